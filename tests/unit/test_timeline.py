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
