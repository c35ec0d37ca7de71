"""StalenessAwareOptimizer in one process, where a step's local step can be fed to stand
for a read made some global steps ago: the staleness is global step minus local step,
the rule scales the learning rate, the bound drops the whole update (slots, the global
step's increment and all), and every value lands in the record."""

import numpy as np
import pytest

import mpiflow as mf


def _model(opt):
    w = mf.Variable([1.0, 2.0], name="w")
    step = mf.train.get_or_create_global_step()
    train = opt.minimize(mf.reduce_sum(mf.square(w)), global_step=step)
    return w, step, train


def test_the_learning_rate_is_scaled_by_one_over_one_plus_the_staleness():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                           staleness_lr="inverse")
    w, step, train = _model(opt)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.assign(step, 5))
        _, staleness = sess.run([train, opt.staleness], {opt._local_step: 2})
        assert staleness == 3
        np.testing.assert_allclose(sess.run(w), np.array([1.0, 2.0]) * (1 - 0.1 / 4 * 2),
                                   rtol=1e-6)
        assert sess.run(step) == 6


def test_a_fresh_gradient_keeps_the_whole_rate():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                           staleness_lr="inverse")
    w, step, train = _model(opt)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        assert sess.run([train, opt.staleness])[1] == 0
        np.testing.assert_allclose(sess.run(w), [0.8, 1.6], rtol=1e-6)


def test_a_dropped_gradient_changes_nothing_not_even_adams_slots_or_the_step():
    opt = mf.train.DropStaleGradientOptimizer(mf.train.AdamOptimizer(0.1), staleness=1)
    w, step, train = _model(opt)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.assign(step, 3))
        state = [w, step, *opt.variables()]
        before = sess.run(state)
        sess.run(train, {opt._local_step: 1})                # 2 steps old: dropped
        for a, b in zip(before, sess.run(state)):
            np.testing.assert_array_equal(a, b)
        sess.run(train, {opt._local_step: 2})                # 1 step old: applied
        assert sess.run(step) == 4 and not np.array_equal(sess.run(w), before[0])
        values, counts, dropped = sess.run(opt.staleness_histogram())
        assert values.tolist() == [1, 2] and counts.tolist() == [1, 1] and dropped == 1


def test_a_histogram_of_the_recent_staleness_goes_to_the_summaries():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1))
    _, _, train = _model(opt)
    assert mf.get_collection(mf.GraphKeys.TRAIN_OP) == [train]
    specs = [spec for summary in mf.get_collection(mf.GraphKeys.SUMMARIES)
             for spec in summary._specs]
    assert [(s.kind, s.tag) for s in specs] == [("histogram",
                                                 "StalenessAware/gradient_staleness")]
    opt_values = mf.get_collection(mf.GraphKeys.SUMMARIES)[0]
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train)
        sess.run(train)
        (recent,) = sess.run(opt_values)
    assert recent.tolist() == [0, 0]      # the staleness of the two steps


@pytest.mark.parametrize("kwargs,match", [
    ({"staleness_lr": "sqrt"}, "staleness_lr must be one of"),
    ({"max_staleness": -1}, "max_staleness must be None or an int >= 0"),
    ({"max_staleness": 1.5}, "max_staleness must be None or an int >= 0"),
])
def test_bad_settings_are_refused_by_name(kwargs, match):
    with pytest.raises(mf.errors.InvalidArgumentError, match=match):
        mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1), **kwargs)


def test_without_a_global_step_staleness_cannot_be_counted():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1))
    w = mf.Variable(1.0, name="w")
    with pytest.raises(mf.errors.FailedPreconditionError, match="create the global step"):
        opt.minimize(mf.square(w))


def test_in_one_process_a_bound_never_holds_the_only_worker():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                           staleness=0)
    w, step, train = _model(opt)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        leads = [sess.run([train, opt.lead])[1] for _ in range(3)]
        done, max_lead, waits = sess.run(opt.clocks_record())
        final = sess.run(w)
    assert leads == [0, 0, 0] and done.tolist() == [3] and (max_lead, waits) == (0, 0)
    np.testing.assert_allclose(final, np.array([1.0, 2.0]) * 0.8 ** 3, rtol=1e-6)


