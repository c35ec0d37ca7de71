"""TrainingMode: one switch between ps, allreduce and hybrid training, same model code.

    mode = mf.train.TrainingMode("hybrid", cluster, server.task_index)
    with mode.scope():
        ...build the model with mf.get_variable / mf.nn.embedding_lookup...
        step = mf.train.get_or_create_global_step()
        train_op = mode.optimizer(mf.train.AdamOptimizer(1e-3)).minimize(loss, global_step=step)
    with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief) as sess:
        ...

- ``ps``: variables round robin on the ps tasks (big ones split over all of them),
  asynchronous updates applied on the ps.
- ``allreduce``: every variable replicated on every worker; gradients averaged with
  ``AllreduceOptimizer`` (dense ones fused, sparse ones all-gathered).
- ``hybrid``: variables used as tables (their gradient is sparse) live on the ps and are
  read and updated only in the rows a batch touches; everything else is replicated on the
  workers and allreduced (``mpiflow.train.hybrid``).
- ``auto``: one of the three, chosen at ``minimize`` from the model's variables and
  gradients and a probe of the workers' link (``mpiflow.train.mode_choice``); the choice
  and its reason are logged on worker 0 and kept in ``choice``.

Big variables (2-D, at least ``shard_rows`` rows, or named in ``tables=``) are split over
all ps tasks in ps and hybrid mode, in contiguous row ranges looked up with "div", so a
checkpoint restores into any number of ps with every id keeping its row. ``describe()``
says what became of each variable.
"""

from __future__ import annotations

import contextlib
import time

from mpiflow import config, errors
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.logger import get_logger
from mpiflow.ops import state_ops
from mpiflow.ops.array_ops import stack
from mpiflow.ops.partitioners import fixed_size_partitioner
from mpiflow.ops.variable_scope import get_variable_scope, variable_scope
from mpiflow.ops.variables import global_variables, variables_initializer
from mpiflow.train.allreduce_optimizer import AllreduceOptimizer
from mpiflow.runtime import process
from mpiflow.train import mode_choice
from mpiflow.train.compression import GradientCompressionOptimizer, parse_compression
from mpiflow.train.device_setter import (GreedyLoadBalancingStrategy, byte_size_load_fn,
                                         replica_device_setter)
from mpiflow.train.hybrid import REPLICATED, TABLE, HybridOptimizer, TableChoice, on_ps
from mpiflow.train.optimizer import WrappingOptimizer
from mpiflow.train.session_manager import (broadcast_replicas, initialize_replicas,
                                           register_replicas)
from mpiflow.train.staleness import StalenessAwareOptimizer

MODES = ("ps", "allreduce", "hybrid")
_LOG = get_logger("mpiflow.train")


