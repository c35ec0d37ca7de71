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


def pool(fn, ksize, strides, padding):
    return lambda x: fn(x, ksize, strides, padding)


def pool_op(type_name, ksize, strides, padding):
    attrs = {"ksize": [1, ksize, ksize, 1], "strides": [1, strides, strides, 1],
             "padding": padding}
    return lambda *inputs: apply_op(type_name, list(inputs), attrs).outputs[0]


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
