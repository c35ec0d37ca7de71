"""max_pool and avg_pool: forward against direct-loop references, gradients (and the
gradient ops' own gradients) against finite differences, and errors naming the op."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import apply_op
from tests.ops.gradcheck import GradCase, check_forward, check_gradient
from tests.ops.window_reference import ref_pool

R = np.random.default_rng(4)


def arr(*shape):
    return R.uniform(-1.0, 1.0, size=shape)


def pool(fn, ksize, strides, padding, data_format="NHWC"):
    return lambda x: fn(x, ksize, strides, padding, data_format=data_format)


def pool_op(type_name, ksize, strides, padding, data_format="NHWC"):
    window = [ksize, ksize]
    step = [strides, strides]
    if data_format == "NHWC":
        attrs = {"ksize": [1, *window, 1], "strides": [1, *step, 1]}
    else:
        attrs = {"ksize": [1, 1, *window], "strides": [1, 1, *step]}
    attrs.update(padding=padding, data_format=data_format)
    return lambda *inputs: apply_op(type_name, list(inputs), attrs).outputs[0]


def nchw(x):
    return np.transpose(x, (0, 3, 1, 2))


GRAD_CASES = [
    GradCase("max_pool_same_s2", pool(mf.nn.max_pool, 2, 2, "SAME"), [arr(1, 5, 5, 2)]),
    GradCase("max_pool_valid_overlapping", pool(mf.nn.max_pool, 3, 1, "VALID"),
             [arr(2, 4, 4, 2)]),
    GradCase("max_pool_grad", pool_op("MaxPoolGrad", 2, 2, "SAME"),
             [arr(1, 5, 5, 2), arr(1, 3, 3, 2)], wrt=[1]),
    GradCase("max_pool_grad_grad", pool_op("MaxPoolGradGrad", 3, 2, "VALID"),
             [arr(1, 5, 5, 2), arr(1, 5, 5, 2)], wrt=[1]),
    GradCase("avg_pool_same_s2", pool(mf.nn.avg_pool, 3, 2, "SAME"), [arr(1, 5, 5, 2)]),
    GradCase("avg_pool_valid", pool(mf.nn.avg_pool, 2, 1, "VALID"), [arr(2, 3, 4, 1)]),
    GradCase("avg_pool_grad",
             lambda g: pool_op("AvgPoolGrad", 3, 2, "SAME")(mf.constant([1, 5, 5, 2]), g),
             [arr(1, 3, 3, 2)]),
    GradCase("max_pool_nchw_same_s2", pool(mf.nn.max_pool, 2, 2, "SAME", "NCHW"),
             [arr(1, 2, 5, 4)]),
    GradCase("max_pool_grad_nchw", pool_op("MaxPoolGrad", 2, 2, "SAME", "NCHW"),
             [arr(1, 2, 5, 5), arr(1, 2, 3, 3)], wrt=[1]),
    GradCase("max_pool_grad_grad_nchw", pool_op("MaxPoolGradGrad", 3, 2, "VALID", "NCHW"),
             [arr(1, 2, 5, 5), arr(1, 2, 5, 5)], wrt=[1]),
    GradCase("avg_pool_nchw_same_s2", pool(mf.nn.avg_pool, 3, 2, "SAME", "NCHW"),
             [arr(1, 2, 5, 4)]),
    GradCase("avg_pool_grad_nchw",
             lambda g: pool_op("AvgPoolGrad", 3, 2, "SAME", "NCHW")(
                 mf.constant([1, 2, 5, 5]), g),
             [arr(1, 2, 3, 3)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


@pytest.mark.parametrize("ksize,strides,padding", [
    ((2, 2), (2, 2), "SAME"), ((3, 3), (1, 1), "SAME"), ((3, 3), (2, 2), "VALID"),
    ((2, 3), (1, 2), "SAME"), ((1, 1), (2, 2), "VALID"),
])
def test_pooling_matches_direct_loop_reference(ksize, strides, padding):
    x = arr(2, 5, 6, 3)
    check_forward(lambda a: mf.nn.max_pool(a, list(ksize), list(strides), padding), [x],
                  ref_pool(x, ksize, strides, padding, np.max))
    check_forward(lambda a: mf.nn.avg_pool(a, list(ksize), list(strides), padding), [x],
                  ref_pool(x, ksize, strides, padding, np.mean))


def test_max_pool_gradient_goes_to_the_first_maximum_only():
    x = mf.constant(np.array([[1.0, 3.0], [3.0, 2.0]]).reshape(1, 2, 2, 1))
    grad = mf.gradients(mf.nn.max_pool(x, 2, 2, "VALID"), x)[0]
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(grad).reshape(2, 2), [[0.0, 1.0], [0.0, 0.0]])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_max_pool_of_integers_keeps_their_dtype_as_tensorflow(dtype):
    # TensorFlow's CPU kernel (these are its results); SAME padding must not win a max
    # of negative integers. It was refused as not floating.
    sign = 1 if dtype == np.uint8 else -1
    x = mf.constant((np.arange(25).reshape(1, 5, 5, 1) * sign).astype(dtype))
    y = mf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    with mf.Session() as sess:
        got = sess.run(y)
    assert got.dtype == dtype and y.dtype.np_dtype == dtype
    want = [[6, 8, 9], [16, 18, 19], [21, 23, 24]] if sign > 0 else \
        [[0, -2, -4], [-10, -12, -14], [-20, -22, -24]]
    np.testing.assert_array_equal(got[0, :, :, 0], want)


@pytest.mark.parametrize("dtype", [mf.int32, mf.bool])
def test_avg_pool_of_integers_and_max_pool_of_bools_are_refused_as_in_tensorflow(dtype):
    x = mf.placeholder(dtype, [1, 2, 2, 1])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=rf"input 0 in op 'AvgPool' \(AvgPool\).*got {dtype.name}"):
        mf.nn.avg_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
    if dtype is mf.bool:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"input 0 in op 'MaxPool' \(MaxPool\).*got bool"):
            mf.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "VALID")


@pytest.mark.parametrize("ksize,strides,padding", [
    ((2, 2), (2, 2), "SAME"), ((2, 3), (1, 2), "SAME"), ((3, 3), (2, 2), "VALID"),
])
def test_pooling_nchw_is_the_nhwc_pooling_in_channels_first_order(ksize, strides, padding):
    # It was refused ('Unsupported data_format'); [h, w] windows go to NCHW's last two
    # places, as in TF.
    x = arr(2, 5, 6, 3)
    for fn, reduce in ((mf.nn.max_pool, np.max), (mf.nn.avg_pool, np.mean)):
        check_forward(lambda a, fn=fn: fn(a, list(ksize), list(strides), padding,
                                          data_format="NCHW"),
                      [nchw(x)], nchw(ref_pool(x, ksize, strides, padding, reduce)))


def test_pooling_nchw_and_its_gradient_match_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1: max_pool(x, 2, 2, "SAME"), avg_pool(x,
    # [1, 1, 2, 3], [1, 1, 2, 2], "SAME"), both NCHW, and the gradient of the sum of their
    # squares (x has ties, which go to the first maximum in both).
    x = (np.arange(40, dtype=np.float32).reshape(1, 2, 4, 5) % 7 - 3) / 4
    xt = mf.constant(x)
    m = mf.nn.max_pool(xt, 2, 2, "SAME", data_format="NCHW")
    a = mf.nn.avg_pool(xt, [1, 1, 2, 3], [1, 1, 2, 2], "SAME", data_format="NCHW")
    dx = mf.gradients(mf.reduce_sum(a * a) + mf.reduce_sum(m * m), xt)[0]
    assert m.shape.as_list() == a.shape.as_list() == [1, 2, 2, 3]
    assert dx.shape.as_list() == [1, 2, 4, 5]
    with mf.Session() as sess:
        got_m, got_a, got_dx = sess.run([m, a, dx])
    np.testing.assert_allclose(got_m, [[[[0.75, 0.0, 0.25], [0.25, 0.75, 0.5]],
                                        [[0.75, 0.75, 0.0], [0.0, 0.5, 0.75]]]])
    np.testing.assert_allclose(got_a, [[[[0.0, -0.208333, -0.125], [-0.125, 0.25, 0.1875]],
                                        [[0.1875, -0.166667, -0.375],
                                         [-0.375, 0.0, 0.375]]]], rtol=1e-5)
    np.testing.assert_allclose(got_dx, [[
        [[0.0, -0.069444, -0.069444, -0.131944, 0.4375],
         [0.0, 1.430556, -0.069444, -0.131944, -0.0625],
         [-0.0625, 0.520833, 0.083333, 1.677083, 0.09375],
         [-0.0625, 0.020833, 0.083333, 0.177083, 1.09375]],
        [[1.59375, 0.038194, -0.055556, -0.243056, -0.1875],
         [0.09375, 0.038194, 1.444444, -0.243056, -0.1875],
         [-0.1875, -0.1875, 0.0, 1.1875, 1.6875],
         [-0.1875, -0.1875, 0.0, 0.1875, 0.1875]]]], rtol=1e-5, atol=1e-6)


def test_pooling_bad_ksize_and_padding_name_the_op():
    x = mf.placeholder(mf.float32, [1, 4, 4, 2])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"Bad ksize in op 'MaxPool'"):
        mf.nn.max_pool(x, [2, 2, 2, 1], 1, "SAME")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"padding in op 'AvgPool'"):
        mf.nn.avg_pool(x, 2, 2, "FULL")


def test_conv_and_pool_gradients_work_with_an_unknown_batch_size():
    x = mf.placeholder(mf.float64, [None, 5, 5, 2])
    f = mf.constant(arr(3, 3, 2, 3))
    y = mf.nn.avg_pool(mf.nn.max_pool(mf.nn.conv2d(x, f, 1, "SAME"), 2, 1, "SAME"), 2, 2,
                       "VALID")
    assert y.shape.as_list() == [None, 2, 2, 3]
    dx, df = mf.gradients(mf.reduce_sum(y), [x, f])
    assert dx.shape.as_list() == [None, 5, 5, 2] and df.shape.as_list() == [3, 3, 2, 3]
    with mf.Session() as sess:
        got_dx, got_df = sess.run([dx, df], {x: arr(3, 5, 5, 2)})
    assert got_dx.shape == (3, 5, 5, 2) and got_df.shape == (3, 3, 2, 3)


def test_max_pool_grad_with_mismatched_grad_at_run_time_names_the_op():
    g = mf.placeholder(mf.float32, [None, None, None, 2])
    dx = apply_op("MaxPoolGrad", [mf.zeros([1, 4, 4, 2]), g],
                  {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"},
                  name="late_pool_grad").outputs[0]
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"grad.*\(2, 2\).*'late_pool_grad'"):
            sess.run(dx, {g: np.zeros((1, 3, 3, 2), np.float32)})
