"""The unsorted segment reductions besides the sum: values, dtypes and gradients as
TensorFlow's (its numbers recorded below), finite-difference gradients, and the ordered
combination every array module runs (the GPU's path) against numpy's ufunc.at."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.segment_ops import _max, _min, _prod, reduce_in_order
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(5)


def arr(*shape):
    return R.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape)


def ids(*values, dtype=np.int32):
    return np.array(values, dtype=dtype)


GRAD_CASES = [
    GradCase("unsorted_segment_max", lambda d, s: mf.unsorted_segment_max(d, s, 3),
             [arr(6, 2), ids(0, 2, 0, -1, 2, 1)]),
    GradCase("unsorted_segment_min_matrix_ids",
             lambda d, s: mf.math.unsorted_segment_min(d, s, 3),
             [arr(2, 3, 2), ids(0, -1, 2, 1, 0, 0, dtype=np.int64).reshape(2, 3)]),
    GradCase("unsorted_segment_prod", lambda d, s: mf.unsorted_segment_prod(d, s, 3),
             [arr(5, 2), ids(2, 0, 2, -1, 2)]),
    GradCase("unsorted_segment_prod_one_zero",
             lambda d, s: mf.unsorted_segment_prod(d * np.array([1.0, 0.0, 1.0]), s, 2),
             [arr(3), ids(0, 0, 1)], wrt=[0]),
    GradCase("unsorted_segment_mean_sqrt_n",
             lambda d, s: mf.unsorted_segment_mean(d, s, 3) *
             mf.unsorted_segment_sqrt_n(d, s, 3),
             [arr(5, 2), ids(1, 1, -1, 0, 1)]),
]



@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# TensorFlow's values: tf.math.unsorted_segment_*(DATA, IDS, 4), and the gradient of
# reduce_sum(y * WEIGHTS) in DATA.
DATA = np.array([[1., 5.], [3., 5.], [3., -2.], [7., 0.], [2., 4.]], np.float32)
IDS = np.array([0, 0, 0, -1, 3], np.int32)
WEIGHTS = np.arange(1.0, 9.0, dtype=np.float32).reshape(4, 2)
LOW, HIGH = -3.4028234663852886e+38, 3.4028234663852886e+38
TF = {
    "unsorted_segment_max": ([[3., 5.], [LOW, LOW], [LOW, LOW], [2., 4.]],
                             [[0., 1.], [0.5, 1.], [0.5, 0.], [0., 0.], [7., 8.]]),
    "unsorted_segment_min": ([[1., -2.], [HIGH, HIGH], [HIGH, HIGH], [2., 4.]],
                             [[1., 0.], [0., 0.], [0., 2.], [0., 0.], [7., 8.]]),
    "unsorted_segment_prod": ([[9., -50.], [1., 1.], [1., 1.], [2., 4.]],
                              [[9., -20.], [3., -20.], [3., 50.], [0., 0.], [7., 8.]]),
    "unsorted_segment_mean": ([[2.3333333, 2.6666667], [0., 0.], [0., 0.], [2., 4.]],
                              [[1 / 3, 2 / 3]] * 3 + [[0., 0.], [7., 8.]]),
    "unsorted_segment_sqrt_n": ([[4.0414519, 4.6188021], [0., 0.], [0., 0.], [2., 4.]],
                                [[0.57735026, 1.1547005]] * 3 + [[0., 0.], [7., 8.]]),
}


@pytest.mark.parametrize("name", sorted(TF))
def test_segment_reductions_give_tensorflows_values_and_gradients(name):
    values, grads = TF[name]
    x = mf.constant(DATA)
    y = getattr(mf.math, name)(x, IDS, 4)
    grad, = mf.gradients(mf.reduce_sum(y * WEIGHTS), x)
    assert y.dtype == mf.float32 and y.shape.as_list() == [4, 2]
    with mf.Session() as sess:
        got, got_grad = sess.run([y, grad])
    np.testing.assert_allclose(got, np.array(values, np.float32), rtol=1e-6)
    np.testing.assert_allclose(got_grad, np.array(grads, np.float32), rtol=1e-6)


def test_max_and_min_split_the_gradient_among_tied_rows_as_tensorflow():
    x, z = mf.constant([2.0, 2.0, 2.0, 1.0, 1.0]), mf.constant([2.0, 1.0, 2.0, 1.0, 1.0])
    most = mf.unsorted_segment_max(x, [0, 0, 0, 1, 1], 2)
    least = mf.unsorted_segment_min(z, [0, 1, 0, 1, 0], 2)
    with mf.Session() as sess:
        got = sess.run([mf.gradients(most, x)[0], mf.gradients(least, z)[0]])
    np.testing.assert_allclose(got[0], [1 / 3, 1 / 3, 1 / 3, 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0.0, 0.5, 0.0, 0.5, 1.0], rtol=1e-6)


def test_prod_gradient_with_zeros_is_tensorflows():
    # TensorFlow: [2, 0, 3] -> 6 to the zero only; [0, 0] -> nothing; [5] -> 1.
    x = mf.constant([2.0, 0.0, 3.0, 0.0, 0.0, 5.0])
    y = mf.unsorted_segment_prod(x, [0, 0, 0, 1, 1, 2], 3)
    with mf.Session() as sess:
        got, grad = sess.run([y, mf.gradients(y, x)[0]])
    np.testing.assert_array_equal(got, [0.0, 0.0, 5.0])
    np.testing.assert_array_equal(grad, [0.0, 6.0, 0.0, 0.0, 0.0, 1.0])


@pytest.mark.parametrize("dtype,low,high", [
    (np.int32, -2 ** 31, 2 ** 31 - 1), (np.int64, -2 ** 63, 2 ** 63 - 1),
    (np.float16, -65504.0, 65504.0), (np.float64, -1.7976931348623157e+308,
                                      1.7976931348623157e+308)])
def test_empty_segments_hold_each_reductions_identity_in_the_data_dtype(dtype, low, high):
    data = DATA.astype(dtype)
    check_forward(lambda d, s: mf.unsorted_segment_max(d, s, 4), [data, IDS],
                  np.array([[3, 5], [low, low], [low, low], [2, 4]], dtype))
    check_forward(lambda d, s: mf.unsorted_segment_min(d, s, 4), [data, IDS],
                  np.array([[1, -2], [high, high], [high, high], [2, 4]], dtype))
    check_forward(lambda d, s: mf.unsorted_segment_prod(d, s, 4), [data, IDS],
                  np.array([[9, -50], [1, 1], [1, 1], [2, 4]], dtype))


def test_integer_mean_is_float64_as_tensorflow():
    check_forward(lambda d, s: mf.unsorted_segment_mean(d, s, 4), [DATA.astype(np.int32), IDS],
                  np.array([[7 / 3, 8 / 3], [0, 0], [0, 0], [2, 4]]))


def test_a_nan_stays_only_until_a_later_row_of_its_segment_as_tensorflow():
    # TensorFlow's CPU kernel: acc = x < acc ? acc : x (max), acc < x ? acc : x (min).
    x = np.array([np.nan, 1.0, 3.0, np.nan, 2.0, 4.0, np.nan], np.float32)
    s = ids(0, 0, 1, 1, 1, 2, 2)
    check_forward(lambda d, i: mf.unsorted_segment_max(d, i, 3), [x, s], [1.0, 2.0, np.nan])
    check_forward(lambda d, i: mf.unsorted_segment_min(d, i, 3), [x, s], [1.0, 2.0, np.nan])


@pytest.mark.parametrize("combine,ufunc", [(_max, np.maximum), (_min, np.minimum),
                                           (_prod, np.multiply)])
def test_the_ordered_combination_equals_numpys_ufunc_at(combine, ufunc):
    segment_ids = R.integers(0, 5, size=40)
    rows = R.uniform(-2, 2, size=(40, 3))
    want = np.full((6, 3), 1.0 if ufunc is np.multiply else 0.0)
    got = want.copy()
    ufunc.at(want, segment_ids, rows)
    reduce_in_order(np, got, segment_ids, rows, combine)
    np.testing.assert_array_equal(got, want)


def test_static_shapes_follow_num_segments_and_a_placeholder_count_is_unknown():
    d, s = mf.placeholder(mf.float32, [None, 3]), mf.placeholder(mf.int32, [None])
    n = mf.placeholder(mf.int32, [])
    for fn in (mf.unsorted_segment_max, mf.unsorted_segment_mean, mf.unsorted_segment_sqrt_n):
        assert fn(d, s, 5).shape.as_list() == [5, 3]
        assert fn(d, s, n).shape.as_list() == [None, 3]


def test_an_id_past_num_segments_fails_the_step_naming_the_op():
    y = mf.unsorted_segment_max(DATA, [0, 0, 0, 5, 1], 4, name="late_max")
    with mf.Session() as sess, pytest.raises(
            mf.errors.InvalidArgumentError,
            match=r"Index out of range in op 'late_max' \(UnsortedSegmentMax\): "
                  r"expected indices in \[0, 4\) for num_segments, got 5"):
        sess.run(y)
