"""Ops behind staleness-aware asynchronous training, on the global step's ps.

In asynchronous ps training a worker reads the variables at the start of its step and
pushes gradients at its end; meanwhile other workers' updates land. A gradient's
staleness is the number of global steps between the two: the global step when it is
applied minus the one the worker read. ``GradientStaleness`` measures it where the
global step lives, says whether the gradient is to be applied (a bound to drop older
ones) and by what its learning rate is scaled, and keeps a record of every value (a
resource of the ps): ``StalenessRecord`` for counts and the recent values a histogram
summary shows.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops.registry import REQUIRED, OpDef, Wait, register_op, require_dtype

RECENT = 1000           # staleness values the record keeps for histograms
LR_RULES = {
    None: lambda staleness: 1.0,
    # lr / (1 + staleness): a fresh gradient (one worker, or none applied since the read)
    # keeps the whole rate; with W workers in steady state each gradient is about W - 1
    # steps old and moves the variables about as far as the average of W would.
    "inverse": lambda staleness: 1.0 / (1.0 + staleness),
}


class StalenessRecord:
    """Every staleness one optimizer met on this ps: counts by value, the dropped, and the
    most recent values (for a histogram summary)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counts = collections.Counter()
        self.dropped = 0
        self.recent = collections.deque(maxlen=RECENT)

    def add(self, staleness: int, applied: bool) -> None:
        with self._lock:
            self.counts[staleness] += 1
            self.recent.append(staleness)
            if not applied:
                self.dropped += 1

    def histogram(self):
        """(staleness values, their counts, how many were dropped), values ascending."""
        with self._lock:
            values = sorted(self.counts)
            return (np.asarray(values, np.int64), np.asarray([self.counts[v] for v in values],
                                                              np.int64),
                    np.asarray(self.dropped, np.int64))

    def recent_values(self):
        with self._lock:
            return np.asarray(self.recent, np.int64)


class _RecordOp(OpDef):
    gpu_kernel = False
    stateful = True
    gradient = None

    def prepare(self, ctx):
        ctx.record = ctx.env.resource(f"staleness:{ctx.attrs['shared_name']}",
                                      StalenessRecord)


@register_op("GradientStaleness", attrs={"shared_name": REQUIRED, "max_staleness": -1,
                                         "lr_rule": ""})
class GradientStalenessOp(_RecordOp):
    """(staleness, applied, learning-rate factor) of a gradient computed from the
    variables of global step ``local_step``, applied when the global step is
    ``global_step``: applied unless ``max_staleness`` >= 0 and it is older; the factor is
    ``LR_RULES[lr_rule]``."""

    changes_shared_state = True     # the record
    tuple_outputs = True
    # A traced step shows each gradient's staleness on the ps's timeline.
    trace_args = staticmethod(lambda result: {"staleness": int(result[0]),
                                              "applied": bool(result[1])})

    def infer(self, b):
        for i, what in ((0, "global_step"), (1, "local_step")):
            require_dtype(b, i, (dtypes.int32, dtypes.int64), what)
            if b.shape(i).ndims not in (None, 0):
                raise b.error(f"Input '{what}' must be a scalar", got=b.shape(i))
        rule = b.attrs["lr_rule"] or None
        if rule not in LR_RULES:
            raise b.error("Unknown staleness learning-rate rule",
                          expected=f"one of {sorted(r for r in LR_RULES if r)}", got=rule)
        return [(dtypes.int64, []), (dtypes.bool_, []), (dtypes.float32, [])]

    def forward(self, xp, ctx, global_step, local_step):
        staleness = int(global_step) - int(local_step)
        if staleness < 0:
            raise errors.op_error(
                errors.InvalidArgumentError, "A gradient from the future", ctx.op,
                expected=f"a local step <= the global step {int(global_step)}",
                got=int(local_step))
        bound = ctx.attrs["max_staleness"]
        applied = bound < 0 or staleness <= bound
        ctx.record.add(staleness, applied)
        factor = LR_RULES[ctx.attrs["lr_rule"] or None](staleness)
        return (np.asarray(staleness, np.int64), np.asarray(applied),
                np.asarray(factor, np.float32))


