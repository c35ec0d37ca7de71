"""AllreduceOptimizer: data parallelism without ps, the variables replicated on every worker.

Each worker keeps a full copy of the variables (placed on its own task), computes its
gradients, averages them with every other worker (dense ones fused into buckets, sparse
ones all-gathered, so an embedding row keeps its sparse update) and applies the average
with the wrapped optimizer's fused ops. All copies start equal and so stay equal:
``apply_gradients`` records the replicated variables (``GraphKeys.REPLICATED_VARIABLES``)
and one op broadcasting them from worker 0 (``GraphKeys.REPLICA_BROADCAST_OPS``), which
``MonitoredTrainingSession``, ``Supervisor`` and ``TrainingMode.initialize`` run once the
session is ready (after the chief's initialization or restore).
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import GraphKeys
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import array_ops, collective_ops, control_ops, math_ops, sparse_ops, state_ops
from mpiflow.ops.constant_ops import constant
from mpiflow.ops.variables import global_variables
from mpiflow.train.compression import parse_compression, top_k_with_feedback
from mpiflow.train.optimizer import WrappingOptimizer
from mpiflow.train.session_manager import broadcast_replicas
from mpiflow.train.session_run_hook import SessionRunHook


class AllreduceOptimizer(WrappingOptimizer):
    """Average gradients over the workers' process group, then apply them locally.

    Args:
        opt: the optimizer that applies the averaged gradients.
        algorithm: "auto", "ring", "mpi" or "nccl" (see mpiflow.comm.collectives).
        fusion_threshold_bytes: bucket size for fusing small gradients; None:
            MPIFLOW_FUSION_THRESHOLD_BYTES (64 MiB unless set) on each rank.
        average: average (True) or sum the gradients.
        group: the process group (default the "worker" job).
        keep_local: ``keep_local(var)`` true for variables whose gradients go to the wrapped
            optimizer unreduced (hybrid mode: tables on the ps apply their own rows).
        overlap: start each fusion bucket's allreduce as soon as its gradients exist,
            while the rest of the backward pass runs (else one fused op at the end).
        compression: how dense gradients travel: None; "fp16" / "bf16" (allreduced as
            float16 / bfloat16, half the bytes, each addition rounded to the format, then
            applied in the variable's dtype); "topk:R" (every worker's ``ceil(R * size)``
            entries of largest magnitude and their positions all-gathered and summed,
            the rest kept in a local residual added to the next gradient).
    """

    def __init__(self, opt, algorithm="auto", fusion_threshold_bytes=None, average=True,
                 group="worker", name="Allreduce", keep_local=None, overlap=True,
                 compression=None):
        super().__init__(opt, False, name)
        self._kind, self._parameter = parse_compression(compression)
        self.compression = compression
        self.residuals = []         # topk: the error-feedback variables, one per gradient
        self._overlap = overlap
        self._keep_local = keep_local or (lambda var: False)
        self._algorithm = algorithm
        self._threshold = None if fusion_threshold_bytes is None else \
            int(fusion_threshold_bytes)
        self._op = "average" if average else "sum"
        self._group = group

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """Return the (grad, var) pairs with every gradient reduced over the group."""
        return self._reduce(self._opt.compute_gradients(loss, var_list=var_list, **kwargs),
                            loss.graph)

    def _reduce(self, pairs, graph):
        """``pairs`` with the gradients of the variables not kept local reduced."""
        shared = [g is not None and not self._keep_local(v) for g, v in pairs]
        dense = [(i, g) for i, (g, _) in enumerate(pairs)
                 if shared[i] and not isinstance(g, IndexedSlices)]
        reduced = {i: g for i, (g, _) in enumerate(pairs)}
        if dense and self._kind == "topk":
            for i, g in dense:
                reduced[i] = self._top_k_reduced(graph, g, pairs[i][1])
            dense = []
        if dense:
            half = self._kind == "cast"
            with graph.name_scope(self._name) as scope:
                sent = [math_ops.cast(g, self._parameter) if half else g for _, g in dense]
                if self._overlap:
                    outs = collective_ops.overlapped_all_reduce(
                        sent, fusion=scope, op=self._op, group=self._group,
                        algorithm=self._algorithm, threshold_bytes=self._threshold,
                        half_on_wire=half)
                else:
                    outs = collective_ops.fused_all_reduce(
                        sent, op=self._op, group=self._group, algorithm=self._algorithm,
                        threshold_bytes=self._threshold, half_on_wire=half)
                if half:
                    outs = [math_ops.cast(t, g.dtype) for t, (_, g) in zip(outs, dense)]
            reduced.update({i: t for (i, _), t in zip(dense, outs)})
        for i, (g, _) in enumerate(pairs):
            if shared[i] and isinstance(g, IndexedSlices):
                reduced[i] = self._gather_rows(g)
        return [(reduced[i], v) for i, (_, v) in enumerate(pairs)]

    def _top_k_reduced(self, graph, grad, var):
        """Every worker's top-k entries of ``grad`` (with its residual), summed (or
        averaged) into a dense gradient of ``var``'s shape."""
        with graph.name_scope(f"{self._name}/{var.op.name}"):
            positions, sent, residual = top_k_with_feedback(graph, grad, var,
                                                            self._parameter, self._name)
            self.residuals.append(residual)
            everyone = collective_ops.all_gather(sent, group=self._group)
            where = collective_ops.all_gather(positions, group=self._group)
            total = sparse_ops.unsorted_segment_sum(everyone, where,
                                                    var.shape.num_elements())
            if self._op == "average":
                ones = collective_ops.all_reduce(constant(1.0, grad.dtype), op="sum",
                                                 group=self._group)
                total = math_ops.divide(total, ones)
            return array_ops.reshape(total, var.shape.as_list())

    def _gather_rows(self, grad):
        values = collective_ops.all_gather(grad.values, group=self._group)
        indices = collective_ops.all_gather(math_ops.cast(grad.indices, "int64"),
                                            group=self._group)
        if self._op == "average":
            ones = collective_ops.all_reduce(constant(1.0, grad.values.dtype), op="sum",
                                             group=self._group)
            values = math_ops.divide(values, ones)
        return IndexedSlices(values, indices, grad.dense_shape)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply the reduced gradients; record the replicated variables (the wrapped
        optimizer's slots and state among them) and the op that broadcasts them."""
        train_op = self._opt.apply_gradients(grads_and_vars, global_step=global_step,
                                             name=name)
        self._register_replicas(train_op.graph)
        return train_op

    def replicated_variables(self, graph) -> list:
        """The variables of ``graph`` every worker of the group holds a copy of: those on
        the group's own tasks (or placed nowhere), except the ones kept local."""
        return [v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
                if DeviceSpec.from_string(v.device).job in (None, self._group) and
                not self._keep_local(v)]

    def _register_replicas(self, graph) -> None:
        known = set(graph.get_collection(GraphKeys.REPLICATED_VARIABLES))
        new = [v for v in self.replicated_variables(graph) if v not in known]
        if not new:
            return
        with graph.as_default():
            op = self.broadcast_variables_op(new)
        for v in new:
            graph.add_to_collection(GraphKeys.REPLICATED_VARIABLES, v)
        graph.add_to_collection(GraphKeys.REPLICA_BROADCAST_OPS, op)

    def broadcast_variables_op(self, var_list=None, root=0):
        """Return an op making every worker's variables equal to ``root``'s (in an order
        every worker agrees on: sorted by name)."""
        variables = sorted(var_list if var_list is not None else global_variables(),
                           key=lambda v: v.op.name)
        if not variables:
            raise errors.InvalidArgumentError("broadcast_variables_op: no variables")
        graph = variables[0].graph
        with graph.name_scope(None), graph.control_dependencies(None):
            assigns = [state_ops.assign(v, collective_ops.broadcast(v.value(), root=root,
                                                                    group=self._group)).op
                       for v in variables]
            return control_ops.group(*assigns, name="broadcast_variables")

    def make_session_run_hook(self, var_list=None, root=0):
        """Return a hook broadcasting the replicated variables from ``root`` once the
        session exists, for sessions no SessionManager made ready (a
        MonitoredTrainingSession or Supervisor has already done it: the hook then does
        nothing, so it is safe to add either way)."""
        if var_list is None and root == 0:
            return _BroadcastHook(None)
        return _BroadcastHook(self.broadcast_variables_op(var_list, root))


class _BroadcastHook(SessionRunHook):
    def __init__(self, op):
        self._op = op

    def after_create_session(self, session, coord):
        if self._op is not None:
            session.run(self._op)
        else:
            broadcast_replicas(session)

