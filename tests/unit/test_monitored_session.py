"""MonitoredTrainingSession in one process: initialization, restore and resume, hooks'
fetches and feeds, stopping, closing, the finalized graph, and waiting for a chief."""

import time

import numpy as np
import pytest

import mpiflow as mf
from tests.unit.monitored_helpers import (
    counter_model, event_scalars, regression_model, train_until_stop)


@pytest.fixture(autouse=True)
def _no_cached_writers():
    yield
    mf.summary.FileWriterCache.clear()


class RecordingHook(mf.train.SessionRunHook):
    """Records the calls it gets and asks for ``fetches``/``feeds`` on every run."""

    def __init__(self, fetches=None, feeds=None):
        self.fetches = fetches
        self.feeds = feeds
        self.calls = []
        self.results = []

    def begin(self):
        self.calls.append("begin")

    def after_create_session(self, session, coord):
        self.calls.append("after_create_session")
        self.graph_finalized = session.graph.finalized

    def before_run(self, run_context):
        self.calls.append("before_run")
        self.original = run_context.original_args
        if self.fetches is None and self.feeds is None:
            return None
        return mf.train.SessionRunArgs(self.fetches, feed_dict=self.feeds)

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.results.append(run_values.results)

    def end(self, session):
        self.calls.append("end")


# -- lifecycle ----------------------------------------------------------------------------------
def test_the_chief_initializes_and_the_graph_is_finalized_only_while_open():
    m = counter_model()
    hook = RecordingHook()
    with mf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        assert mf.get_default_graph().finalized and hook.graph_finalized
        with pytest.raises(mf.errors.FailedPreconditionError, match="Graph is finalized"):
            mf.constant(1.0)
        sess.run(m.train_op)
        assert sess.run(m.v) == 1.0
    assert not mf.get_default_graph().finalized
    assert hook.calls == ["begin", "after_create_session", "before_run", "after_run",
                          "before_run", "after_run", "end"]


def test_hooks_fetches_and_feeds_are_merged_into_the_callers_run():
    m = counter_model()
    p = mf.placeholder(mf.float32, [], name="p")
    doubled = mf.multiply(p, 2.0, name="doubled")
    first = RecordingHook(fetches={"step": m.step, "doubled": doubled}, feeds={p: 3.0})
    second = RecordingHook(fetches=[m.v])
    with mf.train.SingularMonitoredSession(hooks=[first, second]) as sess:
        out = sess.run({"v": m.v, "doubled": doubled})
    assert out == {"v": 0.0, "doubled": 6.0}
    assert first.results == [{"step": 0, "doubled": 6.0}]
    assert second.results == [[0.0]]
    assert first.original.fetches == {"v": m.v, "doubled": doubled}


def test_hooks_read_run_options_and_metadata_even_when_the_caller_passes_none():
    # As TensorFlow's: run_values.options is an empty RunOptions, not None, so a hook
    # reading run_values.options.trace_level works on every run.
    m = counter_model()
    seen = []

    class OptionsHook(mf.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            seen.append((run_values.options.trace_level, run_values.options.timeout_in_ms,
                         run_values.run_metadata.step_stats))

    with mf.train.SingularMonitoredSession(hooks=[OptionsHook()]) as sess:
        sess.run(m.train_op)
        sess.run(m.train_op, options=mf.RunOptions(timeout_in_ms=60_000))
    assert seen == [(mf.RunOptions.NO_TRACE, 0, []), (mf.RunOptions.NO_TRACE, 60_000, [])]


def test_a_tensor_fed_by_a_hook_and_the_caller_raises_runtime_error_as_tensorflow():
    # TensorFlow's MonitoredSession raises RuntimeError("Same tensor is fed by a
    # SessionRunHook and user. ...") and RuntimeError("Same tensor is fed by two hooks.").
    counter_model()
    p = mf.placeholder(mf.float32, [], name="p")
    with mf.train.SingularMonitoredSession(hooks=[RecordingHook(feeds={p: 1.0})]) as sess:
        with pytest.raises(RuntimeError, match="fed by a hook and the caller"):
            sess.run(p, {p: 2.0})
    hooks = [RecordingHook(feeds={p: 1.0}), RecordingHook(feeds={p: 1.0})]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        with pytest.raises(RuntimeError, match="fed by two hooks"):
            sess.run(p)


def test_a_tensor_fed_twice_is_an_error_naming_it():
    counter_model()
    p = mf.placeholder(mf.float32, [], name="p")
    hooks = [RecordingHook(fetches=p, feeds={p: 1.0})]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"fed by a hook and the caller: \['p:0'\]"):
            sess.run(p, {p: 2.0})
    hooks = [RecordingHook(feeds={p: 1.0}), RecordingHook(feeds={p: 1.0})]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="fed by two hooks"):
            sess.run(p)


