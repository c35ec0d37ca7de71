"""conv2d: forward against a direct-loop reference, gradients (and the gradient ops' own
gradients) against finite differences, and shape errors naming the op."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_forward, check_gradient
from tests.ops.window_reference import ref_conv2d

R = np.random.default_rng(3)


def arr(*shape):
    return R.uniform(-1.0, 1.0, size=shape)


def conv(strides, padding, dilations=1, data_format="NHWC"):
    return lambda x, f: mf.nn.conv2d(x, f, strides, padding, dilations=dilations,
                                     data_format=data_format)


def nchw(x):
    return np.transpose(x, (0, 3, 1, 2))


def nhwc(x):
    return np.transpose(x, (0, 2, 3, 1))


GRAD_CASES = [
    GradCase("conv2d_same_s1", conv(1, "SAME"), [arr(1, 5, 5, 2), arr(3, 3, 2, 3)]),
    GradCase("conv2d_valid_s1", conv(1, "VALID"), [arr(1, 5, 5, 2), arr(3, 3, 2, 3)]),
    GradCase("conv2d_same_s2", conv(2, "SAME"), [arr(1, 5, 5, 2), arr(3, 3, 2, 3)]),
    GradCase("conv2d_valid_s2", conv(2, "VALID"), [arr(1, 5, 5, 2), arr(3, 3, 2, 3)]),
    GradCase("conv2d_same_dilated_even_kernel", conv(1, "SAME", dilations=2),
             [arr(2, 5, 4, 1), arr(2, 2, 1, 2)]),
    GradCase("conv2d_backprop_input",
             lambda f, dy: mf.nn.conv2d_backprop_input([1, 5, 5, 2], f, dy, 2, "SAME"),
             [arr(3, 3, 2, 3), arr(1, 3, 3, 3)]),
    GradCase("conv2d_backprop_filter",
             lambda x, dy: mf.nn.conv2d_backprop_filter(x, [3, 3, 2, 3], dy, 2, "VALID"),
             [arr(1, 5, 5, 2), arr(1, 2, 2, 3)]),
    GradCase("conv2d_nchw_same_s2", conv(2, "SAME", data_format="NCHW"),
             [arr(1, 2, 5, 4), arr(3, 2, 2, 3)]),
    GradCase("conv2d_nchw_valid_dilated", conv([1, 2], "VALID", 2, data_format="NCHW"),
             [arr(2, 1, 5, 6), arr(2, 2, 1, 2)]),
    GradCase("conv2d_backprop_input_nchw",
             lambda f, dy: mf.nn.conv2d_backprop_input([1, 2, 5, 5], f, dy, 2, "SAME",
                                                       data_format="NCHW"),
             [arr(3, 3, 2, 3), arr(1, 3, 3, 3)]),
    GradCase("conv2d_backprop_filter_nchw",
             lambda x, dy: mf.nn.conv2d_backprop_filter(x, [3, 3, 2, 3], dy, 2, "VALID",
                                                        data_format="NCHW"),
             [arr(1, 2, 5, 5), arr(1, 3, 2, 2)]),
    GradCase("conv2d_transpose_same_s2",
             lambda x, f: mf.nn.conv2d_transpose(x, f, [2, 6, 5, 3], 2, "SAME"),
             [arr(2, 3, 3, 2), arr(3, 2, 3, 2)]),
    GradCase("conv2d_transpose_valid_nchw",
             lambda x, f: mf.nn.conv2d_transpose(x, f, [1, 3, 7, 7], [1, 1, 2, 2], "VALID",
                                                 data_format="NCHW"),
             [arr(1, 2, 3, 3), arr(3, 3, 3, 2)]),
    GradCase("conv1d_same_s2", lambda x, f: mf.nn.conv1d(x, f, 2, "SAME"),
             [arr(2, 7, 3), arr(3, 3, 2)]),
    GradCase("conv1d_ncw_valid_dilated",
             lambda x, f: mf.nn.conv1d(x, f, 1, "VALID", data_format="NCW", dilations=2),
             [arr(2, 3, 7), arr(2, 3, 2)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


@pytest.mark.parametrize("x_shape,f_shape,strides,padding,dilations", [
    ((1, 5, 5, 2), (3, 3, 2, 3), (1, 1), "SAME", (1, 1)),
    ((1, 5, 5, 2), (3, 3, 2, 3), (1, 1), "VALID", (1, 1)),
    ((2, 5, 5, 2), (3, 3, 2, 3), (2, 2), "SAME", (1, 1)),
    ((2, 5, 5, 2), (3, 3, 2, 3), (2, 2), "VALID", (1, 1)),
    ((2, 6, 7, 3), (2, 3, 3, 4), (2, 1), "SAME", (1, 1)),
    ((1, 7, 7, 1), (3, 3, 1, 2), (1, 1), "SAME", (2, 2)),
    ((1, 7, 8, 1), (3, 2, 1, 2), (1, 1), "VALID", (2, 3)),
    ((2, 6, 6, 3), (1, 1, 3, 5), (2, 2), "VALID", (1, 1)),
])
def test_conv2d_matches_direct_loop_reference(x_shape, f_shape, strides, padding, dilations):
    x, f = arr(*x_shape), arr(*f_shape)
    check_forward(lambda a, b: mf.nn.conv2d(a, b, list(strides), padding,
                                            dilations=list(dilations)),
                  [x, f], ref_conv2d(x, f, strides, padding, dilations), rtol=1e-10,
                  atol=1e-12)


@pytest.mark.parametrize("x_shape,f_shape,strides,padding,dilations", [
    ((2, 5, 5, 2), (3, 3, 2, 3), (2, 2), "SAME", (1, 1)),
    ((2, 6, 7, 3), (2, 3, 3, 4), (2, 1), "SAME", (1, 1)),
    ((1, 7, 8, 1), (3, 2, 1, 2), (1, 1), "VALID", (2, 3)),
])
def test_conv2d_nchw_is_the_nhwc_convolution_in_channels_first_order(
        x_shape, f_shape, strides, padding, dilations):
    # It was refused ('Unsupported data_format'), so TF1 GPU scripts written for NCHW
    # could not run; [h, w] strides and dilations go to NCHW's last two places, as in TF.
    x, f = arr(*x_shape), arr(*f_shape)
    check_forward(lambda a, b: mf.nn.conv2d(a, b, list(strides), padding,
                                            dilations=list(dilations), data_format="NCHW"),
                  [nchw(x), f], nchw(ref_conv2d(x, f, strides, padding, dilations)),
                  rtol=1e-10, atol=1e-12)


def test_conv2d_nchw_and_its_gradients_match_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1: conv2d(x, f, 2, "SAME", data_format="NCHW")
    # and the gradients of reduce_sum(y * y).
    x = (np.arange(40, dtype=np.float32).reshape(1, 2, 4, 5) % 7 - 3) / 4
    f = (np.arange(36, dtype=np.float32).reshape(3, 3, 2, 2) % 5 - 2) / 2
    y = mf.nn.conv2d(mf.constant(x), mf.constant(f), 2, "SAME", data_format="NCHW")
    assert y.op.get_attr("strides") == [1, 1, 2, 2]
    dx, df = mf.gradients(mf.reduce_sum(y * y), [y.op.inputs[0], y.op.inputs[1]])
    assert y.shape.as_list() == [1, 2, 2, 3] and dx.shape.as_list() == [1, 2, 4, 5]
    assert df.shape.as_list() == [3, 3, 2, 2]
    with mf.Session() as sess:
        got_y, got_dx, got_df = sess.run([y, dx, df])
    np.testing.assert_allclose(got_y, [[[[-1.25, 3.25, -1.25], [0.375, -0.875, -2.0]],
                                        [[1.0, 0.75, -2.25], [-0.625, -0.125, 1.0]]]])
    np.testing.assert_allclose(got_dx, [[
        [[-4.5, -6.5, 5.0, 9.5, 2.0], [1.25, 2.25, -3.25, -9.5, 1.25],
         [2.75, 7.0, 3.25, 4.625, -11.75], [-0.375, -0.25, 0.875, 2.875, 2.0]],
        [[1.25, 2.25, -3.25, -9.5, 1.25], [0.75, 6.0, 4.75, 2.75, -5.75],
         [1.125, -8.0, -6.375, 9.125, 6.75], [-0.875, -2.125, -1.125, -6.125, 0.0]]]])
    np.testing.assert_allclose(got_df[..., 0], [
        [[-6.6875, -6.25], [1.75, -8.75], [0.125, -0.625]],
        [[5.5625, 6.0], [-7.875, 4.375], [-5.75, -6.5]],
        [[-0.25, -1.25], [5.125, 0.375], [4.25, 3.25]]])


def test_conv2d_nchw_static_shapes_with_an_unknown_batch():
    x = mf.placeholder(mf.float32, [None, 3, 7, 6])
    f = mf.zeros([3, 3, 3, 8])
    y = mf.nn.conv2d(x, f, [1, 1, 2, 2], "SAME", data_format="NCHW")
    assert y.shape.as_list() == [None, 8, 4, 3]
    dx, df = mf.gradients(mf.reduce_sum(y), [x, f])
    assert dx.shape.as_list() == [None, 3, 7, 6] and df.shape.as_list() == [3, 3, 3, 8]
    with mf.Session() as sess:
        got = sess.run([y, dx, df], {x: np.ones((2, 3, 7, 6), np.float32)})
    assert [g.shape for g in got] == [(2, 8, 4, 3), (2, 3, 7, 6), (3, 3, 3, 8)]


def test_conv2d_transpose_stamps_the_filter_as_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1 (tf.nn.conv2d_transpose was missing:
    # UnsupportedAPIError). SAME with an odd kernel pads at the end only, as conv2d does.
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32).reshape(1, 2, 2, 1)
    f = np.array([[1.0, 10.0], [100.0, 1000.0]], np.float32).reshape(2, 2, 1, 1)
    f3 = np.arange(1, 10, dtype=np.float32).reshape(3, 3, 1, 1)
    same = mf.nn.conv2d_transpose(x, f, [1, 4, 4, 1], 2, "SAME")
    valid = mf.nn.conv2d_transpose(x, f3, [1, 5, 5, 1], [2, 2], "VALID")
    odd_same = mf.nn.conv2d_transpose(x, f3, [1, 4, 4, 1], [1, 2, 2, 1], "SAME")
    assert same.op.type == "Conv2DBackpropInput" and same.op.name == "conv2d_transpose"
    assert valid.shape.as_list() == [1, 5, 5, 1] and same.dtype is mf.float32
    with mf.Session() as sess:
        got_same, got_valid, got_odd = sess.run([same, valid, odd_same])
    np.testing.assert_array_equal(got_same[0, :, :, 0], [
        [1, 10, 2, 20], [100, 1000, 200, 2000], [3, 30, 4, 40], [300, 3000, 400, 4000]])
    expected_valid = [[1, 2, 5, 4, 6], [4, 5, 14, 10, 12], [10, 14, 36, 24, 30],
                      [12, 15, 34, 20, 24], [21, 24, 55, 32, 36]]
    np.testing.assert_array_equal(got_valid[0, :, :, 0], expected_valid)
    np.testing.assert_array_equal(got_odd[0, :, :, 0], np.array(expected_valid)[:4, :4])


def test_conv2d_transpose_is_the_adjoint_of_conv2d():
    z, f, x = arr(2, 7, 6, 3), arr(3, 2, 3, 4), arr(2, 4, 3, 4)
    up = mf.nn.conv2d_transpose(mf.constant(x), mf.constant(f), list(z.shape), 2, "SAME")
    with mf.Session() as sess:
        got = sess.run(up)
    # <conv2d(z, f), x> == <z, conv2d_transpose(x, f)>
    np.testing.assert_allclose((z * got).sum(),
                               (ref_conv2d(z, f, (2, 2), "SAME") * x).sum(), rtol=1e-10)


def test_conv2d_transpose_takes_a_computed_batch_size():
    x = mf.placeholder(mf.float32, [None, 3, 4, 2])
    f = mf.ones([3, 3, 5, 2])
    listed = mf.nn.conv2d_transpose(x, f, [mf.shape(x)[0], 6, 8, 5], 2, "SAME")
    stacked = mf.nn.conv2d_transpose(x, f, mf.stack([mf.shape(x)[0], 6, 8, 5]), 2, "SAME")
    assert listed.shape.as_list() == stacked.shape.as_list() == [None, 6, 8, 5]
    with mf.Session() as sess:
        got = sess.run([listed, stacked], {x: np.ones((3, 3, 4, 2), np.float32)})
    assert [g.shape for g in got] == [(3, 6, 8, 5)] * 2


@pytest.mark.parametrize("value,f_shape,output_shape,message", [
    ((1, 3, 4, 2), (3, 3, 2, 5), [1, 6, 8, 2],
     r"conv2d_transpose: value's channels must equal the filter's in_channels "
     r"\(filter\[3\].*expected 5.*got 2"),
    ((1, 3, 4, 2), (3, 3, 2, 2), [1, 6, 8, 3],
     r"conv2d_transpose: output_shape's channels must equal the filter's out_channels "
     r"\(filter\[2\].*expected 2.*got 3"),
    ((1, 3, 4, 2), (3, 3, 2, 2), [1, 6, 8],
     r"input_sizes must hold the 4 sizes.* in op 'conv2d_transpose'.*got \(3,\)"),
    ((1, 3, 4, 2), (3, 3, 2, 2), [1, 9, 8, 2],
     r"out_backprop does not match the conv2d output in op 'conv2d_transpose'"),
])
def test_conv2d_transpose_mismatches_are_build_errors_naming_what_is_wrong(
        value, f_shape, output_shape, message):
    with pytest.raises(mf.errors.InvalidArgumentError, match=message):
        mf.nn.conv2d_transpose(mf.zeros(value), mf.zeros(f_shape), output_shape, 2, "SAME")


def test_conv1d_is_a_conv2d_over_a_height_of_one_as_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1 (tf.nn.conv1d was missing: UnsupportedAPIError);
    # TF names the Conv2D op after the scope and the result .../Squeeze.
    z = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32).reshape(1, 5, 1)
    k = np.array([1.0, 10.0, 100.0], np.float32).reshape(3, 1, 1)
    strided = mf.nn.conv1d(z, k, 2, "SAME")
    dilated = mf.nn.conv1d(np.transpose(z, (0, 2, 1)), k, [1, 1, 1], "VALID",
                           data_format="NCW", dilations=2)
    assert strided.name == "conv1d/Squeeze:0" and strided.shape.as_list() == [1, 3, 1]
    assert mf.get_default_graph().get_operation_by_name("conv1d").type == "Conv2D"
    assert dilated.shape.as_list() == [1, 1, 1]
    with mf.Session() as sess:
        got_strided, got_dilated = sess.run([strided, dilated])
    np.testing.assert_array_equal(got_strided.ravel(), [210, 432, 54])
    np.testing.assert_array_equal(got_dilated.ravel(), [531])


def test_conv1d_refuses_a_bad_layout_or_rank_naming_conv1d():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"conv1d: data_format.*'NHWC'"):
        mf.nn.conv1d(mf.zeros([1, 5, 2]), mf.zeros([3, 2, 2]), 1, "SAME", data_format="NHWC")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"conv1d: value must be 3-D"):
        mf.nn.conv1d(mf.zeros([1, 5, 5, 2]), mf.zeros([3, 2, 2]), 1, "SAME")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"conv1d: stride must be"):
        mf.nn.conv1d(mf.zeros([1, 5, 2]), mf.zeros([3, 2, 2]), [1, 2], "SAME")


def test_conv2d_float32_keeps_its_dtype():
    x, f = arr(1, 4, 4, 2).astype(np.float32), arr(3, 3, 2, 2).astype(np.float32)
    check_forward(lambda a, b: mf.nn.conv2d(a, b, [1, 1, 1, 1], "SAME"), [x, f],
                  ref_conv2d(x, f, (1, 1), "SAME").astype(np.float32), rtol=1e-5, atol=1e-6)


def test_conv2d_of_int32_computes_in_int32_as_tensorflow():
    # TensorFlow's CPU kernel takes int32 (these are its results); it was refused.
    x = mf.constant(np.arange(-12, 13, dtype=np.int32).reshape(1, 5, 5, 1))
    f = mf.constant(np.array([[1, -2], [3, 4]], np.int32).reshape(2, 2, 1, 1))
    y = mf.nn.conv2d(x, f, [1, 2, 2, 1], "SAME")
    with mf.Session() as sess:
        got = sess.run(y)
    assert got.dtype == np.int32 and y.dtype is mf.int32
    np.testing.assert_array_equal(got[0, :, :, 0],
                                  [[-35, -23, -17], [25, 37, 23], [-10, -12, 12]])


@pytest.mark.parametrize("dtype", [mf.int8, mf.uint8, mf.int16, mf.int64])
def test_conv2d_of_other_integers_is_refused_when_built_as_in_tensorflow(dtype):
    x = mf.placeholder(dtype, [1, 3, 3, 1])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"input 0 in op 'Conv2D' \(Conv2D\): expected a floating dtype "
                             rf"or int32 .*got {dtype.name}"):
        mf.nn.conv2d(x, mf.ones([2, 2, 1, 1], dtype), [1, 1, 1, 1], "VALID")


def test_conv2d_backprop_ops_are_the_adjoints_of_conv2d():
    x, f, dy = arr(2, 6, 5, 3), arr(3, 2, 3, 4), arr(2, 3, 3, 4)
    dx = mf.nn.conv2d_backprop_input(list(x.shape), mf.constant(f), mf.constant(dy),
                                     [1, 2, 2, 1], "SAME")
    df = mf.nn.conv2d_backprop_filter(mf.constant(x), list(f.shape), mf.constant(dy),
                                      [1, 2, 2, 1], "SAME")
    with mf.Session() as sess:
        dx, df = sess.run([dx, df])
    # <conv(x, f), dy> == <x, dx> == <f, df> for a bilinear conv.
    inner = (ref_conv2d(x, f, (2, 2), "SAME") * dy).sum()
    np.testing.assert_allclose((x * dx).sum(), inner, rtol=1e-10)
    np.testing.assert_allclose((f * df).sum(), inner, rtol=1e-10)


# -- errors ---------------------------------------------------------------------------------

def test_conv2d_channel_mismatch_is_a_build_error_naming_the_op():
    x = mf.placeholder(mf.float32, [1, 5, 5, 3])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"in_channels.* in op 'Conv2D' \(Conv2D\): expected filter\[2\] "
                             r"== 3.*got filter \(3, 3, 2, 4\)"):
        mf.nn.conv2d(x, mf.zeros([3, 3, 2, 4]), 1, "SAME")


@pytest.mark.parametrize("kwargs,message", [
    ({"padding": "same"}, r"Unsupported padding in op 'Conv2D'.*'same'"),
    ({"padding": "SAME", "data_format": "channels_first"},
     r"data_format in op 'Conv2D'.*'NHWC' or 'NCHW'.*'channels_first'"),
    ({"padding": "SAME", "strides": [2, 1, 1, 1]}, r"Bad strides in op 'Conv2D'"),
    ({"padding": "VALID", "dilations": 3}, r"smaller than the window in op 'Conv2D'"),
])
def test_conv2d_bad_attrs_are_build_errors_naming_the_op(kwargs, message):
    x = mf.placeholder(mf.float32, [1, 5, 5, 2])
    kwargs.setdefault("strides", 1)
    with pytest.raises(mf.errors.InvalidArgumentError, match=message):
        mf.nn.conv2d(x, mf.zeros([3, 3, 2, 4]), **kwargs)


def test_conv2d_nchw_refuses_strides_over_channels_naming_the_layout():
    # [1, 2, 2, 1] is NHWC's form; under NCHW it strides the channels, which TF refuses.
    x = mf.placeholder(mf.float32, [1, 2, 5, 5])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Bad strides in op 'Conv2D'.*\[1, 1, height, width\].*NCHW"):
        mf.nn.conv2d(x, mf.zeros([3, 3, 2, 4]), [1, 2, 2, 1], "SAME", data_format="NCHW")


def test_conv2d_filter_of_wrong_rank_names_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"filter must be 4-D in op 'c1'"):
        mf.nn.conv2d(mf.zeros([1, 4, 4, 1]), mf.zeros([3, 3, 1]), 1, "SAME", name="c1")


def test_conv2d_channel_mismatch_at_run_time_names_the_op():
    x = mf.placeholder(mf.float32, [None, None, None, None])
    y = mf.nn.conv2d(x, mf.zeros([3, 3, 2, 4]), 1, "SAME", name="late_conv")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match=r"in_channels.*'late_conv'"):
            sess.run(y, {x: np.zeros((1, 5, 5, 3), np.float32)})


def test_backprop_input_with_mismatched_out_backprop_names_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"out_backprop.*'Conv2DBackpropInput'.*\(1, 3, 3, 3\)"):
        mf.nn.conv2d_backprop_input([1, 5, 5, 2], mf.zeros([3, 3, 2, 3]),
                                    mf.zeros([1, 4, 4, 3]), 2, "SAME")


def test_conv2d_requires_strides():
    with pytest.raises(mf.errors.InvalidArgumentError, match="strides is required"):
        mf.nn.conv2d(mf.zeros([1, 4, 4, 1]), mf.zeros([3, 3, 1, 1]), padding="SAME")


def test_backprop_filter_with_mismatched_out_backprop_at_run_time_names_the_op():
    dy = mf.placeholder(mf.float32, [None, None, None, 3])
    df = mf.nn.conv2d_backprop_filter(mf.zeros([1, 5, 5, 2]), [3, 3, 2, 3], dy, 1, "VALID",
                                      name="late_filter_grad")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"out_backprop.*\(3, 3\).*'late_filter_grad'"):
            sess.run(df, {dy: np.zeros((1, 4, 4, 3), np.float32)})


@pytest.mark.parametrize("build,feeds,message", [
    (lambda x, f: mf.nn.conv2d(x, f, 1, "SAME", name="late"),
     [np.ones((3, 3, 2)), np.ones((2, 2, 2, 1))], r"input must be 4-D \(NHWC\), got shape \(3, 3, 2\)"),
    (lambda x, f: mf.nn.conv2d(x, f, 1, "SAME", name="late"),
     [np.ones((1, 3, 3, 2)), np.ones((2, 2, 2))], r"filter must be 4-D \(NHWC\), got shape \(2, 2, 2\)"),
    (lambda x, f: mf.nn.max_pool(x, 2, 1, "VALID", name="late") + 0 * f,
     [np.ones((3, 3, 2)), np.ones(())], r"input must be 4-D \(NHWC\), got shape \(3, 3, 2\)"),
    (lambda x, f: mf.nn.avg_pool(x, 2, 1, "VALID", name="late") + 0 * f,
     [np.ones((3, 3)), np.ones(())], r"input must be 4-D \(NHWC\), got shape \(3, 3\)"),
])
def test_inputs_of_unknown_rank_are_checked_at_run_time_naming_the_op(build, feeds, message):
    # Ranks the graph did not know meet the same check when the kernel runs (it was an
    # IndexError: tuple index out of range, or a failed unpacking).
    x, f = mf.placeholder(mf.float64), mf.placeholder(mf.float64)
    y = build(x, f)
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match=message + r" in op 'late"):
            sess.run(y, {x: feeds[0], f: feeds[1]})
