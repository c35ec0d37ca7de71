"""Collective ops among the ranks of a job: allreduce (single and fused), broadcast, allgather.

Their kernels are async: the first call starts the collective and returns ``Wait``; the
rank service polls the handle and runs the kernel again once it is done, so other ranks'
requests are served meanwhile. Every rank of the group must run the same collective ops
in the same order; they do when they build the same graph (between-graph replication),
since a plan's order is fixed by graph construction.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from mpiflow import errors
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.array_ops import reshape
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import OpDef, Wait, apply_op, register_op
from mpiflow.ops.state_ops import _ref_of, check_ref

_OPS = ("sum", "average")


def runs_collectives(graph) -> bool:
    """Whether ``graph``'s steps run collectives among the workers (allreduce and hybrid
    mode): then no worker may stop stepping on its own (a graceful stop, a join that only
    serves, a chief's duties moving to another worker)."""
    return any(op.type.startswith("Collective") for op in graph.get_operations())


# What a worker whose data ends before the others' does where steps run collectives (the
# errors of a join that only serves, and of a collective with a worker resting in one).
JOINABLE_CURE = ("build the optimizer with AllreduceOptimizer(opt, joinable=True) (or "
                 "TrainingMode('allreduce' or 'hybrid', ..., joinable=True)) and call "
                 "mf.train.join(sess): its join steps carry zeros for that worker")


class CollectiveEvent(NamedTuple):
    """What a collective kernel's step waits for: its op's collective to finish."""

    kind: str
    op_name: str
    group: object           # the kernel's GroupCollectives

    def describe(self, describe_rank) -> str:
        """The wait, naming the group's other ranks: MPI does not say which of them have
        not joined the collective, and each named rank is asked where it is when the wait
        times out (the rank that is not there shows where it is instead)."""
        named = errors.first_of(describe_rank(r) for r in self.group.other_ranks())
        return (f"the collective of op '{self.op_name}' (group '{self.group.group}') to "
                f"finish: every rank of the group must run it, and MPI does not say which "
                f"have not yet: {named}")


class _Collective(OpDef):
    gpu_kernel = "collective"
    stateful = True
    async_kernel = True

    def carried_dtypes(self, op):
        """The dtypes this op's collective moves (where it runs depends on them)."""
        return [t.dtype for t in op.inputs]

    def prepare(self, ctx):
        ctx.group = ctx.env.collectives(ctx.attrs["group"])
        ctx.pending = None
        ctx.event = CollectiveEvent("collective", ctx.op.name, ctx.group)

    def forward(self, xp, ctx, *inputs):
        if ctx.pending is None:
            ctx.pending = self.start(ctx, inputs)
        handles = ctx.pending if isinstance(ctx.pending, list) else [ctx.pending]
        waiting = [h for h in handles if not h.test()]
        if waiting:
            group = ctx.attrs["group"]
            departed = ctx.env.departed(group)
            if departed and not _finish_without(waiting):
                raise errors.op_error(
                    errors.UnavailableError,
                    f"A collective of group '{group}' cannot finish: "
                    f"{', '.join(d for _, d in departed)} left it (where a worker runs "
                    f"fewer steps than the others, as when its data ends first: "
                    f"{JOINABLE_CURE})", ctx.op)
            joined = ctx.env.joined_ahead(group)
            if joined and not _finish_without(waiting):
                raise errors.op_error(
                    errors.FailedPreconditionError,
                    f"A collective of group '{group}' cannot finish: {group} task(s) "
                    f"{', '.join(map(str, joined))} wait in server.join() (or mf.train.join "
                    "without a joinable optimizer), where they run no step until this "
                    f"worker joins too: {JOINABLE_CURE}", ctx.op)
            for h in waiting:
                ctx.group.watch(h, ctx.event)
            return Wait(ctx.event)
        pending, ctx.pending = ctx.pending, None
        return self.finish(ctx, pending)

    def finish(self, ctx, pending):
        return pending.result


def _finish_without(handles, grace_s: float = 1.0) -> bool:
    """Whether ``handles`` complete within ``grace_s`` once a member has left: what it
    sent before it left is delivered by then; only a part it never did keeps them open."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        handles = [h for h in handles if not h.test()]
        if not handles:
            return True
        time.sleep(0.001)
    return False


def _check_op(b):
    if b.attrs["op"] not in _OPS:
        raise b.error("Unknown reduction", expected=" or ".join(_OPS), got=b.attrs["op"])


@register_op("CollectiveAllReduce", attrs={"group": "worker", "op": "average",
                                            "algorithm": "auto", "half_on_wire": False})
class AllReduceOp(_Collective):
    def infer(self, b):
        _check_op(b)
        return [(b.dtype(0), b.shape(0))]

    def start(self, ctx, inputs):
        return ctx.group.allreduce_async(inputs[0], ctx.attrs["op"], ctx.attrs["algorithm"],
                                         ctx.op.name, ctx.attrs["half_on_wire"])

    # Training reduces gradients, it never differentiates through a collective; a
    # gradient here would need its own check across ranks, which does not exist yet.
    gradient = None


@register_op("CollectiveFusedAllReduce", attrs={"group": "worker", "op": "average",
                                                 "algorithm": "auto",
                                                 "threshold_bytes": None,
                                                 "half_on_wire": False, "labels": []})
class FusedAllReduceOp(_Collective):
    """Allreduce many tensors through fusion buffers (one collective per bucket)."""

    tuple_outputs = True
    gradient = None

    def infer(self, b):
        _check_op(b)
        if not b.inputs:
            raise b.error("Fused allreduce needs at least one tensor")
        for i in range(len(b.inputs)):
            if not b.shape(i).is_fully_defined():
                raise b.error(f"Input {i} of a fused allreduce needs a fully defined shape",
                              got=b.shape(i))
        return [(b.dtype(i), b.shape(i)) for i in range(len(b.inputs))]

    def prepare(self, ctx):
        super().prepare(ctx)
        op = ctx.op
        labels = ctx.attrs["labels"] or [t.name for t in op.inputs]
        ctx.names = [f"{i}:{label}" for i, label in enumerate(labels)]
        specs = [(n, t.dtype.np_dtype, t.shape.num_elements() * t.dtype.size, "")
                 for n, t in zip(ctx.names, op.inputs)]
        ctx.fused = ctx.group.fused_allreduce(specs, ctx.attrs["algorithm"], ctx.attrs["op"],
                                              ctx.attrs["threshold_bytes"], op.name,
                                              ctx.attrs["half_on_wire"])

    def start(self, ctx, inputs):
        handles = []
        for name, array in zip(ctx.names, inputs):
            handle = ctx.fused.add(name, array.reshape(-1))
            if handle is not None:
                handles.append(handle)
        return handles

    def finish(self, ctx, handles):
        reduced = {}
        for handle in handles:
            reduced.update(handle.result)
        ctx.fused.check = False         # agreed once; the graph fixes shapes and dtypes
        return tuple(reduced[n].reshape(t.shape.as_list())
                     for n, t in zip(ctx.names, ctx.op.inputs))


# threshold_bytes None: MPIFLOW_FUSION_THRESHOLD_BYTES of the rank that runs the op.
_FUSION_ATTRS = {"group": "worker", "op": "average", "algorithm": "auto",
                 "threshold_bytes": None, "fusion": "", "names": [], "dtypes": [],
                 "sizes": [], "half_on_wire": False}


def _fusion(ctx):
    """The fusion buffers shared by one optimizer's add and wait ops (per process)."""
    a = ctx.attrs
    specs = [(n, d.np_dtype, size * d.size, "") for n, d, size in
             zip(a["names"], a["dtypes"], a["sizes"])]
    group = ctx.env.collectives(a["group"])
    # Keyed by every attr that shapes it: the store outlives graphs, and a later graph may
    # fuse the same tensors under the same name with another reduction or algorithm.
    key = repr(tuple((k, a[k] if not isinstance(a[k], list) else tuple(map(str, a[k])))
                     for k in sorted(_FUSION_ATTRS)))
    return ctx.env.resource(
        f"fusion:{a['fusion']}:{key}",
        lambda: group.fused_allreduce(specs, a["algorithm"], a["op"], a["threshold_bytes"],
                                      a["fusion"], a["half_on_wire"]))


@register_op("CollectiveFusedAdd", attrs=dict(_FUSION_ATTRS, index=0))
class FusedAddOp(OpDef):
    """Put one gradient into its fusion bucket; the bucket's allreduce starts as soon as
    the bucket is full, while the backward pass goes on (scheduled as early as ready)."""
    gpu_kernel = "collective"

    stateful = True
    schedule_early = True
    gradient = None

    def infer(self, b):
        return [("int32", [])]

    def carried_dtypes(self, op):
        """Every tensor of the buckets: the add and wait ops of one fusion run in one
        place, since they share its buffers."""
        return op._attrs["dtypes"]

    def prepare(self, ctx):
        ctx.fused = _fusion(ctx)
        ctx.name = ctx.attrs["names"][ctx.attrs["index"]]

    def forward(self, xp, ctx, grad):
        handle = ctx.fused.add(ctx.name, grad.reshape(-1))
        if handle is not None:
            ctx.env.track(handle)
        return xp.zeros((), dtype="int32")


@register_op("CollectiveFusedWait", attrs=dict(_FUSION_ATTRS))
class FusedWaitOp(_Collective):
    """Wait for every bucket of this step's fused allreduce; output the reduced tensors."""

    tuple_outputs = True
    gradient = None

    def infer(self, b):
        return [(d, [n]) for d, n in zip(b.attrs["dtypes"], b.attrs["sizes"])]

    carried_dtypes = FusedAddOp.carried_dtypes

    def prepare(self, ctx):
        super().prepare(ctx)
        ctx.fused = _fusion(ctx)

    def start(self, ctx, inputs):
        return ctx.fused.handles()

    def finish(self, ctx, handles):
        reduced = {}
        for handle in handles:
            reduced.update(handle.result)
        # The tensors' shapes and dtypes are fixed by the graph: once every rank has
        # agreed on them (the first round's check), later rounds skip the check.
        ctx.fused.check = False
        return tuple(reduced[n] for n in ctx.attrs["names"])


@register_op("CollectiveBroadcast", attrs={"group": "worker", "root": 0})
class BroadcastOp(_Collective):
    """Output the root's value of the input on every rank of the group.

    The collective lands in a buffer of the op's own: the input (a variable's buffer, an
    array the caller fed) is only read, on the root and elsewhere.
    """

    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def start(self, ctx, inputs):
        value = inputs[0]
        root = ctx.attrs["root"]
        out = value.copy() if ctx.group.rank == root else ctx.xp.empty_like(value)
        return ctx.group.broadcast_async(out, root, ctx.op.name)

    gradient = None


@register_op("CollectiveBroadcastVariable", attrs={"group": "worker", "root": 0})
class BroadcastVariableOp(_Collective):
    """Make variable input 0 hold the root's value on every rank of the group, in its own
    buffer: the root sends from it, every other rank receives into it (once sends still
    reading it are done). ``assign(v, broadcast(v))`` lands each variable in a buffer of
    its own first, and a step broadcasting a model holds it twice at its peak."""

    ref_inputs = (0,)
    aliases_state = True
    gradient = None

    def infer(self, b):
        check_ref(b, "variable")
        return [(b.dtype(0), b.shape(0))]

    def start(self, ctx, inputs):
        ref = inputs[0]
        root = ctx.attrs["root"]
        buffer = ref.read() if ctx.group.rank == root else ref.get()
        return ctx.group.broadcast_variable_async(buffer, root, ctx.op.name)


@register_op("CollectiveAllGather", attrs={"group": "worker"})
class AllGatherOp(_Collective):
    """Concatenate every rank's tensor along axis 0 (first dims may differ)."""

    gradient = None

    def infer(self, b):
        shape = b.shape(0)
        if shape.ndims == 0:
            raise b.error("All-gather needs a tensor of rank >= 1", got=shape)
        rest = shape.as_list()[1:] if shape.ndims is not None else None
        return [(b.dtype(0), TensorShape(None if rest is None else [None] + rest))]

    def start(self, ctx, inputs):
        return ctx.group.allgather_async(inputs[0], ctx.op.name)


def all_reduce(tensor, op="average", group="worker", algorithm="auto", name=None,
               half_on_wire=False):
    """Return the sum (or average) of ``tensor`` over the ranks of ``group``
    (``half_on_wire``: a float16/bfloat16 tensor moves as it is, see
    ``Collective.allreduce_async``)."""
    return apply_op("CollectiveAllReduce", [convert_to_tensor(tensor)],
                    {"group": group, "op": op, "algorithm": algorithm,
                     "half_on_wire": bool(half_on_wire)}, name=name).outputs[0]


def fused_all_reduce(tensors, op="average", group="worker", algorithm="auto",
                     threshold_bytes=None, name=None, half_on_wire=False, labels=None):
    """Allreduce ``tensors`` together through fusion buffers; return the reduced list.

    ``threshold_bytes`` None: MPIFLOW_FUSION_THRESHOLD_BYTES where the op runs.
    ``labels``: what each tensor is (default its name), in the cross-rank check of the
    buckets and its errors: ranks whose lists differ are refused, naming them.
    """
    tensors = [convert_to_tensor(t) for t in tensors]
    if not tensors:
        raise errors.InvalidArgumentError("fused_all_reduce needs at least one tensor")
    return apply_op("CollectiveFusedAllReduce", tensors,
                    {"group": group, "op": op, "algorithm": algorithm,
                     "threshold_bytes": _bytes_or_none(threshold_bytes),
                     "half_on_wire": bool(half_on_wire),
                     "labels": _labels(labels, tensors)}, name=name).outputs


def overlapped_all_reduce(tensors, fusion, op="average", group="worker", algorithm="auto",
                          threshold_bytes=None, half_on_wire=False, labels=None):
    """Allreduce ``tensors`` in fusion buckets that start as soon as each bucket's tensors
    exist (overlapping the rest of the backward pass); return the reduced tensors.

    ``fusion`` names the buffers (one per optimizer); every rank must build the same list
    (``labels``: what each tensor is, as in ``fused_all_reduce``).
    """
    tensors = [convert_to_tensor(t) for t in tensors]
    labels = _labels(labels, tensors) or [t.op.name for t in tensors]
    for i, t in enumerate(tensors):
        if not t.shape.is_fully_defined():
            raise errors.InvalidArgumentError(
                f"overlapped_all_reduce: tensor {i} ('{t.name}') needs a fully defined "
                f"shape, got {t.shape}")
    attrs = {"group": group, "op": op, "algorithm": algorithm,
             "threshold_bytes": _bytes_or_none(threshold_bytes), "fusion": fusion,
             "names": [f"{i}:{label}" for i, label in enumerate(labels)],
             "dtypes": [t.dtype for t in tensors],
             "sizes": [t.shape.num_elements() for t in tensors],
             "half_on_wire": bool(half_on_wire)}
    tokens = [apply_op("CollectiveFusedAdd", [t], dict(attrs, index=i)).outputs[0]
              for i, t in enumerate(tensors)]
    flat = apply_op("CollectiveFusedWait", tokens, attrs).outputs
    return [reshape(f, t.shape.as_list()) for f, t in zip(flat, tensors)]


def _labels(labels, tensors) -> list:
    if labels is None:
        return []
    labels = [str(label) for label in labels]
    if len(labels) != len(tensors):
        raise errors.InvalidArgumentError(
            f"fused allreduce: {len(labels)} labels for {len(tensors)} tensors")
    return labels


def _bytes_or_none(threshold_bytes):
    return None if threshold_bytes is None else int(threshold_bytes)


def broadcast(tensor, root=0, group="worker", name=None):
    """Return ``tensor`` as the rank ``root`` of ``group`` has it."""
    return apply_op("CollectiveBroadcast", [convert_to_tensor(tensor)],
                    {"group": group, "root": int(root)}, name=name).outputs[0]


def broadcast_variable(variable, root=0, group="worker", name=None):
    """Make ``variable`` hold rank ``root``'s value on every rank of ``group``, in place;
    return the op's output (the variable's value)."""
    return apply_op("CollectiveBroadcastVariable", [_ref_of(variable)],
                    {"group": group, "root": int(root)}, name=name).outputs[0]


def all_gather(tensor, group="worker", name=None):
    """Return every rank's ``tensor`` of ``group`` concatenated along axis 0."""
    return apply_op("CollectiveAllGather", [convert_to_tensor(tensor)], {"group": group},
                    name=name).outputs[0]