def test_close_is_idempotent_and_run_after_close_or_stop_raises():
    m = counter_model()
    hook = RecordingHook()
    sess = mf.train.MonitoredTrainingSession(
        hooks=[hook, mf.train.StopAtStepHook(last_step=1)])
    sess.run(m.train_op)
    assert sess.should_stop()
    with pytest.raises(RuntimeError, match="Run called even after should_stop requested"):
        sess.run(m.train_op)
    sess.close()
    sess.close()
    assert hook.calls.count("end") == 1 and sess.should_stop()
    with pytest.raises(mf.errors.FailedPreconditionError, match="closed MonitoredSession"):
        sess.run(m.train_op)


def test_context_manager_swallows_out_of_range_and_calls_end():
    m = counter_model()
    hook = RecordingHook()
    with mf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        sess.run(m.train_op)
        raise mf.errors.OutOfRangeError("input exhausted")
    assert hook.calls[-1] == "end" and sess.should_stop()


def test_an_error_made_with_tensorflows_arguments_ends_input_as_one_of_mpiflows():
    # TF1 input code raises OutOfRangeError(node_def, op, message) to end training.
    m = counter_model()
    hook = RecordingHook()
    with mf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        sess.run(m.train_op)
        raise mf.errors.OutOfRangeError(None, None, "end of my input")
    assert hook.calls[-1] == "end"
    error = mf.errors.InvalidArgumentError(node_def="n", op=None, message="bad")
    assert (error.message, error.node_def, error.op, str(error)) == ("bad", "n", None, "bad")
    assert mf.errors.NotFoundError(None, "op", "gone").op == "op"


def test_other_errors_propagate_and_skip_the_hooks_end():
    counter_model()
    hook = RecordingHook()
    with pytest.raises(ValueError, match="boom"):
        with mf.train.MonitoredTrainingSession(hooks=[hook]):
            raise ValueError("boom")
    assert "end" not in hook.calls
    assert not mf.get_default_graph().finalized


def test_run_step_fn_runs_with_hooks_and_can_request_a_stop():
    m = counter_model()
    hook = RecordingHook()

    def step_fn(step_context):
        value = step_context.session.run(m.v)       # the raw session: no hooks
        step_context.run_with_hooks(m.train_op)
        if value >= 1.0:
            step_context.request_stop()
        return value

    with mf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        assert sess.run_step_fn(step_fn) == 0.0
        assert not sess.should_stop()
        with pytest.raises(StopIteration):
            sess.run_step_fn(step_fn)
        assert sess.should_stop()
    assert hook.calls.count("before_run") == 2


def test_a_stop_requested_in_step_fn_ends_the_with_block_as_tensorflow():
    # TensorFlow's run_step_fn lets request_stop's StopIteration out: the with block
    # ends cleanly there (the hooks' end is called), and the loop's next statement never
    # runs with a value the step did not return.
    m = counter_model()
    hook = RecordingHook()
    returned = []

    def step_fn(step_context):
        step_context.run_with_hooks(m.train_op)
        if step_context.session.run(m.step) >= 2:
            step_context.request_stop()
        return step_context.session.run(m.step)

    with mf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        while not sess.should_stop():
            returned.append(sess.run_step_fn(step_fn))
        returned.append("after the loop")
    assert returned == [1]
    assert sess.should_stop() and hook.calls[-1] == "end"


