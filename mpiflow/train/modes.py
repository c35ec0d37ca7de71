"""TrainingMode: one switch between ps, allreduce and hybrid training, same model code.

    mode = mf.train.TrainingMode("hybrid", cluster, server.task_index)
    with mode.scope():
        ...build the model with mf.get_variable / mf.nn.embedding_lookup...
        train_op = mode.optimizer(mf.train.AdamOptimizer(1e-3)).minimize(loss, global_step=step)
    with mf.Session(server.target) as sess:
        mode.initialize(sess, server.is_chief)
        ...

- ``ps``: variables round robin on the ps tasks (tables with at least ``shard_rows``
  rows split over all of them), asynchronous updates applied on the ps.
- ``allreduce``: every variable replicated on every worker; gradients averaged with
  ``AllreduceOptimizer`` (dense ones fused, sparse ones all-gathered).
- ``hybrid``: tables with at least ``shard_rows`` rows are row-sharded over the ps and
  read and updated only in the rows a batch touches (sparse pull and push); everything
  else is replicated on the workers and allreduced.
"""

from __future__ import annotations

import contextlib
import time

from mpiflow import config, errors
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import state_ops
from mpiflow.ops.array_ops import stack
from mpiflow.ops.partitioners import fixed_size_partitioner
from mpiflow.ops.variable_scope import get_variable_scope, variable_scope
from mpiflow.ops.variables import global_variables, variables_initializer
from mpiflow.train.allreduce_optimizer import AllreduceOptimizer
from mpiflow.train.device_setter import replica_device_setter

MODES = ("ps", "allreduce", "hybrid")


class TrainingMode:
    """Placement, optimizer and initialization for one of ``MODES``."""

    def __init__(self, mode, cluster, task_index, shard_rows=10000, algorithm="auto"):
        if mode not in MODES:
            raise errors.InvalidArgumentError(
                f"Unknown training mode {mode!r}: expected one of {', '.join(MODES)}")
        num_ps = cluster.num_tasks("ps") if "ps" in cluster.jobs else 0
        if mode in ("ps", "hybrid") and num_ps == 0:
            raise errors.InvalidArgumentError(
                f"Training mode {mode!r} needs ps tasks, but the cluster has none: "
                f"{cluster.as_dict()} (launch with ps > 0, e.g. MPIFLOW_PS=1)")
        self.mode = mode
        self.cluster = cluster
        self.task_index = task_index
        self.num_ps = num_ps
        self.shard_rows = int(shard_rows)
        self.algorithm = algorithm
        self.worker_device = f"/job:worker/task:{task_index}"
        self._optimizer = None

    # -- building -----------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Build the model inside: places (and shards) variables as the mode wants them."""
        if self.mode == "allreduce":
            device = self.worker_device
        elif self.mode == "ps":
            device = replica_device_setter(cluster=self.cluster,
                                           worker_device=self.worker_device)
        else:
            device = self._hybrid_device
        with get_default_graph().device(device), \
                variable_scope(get_variable_scope(), custom_getter=self._getter,
                               auxiliary_name_scope=False):
            yield self

    def _is_table(self, shape) -> bool:
        return shape is not None and len(shape) >= 2 and shape[0] is not None and \
            shape[0] >= self.shard_rows

    def _getter(self, getter, name, shape=None, partitioner=None, **kwargs):
        """Shard big tables (>= shard_rows rows) over the ps tasks (ps and hybrid modes)."""
        if self.mode != "allreduce" and partitioner is None and self.num_ps > 1 and \
                self._is_table(shape):
            partitioner = fixed_size_partitioner(self.num_ps)
        return getter(name, shape=shape, partitioner=partitioner, **kwargs)

    def _hybrid_device(self, op):
        """Tables (and their shards) to the ps, everything else to this worker."""
        current = DeviceSpec.from_string(op.device)
        if op.type == "VariableV2":
            shape = op.get_attr("shape").as_list()
            name, _, part = op.name.rpartition("/part_")
            rows = shape[0] * self.num_ps if part.isdigit() else (shape[0] if shape else 0)
            if len(shape) >= 2 and rows >= self.shard_rows:
                task = int(part) % self.num_ps if part.isdigit() else \
                    self._table_task(name or op.name)
                return DeviceSpec(job="ps", task=task).make_merged_spec(current).to_string()
        return DeviceSpec.from_string(self.worker_device).make_merged_spec(current).to_string()

    def _table_task(self, name):
        """Unsharded tables (one ps) go round robin, by order of creation."""
        state = get_default_graph()._layer_state.setdefault("hybrid_tables", {})
        return state.setdefault(name, len(state) % self.num_ps)

    def optimizer(self, opt):
        """Wrap ``opt`` as the mode needs (allreduce for replicated variables)."""
        if self.mode == "ps":
            self._optimizer = opt
        elif self.mode == "allreduce":
            self._optimizer = AllreduceOptimizer(opt, algorithm=self.algorithm)
        else:
            self._optimizer = AllreduceOptimizer(opt, algorithm=self.algorithm,
                                                 keep_local=self._on_ps)
        return self._optimizer

    # -- initialization ---------------------------------------------------------------------
    @staticmethod
    def _on_ps(v):
        return DeviceSpec.from_string(v.device).job == "ps"

    def initialize(self, sess, is_chief, timeout=None):
        """Initialize the variables: the chief those on the ps, every worker its own
        replicated ones; then the replicated ones take worker 0's values."""
        variables = global_variables()
        shared = [v for v in variables if self._on_ps(v)]
        local = [v for v in variables if not self._on_ps(v)]
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
        if local:
            sess.run(variables_initializer(local))
            if self.mode != "ps":
                sess.run(self._optimizer.broadcast_variables_op(local))