def test_training_mode_ps_takes_a_staleness_bound_and_the_others_refuse_it():
    cluster = mf.train.ClusterSpec({"ps": ["a"], "worker": ["b", "c"]})
    mode = mf.train.TrainingMode("ps", cluster, 0, staleness=2)
    assert isinstance(mode.optimizer(mf.train.GradientDescentOptimizer(0.1)),
                      mf.train.StalenessAwareOptimizer)
    for other in ("allreduce", "hybrid"):
        with pytest.raises(mf.errors.InvalidArgumentError, match="staleness bound"):
            mf.train.TrainingMode(other, cluster, 0, staleness=2)
    with pytest.raises(mf.errors.InvalidArgumentError, match="staleness must be None"):
        mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                         staleness=-2)


def test_a_traced_step_shows_the_gradients_staleness_on_the_timeline():
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                           max_staleness=1)
    w, step, train = _model(opt)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.assign(step, 4))
        metadata = mf.RunMetadata()
        sess.run(train, {opt._local_step: 2},
                 options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
    (span,) = [e for e in metadata.step_stats if e["args"].get("type") == "GradientStaleness"]
    assert span["args"]["staleness"] == 2 and span["args"]["applied"] is False


@pytest.mark.parametrize("optimizer", [
    lambda: mf.train.GradientDescentOptimizer(0.1),
    lambda: mf.train.AdamOptimizer(0.1),              # its _finish updates more state
])
@pytest.mark.parametrize("kwargs", [{}, {"max_staleness": 2}, {"staleness": 0}])
def test_a_steps_measure_update_and_count_are_chained_on_the_global_steps_ps(optimizer,
                                                                             kwargs):
    # Through the worker, the count would wait for a round trip after the updates: other
    # steps' staleness measured meanwhile misses these updates, and a worker lost in
    # between leaves them made and the step not counted.
    cluster = mf.train.ClusterSpec({"ps": ["a"], "worker": ["b", "c"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                                  worker_device="/job:worker/task:1")):
        opt = mf.train.StalenessAwareOptimizer(optimizer(), **kwargs)
        _model(opt)
    count = mf.get_default_graph().get_operation_by_name("StalenessAware/count_step")
    before = {op.name: op.device for op in count.control_inputs}
    assert before and all(d.startswith("/job:ps/task:0") for d in before.values()), before


def _held_step(op_type, counter, counts, task, value, **attrs):
    """What the ps's step of worker ``task`` says it waits for when ``op_type`` holds it:
    clocks ``counter`` at ``counts`` (worker task -> count) of a 3-worker job."""
    from types import SimpleNamespace

    from mpiflow.ops.registry import Wait, get_op_def
    from mpiflow.ops.staleness_ops import ClocksEvent, WorkerClocks
    clocks = WorkerClocks()
    getattr(clocks, counter).update(counts)
    env = SimpleNamespace(tasks_of=lambda job: 3, departed=lambda job: [],
                          resting=lambda job: [])
    ctx = SimpleNamespace(clocks=clocks, event=ClocksEvent("c", clocks), task=task,
                          attrs={"shared_name": "c", "task": task, **attrs}, env=env)
    wait = get_op_def(op_type).forward(np, ctx, np.asarray(value, np.int64))
    assert isinstance(wait, Wait) and wait.key == ctx.event     # woken by every count
    return wait.key.describe(str)


def test_a_step_held_by_the_bound_names_the_worker_it_waits_for():
    said = _held_step("WorkerRoundBound", "done", {0: 5, 1: 3, 2: 5}, 2, 5, staleness=1)
    assert said.startswith("worker:2 to go on (bounded staleness, staleness=1): it has "
                           "applied 5 step(s), so every live worker must have applied 4; "
                           "behind: worker:1 (steps applied per worker: worker:0 5, "
                           "worker:1 3, worker:2 5)"), said
    assert "rests in server.join()" in said


def test_a_lock_step_update_held_for_the_rounds_reads_names_the_worker_it_waits_for():
    said = _held_step("WorkerRoundAllRead", "read", {0: 4, 1: 3, 2: 4}, 0, 4)
    assert said.startswith("every live worker to read round 4's variables before "
                           "worker:0's update (lock-step, staleness=0); behind: worker:1 "
                           "(rounds read per worker: worker:0 4, worker:1 3, worker:2 4)"), said


def test_the_clock_record_lists_every_worker_also_one_that_applied_nothing():
    from types import SimpleNamespace

    from mpiflow.ops.registry import get_op_def
    from mpiflow.ops.staleness_ops import WorkerClocks
    clocks = WorkerClocks()
    clocks.done.update({0: 10, 1: 10})        # worker 2 rested before its first step
    ctx = SimpleNamespace(clocks=clocks, env=SimpleNamespace(tasks_of=lambda job: 3))
    done, _, _ = get_op_def("WorkerClocksRecord").forward(np, ctx)
    assert done.tolist() == [10, 10, 0]
