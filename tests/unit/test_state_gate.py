"""``graph.state_changes_only_if(predicate)``: the ops made inside that change state do so
only in the steps where the predicate holds (TensorFlow writes it with ``tf.cond``); the
rest of the graph runs as always, and what is made under ``control_dependencies(None)``
is not gated."""

import numpy as np
import pytest

import mpiflow as mf


def _run(fetches, feed=None, init=True):
    with mf.Session() as sess:
        if init:
            sess.run(mf.global_variables_initializer())
        return sess.run(fetches, feed)


def test_an_update_under_a_false_predicate_leaves_the_variable_and_reads_its_value():
    v = mf.Variable([1.0, 2.0], name="v")
    ok = mf.placeholder(mf.bool, [], name="ok")
    graph = mf.get_default_graph()
    with graph.state_changes_only_if(ok):
        update = mf.assign_add(v, [10.0, 10.0])
    with mf.Session() as sess:
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(update, {ok: False}), [1.0, 2.0])
        np.testing.assert_array_equal(sess.run(v), [1.0, 2.0])
        np.testing.assert_array_equal(sess.run(update, {ok: True}), [11.0, 12.0])
        np.testing.assert_array_equal(sess.run(v), [11.0, 12.0])


def test_a_whole_optimizer_step_is_skipped_slots_and_all():
    w = mf.Variable([1.0, -1.0], name="w")
    loss = mf.reduce_sum(mf.square(w))
    ok = mf.placeholder(mf.bool, [], name="ok")
    opt = mf.train.AdamOptimizer(0.1)
    grads = opt.compute_gradients(loss)
    with mf.get_default_graph().state_changes_only_if(ok):
        train = opt.apply_gradients(grads)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())      # slots made inside: not gated
        before = sess.run([w, *opt.variables()])
        sess.run(train, {ok: False})
        for a, b in zip(before, sess.run([w, *opt.variables()])):
            np.testing.assert_array_equal(a, b)
        sess.run(train, {ok: True})
        assert not np.array_equal(sess.run(w), before[0])
        beta1_power = opt._get_non_slot_variable("beta1_power")
        assert sess.run(beta1_power) == pytest.approx(0.9 * 0.9)   # advanced once


def test_reads_and_pure_ops_under_the_predicate_run_as_always():
    v = mf.Variable(3.0, name="v")
    ok = mf.placeholder(mf.bool, [], name="ok")
    with mf.get_default_graph().state_changes_only_if(ok):
        doubled = v * 2.0
    assert _run(doubled, {ok: False}) == 6.0
    assert "_gate" not in doubled.op._attrs


def test_control_dependencies_none_clears_the_predicate():
    ok = mf.placeholder(mf.bool, [], name="ok")
    graph = mf.get_default_graph()
    with graph.state_changes_only_if(ok):
        with graph.control_dependencies(None):
            v = mf.Variable(5.0, name="v")
            assert graph.current_state_gate() is None
        assert graph.current_state_gate() is ok
    assert "_gate" not in v.initializer._attrs and _run(v) == 5.0


def test_a_predicate_that_is_no_bool_scalar_is_refused_naming_the_op():
    v = mf.Variable(1.0, name="v")
    bad = mf.placeholder(mf.float32, [], name="bad")
    with mf.get_default_graph().state_changes_only_if(bad):
        with pytest.raises(mf.errors.InvalidArgumentError, match="must be a bool scalar"):
            mf.assign(v, 2.0, name="write_v")


def test_a_gated_update_survives_the_graph_def_round_trip():
    v = mf.Variable(1.0, name="v")
    ok = mf.placeholder(mf.bool, [], name="ok")
    with mf.get_default_graph().state_changes_only_if(ok):
        mf.assign_add(v, 1.0, name="bump")
    graph_def = mf.get_default_graph().as_graph_def()
    copy = mf.Graph()
    with copy.as_default():
        mf.import_graph_def(graph_def, name="")
        bump, ok2 = copy.get_operation_by_name("bump"), copy.get_tensor_by_name("ok:0")
        with mf.Session(graph=copy) as sess:
            sess.run(copy.get_operation_by_name("v/Assign"))
            sess.run(bump, {ok2: False})
            assert sess.run(copy.get_tensor_by_name("v:0")) == 1.0
            sess.run(bump, {ok2: True})
            assert sess.run(copy.get_tensor_by_name("v:0")) == 2.0
