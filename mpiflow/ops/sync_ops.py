"""Ops behind SyncReplicasOptimizer: gradient accumulators and step tokens, on the ps.

An accumulator sums the gradients of one variable for the current global step, drops
the ones computed at an older step (stale, e.g. from a backup worker), and hands out
their average once enough have arrived; the token counter releases every worker waiting
for the next step at once. Both live in the ps's resource store and their waiting ops
are async kernels: a step that must wait is parked, never blocking the ps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops.registry import REQUIRED, OpDef, Wait, register_op, require_dtype


class GradientAccumulator:
    """Sum and count of one variable's gradients for step ``step`` (dense or sparse)."""

    def __init__(self, dtype, shape):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.step = 0
        self.count = 0
        self.required = 0       # what the last take that waited needed
        self.senders = []       # the ranks whose gradients are in (None: unknown)
        self.total = None
        self.rows = []          # sparse: [(indices, values)]

    def accepts(self, local_step) -> bool:
        return int(local_step) >= self.step

    def add_dense(self, grad, sender=None):
        if self.total is None:
            self.total = np.array(grad, dtype=self.dtype, copy=True)
        else:
            self.total += grad
        self.count += 1
        self.senders.append(sender)

    def add_sparse(self, indices, values, sender=None):
        self.rows.append((np.asarray(indices).reshape(-1), np.asarray(values)))
        self.count += 1
        self.senders.append(sender)

    def take(self, num_required, new_step):
        """Return the average if ``num_required`` gradients are in, else None."""
        if self.count < max(int(num_required), 1):
            self.required = max(int(num_required), 1)
            return None
        count = self.count
        if self.rows:
            indices = np.concatenate([i for i, _ in self.rows])
            values = np.concatenate([v for _, v in self.rows]) / np.asarray(count, self.dtype)
            result = (indices.astype(np.int64), values.astype(self.dtype, copy=False))
        else:
            result = (self.total / np.asarray(count, self.dtype)).astype(self.dtype,
                                                                         copy=False)
        self.total, self.rows, self.count, self.senders = None, [], 0, []
        self.step = int(new_step)
        return result


class StepTokens:
    """The newest global step the chief has released (-1: none yet)."""

    def __init__(self):
        self.step = -1


class AccumulatorEvent(NamedTuple):
    """What the chief's sync loop waits for on the ps: enough gradients in accumulator
    ``name``. Says how many it holds, so a report of where the ps is shows that a
    worker's gradient is missing (a ps that only serves is never what the step waits
    for)."""

    name: str
    acc: GradientAccumulator

    def describe(self, describe_rank) -> str:
        senders = [describe_rank(r) for r in list(self.acc.senders) if r is not None]
        sent = f" (from {', '.join(senders)})" if senders else ""
        return (f"accumulator '{self.name}' to hold {self.acc.required} gradient(s) of "
                f"global step {self.acc.step} (the chief's sync loop averages them; "
                f"replicas_to_aggregate): it holds {self.acc.count}{sent}; the other "
                f"workers' have not come")


class TokensEvent(NamedTuple):
    """What a worker's synchronous step waits for on the ps: the chief's sync loop
    releasing the next step (it does once every gradient of this one is in)."""

    name: str
    tokens: StepTokens

    def describe(self, describe_rank) -> str:
        return (f"the chief's sync loop to release the next synchronous step (released "
                f"so far: global step {self.tokens.step}); it waits for the workers' "
                f"gradients in the accumulators")


def _too_few_left(ctx, needed: int, departed, what: str) -> errors.OpError | None:
    """The UnavailableError for a step that needs more workers than are left after
    ``departed`` (it would wait in vain until MPIFLOW_TIMEOUT, then blame whichever rank
    it waited on); None while enough are left."""
    total = ctx.env.tasks_of("worker")
    if not needed or total - len(departed) >= needed:
        return None
    return errors.op_error(
        errors.UnavailableError,
        f"{what} needs {needed} worker(s), but only {total - len(departed)} of {total} "
        f"are left: {', '.join(d for _, d in departed)} left before training was done "
        "(to stop training, stop every worker at the same step, e.g. StopAtStepHook)",
        ctx.op)


def _training(ctx, num_required) -> int:
    """The gradients a step averages: ``num_required``, or fewer once workers whose data
    ran out rest in server.join() and too few still train (uneven data: the others go
    on); a worker lost is no such case (see ``_too_few_left``)."""
    resting = ctx.env.resting("worker")
    if not resting:
        return int(num_required)
    gone = {task for task, _ in ctx.env.departed("worker")} | set(resting)
    training = ctx.env.tasks_of("worker") - len(gone)
    return max(1, min(int(num_required), training))


class _AccumulatorOp(OpDef):
    gpu_kernel = False    # the accumulator lives in host memory beside its queue
    stateful = True
    changes_shared_state = True
    gradient = None

    def prepare(self, ctx):
        name = ctx.attrs["shared_name"]
        dtype, shape = ctx.attrs["dtype"].np_dtype, ctx.attrs["shape"].as_list()
        ctx.acc = ctx.env.resource(f"accumulator:{name}",
                                     lambda: GradientAccumulator(dtype, shape))
        ctx.event = AccumulatorEvent(name, ctx.acc)


_ACC_ATTRS = {"shared_name": REQUIRED, "dtype": REQUIRED, "shape": REQUIRED}