class TrainingMode:
    """Placement, optimizer and initialization for one of ``MODES``.

    Args:
        mode: "ps", "allreduce", "hybrid" or "auto".
        cluster, task_index: the cluster and this worker's task.
        shard_rows: variables of at least this many rows (2-D) are split over the ps
            tasks in ps and hybrid mode.
        algorithm: the allreduce algorithm (allreduce and hybrid mode).
        tables: names (or shell-style patterns) of variables hybrid mode must keep on the
            ps as tables, and ps and hybrid mode split over the ps, whatever their use.
        replicated: names (or patterns) of variables hybrid mode must replicate even if
            they are only gathered from, and that are never split.
        staleness: ps mode only: no worker starts a step having applied more than this
            many steps more than the slowest live worker (0: lock-step; None: fully
            asynchronous); see ``StalenessAwareOptimizer``. ``minimize`` then needs the
            global step.
        compression: how dense gradients travel: "fp16", "bf16" or "topk:R": pushed so
            to the ps in ps mode (``GradientCompressionOptimizer``), allreduced so in
            allreduce and hybrid mode (``AllreduceOptimizer(compression=...)``; a hybrid
            model's table rows cross as they are).
        candidates: the modes "auto" chooses from (default all three; allreduce alone
            where the launch made no ps task).
        ids_per_step: "auto": the ids one worker's step looks up in all its tables
            together (its batch times the fields). Without it, the lookups' static shapes
            say, and a lookup whose batch dimension is None counts as
            ``mode_choice.ASSUMED_IDS`` ids.
        joinable: allreduce and hybrid mode (and auto, where it picks one of them): a
            worker whose data runs out first may leave with ``mf.train.join(sess)`` while
            the others train on (``AllreduceOptimizer(joinable=True)``; in hybrid mode a
            joined worker pushes no rows, and its steps leave the tables as they are). ps
            training joins without it.
    """

    def __init__(self, mode, cluster, task_index, shard_rows=10000, algorithm="auto",
                 tables=(), replicated=(), staleness=None, compression=None,
                 candidates=MODES, ids_per_step=None, joinable=False):
        if mode not in (*MODES, "auto"):
            raise errors.InvalidArgumentError(
                f"Unknown training mode {mode!r}: expected one of {', '.join(MODES)} or "
                "auto")
        candidates = tuple(candidates)
        if not candidates or any(c not in MODES for c in candidates):
            raise errors.InvalidArgumentError(
                f"TrainingMode(candidates={candidates!r}): expected some of "
                f"{', '.join(MODES)}")
        parse_compression(compression)
        if joinable and mode == "ps":
            raise errors.InvalidArgumentError(
                "TrainingMode('ps', joinable=True): joinable is for allreduce and hybrid "
                "mode, whose steps run collectives; ps training joins without it "
                "(mf.train.join)")
        if staleness is not None and mode != "ps":
            raise errors.InvalidArgumentError(
                f"TrainingMode({mode!r}, staleness={staleness!r}): a staleness bound is for "
                "asynchronous ps training; allreduce and hybrid mode average their dense "
                "gradients synchronously")
        num_ps = cluster.num_tasks("ps") if "ps" in cluster.jobs else 0
        if mode == "auto" and num_ps == 0:
            candidates = ("allreduce",)
        if mode in ("ps", "hybrid") and num_ps == 0:
            raise errors.InvalidArgumentError(
                f"Training mode {mode!r} needs ps tasks, but the cluster has none: "
                f"{cluster.as_dict()} (launch with ps > 0: --ps 1 or MPIFLOW_PS=1, and one "
                f"more rank for it)")
        if mode == "allreduce" and num_ps and task_index == 0:
            _LOG.warning(
                "Training mode 'allreduce' keeps every variable on the workers, but the "
                "launch made %d ps task(s) (rank(s) %s), which will only wait: launch with "
                "--ps 0 (or MPIFLOW_PS=0) to make them workers", num_ps,
                ", ".join(str(cluster.rank_of("ps", t)) for t in range(num_ps)))
        if ids_per_step is not None:
            ids_per_step = errors.integer_at_least(
                ids_per_step, 1, "TrainingMode: ids_per_step",
                " (the ids one worker's step looks up in its tables)")
        self.mode = mode
        self.requested = mode
        self.candidates = candidates
        self.ids_per_step = ids_per_step
        self.joinable = bool(joinable)
        self.choice = None          # auto: the mode_choice.Choice made at minimize()
        self.cluster = cluster
        self.task_index = task_index
        self.num_ps = num_ps
        self.shard_rows = int(shard_rows)
        self.algorithm = algorithm
        self.worker_device = f"/job:worker/task:{task_index}"
        self._variables = {}        # full name -> (shape, PartitionedVariable or Variable)
        self._choice = TableChoice(num_ps, tables, replicated, lambda: list(self._variables))
        self._optimizer = None
        self.staleness = staleness
        self.compression = compression

    # -- building -----------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Build the model inside: places (and shards) variables as the mode wants them."""
        if self.mode == "ps":
            device = replica_device_setter(cluster=self.cluster,
                                           worker_device=self.worker_device)
        else:   # hybrid, auto: on the workers until the optimizer decides
            device = self.worker_device
        with get_default_graph().device(device), \
                variable_scope(get_variable_scope(), custom_getter=self._getter,
                               auxiliary_name_scope=False):
            yield self

    def _splits(self, name, shape) -> bool:
        if self.mode == "allreduce" or self.num_ps < 2:
            return False
        forced = self._choice.forced(name)
        if forced is not None:
            return forced == TABLE
        return shape is not None and len(shape) == 2 and shape[0] is not None and \
            shape[0] >= self.shard_rows

    def _getter(self, getter, name, shape=None, partitioner=None, **kwargs):
        """Split big variables over the ps tasks (ps and hybrid mode), looked up by range."""
        ours = partitioner is None and self._splits(name, shape)
        if ours:
            partitioner = fixed_size_partitioner(self.num_ps)
        var = getter(name, shape=shape, partitioner=partitioner, **kwargs)
        if ours and hasattr(var, "lookup_strategy"):
            var.lookup_strategy = "div"
        self._variables.setdefault(name, (shape, var))
        return var

    def optimizer(self, opt):
        """Wrap ``opt`` as the mode needs (allreduce for replicated variables); in auto
        mode, as the mode chosen when its gradients exist."""
        if self.mode == "auto":
            self._optimizer = _AutoOptimizer(opt, self)
            return self._optimizer
        self._optimizer = self._wrap(opt)
        return self._optimizer

    def _wrap(self, opt):
        if self.mode == "ps":
            if self.compression is not None:
                opt = GradientCompressionOptimizer(opt, self.compression)
            return opt if self.staleness is None else \
                StalenessAwareOptimizer(opt, staleness=self.staleness)
        if self.mode == "allreduce":
            return AllreduceOptimizer(opt, algorithm=self.algorithm,
                                      compression=self.compression, joinable=self.joinable)
        return HybridOptimizer(opt, self._choice, algorithm=self.algorithm,
                               compression=self.compression, joinable=self.joinable)

    def _decide(self, opt, grads_and_vars) -> None:
        """Auto mode: choose the mode for these gradients (``mode_choice``) and place the
        variables as it wants them (hybrid's tables move when its optimizer sees them)."""
        shape = mode_choice.model_shape(grads_and_vars, opt.slots_per_variable,
                                        self.ids_per_step)
        service = process.current_service()
        comm = service.groups.get("worker") if service is not None else None
        workers = self.cluster.num_tasks("worker")
        ps_task = self.task_index % self.num_ps if self.num_ps and service is not None \
            else None
        started = time.perf_counter()
        link = mode_choice.measure(comm, shape.dense_bytes, ps_task=ps_task, shape=shape)
        probed = time.perf_counter() - started
        self.choice = mode_choice.choose(shape, workers, self.num_ps, link,
                                         mode_choice.memory_per_worker(), self.candidates,
                                         mode_choice.this_node())
        self.mode = self.choice.mode
        if self.task_index == 0:
            _LOG.info("TrainingMode('auto') chose %r: %s (measured in %.2f s: %s)",
                      self.mode, self.choice.reason, probed, link.describe())
        if self.mode == "ps":
            self._place_on_ps(grads_and_vars[0][1].graph)

    def _place_on_ps(self, graph) -> None:
        """Put every variable built on this worker on the ps tasks, the least loaded (in
        bytes) first, as ``replica_device_setter`` would have in ps mode."""
        load = GreedyLoadBalancingStrategy(self.num_ps, byte_size_load_fn)
        mine = DeviceSpec.from_string(self.worker_device)
        for var in graph.get_collection(GraphKeys.GLOBAL_VARIABLES):
            spec = DeviceSpec.from_string(var.device)
            if (spec.job, spec.task) == (mine.job, mine.task):
                var.op._set_device(DeviceSpec(job="ps", task=load(var.op)).to_string())

    # -- what became of each variable ----------------------------------------------------
    def describe(self) -> str:
        """Return one line per variable built in ``scope()``: where it lives, how its
        gradient travels, and why."""
        lines = [f"TrainingMode {self.mode!r}: {self.cluster.num_tasks('worker')} worker(s), "
                 f"{self.num_ps} ps, shard_rows={self.shard_rows}"]
        if self.requested == "auto":
            lines.append(f"  chosen by auto: {self.choice.reason}" if self.choice else
                         "  auto: the mode is chosen at minimize()")
        width = max((len(n) for n in self._variables), default=0)
        shapes = {n: str(list(shape or [])) for n, (shape, _) in self._variables.items()}
        shape_width = max((len(s) for s in shapes.values()), default=0)
        for name, (_, var) in self._variables.items():
            parts = list(var) if hasattr(var, "get_variable_list") else [var]
            lines.append(f"  {name:<{width}}  {shapes[name]:<{shape_width}}  "
                         f"{self._treatment(name, parts)}")
        return "\n".join(lines)

    def _treatment(self, name, parts) -> str:
        where = ", ".join(_task_name(p.device) for p in parts)
        split = f" in {len(parts)} parts" if len(parts) > 1 else ""
        if self.mode == "auto":
            return f"on {where}{split} until minimize() chooses the mode"
        if self.mode == "ps":
            return f"on {where}{split}, updated there by each worker's push"
        if self.mode == "allreduce":
            return "replicated on every worker, gradient allreduced"
        undecided = "no optimizer of this mode trains it" if self._choice.decided else \
            "decided at minimize()"
        kind, why = self._choice.decided.get(name, (None, undecided))
        if kind is None and self._choice.decided:
            return f"replicated on every worker, not trained here ({why}): every copy " \
                "takes worker 0's values"
        if kind == TABLE:
            return f"table{split} on {where}: rows pulled and pushed sparsely ({why})"
        note = f"; {why}" if kind == REPLICATED else f" ({why})"
        if len(parts) > 1:
            note += (f"; split in {len(parts)} parts as it has >= shard_rows rows, name it "
                     "in replicated= to keep it whole")
        return f"replicated on every worker, gradient allreduced{note}"

    # -- initialization ---------------------------------------------------------------------
    def initialize(self, sess, is_chief, timeout=None):
        """Initialize a plain Session's variables: the chief those on the ps, every worker
        its own; then the replicated ones take worker 0's values. (A
        MonitoredTrainingSession or Supervisor does all of this itself.) Variables made
        on the workers after ``minimize`` (an ExponentialMovingAverage's shadows) are
        replicated too, and take worker 0's values as well."""
        register_replicas(sess.graph)
        variables = global_variables()
        replicas = set(sess.graph.get_collection(GraphKeys.REPLICATED_VARIABLES))
        shared = [v for v in variables if on_ps(v)]
        own = [v for v in variables if not on_ps(v) and v not in replicas]
        if shared and is_chief:
            sess.run(variables_initializer(shared))
        if shared and not is_chief:
            ready = stack([state_ops.is_variable_initialized(v) for v in shared])
            deadline = time.monotonic() + (timeout or config.get("MPIFLOW_TIMEOUT"))
            while not sess.run(ready).all():
                if time.monotonic() > deadline:
                    raise errors.DeadlineExceededError(
                        "The chief did not initialize the ps variables "
                        f"{[v.op.name for v in shared][:5]} in time")
                time.sleep(0.02)
        if own:
            sess.run(variables_initializer(own))
        initialize_replicas(sess)
        broadcast_replicas(sess)