@register_op("StalenessHistogram", attrs={"shared_name": REQUIRED})
class StalenessHistogramOp(_RecordOp):
    """(values, counts, dropped) of the staleness recorded under ``shared_name``."""

    tuple_outputs = True

    def infer(self, b):
        return [(dtypes.int64, [None]), (dtypes.int64, [None]), (dtypes.int64, [])]

    def forward(self, xp, ctx):
        return ctx.record.histogram()


@register_op("RecentStaleness", attrs={"shared_name": REQUIRED})
class RecentStalenessOp(_RecordOp):
    """The last ``RECENT`` staleness values recorded under ``shared_name``."""

    def infer(self, b):
        return [(dtypes.int64, [None])]

    def forward(self, xp, ctx):
        return ctx.record.recent_values()


# -- bounded staleness (stale synchronous parallel) ------------------------------------------

class WorkerClocks:
    """Each worker's rounds on this ps: ``read`` (steps that have read the variables) and
    ``done`` (steps applied); and what the bound held: the largest lead a worker started a
    step with, and how often one had to wait."""

    def __init__(self):
        self.read = collections.Counter()
        self.done = collections.Counter()
        self.max_lead = 0
        self.waits = 0


class ClocksEvent:
    """The event of the clocks ``name``, which every count signals; a waiting step's
    own copy also says what it waits for (``describe``), so a report of where the ps is
    names the worker that holds it back. Equal by the clocks' name alone: every copy is
    the one event."""

    __slots__ = ("bound", "clocks", "live", "name", "target", "task")

    def __init__(self, name, clocks, task=None, target=0, bound=None, live=()):
        self.name, self.clocks, self.task = name, clocks, task
        self.target, self.bound, self.live = target, bound, tuple(live)

    def __eq__(self, other):
        return isinstance(other, ClocksEvent) and other.name == self.name

    def __hash__(self):
        return hash(("clocks", self.name))

    def __repr__(self):
        return f"ClocksEvent({self.name!r})"

    def waiting(self, task, target, bound, live) -> ClocksEvent:
        """The copy a step of worker ``task`` waits on: every live worker's clock (its
        ``done``, or its ``read`` in lock-step's wait for the round's reads) at
        ``target`` or more; ``live``: the worker tasks counted."""
        return ClocksEvent(self.name, self.clocks, task, target, bound, live)

    def describe(self, describe_rank) -> str:
        counts, what = ((self.clocks.done, "steps applied") if self.bound is not None else
                        (self.clocks.read, "rounds read"))
        behind = [t for t in self.live if counts[t] < self.target]
        per_worker = ", ".join(f"worker:{t} {counts[t]}" for t in self.live)
        if self.bound is not None:
            wanted = (f"worker:{self.task} to go on (bounded staleness, staleness="
                      f"{self.bound}): it has applied {self.target + self.bound} step(s), "
                      f"so every live worker must have applied {self.target}")
        else:
            wanted = (f"every live worker to read round {self.target}'s variables before "
                      f"worker:{self.task}'s update (lock-step, staleness=0)")
        late = ", ".join(f"worker:{t}" for t in behind) or "none now"
        return (f"{wanted}; behind: {late} ({what} per worker: {per_worker}). A "
                "worker that stops training stops counting once it rests in "
                "server.join() or mf.train.join(sess), or leaves the job")


def _live_workers(ctx, own: int) -> list:
    """The worker tasks that count: every one of the job but those that left or rest in
    server.join(), and always this step's own."""
    total = ctx.env.tasks_of("worker")
    if total is None:                 # one process: only this one
        return [own]
    gone = {task for task, _ in ctx.env.departed("worker")} | set(ctx.env.resting("worker"))
    return [t for t in range(total) if t not in gone] + ([own] if own in gone else [])


class _ClockOp(OpDef):
    gpu_kernel = False
    stateful = True
    gradient = None

    def prepare(self, ctx):
        name = ctx.attrs["shared_name"]
        ctx.clocks = ctx.env.resource(f"clocks:{name}", WorkerClocks)
        ctx.event = ClocksEvent(name, ctx.clocks)
        ctx.task = int(ctx.attrs["task"])