def _check_step(b, i=0):
    require_dtype(b, i, (dtypes.int64, dtypes.int32), "step")


@register_op("AccumulatorApplyGradient", attrs=dict(_ACC_ATTRS))
class AccumulatorApplyGradientOp(_AccumulatorOp):
    def infer(self, b):
        _check_step(b)
        if b.dtype(1) is not b.attrs["dtype"] or \
                not b.shape(1).is_compatible_with(b.attrs["shape"]):
            raise b.error("Gradient does not match the accumulator",
                          expected=f"{b.attrs['dtype'].name} {b.attrs['shape']}",
                          got=f"{b.dtype(1).name} {b.shape(1)}")
        return []

    def forward(self, xp, ctx, local_step, grad):
        if grad.shape != ctx.acc.shape:
            raise errors.op_error(errors.InvalidArgumentError, "Gradient shape mismatch",
                                  ctx.op, expected=list(ctx.acc.shape), got=list(grad.shape))
        if ctx.acc.accepts(local_step):
            ctx.acc.add_dense(grad, ctx.env.step_client())
            ctx.env.notify(ctx.event)


@register_op("AccumulatorApplyIndexedSlices", attrs=dict(_ACC_ATTRS))
class AccumulatorApplyIndexedSlicesOp(_AccumulatorOp):
    def infer(self, b):
        _check_step(b)
        require_dtype(b, 1, (dtypes.int32, dtypes.int64), "indices")
        return []

    def forward(self, xp, ctx, local_step, indices, values):
        if ctx.acc.accepts(local_step):
            ctx.acc.add_sparse(indices, values, ctx.env.step_client())
            ctx.env.notify(ctx.event)


@register_op("AccumulatorTakeGradient", attrs=dict(_ACC_ATTRS))
class AccumulatorTakeGradientOp(_AccumulatorOp):
    async_kernel = True

    def infer(self, b):
        require_dtype(b, 0, (dtypes.int32, dtypes.int64), "num_required")
        _check_step(b, 1)
        return [(b.attrs["dtype"], b.attrs["shape"])]

    def forward(self, xp, ctx, num_required, new_step):
        average = ctx.acc.take(_training(ctx, num_required), new_step)
        return Wait(ctx.event) if average is None else average


@register_op("AccumulatorTakeIndexedSlices", attrs=dict(_ACC_ATTRS))
class AccumulatorTakeIndexedSlicesOp(_AccumulatorOp):
    async_kernel = True
    tuple_outputs = True

    def infer(self, b):
        require_dtype(b, 0, (dtypes.int32, dtypes.int64), "num_required")
        _check_step(b, 1)
        row = b.attrs["shape"].as_list()[1:]
        return [(dtypes.int64, [None]), (b.attrs["dtype"], [None] + row)]

    def forward(self, xp, ctx, num_required, new_step):
        taken = ctx.acc.take(_training(ctx, num_required), new_step)
        return Wait(ctx.event) if taken is None else taken


class _TokenOp(OpDef):
    gpu_kernel = False
    stateful = True
    changes_shared_state = True
    gradient = None

    def prepare(self, ctx):
        name = ctx.attrs["shared_name"]
        ctx.tokens = ctx.env.resource(f"tokens:{name}", StepTokens)
        ctx.event = TokensEvent(name, ctx.tokens)


@register_op("SyncTokenWait", attrs={"shared_name": REQUIRED, "replicas": 0})
class SyncTokenWaitOp(_TokenOp):
    """Return the released step once it is past the caller's ``local_step``.

    A release takes ``replicas`` gradients (0: not known): a worker waiting for one when
    fewer workers are left, or after the chief left, is told so, naming who left; unless
    the chief's duties move to a survivor (MPIFLOW_ELASTIC), whose sync loop releases
    it. (The chief's loop itself keeps waiting quietly: at the end of training the
    workers leave while it still waits for a step nobody will make.) In a graceful stop
    (SIGTERM) the workers leave on purpose, each after its own step: with backup workers
    one may already wait for a step the others will never join, and it is let go with
    the step it has (its gradient is not applied), so it stops as they did.
    """

    async_kernel = True

    def infer(self, b):
        _check_step(b)
        return [(b.dtype(0), [])]

    def forward(self, xp, ctx, local_step):
        if ctx.tokens.step > int(local_step):
            return np.asarray(ctx.tokens.step, dtype=local_step.dtype)
        departed = ctx.env.departed("worker")
        if departed:
            chief = [d for task, d in departed if task == 0]
            never = errors.op_error(
                errors.UnavailableError,
                f"This worker waits for the chief to release the next synchronous step, but "
                f"the chief left: {chief[0]}", ctx.op) \
                if chief and not ctx.env.chief_can_move() else \
                _too_few_left(ctx, ctx.attrs["replicas"], departed, "A synchronous step")
            if never is not None:
                if ctx.env.stopping_gracefully():   # let go, its gradient unapplied
                    return np.asarray(ctx.tokens.step, dtype=local_step.dtype)
                raise never
        return Wait(ctx.event)


@register_op("SyncTokenRelease", attrs={"shared_name": REQUIRED})
class SyncTokenReleaseOp(_TokenOp):
    """Release every worker waiting for a step before ``step``."""

    def infer(self, b):
        _check_step(b)
        return []

    def forward(self, xp, ctx, step):
        ctx.tokens.step = max(ctx.tokens.step, int(step))
        ctx.env.notify(ctx.event)