class _AutoOptimizer(WrappingOptimizer):
    """TrainingMode("auto")'s optimizer: computes the gradients, has the mode chosen from
    them (``TrainingMode._decide``), then trains as that mode's optimizer."""

    def __init__(self, opt, mode: TrainingMode):
        super().__init__(opt, False, "Auto")
        self._mode = mode
        self._chosen = None

    def compute_gradients(self, loss, *args, **kwargs):
        if self._chosen is not None:
            return self._chosen.compute_gradients(loss, *args, **kwargs)
        pairs = self._opt.compute_gradients(loss, *args, **kwargs)
        if self._mode.choice is None:       # the first optimizer's gradients decide
            self._mode._decide(self._opt, pairs)
        # The chosen mode's optimizer takes these gradients instead of computing them again.
        self._chosen = self._mode._wrap(_Computed(self._opt, pairs))
        return self._chosen.compute_gradients(loss, *args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if self._chosen is None:
            raise errors.FailedPreconditionError(
                "TrainingMode('auto'): call compute_gradients (or minimize) first: the mode "
                "is chosen from the gradients")
        return self._chosen.apply_gradients(grads_and_vars, global_step=global_step,
                                            name=name)


class _Computed(WrappingOptimizer):
    """``opt`` whose next ``compute_gradients`` returns gradients already computed."""

    def __init__(self, opt, pairs):
        super().__init__(opt, False, opt.get_name())
        self._pairs = pairs

    def compute_gradients(self, loss, *args, **kwargs):
        pairs, self._pairs = self._pairs, None
        return pairs if pairs is not None else \
            self._opt.compute_gradients(loss, *args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)


def _task_name(device: str) -> str:
    spec = DeviceSpec.from_string(device)
    return f"{spec.job}:{spec.task}" if spec.job else "this task"


__all__ = ["MODES", "TrainingMode"]
