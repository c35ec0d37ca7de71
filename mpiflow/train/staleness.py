"""Staleness-aware asynchronous training: each gradient's age known where it is applied.

In asynchronous ps training a gradient lands after other workers' updates: it was
computed from variables some global steps old. ``StalenessAwareOptimizer`` measures that
age on the global step's ps for every gradient and can act on it:

- ``staleness_lr="inverse"`` scales the learning rate by ``1 / (1 + staleness)`` (a fresh
  gradient keeps the whole rate; with W workers a gradient is typically W - 1 steps old);
- ``max_staleness=k`` drops a gradient older than k steps: none of its updates is made,
  slots and the global step included (TensorFlow-1's ``DropStaleGradientOptimizer``,
  under that name too).

Every staleness met is recorded on that ps: ``staleness_histogram()`` fetches the counts,
and a histogram summary of the recent values goes to the summaries (``MonitoredTraining
Session`` writes it with the others).

How: the worker reads the global step before it computes its gradients (the read travels
with the step's variable reads, TensorFlow's way); after the gradients have reached the
ps, the ps reads the global step again and ``GradientStaleness`` compares the two there,
so nothing between the comparison and the update can interleave.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys, Tensor
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import control_ops, math_ops, state_ops, staleness_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import apply_op
from mpiflow.runtime import process
from mpiflow.train.global_step import get_global_step
from mpiflow.train.optimizer import WrappingOptimizer


class StalenessAwareOptimizer(WrappingOptimizer):
    """Apply ``opt``'s updates knowing each gradient's staleness (see the module docstring).

    Args:
        opt: the optimizer that applies the gradients (its slots live with the variables).
        staleness_lr: None, or "inverse" (learning rate x 1 / (1 + staleness)).
        max_staleness: None, or drop gradients older than this many global steps.
        name: the name scope of the ops made here (and of the record on the ps).
    """

    def __init__(self, opt, staleness=None, staleness_lr=None, max_staleness=None,
                 use_locking=False, name="StalenessAware"):
        super().__init__(opt, use_locking, name)
        _check_bound(name, "staleness", staleness)
        if staleness_lr not in staleness_ops.LR_RULES:
            raise errors.InvalidArgumentError(
                f"{name}: staleness_lr must be one of "
                f"{[r for r in staleness_ops.LR_RULES]}, got {staleness_lr!r}")
        _check_bound(name, "max_staleness", max_staleness)
        if staleness_lr is not None and not hasattr(opt, "_learning_rate"):
            raise errors.UnimplementedError(
                f"{name}: staleness_lr scales the learning rate, and {type(opt).__name__} "
                "has none")
        self._bound = staleness
        self._staleness_lr = staleness_lr
        self._max_staleness = max_staleness
        self._record = None         # the name of this optimizer's record on the ps
        self._clocks = None         # ... and of its workers' clocks (bounded staleness)
        self._local_step = None
        self._global_step = None
        self._task = 0
        self._round_read = None

    # -- building ----------------------------------------------------------------------------
    def compute_gradients(self, loss, *args, **kwargs):
        """The wrapped optimizer's gradients, computed after this step read the global
        step (its "local step": the variables it reads are those of that step)."""
        step = get_global_step(loss.graph)
        if step is None:
            raise errors.FailedPreconditionError(
                f"{self._name} measures staleness in global steps: create the global step "
                "(mf.train.get_or_create_global_step()) before compute_gradients")
        graph = loss.graph
        with graph.colocate_with(loss.op), graph.name_scope(self._name):
            self._local_step = control_ops.identity(step, name="local_step")
        self._task = _this_worker_task()
        if self._bound == 0:        # lock-step: this step's reads are counted as they happen
            self._clocks = graph.unique_name(f"{self._name}_clocks", mark_as_used=True)
            with graph.name_scope(self._name), graph.colocate_with(step.op), \
                    graph.control_dependencies(None):
                self._round_read = apply_op(
                    "WorkerRoundRead", [], {"shared_name": self._clocks, "task": self._task},
                    name="round_read").outputs[0]
        with graph.control_dependencies([self._local_step]):
            loss = control_ops.identity(loss)
        return self._opt.compute_gradients(loss, *args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Measure the gradients' staleness on ``global_step``'s ps, then apply them with
        the wrapped optimizer (scaled, or not at all); return the train op, which adds 1
        to ``global_step`` for gradients applied (a dropped one is not counted).

        Raises:
            InvalidArgumentError: no global step, or compute_gradients was not called.
        """
        grads_and_vars = list(grads_and_vars)
        if global_step is None:
            raise errors.InvalidArgumentError(
                f"{self._name}.apply_gradients needs global_step: staleness is counted in "
                "global steps")
        if self._local_step is None:
            raise errors.FailedPreconditionError(
                f"{self._name}: call compute_gradients (or minimize) first: it reads the "
                "step the gradients belong to")
        graph = global_step.graph
        arrived = [t for g, _ in grads_and_vars if g is not None
                   for t in ((g.values, g.indices) if isinstance(g, IndexedSlices) else (g,))
                   if isinstance(t, Tensor)]
        # Every worker builds the same graph: the name is the same in each, and so is the
        # record on the ps they all add to.
        self._record = graph.unique_name(f"{self._name}_record", mark_as_used=True) \
            if self._record is None else self._record
        after = []
        if self._round_read is not None:    # lock-step: no update before every read
            with graph.colocate_with(global_step.op):
                after.append(apply_op("WorkerRoundAllRead", [self._round_read],
                                      {"shared_name": self._clocks, "task": self._task},
                                      name=f"{self._name}/all_read"))
        with graph.name_scope(name or self._name), graph.colocate_with(global_step.op):
            # Read once the gradients are in and (lock-step) the round's other updates may
            # land: the wait for the round's reads comes before, not between this read and
            # the update, or the updates of the round applied meanwhile would go uncounted.
            with graph.control_dependencies(arrived + after):
                now = control_ops.identity(global_step, name="global_step_now")
            staleness, applied, factor = apply_op(
                "GradientStaleness", [now, math_ops.cast(self._local_step, now.dtype)],
                {"shared_name": self._record,
                 "max_staleness": -1 if self._max_staleness is None else self._max_staleness,
                 "lr_rule": self._staleness_lr or ""}, name="staleness").outputs
        self._global_step = global_step
        # The wrapped optimizer's updates are each made next to their variable; what
        # groups them goes next to the global step, so the step's chain (measure, update,
        # count) stays on its ps: a group op on the worker would carry the order through
        # the worker, and a lost worker would leave the updates made and the step not
        # counted, and other steps would be measured in between, not counting these.
        with self._scaled_learning_rate(factor), graph.control_dependencies(after), \
                graph.colocate_with(global_step.op):
            if self._max_staleness is None:
                update = self._opt.apply_gradients(grads_and_vars, name=name)
            else:
                with graph.state_changes_only_if(applied):
                    update = self._opt.apply_gradients(grads_and_vars, name=name)
        with graph.colocate_with(global_step.op), graph.control_dependencies([update]):
            counted = math_ops.cast(applied, global_step.dtype)
            train_op = state_ops.assign_add(global_step, counted,
                                            name=f"{self._name}/count_step").op
        if self._bound is not None:
            train_op = self._bounded(graph, global_step, train_op)
        collection = graph.get_collection_ref(GraphKeys.TRAIN_OP)
        if update in collection:            # the train op is this one, not the update
            collection[collection.index(update)] = train_op
        self._add_summary(graph, global_step)
        self.staleness = staleness      # this step's gradients' staleness, to fetch
        return train_op

    def _bounded(self, graph, global_step, counted):
        """The step's end: count it as applied on the global step's ps, and hold the
        worker there while it leads the slowest live worker by more than the bound."""
        self._clocks = self._clocks or graph.unique_name(f"{self._name}_clocks",
                                                         mark_as_used=True)
        attrs = {"shared_name": self._clocks, "task": self._task}
        with graph.colocate_with(global_step.op), graph.control_dependencies([counted]):
            done = apply_op("WorkerRoundDone", [], attrs,
                            name=f"{self._name}/round_done").outputs[0]
            self.lead = apply_op("WorkerRoundBound", [done],
                                 dict(attrs, staleness=self._bound),
                                 name=f"{self._name}/bound").outputs[0]
        return self.lead.op

    def _scaled_learning_rate(self, factor):
        """While the wrapped optimizer builds its updates, its learning rate is its own
        times ``factor`` (computed where each variable is updated)."""
        return _LearningRateScaled(self._opt, factor if self._staleness_lr else None)

    def _add_summary(self, graph, global_step) -> None:
        from mpiflow import summary  # noqa: PLC0415  (summary imports train's neighbours)
        with graph.colocate_with(global_step.op):
            recent = apply_op("RecentStaleness", [], {"shared_name": self._record},
                              name=f"{self._name}/recent_staleness").outputs[0]
        summary.histogram(f"{self._name}/gradient_staleness", recent)

    # -- reading the record --------------------------------------------------------------
    def staleness_histogram(self):
        """A fetch of ``(values, counts, dropped)``: every staleness value met so far on
        the ps (ascending), how often, and how many gradients were dropped."""
        return self._read("StalenessHistogram", self._record, "histogram",
                          "apply_gradients (or minimize) first")


    def clocks_record(self):
        """A fetch of ``(applied steps per worker task, the largest lead a worker went on
        with, how many times a worker waited)`` (with ``staleness=k``)."""
        return self._read("WorkerClocksRecord", self._clocks, "clocks",
                          "needs staleness=k and apply_gradients first")

    def _read(self, op_type, record, what, missing):
        """A fetch of the record ``record`` on the global step's ps (``op_type``)."""
        if record is None or self._global_step is None:
            raise errors.FailedPreconditionError(f"{self._name}: reading the {what}: {missing}")
        graph = self._global_step.graph
        with graph.as_default(), graph.colocate_with(self._global_step.op):
            return tuple(apply_op(op_type, [], {"shared_name": record},
                                  name=f"{self._name}/{what}").outputs)


