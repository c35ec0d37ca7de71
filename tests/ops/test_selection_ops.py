"""top_k, gather_nd / scatter_nd and boolean_mask: values, dtypes, static shapes and
names as TensorFlow's (recorded from TF 2.21's tf.compat.v1), gradients against finite
differences, and errors that name the op."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_gradient, second_order

R = np.random.default_rng(5)


def arr(*shape):
    return R.uniform(-1.0, 1.0, size=shape)


def ints(*values):
    return np.array(values, dtype=np.int32)


# Distinct values (spaced well beyond the finite-difference step) keep top_k's choice fixed.
DISTINCT = R.permutation(24).reshape(2, 3, 4) / 7.0

GRAD_CASES = [
    GradCase("top_k_values", lambda a: mf.nn.top_k(a, 2)[0], [DISTINCT]),
    GradCase("top_k_all_of_a_vector", lambda a: mf.nn.top_k(a, 5)[0],
             [R.permutation(5) / 3.0]),
    GradCase("top_k_second_order", second_order(lambda a: mf.nn.top_k(a, 3)[0]),
             [DISTINCT[0]]),
    GradCase("gather_nd_slices_repeated", lambda p: mf.gather_nd(p, [[0, 1], [1, 2], [0, 1]]),
             [arr(2, 3, 4)]),
    GradCase("gather_nd_elements", lambda p, i: mf.gather_nd(p, i),
             [arr(3, 4), np.array([[[2, 3], [0, 0]], [[2, 3], [1, 2]]], dtype=np.int64)]),
    GradCase("gather_nd_batch_dims", lambda p: mf.gather_nd(p, [[[1], [0]], [[2], [2]]],
                                                            batch_dims=1), [arr(2, 3, 2)]),
    GradCase("gather_nd_second_order", second_order(lambda p: mf.gather_nd(p, [[1], [1]])),
             [arr(3, 2)]),
    GradCase("scatter_nd_repeated", lambda u: mf.scatter_nd([[0], [2], [0]], u, [4, 2]),
             [arr(3, 2)]),
    GradCase("scatter_nd_second_order",
             second_order(lambda u: mf.scatter_nd([[1, 0], [0, 1]], u, [2, 2, 3])),
             [arr(2, 3)]),
    GradCase("boolean_mask_2d_mask",
             lambda a: mf.boolean_mask(a, [[True, False, True], [False, False, True]]),
             [arr(2, 3, 4)]),
    GradCase("boolean_mask_axis", lambda a: mf.boolean_mask(a, [True, False, True, True],
                                                            axis=2), [arr(2, 3, 4)]),
]


# -- top_k --------------------------------------------------------------------------------

def test_top_k_matches_tensorflow_largest_first_equal_values_by_position():
    x = mf.constant([[3., 1., 3., 2.], [0., 5., 5., 5.]])
    values, indices = mf.nn.top_k(x, 3)
    grad, = mf.gradients(mf.reduce_sum(values * mf.constant([[1., 2., 3.], [4., 5., 6.]])), x)
    ints64, positions = mf.nn.top_k(mf.constant([1, 3, 2], mf.int64), 2)
    assert (values.name, indices.name) == ("TopKV2:0", "TopKV2:1")
    assert (values.dtype, indices.dtype, ints64.dtype) == (mf.float32, mf.int32, mf.int64)
    assert values.shape.as_list() == indices.shape.as_list() == [2, 3]
    with mf.Session() as sess:
        got = sess.run([values, indices, grad, ints64, positions])
    # Recorded from TF 2.21's tf.compat.v1.
    assert got[0].tolist() == [[3., 3., 2.], [5., 5., 5.]]
    assert got[1].tolist() == [[0, 2, 3], [1, 2, 3]]
    assert got[2].tolist() == [[1., 0., 2., 3.], [0., 4., 5., 6.]]
    assert got[3].tolist() == [3, 2] and got[4].tolist() == [1, 2]


def test_top_k_takes_k_as_a_tensor_and_checks_it_when_the_step_runs():
    x = mf.placeholder(mf.float32, [None, 5])
    k = mf.placeholder(mf.int32, [])
    assert [t.shape.as_list() for t in mf.nn.top_k(x, 2)] == [[None, 2]] * 2
    values, indices = mf.nn.top_k(x, k)
    assert values.shape.as_list() == [None, None]
    with mf.Session() as sess:
        got = sess.run(values, {x: [[1., 5., 2., 4., 3.]], k: 4})
        assert got.tolist() == [[5., 4., 3., 2.]]
        assert sess.run(values, {x: np.ones((1, 5)), k: 0}).shape == (1, 0)
        with pytest.raises(mf.errors.InvalidArgumentError, match=r"TopKV2.*k=7"):
            sess.run(values, {x: np.ones((1, 5)), k: 7})


@pytest.mark.parametrize("build,words", [
    (lambda: mf.nn.top_k(mf.constant([1., 2.]), 3), r"at least k entries.*TopKV2"),
    (lambda: mf.nn.top_k(mf.constant(1.), 1), r"rank >= 1.*TopKV2"),
    (lambda: mf.nn.top_k(mf.constant([1., 2.]), -1), r"non-negative.*TopKV2"),
    (lambda: mf.nn.top_k(mf.constant([True, False]), 1), r"dtype.*TopKV2"),
])
def test_top_k_refuses_what_tensorflow_refuses_naming_the_op(build, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=words):
        build()


# -- gather_nd / scatter_nd ---------------------------------------------------------------

P = np.arange(24.).reshape(2, 3, 4)


def test_gather_nd_matches_tensorflow():
    p = mf.constant(P)
    got = {"slices": mf.gather_nd(p, [[0, 1], [1, 2], [0, 1]]),
           "leading": mf.gather_nd(p, [[[1]], [[0]]]),
           "element": mf.gather_nd(p, [1, 2, 3]),
           "elements": mf.gather_nd(p, [[0, 0, 0], [1, 2, 3]]),
           "batch_dims": mf.gather_nd(p, [[[1, 0], [2, 3]], [[0, 0], [1, 1]]], batch_dims=1)}
    assert {k: v.shape.as_list() for k, v in got.items()} == {
        "slices": [3, 4], "leading": [2, 1, 3, 4], "element": [], "elements": [2],
        "batch_dims": [2, 2]}
    assert mf.gather_nd(p, mf.placeholder(mf.int64, [None, 2])).shape.as_list() == [None, 4]
    grad, = mf.gradients(mf.reduce_sum(got["slices"] * np.arange(12.).reshape(3, 4)), p)
    assert grad.shape.as_list() == [2, 3, 4]
    with mf.Session() as sess:
        values, grad = sess.run([got, grad])
    # Recorded from TF 2.21's tf.compat.v1.
    assert values["slices"].tolist() == [[4, 5, 6, 7], [20, 21, 22, 23], [4, 5, 6, 7]]
    np.testing.assert_array_equal(values["leading"], P[[[1], [0]]])
    assert values["element"] == 23.0 and values["elements"].tolist() == [0, 23]
    assert values["batch_dims"].tolist() == [[4, 11], [12, 17]]
    assert grad.tolist() == [[[0, 0, 0, 0], [8, 10, 12, 14], [0, 0, 0, 0]],
                             [[0, 0, 0, 0], [0, 0, 0, 0], [4, 5, 6, 7]]]


def test_scatter_nd_adds_repeated_indices_as_tensorflow():
    repeated = mf.scatter_nd([[0], [2], [0]], mf.constant([1., 2., 3.]), [4])
    slices = mf.scatter_nd([[0, 1], [1, 0]], mf.constant([[1., 2.], [3., 4.]]), [2, 2, 2])
    assert (repeated.shape.as_list(), slices.shape.as_list()) == ([4], [2, 2, 2])
    with mf.Session() as sess:
        got = sess.run([repeated, slices])
    assert got[0].tolist() == [4., 0., 2., 0.]
    assert got[1].tolist() == [[[0., 0.], [1., 2.]], [[3., 4.], [0., 0.]]]


@pytest.mark.parametrize("index", [[[0, 3]], [[-1, 0]]])
def test_gather_nd_index_outside_params_fails_naming_the_op_and_the_index(index):
    out = mf.gather_nd(mf.constant(P), index)
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=rf"Index out of range in op 'GatherNd.*indices\[0\] = "
                                 rf"\[{index[0][0]}, {index[0][1]}\]"):
            sess.run(out)


@pytest.mark.parametrize("build,words", [
    (lambda p: mf.gather_nd(p, [[0, 1, 2, 3]]), r"indices.shape\[-1\] must be <= .*GatherNd"),
    (lambda p: mf.gather_nd(p, [0.5]), r"dtype for indices.*GatherNd"),
    (lambda p: mf.gather_nd(p, 1), r"rank >= 1.*GatherNd"),
    (lambda p: mf.scatter_nd([[0], [1]], mf.constant([1., 2., 3.]), [4]),
     r"updates must have shape.*ScatterNd"),
])
def test_gather_nd_and_scatter_nd_refuse_bad_indices_naming_the_op(build, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=words):
        build(mf.constant(P))


# -- boolean_mask -------------------------------------------------------------------------

def test_boolean_mask_matches_tensorflow():
    p = mf.constant(P)
    mask = [[True, False, True], [False, False, True]]
    got = {"mask_2d": mf.boolean_mask(p, mask),
           "axis_2": mf.boolean_mask(p, [True, False, True, True], axis=2),
           "axis_1": mf.boolean_mask(p, [False, True, True], axis=1)}
    assert {k: (v.name, v.shape.as_list()) for k, v in got.items()} == {
        "mask_2d": ("boolean_mask/GatherV2:0", [None, 4]),
        "axis_2": ("boolean_mask_1/GatherV2:0", [2, 3, None]),
        "axis_1": ("boolean_mask_2/GatherV2:0", [2, None, 4])}
    assert mf.boolean_mask(p, mf.placeholder(mf.bool, [None])).shape.as_list() == [None, 3, 4]
    assert mf.boolean_mask(mf.placeholder(mf.float32, [None, 3]),
                           mf.placeholder(mf.bool, [None])).shape.as_list() == [None, 3]
    grad, = mf.gradients(mf.reduce_sum(got["mask_2d"] * np.arange(12.).reshape(3, 4)), p)
    with mf.Session() as sess:
        values, grad = sess.run([got, mf.convert_to_tensor(grad)])
    np.testing.assert_array_equal(values["mask_2d"], P[np.array(mask)])
    np.testing.assert_array_equal(values["axis_2"], P[:, :, [0, 2, 3]])
    np.testing.assert_array_equal(values["axis_1"], P[:, [1, 2]])
    # Recorded from TF 2.21's tf.compat.v1.
    assert grad.tolist() == [[[0, 1, 2, 3], [0, 0, 0, 0], [4, 5, 6, 7]],
                             [[0, 0, 0, 0], [0, 0, 0, 0], [8, 9, 10, 11]]]


def test_boolean_mask_with_fed_tensor_and_mask():
    x = mf.placeholder(mf.float32, [None, 2])
    keep = mf.placeholder(mf.bool, [None])
    with mf.Session() as sess:
        got = sess.run(mf.boolean_mask(x, keep), {x: [[1, 2], [3, 4], [5, 6]],
                                                  keep: [True, False, True]})
    assert got.tolist() == [[1, 2], [5, 6]]


@pytest.mark.parametrize("mask,axis,words", [
    (True, None, "mask cannot be a scalar"),
    ([True, False, True], None, r"does not match dimensions 0..0"),
    ([True, False, True], 2, r"does not match dimensions 2..2"),
    ([[[[True]]]], None, "does not fit a tensor of shape"),
])
def test_boolean_mask_refuses_masks_that_do_not_fit(mask, axis, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=f"boolean_mask: .*{words}"):
        mf.boolean_mask(mf.constant(P), mask, axis=axis)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)