def test_a_hook_thread_error_reaches_should_stop():
    counter_model()

    class FailingThreadHook(mf.train.SessionRunHook):
        def after_create_session(self, session, coord):
            coord.request_stop(ValueError("reader thread failed"))

    sess = mf.train.MonitoredTrainingSession(hooks=[FailingThreadHook()])
    with pytest.raises(ValueError, match="reader thread failed"):
        sess.should_stop()
    with pytest.raises(ValueError, match="reader thread failed"):
        sess.close()


# -- default hooks, checkpoints, resume -------------------------------------------------------
def test_the_chief_gets_the_default_hooks_for_its_checkpoint_dir(tmp_path):
    m = regression_model()
    # The SummarySaverHook whether or not the graph has summaries yet, as TensorFlow.
    with mf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
        kinds = [type(h).__name__ for h in sess._hooks]
    assert kinds == ["StepCounterHook", "SummarySaverHook", "CheckpointSaverHook",
                     "ProgressBarHook"]
    mf.summary.scalar("loss", m.loss)
    with mf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                           save_checkpoint_secs=None,
                                           progress_bar=False) as sess:
        kinds = [type(h).__name__ for h in sess._hooks]
    assert kinds == ["StepCounterHook", "SummarySaverHook"]
    # A worker runs only its own hooks (its ready ops here say "ready" at once).
    ready = mf.constant(np.zeros([0], np.bool_))
    scaffold = mf.train.Scaffold(ready_op=ready, ready_for_local_init_op=ready)
    with mf.train.MonitoredTrainingSession(is_chief=False, checkpoint_dir=str(tmp_path),
                                           hooks=[RecordingHook()], scaffold=scaffold) as sess:
        kinds = [type(h).__name__ for h in sess._hooks]
    assert kinds == ["RecordingHook"]


def test_a_second_session_on_the_checkpoint_dir_resumes_from_the_saved_step(tmp_path):
    m = regression_model()
    ckpt = str(tmp_path)
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=ckpt, save_checkpoint_steps=2,
            hooks=[mf.train.StopAtStepHook(last_step=5)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
        w_saved = sess._tf_sess().run(m.w)
    assert mf.train.latest_checkpoint(ckpt).endswith("model.ckpt-5")
    final = mf.train.FinalOpsHook({"step": m.step, "w": m.w})
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=ckpt, save_checkpoint_steps=2,
            hooks=[mf.train.StopAtStepHook(num_steps=3), final]) as sess:
        assert sess._tf_sess().run(m.step) == 5
        assert np.array_equal(sess._tf_sess().run(m.w), w_saved)
        assert train_until_stop(sess, m.train_op, m.feed) == 3
    assert final.final_ops_values["step"] == 8
    assert mf.train.latest_checkpoint(ckpt).endswith("model.ckpt-8")


