"""The gradient walk itself: paths summed, unconnected inputs, stops, sparse gradients."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import OpDef, apply_op, register_op


def _run(*tensors, feed=None):
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        return sess.run(list(tensors), feed)


def test_gradients_of_every_path_are_summed():
    x = mf.constant([1.0, 2.0])
    y = x * x + 3.0 * x          # two paths from x
    g, = _run(*mf.gradients(y, x))
    np.testing.assert_allclose(g, 2 * np.array([1.0, 2.0]) + 3.0)


def test_unconnected_inputs_get_none_and_unconnected_ys_give_none():
    a = mf.constant(1.0)
    b = mf.constant(2.0)
    assert mf.gradients(a * 2.0, [a, b])[1] is None
    assert mf.gradients(mf.constant(5.0), [a]) == [None]


@pytest.mark.parametrize("zero", ["zero", mf.UnconnectedGradients.ZERO])
def test_unconnected_gradients_zero_gives_zeros_shaped_as_each_unconnected_input(zero):
    a = mf.constant([1.0, 2.0])
    b = mf.Variable(np.ones((2, 3)))
    da, db = mf.gradients(mf.reduce_sum(a * 3.0), [a, b], unconnected_gradients=zero)
    got_a, got_b = _run(da, db)
    np.testing.assert_array_equal(got_a, [3.0, 3.0])
    np.testing.assert_array_equal(got_b, np.zeros((2, 3)))
    assert mf.gradients(a * 2.0, [b], unconnected_gradients="none") == [None]
    with pytest.raises(mf.errors.InvalidArgumentError, match="'none' or 'zero', got 'zeros'"):
        mf.gradients(a, [b], unconnected_gradients="zeros")


def test_stop_gradients_and_stop_gradient_op_block_flow():
    x = mf.constant(3.0)
    h = x * 2.0
    y = h * x
    g_stop, = mf.gradients(y, x, stop_gradients=[h])
    g_op, = mf.gradients(mf.stop_gradient(h) * x, x)
    assert _run(g_stop, g_op) == [6.0, 6.0]


def test_grad_ys_scale_the_result_and_must_match_ys():
    x = mf.constant([1.0, 2.0])
    g, = mf.gradients(x * 2.0, x, grad_ys=mf.constant([10.0, 1.0]))
    np.testing.assert_allclose(_run(g)[0], [20.0, 2.0])
    with pytest.raises(mf.errors.InvalidArgumentError, match="grad_ys"):
        mf.gradients(x * 2.0, x, grad_ys=mf.constant([1.0, 2.0, 3.0]))


def test_integer_ys_cannot_be_differentiated():
    with pytest.raises(mf.errors.InvalidArgumentError, match="only floating ys"):
        mf.gradients(mf.constant([1, 2]), mf.constant([1, 2]))


def test_an_op_without_a_gradient_on_the_path_is_named():
    @register_op("TestOnlyNoGradient")
    class NoGradient(OpDef):
        def infer(self, b):
            return [(b.dtype(0), b.shape(0))]

        def forward(self, xp, ctx, x):
            return x

    x = mf.constant([1.0])
    y = apply_op("TestOnlyNoGradient", [x], name="opaque").outputs[0]
    with pytest.raises(mf.errors.UnimplementedError,
                       match=r"No gradient defined for op 'opaque' \(TestOnlyNoGradient\)"):
        mf.gradients(y * 2.0, x)
    from mpiflow.ops import registry
    del registry._REGISTRY["TestOnlyNoGradient"]


def test_gather_gradient_is_sparse_and_densified_where_an_op_needs_it():
    parts = [mf.Variable(np.ones((3, 2), np.float32), name=f"p{i}") for i in range(2)]
    table = mf.Variable(np.ones((6, 2), np.float32), name="table")
    direct, = mf.gradients(mf.reduce_sum(mf.gather(table, [0, 4, 4])), table)
    assert isinstance(direct, mf.IndexedSlices)
    # Through a concat the rows must be densified before ConcatGrad splits them.
    through = mf.gradients(mf.reduce_sum(mf.gather(mf.concat(parts, 0), [0, 4, 4])), parts)
    g0, g1 = _run(*through)
    np.testing.assert_allclose(g0, [[1, 1], [0, 0], [0, 0]])
    np.testing.assert_allclose(g1, [[0, 0], [2, 2], [0, 0]])


def test_a_deep_chain_does_not_hit_the_recursion_limit():
    x = mf.constant(1.0)
    y = x
    for _ in range(3000):
        y = y * 1.0
    g, = _run(*mf.gradients(y, x))
    assert g == 1.0


def test_stop_gradients_takes_one_tensor_as_tensorflow():
    x = mf.constant(3.0)
    h = x * 2.0
    g, = mf.gradients(h * x, x, stop_gradients=h)       # not in a list
    assert _run(g) == [6.0]


@pytest.mark.parametrize("method", [None, mf.AggregationMethod.ADD_N,
                                    mf.AggregationMethod.DEFAULT,
                                    mf.AggregationMethod.EXPERIMENTAL_TREE,
                                    mf.AggregationMethod.EXPERIMENTAL_ACCUMULATE_N])
def test_every_aggregation_method_sums_the_paths(method):
    x = mf.constant([1.0, 2.0])
    v = mf.Variable([1.0, 2.0])
    g, = mf.gradients(x * x + 3.0 * x, x, aggregation_method=method)
    (opt_g, _), = mf.train.GradientDescentOptimizer(0.1).compute_gradients(
        mf.reduce_sum(v * v + v), aggregation_method=method)
    got = _run(g, opt_g)
    np.testing.assert_array_equal(got, [[5.0, 7.0], [3.0, 5.0]])


def test_an_unknown_aggregation_method_is_refused_as_in_tensorflow():
    x = mf.constant([1.0, 2.0])
    with pytest.raises(mf.errors.InvalidArgumentError, match="invalid aggregation_method 7"):
        mf.gradients(x * x, x, aggregation_method=7)