def _this_worker_task() -> int:
    """The worker task this process runs (0 in a process of its own): whose clock a step
    built here advances, whatever device its ops were placed on."""
    service = process.current_service()
    if service is None:
        return 0
    job, _, task = service.peers.role_names.get(service.rank, "").partition(":")
    return int(task) if job == "worker" and task else 0


def _check_bound(name, what, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                              value < 0):
        raise errors.InvalidArgumentError(
            f"{name}: {what} must be None or an int >= 0, got {value!r}")


class DropStaleGradientOptimizer(StalenessAwareOptimizer):
    """TensorFlow-1's ``tf.contrib.opt.DropStaleGradientOptimizer``: gradients more than
    ``staleness`` global steps old are dropped (none of their updates is made)."""

    def __init__(self, opt, staleness, use_locking=False, name="DropStaleGradient"):
        super().__init__(opt, max_staleness=staleness, use_locking=use_locking, name=name)


class _LearningRateScaled:
    """Context: ``opt._learning_rate`` is its value times ``factor`` (None: unchanged)."""

    def __init__(self, opt, factor):
        self._opt = opt
        self._factor = factor
        self._saved = None

    def __enter__(self):
        if self._factor is None:
            return self
        self._saved = base = self._opt._learning_rate
        factor = self._factor

        def scaled():
            value = base() if callable(base) and not hasattr(base, "_as_tensor") else base
            rate = convert_to_tensor(value)
            rate = rate if rate.dtype is dtypes.float32 else math_ops.cast(rate, dtypes.float32)
            return rate * factor
        self._opt._learning_rate = scaled
        return self

    def __exit__(self, *exc):
        if self._factor is not None:
            self._opt._learning_rate = self._saved
        return False


__all__ = ["DropStaleGradientOptimizer", "StalenessAwareOptimizer"]