def test_summaries_of_a_training_run_reach_tensorboard(tmp_path):
    m = regression_model()
    # "loss_1": the op "loss" has the name, as TensorFlow's tag would be.
    tag, = mf.summary.scalar("loss", m.loss).tags
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), save_summaries_steps=2, log_step_count_steps=2,
            save_checkpoint_secs=None, hooks=[mf.train.StopAtStepHook(last_step=6)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    scalars = event_scalars(tmp_path)
    losses = scalars[tag]
    assert [s for s, _ in losses] == [1, 3, 5]
    assert losses[0][1] > losses[-1][1] > 0
    assert [s for s, _ in scalars["global_step/sec"]] == [3, 5]


def test_summaries_a_hook_makes_in_begin_are_written_as_tensorflow_writes_them(tmp_path):
    # TensorFlow adds its SummarySaverHook whether or not the graph has summaries yet,
    # and the scaffold merges them after every hook's begin(): they were silently dropped.
    m = regression_model()

    class MakesASummary(mf.train.SessionRunHook):
        def begin(self):
            mf.summary.scalar("late_loss", m.loss)

    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), save_summaries_steps=2, log_step_count_steps=0,
            save_checkpoint_secs=None,
            hooks=[MakesASummary(), mf.train.StopAtStepHook(last_step=4)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    assert [s for s, _ in event_scalars(tmp_path)["late_loss"]] == [1, 3]


def test_a_graph_without_summaries_still_logs_the_runs_start_and_fetches_nothing_more(
        tmp_path):
    m = regression_model()
    hook = mf.train.SummarySaverHook(save_steps=1, output_dir=str(tmp_path),
                                     scaffold=mf.train.Scaffold())
    with mf.train.MonitoredTrainingSession(
            hooks=[hook, mf.train.StopAtStepHook(last_step=3)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    starts = [e for path in tmp_path.glob("events.*")
              for e in mf.summary.summary_iterator(str(path)) if e.HasField("session_log")]
    assert len(starts) == 1
    assert hook.before_run(None) is None        # after the first step: no fetch at all


def test_checkpoint_secs_and_steps_together_are_refused_as_in_tensorflow(tmp_path):
    # Its CheckpointSaverHook's timer refuses the pair: with one of them ignored, the
    # script would believe it saves on both schedules.
    counter_model()
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"exactly one of save_secs and save_steps.*save_secs=100.*"
                             r"save_steps=1"):
        mf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                          save_checkpoint_secs=100, save_checkpoint_steps=1)


# -- scaffold and readiness -----------------------------------------------------------------
def test_report_uninitialized_variables_returns_a_mask_and_keeps_the_names():
    a = mf.Variable(1.0, name="a")
    mf.Variable(2.0, name="b")
    report = mf.train.report_uninitialized_variables()
    with mf.Session() as sess:
        sess.run(a.initializer)
        mask = sess.run(report)
    assert mask.dtype == np.bool_ and mask.tolist() == [False, True]
    from mpiflow.train.session_manager import uninitialized_names
    assert uninitialized_names(report, mask) == ["b"]


def test_scaffold_takes_its_pieces_from_the_collections_and_rejects_duplicates():
    m = counter_model()
    mf.add_to_collection(mf.GraphKeys.INIT_OP, m.v.initializer)
    scaffold = mf.train.Scaffold().finalize()
    assert scaffold.init_op is m.v.initializer
    mf.get_default_graph()._unsafe_unfinalize()
    mf.add_to_collection(mf.GraphKeys.INIT_OP, m.step.initializer)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="'init_op' holds 2 items: pass the one to use as "
                             r"Scaffold\(init_op=...\)"):
        mf.train.Scaffold().finalize()


def test_scaffold_static_helpers_build_a_custom_local_init_op_as_tensorflow():
    # TF1 scripts extend the default local_init_op with Scaffold.default_local_init_op()
    # and take pieces with Scaffold.get_or_default, both static methods in TensorFlow.
    local = mf.Variable(5.0, name="local", trainable=False,
                        collections=[mf.GraphKeys.LOCAL_VARIABLES])
    marker = mf.Variable(0.0, name="marker", trainable=False,
                         collections=[mf.GraphKeys.LOCAL_VARIABLES])
    init_op = mf.train.Scaffold.get_or_default(
        "init_op", mf.GraphKeys.INIT_OP, mf.global_variables_initializer)
    assert mf.train.Scaffold.get_or_default("init_op", mf.GraphKeys.INIT_OP, None) is init_op
    with mf.control_dependencies([mf.train.Scaffold.default_local_init_op()]):
        local_init_op = mf.assign(marker, 1.0).op
    scaffold = mf.train.Scaffold(local_init_op=local_init_op)
    with mf.train.SingularMonitoredSession(scaffold=scaffold) as sess:
        assert sess.run([local, marker]) == [5.0, 1.0]


def test_an_init_op_that_leaves_variables_uninitialized_is_named():
    m = counter_model()
    scaffold = mf.train.Scaffold(init_op=m.v.initializer)
    with pytest.raises(mf.errors.FailedPreconditionError,
                       match="Init operations did not make the model ready for local_init: 1 of 2 "
                             "variables are not initialized: 'global_step'"):
        mf.train.MonitoredTrainingSession(scaffold=scaffold)
    assert not mf.get_default_graph().finalized


def test_a_worker_whose_chief_never_initializes_times_out_naming_the_variables(monkeypatch):
    counter_model()
    monkeypatch.setenv("MPIFLOW_TIMEOUT", "0.3")
    start = time.monotonic()
    with pytest.raises(mf.errors.DeadlineExceededError) as info:
        mf.train.MonitoredTrainingSession(is_chief=False)
    waited = time.monotonic() - start
    message = str(info.value)
    assert "MPIFLOW_TIMEOUT=0.3" in message
    assert "2 of 2 variables are not initialized: 'global_step', 'v'" in message
    assert "The chief has not initialized them" in message
    assert 0.3 <= waited < 3.0
    assert not mf.get_default_graph().finalized


