"""The standard hooks, each driven by a SingularMonitoredSession in one process."""

import glob
import io
import json
import logging

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.train import basic_hooks
from tests.unit.monitored_helpers import (
    RecordingSaver, counter_model, event_scalars, train_until_stop)

HOOK_LOGGER = "mpiflow.train"


@pytest.fixture(autouse=True)
def _no_cached_writers():
    yield
    mf.summary.FileWriterCache.clear()


class FakeClock:
    """Stands in for time.monotonic so seconds-based schedules are tested without sleeping."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# -- bad arguments ----------------------------------------------------------------------------
# (make(tensor, summary) -> hook, the text its InvalidArgumentError must contain)
BAD_ARGUMENTS = {
    "stop_neither": (lambda t, s: mf.train.StopAtStepHook(),
                     "StopAtStepHook: exactly one of num_steps and last_step must be given, "
                     "got num_steps=None and last_step=None"),
    "stop_both": (lambda t, s: mf.train.StopAtStepHook(num_steps=2, last_step=3),
                  "exactly one of num_steps and last_step"),
    "stop_negative": (lambda t, s: mf.train.StopAtStepHook(num_steps=-1),
                      "num_steps must be an int >= 0, got -1"),
    "checkpoint_neither": (lambda t, s: mf.train.CheckpointSaverHook("d"),
                           "CheckpointSaverHook: exactly one of save_secs and save_steps must "
                           "be given, got save_secs=None and save_steps=None"),
    "checkpoint_both": (lambda t, s: mf.train.CheckpointSaverHook("d", save_secs=5,
                                                                  save_steps=5),
                        "exactly one of save_secs and save_steps"),
    "checkpoint_zero_steps": (lambda t, s: mf.train.CheckpointSaverHook("d", save_steps=0),
                              "CheckpointSaverHook: save_steps must be a positive int, got 0"),
    "checkpoint_saver_and_scaffold": (
        lambda t, s: mf.train.CheckpointSaverHook("d", save_steps=1, saver=RecordingSaver(),
                                                  scaffold=mf.train.Scaffold()),
        "give saver or scaffold, not both"),
    "checkpoint_no_dir": (lambda t, s: mf.train.CheckpointSaverHook("", save_steps=1),
                          "checkpoint_dir must be a directory, got ''"),
    "step_counter_neither": (lambda t, s: mf.train.StepCounterHook(every_n_steps=None),
                             "StepCounterHook: exactly one of every_n_secs and every_n_steps"),
    "step_counter_both": (lambda t, s: mf.train.StepCounterHook(every_n_steps=10,
                                                                every_n_secs=1.0),
                          "StepCounterHook: exactly one of every_n_secs and every_n_steps"),
    "step_counter_negative": (lambda t, s: mf.train.StepCounterHook(every_n_steps=None,
                                                                    every_n_secs=-1),
                              "every_n_secs must be a positive number, got -1"),
    "logging_no_schedule": (lambda t, s: mf.train.LoggingTensorHook([t]),
                            "LoggingTensorHook: give at_end=True and/or exactly one of "
                            "every_n_iter and every_n_secs"),
    "logging_both": (lambda t, s: mf.train.LoggingTensorHook([t], every_n_iter=1,
                                                             every_n_secs=1),
                     "exactly one of every_n_iter and every_n_secs"),
    "logging_nothing": (lambda t, s: mf.train.LoggingTensorHook([], at_end=True),
                        "no tensors to log"),
    "summary_no_source": (lambda t, s: mf.train.SummarySaverHook(save_steps=1),
                          "SummarySaverHook: exactly one of scaffold and summary_op must be "
                          "given"),
    "summary_no_schedule": (lambda t, s: mf.train.SummarySaverHook(summary_op=s),
                            "SummarySaverHook: exactly one of save_secs and save_steps"),
    "profiler_neither": (lambda t, s: mf.train.ProfilerHook(output_dir="d"),
                         "ProfilerHook: exactly one of save_secs and save_steps"),
    "timer_neither": (lambda t, s: mf.train.SecondOrStepTimer(),
                      "SecondOrStepTimer: exactly one of every_secs and every_steps"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_hooks_reject_bad_arguments_with_clear_messages(case):
    make, message = BAD_ARGUMENTS[case]
    t = mf.constant(1.0, name="t")
    with pytest.raises(mf.errors.InvalidArgumentError) as info:
        make(t, mf.summary.scalar("t", t))
    assert message in str(info.value)


def test_hooks_that_count_steps_need_a_global_step():
    hook = mf.train.StopAtStepHook(last_step=3)
    with pytest.raises(mf.errors.FailedPreconditionError,
                       match="Global step should be created to use StopAtStepHook: call "
                             r"mf.train.get_or_create_global_step\(\)"):
        hook.begin()


# -- timer ------------------------------------------------------------------------------------
def test_timer_by_steps_triggers_first_then_every_n_steps():
    timer = mf.train.SecondOrStepTimer(every_steps=3)
    assert timer.should_trigger_for_step(0)
    assert timer.update_last_triggered_step(0) == (None, None)
    assert [s for s in range(1, 8) if timer.should_trigger_for_step(s)] == [3, 4, 5, 6, 7]
    assert not timer.should_trigger_for_step(0)
    assert timer.last_triggered_step() == 0


def test_timer_by_seconds_triggers_once_the_interval_has_passed(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(basic_hooks.time, "monotonic", clock)
    timer = mf.train.SecondOrStepTimer(every_secs=10.0)
    timer.update_last_triggered_step(5)
    clock.now += 9.0
    assert not timer.should_trigger_for_step(50)
    clock.now += 1.0
    assert timer.should_trigger_for_step(50)
    assert timer.update_last_triggered_step(50) == (10.0, 45)
    assert not timer.should_trigger_for_step(50)


# -- StopAtStepHook ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,runs", [({"last_step": 5}, 5), ({"num_steps": 3}, 3)])
def test_stop_at_step_hook_stops_at_the_right_step(kwargs, runs):
    m = counter_model()
    with mf.train.SingularMonitoredSession(hooks=[mf.train.StopAtStepHook(**kwargs)]) as sess:
        assert train_until_stop(sess, m.train_op) == runs
        assert sess.raw_session().run(m.step) == runs


# -- CheckpointSaverHook ----------------------------------------------------------------------
def test_checkpoint_saver_hook_saves_at_start_every_n_steps_and_at_end(tmp_path):
    m = counter_model()
    hooks = [mf.train.StopAtStepHook(last_step=5),
             mf.train.CheckpointSaverHook(tmp_path, save_steps=2)]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        train_until_stop(sess, m.train_op)
    state = mf.train.get_checkpoint_state(str(tmp_path))
    assert [p.rsplit("-", 1)[1] for p in state.all_model_checkpoint_paths] == \
        ["0", "2", "4", "5"]
    assert mf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-5")
    assert mf.train.load_variable(str(tmp_path / "model.ckpt-5"), "v") == 5.0



def test_checkpoint_saver_hook_writes_a_checkpoint_session_log_per_save(tmp_path):
    # As TensorFlow's: SessionLog(CHECKPOINT, checkpoint_path=the save path without the
    # step) at each save's step, in the event file of the checkpoint directory.
    m = counter_model()
    hooks = [mf.train.StopAtStepHook(last_step=3),
             mf.train.CheckpointSaverHook(tmp_path, save_steps=2)]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        train_until_stop(sess, m.train_op)
    logs = [(event.step, event.session_log)
            for path in sorted(tmp_path.glob("events.out.tfevents.*"))
            for event in mf.summary.summary_iterator(str(path))
            if event.HasField("session_log")]
    assert [step for step, _ in logs] == [0, 2, 3]
    assert {log.status for _, log in logs} == {mf.SessionLog.CHECKPOINT}
    assert {log.checkpoint_path for _, log in logs} == {str(tmp_path / "model.ckpt")}

def test_checkpoint_saver_hook_by_seconds_and_its_listeners(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(basic_hooks.time, "monotonic", clock)
    m = counter_model()
    saver = RecordingSaver()
    events = []

    class Listener(mf.train.CheckpointSaverListener):
        def before_save(self, session, step):
            events.append(("before", step))

        def after_save(self, session, step):
            events.append(("after", step))

        def end(self, session, step):
            events.append(("end", step))

    hooks = [mf.train.CheckpointSaverHook(tmp_path, save_secs=60, saver=saver,
                                          listeners=[Listener()])]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        sess.run(m.train_op)
        sess.run(m.train_op)
        clock.now += 60
        sess.run(m.train_op)
        sess.run(m.train_op)
    assert saver.saves == [0, 3, 4]
    assert events == [("before", 0), ("after", 0), ("before", 3), ("after", 3),
                      ("before", 4), ("after", 4), ("end", 4)]


def test_a_listener_returning_true_stops_training(tmp_path):
    m = counter_model()

    class StopAfterSecondSave(mf.train.CheckpointSaverListener):
        def after_save(self, session, step):
            return step >= 2

    hook = mf.train.CheckpointSaverHook(tmp_path, save_steps=2, saver=RecordingSaver(),
                                        listeners=[StopAfterSecondSave()])
    with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        assert train_until_stop(sess, m.train_op) == 2


# -- LoggingTensorHook ------------------------------------------------------------------------
def _fed_counter():
    """Return (placeholder, FeedFnHook feeding 0, 1, 2, ... to it on successive runs)."""
    it = mf.placeholder(mf.float32, [], name="it")
    count = iter(range(10**6))
    return it, mf.train.FeedFnHook(lambda: {it: float(next(count))})


def test_logging_tensor_hook_logs_every_n_iterations_and_at_end(caplog):
    m = counter_model()
    it, feeder = _fed_counter()
    doubled = mf.multiply(it, 2.0, name="doubled")
    hooks = [feeder, mf.train.StopAtStepHook(last_step=5),
             mf.train.LoggingTensorHook({"doubled": doubled}, every_n_iter=2),
             mf.train.LoggingTensorHook([m.v], at_end=True)]
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
            train_until_stop(sess, m.train_op)
    lines = [r.getMessage() for r in caplog.records if r.name == HOOK_LOGGER]
    assert lines[0] == "doubled = 0.0"
    assert lines[1].startswith("doubled = 4.0 (") and lines[1].endswith(" sec)")
    assert lines[2].startswith("doubled = 8.0 (")
    assert lines[3:] == ["v:0 = 5.0"]


def test_logging_tensor_hook_uses_the_formatter(caplog):
    m = counter_model()
    hook = mf.train.LoggingTensorHook({"step": m.step}, every_n_iter=1,
                                      formatter=lambda values: f"at step {values['step']}")
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
            sess.run(m.train_op)
    assert [r.getMessage() for r in caplog.records if r.name == HOOK_LOGGER] == ["at step 0"]



def test_logging_tensor_hook_tags_list_items_by_themselves_as_tensorflow(caplog):
    # TensorFlow's formatter gets {item: value} for a list: the tensor object, or the
    # name as given ("doubled" is the op's one output).
    m = counter_model()
    mf.multiply(m.v, 2.0, name="doubled")
    halves = mf.split(mf.constant([1.0, 2.0]), 2, name="halves")
    seen = []
    hook = mf.train.LoggingTensorHook(
        [m.step, "doubled", "doubled:0"], every_n_iter=1,
        formatter=lambda values: seen.append(values) or f"step {values[m.step]}")
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER), \
            mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        sess.run(m.train_op)
    assert [set(values) for values in seen] == [{m.step, "doubled", "doubled:0"}]
    assert seen[0]["doubled"] == seen[0]["doubled:0"] == 0.0
    assert [r.getMessage() for r in caplog.records if r.name == HOOK_LOGGER] == ["step 0"]
    with pytest.raises(mf.errors.InvalidArgumentError, match="'halves' is ambiguous"):
        mf.train.LoggingTensorHook([halves[0].op.name], every_n_iter=1).begin()


def test_logging_tensor_hook_logs_a_dicts_tags_in_sorted_order_a_lists_as_given(caplog):
    # As TensorFlow's: {"zeta": .., "alpha": .., "mid": ..} logs "alpha = .., mid = ..,
    # zeta = ..", whatever order the dict was written in; a list keeps its own order.
    m = counter_model()
    doubled = mf.multiply(m.v, 2.0, name="doubled")
    hooks = [mf.train.LoggingTensorHook({"zeta": doubled, "alpha": m.step, "mid": m.v},
                                        at_end=True),
             mf.train.LoggingTensorHook([doubled, m.step], at_end=True)]
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER), \
            mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        sess.run(m.train_op)
    assert [r.getMessage() for r in caplog.records if r.name == HOOK_LOGGER] == [
        "alpha = 1, mid = 1.0, zeta = 2.0", "doubled:0 = 2.0, global_step:0 = 1"]


# -- NanTensorHook ----------------------------------------------------------------------------
def test_nan_tensor_hook_raises_on_a_nan_loss():
    m = counter_model()
    loss = mf.placeholder(mf.float32, [], name="loss")
    with pytest.raises(mf.train.NanLossDuringTrainingError,
                       match="Model diverged with loss = NaN \\('loss:0'\\)"):
        with mf.train.SingularMonitoredSession(hooks=[mf.train.NanTensorHook(loss)]) as sess:
            sess.run(m.train_op, {loss: 1.0})
            sess.run(m.train_op, {loss: np.nan})
    assert sess.should_stop()       # closed on the way out


def test_nan_tensor_hook_can_request_a_stop_instead():
    m = counter_model()
    loss = mf.placeholder(mf.float32, [], name="loss")
    hook = mf.train.NanTensorHook(loss, fail_on_nan_loss=False)
    with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        sess.run(m.train_op, {loss: 1.0})
        assert not sess.should_stop()
        sess.run(m.train_op, {loss: np.nan})
        assert sess.should_stop()


# -- StepCounterHook and SummarySaverHook -------------------------------------------------------
def test_step_counter_hook_logs_and_writes_steps_per_second(tmp_path, caplog):
    m = counter_model()
    hooks = [mf.train.StopAtStepHook(last_step=6),
             mf.train.StepCounterHook(every_n_steps=2, output_dir=tmp_path)]
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
            train_until_stop(sess, m.train_op)
    rates = event_scalars(tmp_path)["global_step/sec"]
    assert [step for step, _ in rates] == [3, 5]
    assert all(rate > 0 for _, rate in rates)
    assert sum("global_step/sec: " in r.getMessage() for r in caplog.records) == 2


def test_summary_saver_hook_writes_each_value_at_its_step(tmp_path):
    m = counter_model()
    it, feeder = _fed_counter()
    summary = mf.summary.scalar("run_index", it)
    hooks = [feeder, mf.train.StopAtStepHook(last_step=7),
             mf.train.SummarySaverHook(save_steps=3, output_dir=tmp_path, summary_op=summary)]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        train_until_stop(sess, m.train_op)
    written = event_scalars(tmp_path)["run_index"]
    # After run i (0-based) the global step is i + 1.
    assert written == [(1, 0.0), (4, 3.0), (7, 6.0)]


def test_profiler_hook_traces_every_n_steps_into_timelines_and_run_metadata(tmp_path):
    # As TensorFlow's ProfilerHook: the first run starts the schedule untraced; each
    # step due is traced into timeline-<step>.json and tagged step_<step> in the events.
    m = counter_model()
    traced = []

    class TraceWatcher(mf.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            traced.append(bool(run_values.run_metadata.step_stats))

    hooks = [mf.train.ProfilerHook(save_steps=3, output_dir=str(tmp_path)), TraceWatcher(),
             mf.train.StopAtStepHook(last_step=10)]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        train_until_stop(sess, m.train_op)
    # After run i (1-based) the global step is i.
    assert [i for i, t in enumerate(traced, 1) if t] == [3, 6, 9]
    assert sorted(p.name for p in tmp_path.glob("timeline-*.json")) == [
        "timeline-3.json", "timeline-6.json", "timeline-9.json"]
    trace = json.loads((tmp_path / "timeline-6.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    tags = [event.tagged_run_metadata.tag
            for path in glob.glob(f"{tmp_path}/events.out.tfevents.*")
            for event in mf.summary.summary_iterator(path)
            if event.HasField("tagged_run_metadata")]
    assert tags == ["step_3", "step_6", "step_9"]


def test_global_step_waiter_hook_holds_the_first_run_until_the_step_is_reached(monkeypatch):
    # As TensorFlow's: before the first run it polls the global step (here another
    # worker's steps are played by each sleep), then never waits again.
    m = counter_model()
    bump = mf.assign_add(m.step, 1)
    waiter = mf.train.GlobalStepWaiterHook(wait_until_step=3)
    with mf.train.SingularMonitoredSession(hooks=[waiter]) as sess:
        sleeps = []

        def another_worker_steps(secs):
            sleeps.append(secs)
            sess.raw_session().run(bump)

        monkeypatch.setattr(basic_hooks.time, "sleep", another_worker_steps)
        sess.run(m.train_op)
        assert sleeps == [0.5, 0.5, 0.5] and sess.run(m.step) == 4
        sess.run(m.train_op)
        assert len(sleeps) == 3
    with mf.train.SingularMonitoredSession(
            hooks=[mf.train.GlobalStepWaiterHook(wait_until_step=0)]) as sess:
        sess.run(m.train_op)        # no wait for a step <= 0
        assert len(sleeps) == 3


# -- ProgressBarHook, FinalOpsHook --------------------------------------------------------------
def test_progress_bar_hook_shows_the_global_step_and_the_loss():
    m = counter_model()
    loss = mf.multiply(m.v, 0.5, name="loss")
    out = io.StringIO()
    hooks = [mf.train.StopAtStepHook(last_step=4),
             mf.train.ProgressBarHook(last_step=4, loss=loss, file=out, disable=False)]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        train_until_stop(sess, m.train_op)
    text = out.getvalue()
    assert "4/4" in text and "loss=" in text


def test_final_ops_hook_runs_its_ops_at_the_end():
    m = counter_model()
    final = mf.train.FinalOpsHook({"v": m.v, "step": m.step})
    with mf.train.SingularMonitoredSession(hooks=[mf.train.StopAtStepHook(last_step=3),
                                                  final]) as sess:
        train_until_stop(sess, m.train_op)
    assert final.final_ops_values == {"v": 3.0, "step": 3}
