"""Run a compiled plan step after step: one tight loop over typed step records.

A ``Plan`` is built once per (fetches, feeds) and reused: ``schedule`` decides which ops
run and in which order, ``plan_compiler`` turns them into ``Step`` records (kernels bound
to their ops, value slots, host/GPU copies, frees). Running a plan is one loop over the
records; no Python work scales with tensor size. A step that must wait (a Recv, an async
kernel) yields what it waits for to whoever drives it: the rank service in a cluster,
``Plan.run`` (with ``waiting.wait_until``) in one process.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from mpiflow import backend, errors
from mpiflow.comm.rendezvous import MISSING
from mpiflow.framework.graph_def import as_graph_def
from mpiflow.ops.registry import Wait
from mpiflow.runtime import tracing, waiting
from mpiflow.runtime.plan_compiler import (
    ASYNC,
    ASYNC_MULTI,
    MULTI,
    NO_OUTPUT,
    RECV,
    SEND,
    SINGLE,
    KernelContext,
    compile_plan,
    own_device,
)
from mpiflow.runtime.schedule import reads_after_writes, schedule, variables_to_run
from mpiflow.runtime.transfers import RecvWait

__all__ = ["EventWait", "KernelContext", "Plan", "RecvWait", "schedule"]

# The task an in-process session's graph runs on, as TensorFlow names it.
_LOCAL_TASK = "/job:localhost/replica:0/task:0"


class EventWait(NamedTuple):
    """What a step yields where an async kernel waits for event ``key``."""

    key: object

    def describe(self, describe_rank) -> str:
        describe_key = getattr(self.key, "describe", None)    # a key that can say what
        return describe_key(describe_rank) if callable(describe_key) else f"event {self.key!r}"


class Plan:
    """An executable schedule for one set of fetches and feeds.

    ``Plan(...)`` prunes and orders a graph for a local run; ``Plan.from_order`` compiles an
    already ordered op list (a partition shipped from another rank, whose order the client
    chose so that every rank's partition follows one global topological order).
    """

    def __init__(self, graph, fetch_tensors, target_ops, feed_tensors, env,
                 device_of=None, log_placement=None):
        fed = set(feed_tensors)
        order = schedule(graph, fetch_tensors, target_ops, fed)
        device_of = device_of or own_device
        if log_placement is not None:
            for op in order:
                log_placement(op, device_of(op))
        self._setup(graph, order, fetch_tensors, feed_tensors, env, device_of)

    @classmethod
    def from_order(cls, graph, order, fetch_tensors, feed_tensors, env, device_of=None):
        """Compile ``order`` as given (every op in it runs, in that order); ``device_of(op)``
        is where an op runs (default: its own device, as a partition's ops carry it)."""
        plan = cls.__new__(cls)
        plan._setup(graph, list(order), fetch_tensors, feed_tensors, env,
                    device_of or own_device)
        return plan

    def _setup(self, graph, order, fetch_tensors, feed_tensors, env, device_of):
        self.graph = graph
        self._order = order
        self._env = env
        self.fetch_tensors = list(fetch_tensors)
        self.feed_tensors = list(feed_tensors)
        fed = set(self.feed_tensors)
        late = reads_after_writes(order, fed)
        run_var_ops = variables_to_run(set(order), fed, self.fetch_tensors, late)
        compiled = compile_plan(order, run_var_ops, late, self.fetch_tensors,
                                self.feed_tensors, env, device_of)
        self._steps = compiled.steps
        # The run loop unpacks plain tuples: unpacking a NamedTuple takes the generic
        # iterator path, twice the cost per step of an exact tuple (measured 49 vs 22 ns).
        self._loop = [tuple(step) for step in compiled.steps]
        self.ops = compiled.ops
        self._places = compiled.places
        self._labels = compiled.labels
        self._template = compiled.template
        self.feed_slots = compiled.feed_slots
        self.fetch_slots = compiled.fetch_slots
        self.gpu = compiled.gpu
        self.has_transfers = compiled.has_transfers
        self.donated = compiled.donated       # (both for inspection: tests, debugging)
        self.outgoing = compiled.outgoing

    def partition_graphs(self) -> list:
        """The ops this plan runs, as one GraphDef dict (``RunMetadata.partition_graphs``)."""
        return [dict(as_graph_def(self.graph, self._order), device=_LOCAL_TASK)]

    def run(self, feed_values, timeout=None, trace=None):
        """Execute the schedule with ``feed_values`` (ordered as ``feed_tensors``).

        An async kernel that must wait (a sync-replicas accumulator, say) blocks this
        thread until another thread's step signals it through the plan's environment, for
        at most ``timeout`` seconds (default MPIFLOW_TIMEOUT).
        """
        steps = self.run_steps(feed_values, None, trace)
        env = self._env
        outcome = {}

        def resume():
            try:
                wanted = steps.send(None)
            except StopIteration as done:
                outcome["fetched"] = done.value
                return waiting.DONE
            if type(wanted) is not EventWait or not hasattr(env, "wait_event"):
                raise errors.InternalError(
                    f"A local plan waited for {wanted!r}, which nothing here can provide")
            outcome["wanted"] = wanted
            return waiting.IDLE

        def wait_and_resume():
            # The kernel looks again after each signal, or every 50 ms at the latest (a
            # signal may come between its look and this wait).
            env.wait_event(outcome["wanted"].key, 0.05)
            if env.cancel_reason is not None:
                raise errors.CancelledError(env.cancel_reason)
            return resume()

        try:
            if resume() != waiting.DONE:
                waiting.wait_until(
                    wait_and_resume, lambda: f"{outcome['wanted'].key!r}: nothing in this "
                    "process signalled it (a sync-replicas step needs its chief's sync loop "
                    "running)", timeout, who="This process")
            return outcome["fetched"]
        finally:
            steps.close()

    def run_steps(self, feed_values, io, trace=None):
        """Generator running the schedule; yields a ``RecvWait`` where a Recv waits and an
        ``EventWait`` where an async kernel waits.

        The driver resumes it with ``send(value)`` (the received tensor, or None after an
        event); Send steps call ``io.send(send_group, values)``. Returns the fetched values.
        The driver may resume it from another thread, so numpy's error state (quiet, as
        kernels want it) is set per stretch between waits, and only where a kernel runs:
        a worker's pull resumes the step once per received variable, and setting numpy's
        state costs a microsecond each time. With a ``trace`` list, every kernel, send and
        receive appends its span to it.
        """
        vals = self._template.copy()
        for slot, value in zip(self.feed_slots, feed_values):
            vals[slot] = value
        index = 0
        # Collectives started earlier in this step advance only when polled: between
        # kernels, while any is in flight.
        env = self._env
        gpu = self.gpu
        quiet = _QuietNumpy()
        loud = True             # numpy's own error state: no kernel since the last wait
        held = False            # ``io`` holds tensors back: sent before any wait
        try:
            if gpu is not None:
                backend.activate_gpu(gpu)
            for index, (fn, ins, out, kind, frees) in enumerate(
                    self._loop if trace is None else self._traced_steps(trace)):
                if loud and kind not in _NO_KERNEL:
                    quiet.enter()
                    loud = False
                if kind == SINGLE:
                    vals[out] = fn(*[vals[i] for i in ins])
                elif kind == MULTI:
                    for s, v in zip(out, fn(*[vals[i] for i in ins])):
                        vals[s] = v
                elif kind == NO_OUTPUT:
                    fn(*[vals[i] for i in ins])
                elif kind == SEND:
                    t0 = tracing.now_ns() if trace is not None else 0
                    values = [vals[i] for i in ins]
                    held = io.send(fn, values)
                    if trace is not None:
                        trace.append(tracing.event("send", f"Send {fn.label}", t0,
                                                   tracing.now_ns(), peer=fn.peer,
                                                   bytes=sum(map(_nbytes, values))))
                elif kind == RECV:
                    t0 = tracing.now_ns() if trace is not None else 0
                    value = io.take(fn.edge)
                    if value is MISSING:
                        quiet.exit()
                        loud = True
                        if held:
                            io.flush()
                            held = False
                        value = yield RecvWait(fn.edge, fn.peer, fn.carries)
                        if gpu is not None:     # resumed maybe by another thread
                            backend.activate_gpu(gpu)
                    vals[out] = value if fn.gpu is None else backend.to_device(value, fn.gpu)
                    if trace is not None:
                        trace.append(tracing.event("recv", f"Recv {fn.edge}", t0,
                                                   tracing.now_ns(), peer=fn.peer,
                                                   bytes=_nbytes(vals[out])))
                else:
                    args = [vals[i] for i in ins]
                    result = fn(*args)
                    while type(result) is Wait:
                        quiet.exit()
                        if held:
                            io.flush()
                            held = False
                        yield EventWait(result.key)
                        quiet.enter()
                        if gpu is not None:
                            backend.activate_gpu(gpu)
                        result = fn(*args)
                    if kind == ASYNC_MULTI:
                        for s, v in zip(out, result):
                            vals[s] = v
                    elif out is not None:
                        vals[out] = result
                if frees:
                    for s in frees:
                        vals[s] = None
                if held and time.perf_counter() >= io.hold_deadline:
                    io.flush()
                    held = False
                if env.tracking:
                    if loud:            # collectives sum in numpy, quietly as kernels
                        quiet.enter()
                        loud = False
                    env.poll()
        except errors.OpError:
            raise
        except GeneratorExit:
            raise
        except Exception as exc:
            raise errors.kernel_error(exc, self.ops[index]) from exc
        finally:
            quiet.exit()
        if held:
            io.flush()
        return [_fetch_value(vals[s]) for s in self.fetch_slots]

    def _traced_steps(self, trace):
        """The schedule with every kernel timed into ``trace`` (built per traced run)."""
        traced = []
        for step, op, place, label in zip(self._steps, self.ops, self._places, self._labels):
            if step.kind not in (SEND, RECV):
                step = step._replace(fn=tracing.timed_kernel(
                    step.fn, op, trace, step.kind in (ASYNC, ASYNC_MULTI),
                    on_gpu=place is not None, op_type=label))
            traced.append(step)
        return traced


_NO_KERNEL = frozenset((SEND, RECV))     # steps that run no numpy kernel


def _nbytes(value):
    return int(getattr(value, "nbytes", 0))


class _QuietNumpy:
    """numpy's floating-point warnings off while kernels run (they report through
    results, e.g. CheckNumerics), entered and left around each stretch of a step."""

    __slots__ = ("_state",)

    def __init__(self):
        self._state = None

    def enter(self):
        self._state = np.errstate(all="ignore")
        self._state.__enter__()

    def exit(self):
        if self._state is not None:
            self._state.__exit__(None, None, None)
            self._state = None


def _fetch_value(value):
    if type(value) is np.ndarray and value.ndim:      # the common case, first
        return value
    value = backend.to_host(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]            # a numpy scalar, as TensorFlow returns
    return value
