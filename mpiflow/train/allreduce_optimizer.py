"""AllreduceOptimizer: data parallelism without ps, the variables replicated on every worker.

Each worker keeps a full copy of the variables (placed on its own task), computes its
gradients, averages them with every other worker (dense ones fused into buckets, sparse
ones all-gathered, so an embedding row keeps its sparse update) and applies the average
with the wrapped optimizer's fused ops. All copies start equal and the trained ones stay
equal (what no gradient updates, batch normalization's moving statistics, follows each
worker's own batches). ``apply_gradients`` records the replicated variables (``GraphKeys.REPLICATED_VARIABLES``)
and one op broadcasting them from worker 0 (``GraphKeys.REPLICA_BROADCAST_OPS``), which
``MonitoredTrainingSession``, ``Supervisor`` and ``TrainingMode.initialize`` run once the
session is ready (after the chief's initialization or restore). Variables made on the
workers after that (an ExponentialMovingAverage's shadows) are recorded, with a broadcast
op of their own, when a session is made (``session_manager.register_replicas``).
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import array_ops, collective_ops, control_ops, math_ops, sparse_ops
from mpiflow.ops.constant_ops import constant, placeholder_with_default
from mpiflow.ops.variables import global_variables
from mpiflow.runtime import process
from mpiflow.train.compression import parse_compression, top_k_with_feedback
from mpiflow.train.optimizer import WrappingOptimizer
from mpiflow.train.session_manager import REPLICA_OWNERS, broadcast_replicas, register_replicas
from mpiflow.train.session_run_hook import SessionRunHook

JOINABLE_OPTIMIZERS = "joinable_allreduce_optimizers"    # graph collection: see join()


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
            float16 / bfloat16, half the bytes: MPI's path rounds each addition to the
            format, the ring adds in float32 and rounds partial sums only to cross; then
            applied in the variable's dtype); "topk:R" (every worker's ``ceil(R * size)``
            entries of largest magnitude and their positions all-gathered and summed,
            the rest kept in a local residual added to the next gradient).
        joinable: let a worker that runs out of data leave training without stopping the
            others (``join``): every step then sums the gradients with a count of the
            workers contributing, and averages over those (an extra pass over each
            gradient, which is why it is asked for).
    """

    def __init__(self, opt, algorithm="auto", fusion_threshold_bytes=None, average=True,
                 group="worker", name="Allreduce", keep_local=None, overlap=True,
                 compression=None, joinable=False):
        super().__init__(opt, False, name)
        self.joinable = bool(joinable)
        self._contributes = None    # joinable: 1.0, fed 0.0 by a worker that has joined
        self._contributors = None   # joinable: how many workers contributed to the step
        self._join_feeds = []       # joinable: (tensor, what a joined worker feeds it)
        self._last_collective = None    # joinable: the collectives run one after another
        self._train_op = None
        self._own_gradients = {}    # kept local (hybrid's tables): tensor -> its variable
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

    def _own_replicas(self, graph) -> None:
        """Record this optimizer, once, as an owner of replicas on ``graph``: a session
        made on it broadcasts them (``session_manager.register_replicas``)."""
        if self not in graph.get_collection(REPLICA_OWNERS):
            graph.add_to_collection(REPLICA_OWNERS, self)

    def _reduce(self, pairs, graph):
        """``pairs`` with the gradients of the variables not kept local reduced. The
        replicas are this optimizer's from here on, whoever applies the gradients (the
        wrapped optimizer itself, say): a session made on the graph broadcasts them."""
        self._own_replicas(graph)
        shared = [g is not None and not self._keep_local(v) for g, v in pairs]
        dense = [(i, g) for i, (g, _) in enumerate(pairs)
                 if shared[i] and not isinstance(g, IndexedSlices)]
        reduced = {i: g for i, (g, _) in enumerate(pairs)}
        if self.joinable:
            first = next(g for g, v in pairs if g is not None)
            with graph.name_scope(self._name), graph.colocate_with(
                    (first.values if isinstance(first, IndexedSlices) else first).op):
                self._contributes = placeholder_with_default(
                    constant(1.0, dtypes.float32), [], name="contributes")
            self._join_feeds = [(self._contributes, np.float32(0.0))]
        if dense and self._kind == "topk":
            for i, g in dense:
                if pairs[i][1].shape.num_elements() != 0:   # empty: nothing to send
                    reduced[i] = self._top_k_reduced(graph, g, pairs[i][1])
            dense = []
        if dense:
            half = self._kind == "cast"
            op = "sum" if self.joinable else self._op
            with graph.name_scope(self._name) as scope:
                sent = [math_ops.cast(g, self._parameter) if half else g for _, g in dense]
                self._joins_with_zeros(sent)
                # The check of every bucket compares which variables' gradients it holds.
                labels = [f"gradient of {pairs[i][1].op.name}" for i, _ in dense]
                if self.joinable:          # the count of contributors rides along
                    sent = sent + [self._contributes]
                    labels.append("count of contributors")
                if self._overlap:
                    outs = collective_ops.overlapped_all_reduce(
                        sent, fusion=scope, op=op, group=self._group,
                        algorithm=self._algorithm, threshold_bytes=self._threshold,
                        half_on_wire=half, labels=labels)
                else:
                    outs = collective_ops.fused_all_reduce(
                        sent, op=op, group=self._group, algorithm=self._algorithm,
                        threshold_bytes=self._threshold, half_on_wire=half, labels=labels)
                if self.joinable:
                    self._contributors = outs.pop()
                    self._last_collective = self._contributors.op
                if half:
                    outs = [math_ops.cast(t, g.dtype) for t, (_, g) in zip(outs, dense)]
                if self.joinable and self._op == "average":
                    outs = [self._over_contributors(t) for t in outs]
            reduced.update({i: t for (i, _), t in zip(dense, outs)})
        for g, v in pairs:
            if g is not None and self._keep_local(v):
                for t in (g.values, g.indices) if isinstance(g, IndexedSlices) else (g,):
                    self._own_gradients[t] = v
        for i, (g, v) in enumerate(pairs):
            if shared[i] and isinstance(g, IndexedSlices):
                reduced[i] = self._gather_rows(g, v)
            elif self.joinable and g is not None and not shared[i]:
                # Pushed to the ps alone (hybrid's tables): a joined worker feeds nothing
                # of its own, and its update waits on its contribution (apply_gradients).
                self._join_feeds += self._nothing_of(g, v)
        return [(reduced[i], v) for i, (_, v) in enumerate(pairs)]

    def _nothing_of(self, grad, var) -> list:
        """What a joined worker feeds in place of ``grad`` of ``var``: no rows of a sparse
        gradient, zeros of a dense one."""
        if not isinstance(grad, IndexedSlices):
            shape = grad.shape.as_list() if grad.shape.ndims is not None else None
            if shape is None or None in shape:
                shape = var.shape.as_list()
            return [(grad, np.zeros(shape, grad.dtype.np_dtype))]
        # A row's shape, from the variable where the gradient's leaves it open.
        declared = var.shape.as_list()[1:] if var.shape.ndims else []
        given = grad.values.shape.as_list()[1:] if grad.values.shape.ndims is not None \
            else [None] * len(declared)
        row = [d if d is not None else v for d, v in zip(given, declared)]
        if None in row or len(row) != len(given):
            raise errors.InvalidArgumentError(
                f"{self._name}: joinable=True needs the row shape of '{var.op.name}' "
                f"known (a joined worker sends no rows of it), got {var.shape}")
        return [(grad.values, np.zeros([0] + row, grad.values.dtype.np_dtype)),
                (grad.indices, np.zeros([0], grad.indices.dtype.np_dtype))]

    def _top_k_reduced(self, graph, grad, var):
        """Every worker's top-k entries of ``grad`` (with its residual), summed (or
        averaged) into a dense gradient of ``var``'s shape."""
        with graph.name_scope(f"{self._name}/{var.op.name}"):
            positions, sent, residual = top_k_with_feedback(graph, grad, var,
                                                            self._parameter, self._name)
            self.residuals.append(residual)
            if self.joinable:       # a joined worker adds zeros at the first positions
                k = positions.shape.num_elements()
                self._join_feeds += [(sent, np.zeros(k, grad.dtype.np_dtype)),
                                     (positions, np.arange(k, dtype=np.int64))]
            everyone = self._in_order(collective_ops.all_gather, sent, group=self._group)
            where = self._in_order(collective_ops.all_gather, positions, group=self._group)
            total = sparse_ops.unsorted_segment_sum(everyone, where,
                                                    var.shape.num_elements())
            if self._op == "average":
                total = math_ops.divide(total, self._count(grad.dtype))
            return array_ops.reshape(total, var.shape.as_list())

    def _gather_rows(self, grad, var):
        if self.joinable:           # a joined worker gathers no rows
            self._join_feeds += self._nothing_of(grad, var)
        values = self._in_order(collective_ops.all_gather, grad.values, group=self._group)
        indices = self._in_order(collective_ops.all_gather,
                                 math_ops.cast(grad.indices, "int64"), group=self._group)
        if self._op == "average":
            values = math_ops.divide(values, self._count(grad.values.dtype))
        return IndexedSlices(values, indices, grad.dense_shape)

    def _count(self, dtype):
        """The number of workers whose gradients a step averages, as ``dtype``: every one
        of the group, or (joinable) those contributing."""
        if not self.joinable:
            return collective_ops.all_reduce(constant(1.0, dtype), op="sum",
                                             group=self._group)
        if self._contributors is None:
            self._contributors = self._in_order(collective_ops.all_reduce,
                                                self._contributes, op="sum",
                                                group=self._group)
        return math_ops.cast(math_ops.maximum(self._contributors, 1.0), dtype)

    def _in_order(self, collective, tensor, **kwargs):
        """``collective(tensor)``; joinable, after the one made before it. A joined worker
        feeds its gradients, so its step is scheduled from other starting points than
        the others': only this chain keeps every worker's collectives in one order."""
        if not self.joinable:
            return collective(tensor, **kwargs)
        graph = tensor.graph
        with graph.control_dependencies([self._last_collective] if self._last_collective
                                        else []):
            out = collective(tensor, **kwargs)
        self._last_collective = out.op
        return out

    def _over_contributors(self, total):
        return math_ops.divide(total, self._count(total.dtype))

    def _joins_with_zeros(self, sent) -> None:
        if self.joinable:
            self._join_feeds += [(t, np.zeros(t.shape.as_list(), t.dtype.np_dtype))
                                 for t in sent]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply the reduced gradients; record the replicated variables (the wrapped
        optimizer's slots and state among them) and the op that broadcasts them.
        Joinable, a step nobody contributed to (every worker has joined) applies
        nothing, and a worker that joined leaves what it alone pushes to (hybrid's
        tables on the ps) as it is: an empty push would still move a table whose sparse
        update touches every row (Adam's).

        Raises:
            InvalidArgumentError: a replicated variable's gradient was computed from a
                gradient this worker keeps to itself (hybrid's tables: their rows go to
                the ps unaveraged), e.g. by clip_by_global_norm over all gradients: each
                worker would apply another value, and the replicas would drift apart.
        """
        grads_and_vars = list(grads_and_vars)          # read more than once
        self._check_replicated_gradients(grads_and_vars)
        if self.joinable and self._contributors is not None:
            graph = self._contributors.graph
            kept_local = [v for g, v in grads_and_vars
                          if g is not None and self._keep_local(v)]
            with graph.state_changes_only_if(math_ops.greater(self._contributors, 0.0)):
                contributes = math_ops.greater(self._contributes, 0.0) if kept_local else None
                with self._opt.gating_updates([(v, contributes) for v in kept_local]):
                    train_op = self._opt.apply_gradients(grads_and_vars,
                                                         global_step=global_step, name=name)
            graph.add_to_collection(JOINABLE_OPTIMIZERS, self)
        else:
            train_op = self._opt.apply_gradients(grads_and_vars, global_step=global_step,
                                                 name=name)
        self._train_op = train_op
        graph = train_op.graph
        self._own_replicas(graph)
        self.register_replicas(graph)
        return train_op

    def _check_replicated_gradients(self, grads_and_vars) -> None:
        """Refuse a replicated variable's gradient that depends on a gradient kept local
        (see apply_gradients), following data inputs back to the collectives, whose
        outputs every worker holds alike."""
        if not self._own_gradients:
            return
        found = {}          # op -> the kept-local variable whose gradient it reads, or None
        entered = set()

        def own_source(tensor):
            stack = [(tensor.op, False)]
            while stack:                    # post-order: an op after its inputs
                op, inputs_done = stack.pop()
                if op in found or (op in entered and not inputs_done):
                    continue                # done, or on the path (a loop's back edge)
                collective = op.type.startswith("Collective")
                if not inputs_done:
                    entered.add(op)
                    stack.append((op, True))
                    if not collective:
                        stack.extend((t.op, False) for t in op.inputs if t.op not in found)
                    continue
                found[op] = next((self._own_gradients[t] for t in op.outputs
                                  if t in self._own_gradients), None)
                if found[op] is None and not collective:
                    found[op] = next((found[t.op] for t in op.inputs
                                      if found.get(t.op) is not None), None)
            return found[tensor.op]

        for g, v in grads_and_vars:
            if g is None or self._keep_local(v):
                continue
            for t in (g.values, g.indices) if isinstance(g, IndexedSlices) else (g,):
                source = own_source(t)
                if source is not None:
                    source, name = _full_name(source), _full_name(v)
                    raise errors.InvalidArgumentError(
                        f"{self._name}.apply_gradients: the gradient given for "
                        f"'{name}', replicated on every worker, was computed from the "
                        f"gradient of '{source}', which lives on the ps and takes "
                        "each worker's own gradient unaveraged: every worker would apply "
                        f"another value to its replica of '{name}', and the replicas "
                        "would drift apart. Transform the two kinds apart (e.g. "
                        "clip_by_global_norm over the replicated variables' gradients, and "
                        "over the tables' on their own), or, in hybrid mode, name the table "
                        "in TrainingMode(replicated=[...]) to have its gradient averaged")

    def join(self, session) -> int:
        """Leave training: run this optimizer's train op with zero gradients (and no
        data: the gradients are fed) step after step, with the workers still training,
        until every worker has joined; return how many steps that took. Call it on every
        worker once its data is done (the last one to join ends every join).

        A MonitoredSession's steps here run without its hooks: a hook's fetches (the
        progress line's loss, the summaries) read the input that has run out, and a hook
        that stopped the session (StopAtStepHook) must not stop the others' steps.

        Raises:
            FailedPreconditionError: the optimizer was not made ``joinable=True``, or
                has built no train op yet.
        """
        if not self.joinable or self._train_op is None or self._contributors is None:
            raise errors.FailedPreconditionError(
                f"{self._name}.join: build the optimizer with joinable=True and its train "
                "op (minimize or apply_gradients) first: a worker that joins contributes "
                "zeros to the steps of the others, which must count the contributors")
        feeds = dict(self._join_feeds)
        fetches = [self._train_op, self._contributors]
        run_step_fn = getattr(session, "run_step_fn", None)     # a MonitoredSession's
        if callable(run_step_fn):
            def step():
                return run_step_fn(lambda context: context.session.run(fetches, feeds))
        else:
            def step():
                return session.run(fetches, feeds)
        steps = 0
        while True:
            _, contributors = step()
            steps += 1
            if contributors == 0:
                return steps

    def replicated_variables(self, graph) -> list:
        """The variables of ``graph`` every worker of the group holds a copy of: those on
        the group's own tasks (or placed nowhere), except the ones kept local."""
        return [v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
                if DeviceSpec.from_string(v.device).job in (None, self._group) and
                not self._keep_local(v)]

    def register_replicas(self, graph) -> None:
        """Record this group's replicated variables not yet recorded, and add one op
        broadcasting them from worker 0 to ``REPLICA_BROADCAST_OPS`` (see
        ``session_manager.register_replicas``)."""
        known = set(graph.get_collection(GraphKeys.REPLICATED_VARIABLES))
        new = [v for v in self.replicated_variables(graph) if v not in known]
        if not new:
            return
        if graph.finalized:
            names = errors.first_of((f"'{v.op.name}'" for v in new), 5)
            raise errors.FailedPreconditionError(
                f"{names}: variables replicated on every worker that were made after the "
                "replicas' broadcast was built, and the graph is finalized, so none can be "
                "built for them: each worker would keep its own initial values. Create the "
                "session before finalizing the graph (MonitoredTrainingSession and "
                "Supervisor finalize it after adding the broadcast)")
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
            # Named after its variable: ranks whose variables differ (one missing) are
            # told which variable each rank was broadcasting, not just a dtype mismatch.
            # In place: the model is not held twice while it is broadcast.
            broadcasts = [collective_ops.broadcast_variable(
                v, root=root, group=self._group, name=f"broadcast/{v.op.name}").op
                for v in variables]
            return control_ops.group(*broadcasts, name="broadcast_variables")

    def make_session_run_hook(self, var_list=None, root=0):
        """Return a hook broadcasting the replicated variables from ``root`` once the
        session exists, for sessions no SessionManager made ready (a
        MonitoredTrainingSession or Supervisor has already done it: the hook then does
        nothing, so it is safe to add either way)."""
        if var_list is None and root == 0:
            return _BroadcastHook(None)
        return _BroadcastHook(self.broadcast_variables_op(var_list, root))


def join(session) -> int:
    """``mf.train.join(session)``: leave training on a worker whose data is done while
    the others go on (Horovod's ``hvd.join``); return once every worker has joined.

    - Allreduce and hybrid: the graph's joinable ``AllreduceOptimizer`` (``joinable=True``;
      hybrid mode's ``TrainingMode(..., joinable=True)``) runs its steps with zeros from
      this worker, the others averaging over the workers still contributing, and no rows
      pushed to the tables; returns how many such steps it ran.
    - ps training (synchronous replicas, bounded staleness, asynchronous): this rank
      serves (as ``server.join()`` does) with the session still open, so a chief's sync
      loop goes on for the others; the ps counts a joined worker out of the gradients a
      synchronous step waits for. Returns 0.

    Raises:
        FailedPreconditionError: more than one joinable allreduce optimizer (their steps
            would interleave differently on different workers), or no cluster.
    """
    found = session.graph.get_collection(JOINABLE_OPTIMIZERS)
    if len(found) > 1:
        raise errors.FailedPreconditionError(
            f"mf.train.join: the graph has {len(found)} joinable allreduce optimizers; "
            "build exactly one with AllreduceOptimizer(..., joinable=True)")
    if found:
        return found[0].join(session)
    service = process.current_service()
    if service is None:
        raise errors.FailedPreconditionError(
            "mf.train.join: no cluster in this process (create mf.train.Server first): "
            "there are no other workers to go on")
    if collective_ops.runs_collectives(session.graph):
        raise errors.FailedPreconditionError(
            "mf.train.join: this graph's steps run collectives among the workers "
            "(allreduce or hybrid mode), which a worker that only serves would leave "
            f"waiting: {collective_ops.JOINABLE_CURE}")
    service.join()
    return 0


def _full_name(var) -> str:
    """A variable's name as its user gave it (a part's, its whole variable's)."""
    info = getattr(var, "_save_slice_info", None)
    return info.full_name if info is not None else var.op.name


class _BroadcastHook(SessionRunHook):
    def __init__(self, op):
        self._op = op

    def begin(self):
        graph = get_default_graph()
        if not graph.finalized:
            register_replicas(graph)

    def after_create_session(self, session, coord):
        if self._op is None and not session.graph.finalized:
            register_replicas(session.graph)
        if self._op is not None:
            session.run(self._op)
        else:
            broadcast_replicas(session)

