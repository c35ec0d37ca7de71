"""Traced steps in one process: ``Timeline(run_metadata.step_stats)`` gives a Chrome trace
of one step, and what the process keeps for the job's trace (``write_chrome_trace``)
stays bounded when nobody writes it."""

import json
import logging

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.runtime import tracing


@pytest.fixture(autouse=True)
def _empty_tracer():
    tracing.TRACER.take()
    yield
    tracing.TRACER.take()


def _traced_model():
    x = mf.placeholder(mf.float32, [None, 4], name="x")
    w = mf.Variable(np.ones((4, 2), np.float32), name="w")
    loss = mf.reduce_sum(mf.matmul(x, w), name="loss")
    train = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
    return x, train


def test_a_traced_step_is_a_chrome_trace_of_its_kernels():
    x, train = _traced_model()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        metadata = mf.RunMetadata()
        sess.run(train, {x: np.ones((3, 4))}, run_metadata=metadata,
                 options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE))
    trace = json.loads(mf.timeline.Timeline(metadata.step_stats)
                       .generate_chrome_trace_format())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {"MatMul", "loss"} <= {e["name"] for e in spans}
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans)


def test_the_events_kept_for_the_jobs_trace_are_bounded(monkeypatch, caplog):
    # A TF1 script traces a step now and then to write that step's Timeline, and never
    # writes the job's trace: the process keeps only the most recent events.
    monkeypatch.setenv("MPIFLOW_TRACE_MAX_EVENTS", "25")
    x, train = _traced_model()
    options = mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE)
    with mf.Session() as sess, caplog.at_level(logging.WARNING, logger="mpiflow.timeline"):
        sess.run(mf.global_variables_initializer())
        for _ in range(20):
            metadata = mf.RunMetadata()
            sess.run(train, {x: np.ones((3, 4))}, options=options, run_metadata=metadata)
    per_step = len(metadata.step_stats)
    assert 0 < per_step < 25
    kept = tracing.TRACER.take()
    assert len(kept) == 25
    assert kept[-per_step:] == list(metadata.step_stats)       # the most recent ones
    warnings = [r.getMessage() for r in caplog.records if r.name == "mpiflow.timeline"]
    assert len(warnings) == 1 and "MPIFLOW_TRACE_MAX_EVENTS" in warnings[0], warnings


def test_a_run_metadata_passed_to_every_run_holds_the_last_runs_step():
    # As TensorFlow fills it: a script making one RunMetadata for its whole loop writes
    # each traced step's Timeline, not every step traced so far.
    x, train = _traced_model()
    options = mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE)
    metadata = mf.RunMetadata()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train, {x: np.ones((3, 4))}, options=options, run_metadata=metadata)
        one_step = len(metadata.step_stats)
        sess.run(train, {x: np.ones((3, 4))}, options=options, run_metadata=metadata)
        assert len(metadata.step_stats) == one_step
        sess.run(train, {x: np.ones((3, 4))}, run_metadata=metadata)     # not traced
        assert metadata.step_stats == []


class _TraceEverySecondStep(mf.train.SessionRunHook):
    """A TF1 profiling hook: asks for a trace in before_run, reads it in after_run."""

    def __init__(self):
        self.runs, self.traced = 0, []

    def before_run(self, run_context):
        self.runs += 1
        if self.runs % 2 == 0:
            return mf.train.SessionRunArgs(None, options=mf.RunOptions(
                trace_level=mf.RunOptions.FULL_TRACE))
        return None

    def after_run(self, run_context, run_values):
        if self.runs % 2 == 0:
            assert run_values.options.trace_level == mf.RunOptions.FULL_TRACE
            trace = json.loads(mf.timeline.Timeline(run_values.run_metadata.step_stats)
                               .generate_chrome_trace_format())
            self.traced.append(sum(e["ph"] == "X" for e in trace["traceEvents"]))


def test_a_hook_asking_for_a_trace_reads_it_in_after_run():
    # MonitoredSession hands hooks a RunMetadata even when the caller passes none, and
    # merges a hook's RunOptions into the caller's (the larger trace level, the longer
    # timeout), as TensorFlow's does.
    x, train = _traced_model()
    hook = _TraceEverySecondStep()
    with mf.train.MonitoredSession(hooks=[hook]) as sess:
        for _ in range(4):
            sess.run(train, {x: np.ones((3, 4))},
                     options=mf.RunOptions(timeout_in_ms=60_000))
    assert len(hook.traced) == 2 and all(n > 0 for n in hook.traced), hook.traced