def test_max_wait_secs_overrides_the_default_wait():
    counter_model()
    with pytest.raises(mf.errors.DeadlineExceededError, match=r"max_wait_secs=0\.1\)"):
        mf.train.MonitoredTrainingSession(is_chief=False, max_wait_secs=0.1)


def test_where_a_rank_is_counts_the_training_steps_not_every_session_run(tmp_path):
    # The hang report's "steps run" are the script's MonitoredSession.run calls; the
    # hooks' own runs (the stop hook's re-reads, the saves) show in the Session.run count.
    from mpiflow.runtime import whereabouts

    m = counter_model()
    before = whereabouts.report()
    hooks = [mf.train.StopAtStepHook(last_step=4)]
    with mf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), hooks=hooks,
                                           save_checkpoint_steps=1, progress_bar=False) as sess:
        assert train_until_stop(sess, m.train_op) == 4
        now = whereabouts.report()
    assert now["training_steps"] - before.get("training_steps", 0) == 4
    assert now["steps"] - before["steps"] > 4
    text = whereabouts.format_report("rank 0 (worker:0)", now)
    assert f"steps run: {now['training_steps']} (MonitoredSession.run calls; " \
        f"{now['steps']} Session.run calls in all" in text
    assert "Session.run calls: 7\n" in whereabouts.format_report("rank 1", {"steps": 7})


def test_a_tensor_a_hook_and_the_caller_feed_by_different_keys_takes_the_callers_value():
    # As TF 2.21's tf.compat.v1 MonitoredSession: a hook feeding x and the caller 'x:0'
    # (or the other way round) run with the caller's value, 2 * 1.0 = 2.0; of two hooks,
    # the later one's value (10.0 over 5.0 gives 20.0, 5.0 over 10.0 gives 10.0).
    counter_model()
    x = mf.placeholder(mf.float32, [], name="x")
    y = x * 2
    for hook_key, caller_key in ((x, "x:0"), ("x:0", x)):
        with mf.train.SingularMonitoredSession(
                hooks=[RecordingHook(feeds={hook_key: 10.0})]) as sess:
            assert sess.run(y, feed_dict={caller_key: 1.0}) == 2.0
    for first, second, expected in (((x, 10.0), ("x:0", 5.0), 10.0),
                                    (("x:0", 5.0), (x, 10.0), 20.0)):
        hooks = [RecordingHook(feeds=dict([first])), RecordingHook(feeds=dict([second]))]
        with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
            assert sess.run(y) == expected


def test_a_scaffold_always_has_a_saver_once_finalized_as_tensorflow(tmp_path):
    # TF 2.21's Scaffold.finalize takes the SAVERS collection's one, else adds a new
    # Saver(sharded=True, allow_empty=True): scaffold.saver.save works in any session.
    m = counter_model()
    set_v = m.v.assign(7.0)
    scaffold = mf.train.Scaffold()
    assert scaffold.saver is None
    with mf.train.SingularMonitoredSession(scaffold=scaffold) as sess:
        assert mf.get_collection(mf.GraphKeys.SAVERS) == [scaffold.saver]
        sess.run(set_v)
        prefix = scaffold.saver.save(sess, str(tmp_path / "model.ckpt"))
    assert mf.train.load_variable(prefix, m.v.op.name) == 7.0


def test_a_scaffold_of_a_graph_without_variables_gets_an_empty_saver():
    with mf.Graph().as_default():
        scaffold = mf.train.Scaffold().finalize()
        assert scaffold.saver is not None
        assert mf.get_collection(mf.GraphKeys.SAVERS) == [scaffold.saver]


def test_a_scaffold_refuses_two_savers_in_the_collection():
    mf.Variable(1.0, name="v")
    for _ in range(2):
        mf.add_to_collection(mf.GraphKeys.SAVERS, mf.train.Saver())
    with pytest.raises(mf.errors.InvalidArgumentError, match="SAVERS collection holds 2"):
        mf.train.Scaffold().finalize()