_CLOCK_ATTRS = {"shared_name": REQUIRED, "task": REQUIRED}


class _ClockCountOp(_ClockOp):
    """Add a step of worker ``task`` to the clock named ``counter`` (``WorkerClocks``'s
    ``read`` or ``done``), wake what waits on the clocks, output the new count."""

    counter = None
    changes_shared_state = True

    def infer(self, b):
        return [(dtypes.int64, [])]

    def forward(self, xp, ctx):
        counts = getattr(ctx.clocks, self.counter)
        counts[ctx.task] += 1
        ctx.env.notify(ctx.event)
        return np.asarray(counts[ctx.task], np.int64)


@register_op("WorkerRoundRead", attrs=dict(_CLOCK_ATTRS))
class WorkerRoundReadOp(_ClockCountOp):
    """Count a step of worker ``task`` as having read the variables (it runs first in the
    ps's piece of the step, with the reads)."""

    counter = "read"
    schedule_early = True


@register_op("WorkerRoundAllRead", attrs=dict(_CLOCK_ATTRS))
class WorkerRoundAllReadOp(_ClockOp):
    """Wait until every live worker has read the variables of this worker's round ``round``
    (lock-step: no update of a round lands before every read of it)."""

    async_kernel = True

    def infer(self, b):
        require_dtype(b, 0, (dtypes.int64,), "round")
        return [(dtypes.int64, [])]

    def forward(self, xp, ctx, round_):
        live = _live_workers(ctx, ctx.task)
        if all(ctx.clocks.read[t] >= int(round_) for t in live):
            return np.asarray(round_, np.int64)
        return Wait(ctx.event.waiting(ctx.task, int(round_), None, live))


@register_op("WorkerRoundDone", attrs=dict(_CLOCK_ATTRS))
class WorkerRoundDoneOp(_ClockCountOp):
    """Count a step of worker ``task`` as applied."""

    counter = "done"


@register_op("WorkerRoundBound", attrs=dict(_CLOCK_ATTRS, staleness=REQUIRED))
class WorkerRoundBoundOp(_ClockOp):
    """Hold worker ``task`` (its step ends here) while it has applied more than
    ``staleness`` steps more than the slowest live worker; output its lead when it goes
    on. A worker that leaves or rests in join stops counting (the waiting look again)."""

    async_kernel = True

    def infer(self, b):
        require_dtype(b, 0, (dtypes.int64,), "done")
        return [(dtypes.int64, [])]

    def forward(self, xp, ctx, done):
        clocks = ctx.clocks
        live = _live_workers(ctx, ctx.task)
        lead = int(done) - min(clocks.done[t] for t in live)
        bound = ctx.attrs["staleness"]
        if lead > bound:
            if not getattr(ctx, "waiting", False):
                ctx.waiting = True
                clocks.waits += 1
            return Wait(ctx.event.waiting(ctx.task, int(done) - bound, bound, live))
        ctx.waiting = False
        clocks.max_lead = max(clocks.max_lead, lead)
        return np.asarray(lead, np.int64)


@register_op("WorkerClocksRecord", attrs={"shared_name": REQUIRED})
class WorkerClocksRecordOp(OpDef):
    """(each worker's applied steps, the largest lead a step went on with, how many times
    a worker waited) of the clocks ``shared_name``."""

    gpu_kernel = False
    stateful = True
    gradient = None
    tuple_outputs = True

    def prepare(self, ctx):
        ctx.clocks = ctx.env.resource(f"clocks:{ctx.attrs['shared_name']}", WorkerClocks)

    def infer(self, b):
        return [(dtypes.int64, [None]), (dtypes.int64, []), (dtypes.int64, [])]

    def forward(self, xp, ctx):
        clocks = ctx.clocks
        # Every worker of the job, also one that has applied nothing (yet, or ever).
        tasks = range(max(max(clocks.done, default=-1) + 1, ctx.env.tasks_of("worker") or 0))
        return (np.asarray([clocks.done[t] for t in tasks], np.int64),
                np.asarray(clocks.max_lead, np.int64), np.asarray(clocks.waits, np.int64))
