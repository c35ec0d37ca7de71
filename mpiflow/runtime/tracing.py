"""What a traced step records, and the per-process buffer a timeline is made from.

``Session.run(..., options=RunOptions(trace_level=FULL_TRACE), run_metadata=md)`` runs the
step with every kernel, send, receive and collective timed (``Plan.run_steps`` with a
trace list). The step's events on this rank go to ``md.step_stats``; every rank that ran
a part of the step (a ps serving it, say) keeps its events in ``TRACER``, from which
``mf.timeline.write_chrome_trace`` builds one trace of the whole job. Untraced steps run
the plain schedule: tracing costs nothing until asked for.
"""

from __future__ import annotations

import collections
import threading
import time

from mpiflow import backend, config
from mpiflow.logger import get_logger

now_ns = time.perf_counter_ns     # CLOCK_MONOTONIC: one clock for every process of a host


class Tracer:
    """The events this process recorded in traced steps, and its name in a timeline.

    It keeps the most recent MPIFLOW_TRACE_MAX_EVENTS: a TF1 script that traces a step
    now and then to write that step's ``Timeline`` never calls ``write_chrome_trace``
    (which empties it), and would otherwise hold every traced step's events, on every
    rank that ran a part of it, for the life of the job. The first drop is logged once.
    """

    def __init__(self):
        self.events: collections.deque = collections.deque()
        self.dropped = 0
        self.describe = lambda: "this process"    # the rank service names its rank here
        self._lock = threading.Lock()

    def extend(self, events) -> None:
        limit = config.get("MPIFLOW_TRACE_MAX_EVENTS")
        with self._lock:
            self.events.extend(events)
            excess = len(self.events) - limit
            if excess <= 0:
                return
            for _ in range(excess):
                self.events.popleft()
            first, self.dropped = not self.dropped, self.dropped + excess
        if first:
            get_logger("mpiflow.timeline").warning(
                "%s keeps the %d most recent traced events (MPIFLOW_TRACE_MAX_EVENTS) for "
                "mf.timeline.write_chrome_trace; older ones are dropped. Write the job's "
                "trace (it clears them) or raise the limit to keep more.",
                self.describe(), limit)

    def take(self) -> list[dict]:
        """Return the events recorded so far and forget them."""
        with self._lock:
            events, self.events, self.dropped = list(self.events), collections.deque(), 0
        return events


TRACER = Tracer()


def event(cat: str, name: str, start_ns: int, end_ns: int, **args) -> dict:
    """One span: ``cat`` is "op", "send", "recv" or "collective"."""
    return {"cat": cat, "name": name, "ts": start_ns, "dur": end_ns - start_ns,
            "tid": threading.get_ident(), "args": args}


def timed_kernel(fn, op, trace: list, waits: bool, on_gpu: bool = False, op_type=None):
    """Wrap a kernel so each run appends its span to ``trace``. A kernel that ``waits``
    (an async collective, polled until done) is one span from its first call to its
    result. A GPU kernel returns before the GPU has done its work, so in a traced step
    the GPU is drained before and after it: its span is the time the GPU spent on it
    (the traced step runs slower, each kernel's share is right). ``op_type`` names what
    ran where it is not ``op``'s kernel alone (a fused group)."""
    from mpiflow.ops.registry import Wait, get_op_def
    cat = "collective" if waits else "op"
    started = []
    drain = backend.synchronize if on_gpu else _nothing
    shown = get_op_def(op.type).trace_args if op_type is None else None
    op_type = op_type or op.type

    def run(*args):
        drain()
        t0 = now_ns()
        result = fn(*args)
        drain()
        if waits and type(result) is Wait:
            if not started:
                started.append(t0)
            return result
        begin = started.pop() if started else t0
        extra = shown(result) if shown is not None else {}
        trace.append(event(cat, op.name, begin, now_ns(), type=op_type, **extra))
        return result
    return run


def _nothing():
    pass
