"""tf.global_norm, tf.clip_by_global_norm, tf.clip_by_norm and tf.clip_by_value: values
against numpy and TensorFlow,
None and IndexedSlices entries, a non-finite norm, and gradients against finite
differences."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_gradient

A = np.array([[3.0, -4.0], [1.0, 2.0]])
B = np.array([12.0, 0.0, -1.0])
NORM = np.sqrt((A ** 2).sum() + (B ** 2).sum())          # sqrt(175)


def run(fetches, feed=None):
    with mf.Session() as sess:
        return sess.run(fetches, feed)


def test_global_norm_is_the_norm_of_all_entries_together_skipping_none():
    norm = mf.global_norm([mf.constant(A), None, mf.constant(B)])
    assert norm.shape.as_list() == []
    np.testing.assert_allclose(run(norm), NORM)


@pytest.mark.parametrize("clip_norm", [NORM * 2, NORM / 5])
def test_clip_by_global_norm_scales_every_tensor_by_one_factor(clip_norm):
    clipped, norm = mf.clip_by_global_norm([mf.constant(A), None, mf.constant(B)], clip_norm)
    assert clipped[1] is None
    a, b, got_norm = run([clipped[0], clipped[2], norm])
    scale = clip_norm / max(NORM, clip_norm)
    np.testing.assert_allclose(a, A * scale)
    np.testing.assert_allclose(b, B * scale)
    np.testing.assert_allclose(got_norm, NORM)
    np.testing.assert_allclose(np.sqrt((a ** 2).sum() + (b ** 2).sum()), min(NORM, clip_norm))


def test_use_norm_replaces_the_computed_norm():
    (a,), norm = mf.clip_by_global_norm([mf.constant(A)], 1.0, use_norm=mf.constant(10.0,
                                                                                   mf.float64))
    got, got_norm = run([a, norm])
    np.testing.assert_allclose(got, A / 10.0)
    assert got_norm == 10.0


def test_a_non_finite_norm_makes_every_entry_nan():
    (a, b), norm = mf.clip_by_global_norm(
        [mf.constant(A), mf.constant(np.array([np.inf, 1.0]))], 5.0)
    got_a, got_b, got_norm = run([a, b, norm])
    assert np.isinf(got_norm) and np.isnan(got_a).all() and np.isnan(got_b).all()


def test_indexed_slices_are_clipped_through_their_values_and_stay_sparse():
    table = mf.Variable(np.arange(12.0).reshape(4, 3), name="table")
    rows = mf.gather(table, [0, 3])
    grad, = mf.gradients(mf.reduce_sum(rows * 10.0), [table])
    assert isinstance(grad, mf.IndexedSlices)
    (clipped,), norm = mf.clip_by_global_norm([grad], 1.0)
    assert isinstance(clipped, mf.IndexedSlices) and clipped.indices is grad.indices
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        values, got_norm = sess.run([clipped.values, norm])
    np.testing.assert_allclose(got_norm, np.sqrt(6 * 100.0))
    np.testing.assert_allclose(values, np.full((2, 3), 10.0 / np.sqrt(600.0)))
    step = mf.train.GradientDescentOptimizer(1.0).apply_gradients([(clipped, table)])
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(step)
        after = sess.run(table)
    np.testing.assert_allclose(after[[1, 2]], np.arange(12.0).reshape(4, 3)[[1, 2]])


@pytest.mark.parametrize("axes", [None, 1, [0]])
def test_clip_by_norm_clips_each_slice_along_axes(axes):
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    got = run(mf.clip_by_norm(mf.constant(x), 1.0, axes=axes))
    norm = np.sqrt((x ** 2).sum(axis=None if axes is None else tuple(np.atleast_1d(axes)),
                                keepdims=True))
    np.testing.assert_allclose(got, x * 1.0 / np.maximum(norm, 1.0))


GRAD_CASES = [
    GradCase("clip_by_global_norm_clipping",
             lambda a, b: mf.concat([mf.reshape(t, [-1]) for t in
                                     mf.clip_by_global_norm([a, b], 2.0)[0]], 0),
             [A, B]),
    GradCase("clip_by_global_norm_passing", lambda a, b: mf.clip_by_global_norm([a, b],
                                                                                  100.0)[0][0],
             [A, B]),
    GradCase("global_norm", lambda a, b: mf.global_norm([a, b]), [A, B]),
    GradCase("clip_by_norm_rows", lambda a: mf.clip_by_norm(a, 1.0, axes=1),
             [np.array([[3.0, 4.0], [0.3, 0.4]])]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=repr)
def test_gradients_match_finite_differences(case):
    check_gradient(case)


def test_the_gradient_of_clip_by_norm_at_zero_is_finite():
    x = mf.placeholder(mf.float64, [2, 2])
    grad, = mf.gradients(mf.reduce_sum(mf.clip_by_norm(x, 1.0, axes=1)), [x])
    got = run(grad, {x: np.array([[0.0, 0.0], [0.3, 0.4]])})
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[0], [1.0, 1.0])          # below the clip: identity


@pytest.mark.parametrize("call,match", [
    (lambda: mf.clip_by_global_norm(mf.constant(A), 1.0), "must be a list or tuple"),
    (lambda: mf.global_norm([None, None]), "only None"),
    (lambda: mf.global_norm([mf.constant(A), mf.constant(B, mf.float32)]), "one dtype"),
    (lambda: mf.clip_by_norm(mf.constant([1, 2]), 1), "floating"),
])
def test_bad_inputs_are_refused_naming_the_function(call, match):
    with pytest.raises(mf.errors.InvalidArgumentError, match=match):
        call()


def test_clip_by_value_keeps_a_sparse_gradient_sparse_so_momentum_moves_only_its_rows():
    # TensorFlow's values: the clipped embedding gradient stays IndexedSlices (each
    # looked-up row's value clipped), so the second step, which looks up row 2 only,
    # leaves rows 1 and 3 where the first left them. Densified, their momentum moved them.
    table = mf.Variable(np.arange(12.0).reshape(6, 2) / 10, name="table")
    ids = mf.placeholder(mf.int32, [None])
    opt = mf.train.MomentumOptimizer(0.1, 0.9)
    grads = opt.compute_gradients(mf.reduce_sum(mf.square(mf.gather(table, ids))))
    clipped = [(mf.clip_by_value(g, -0.5, 0.5), v) for g, v in grads]
    assert isinstance(clipped[0][0], mf.IndexedSlices)
    train = opt.apply_gradients(clipped)
    with mf.Session() as sess:
        sess.run(table.initializer)
        sess.run(mf.variables_initializer(opt.variables()))
        sess.run(train, {ids: [1, 3, 1]})
        sess.run(train, {ids: [2]})
        np.testing.assert_allclose(
            sess.run(table), [[0.0, 0.1], [0.12, 0.2], [0.35, 0.45], [0.55, 0.65],
                              [0.8, 0.9], [1.0, 1.1]], rtol=1e-12)


def test_clip_by_value_takes_the_minimum_first_as_tensorflow():
    # With min > max every element is clip_value_min in TensorFlow (numpy's clip gives max).
    np.testing.assert_array_equal(run(mf.clip_by_value(mf.constant([0.0, 2.0, 9.0]), 3.5, 0.5)),
                                  [3.5, 3.5, 3.5])


def test_clip_by_value_refuses_bounds_that_would_broadcast_the_tensor():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"clip_by_value: the bounds"):
        mf.clip_by_value(mf.constant([1.0, 2.0]), mf.constant([[0.0], [1.0]]), 3.0)
