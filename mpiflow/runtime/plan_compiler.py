"""Compile an ordered op list into a plan's steps: where each kernel runs, the host/GPU
copies between them, fused elementwise groups, and one typed step record per call.

Everything that does not change from step to step is decided here, once per plan: the
kernel each op runs (numpy or cupy, bound to its op by ``KernelContext``), the slot each
value lives in, the copies a value needs to reach a kernel on another device, the
read-only guard of the write check, and the last reader of each slot (which frees it).
The executor (``executor.py``) then only loops over the ``Step`` records.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from mpiflow import backend, config, errors
from mpiflow.framework import dtypes
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.ops.registry import DONATE_MIN_BYTES, GATE_ATTR, get_op_def
from mpiflow.runtime import kernel_fusion, write_check
from mpiflow.runtime.schedule import fetch_is_copied, variable_aliased
from mpiflow.runtime.transfers import RecvStep, SendGroup, SendStep

# Step kinds: how the executor calls ``fn`` and stores what it returns.
SINGLE, MULTI, NO_OUTPUT, SEND, RECV, ASYNC, ASYNC_MULTI = range(7)


class Step(NamedTuple):
    """One call of a compiled plan: ``fn(*values of ins)`` into ``out`` (a slot, a list of
    slots, or None), then the slots in ``frees`` are dropped. For SEND and RECV, ``fn``
    is the ``transfers`` record (a ``SendGroup`` of the Sends that leave together)."""

    fn: object
    ins: tuple
    out: object
    kind: int
    frees: tuple


class KernelContext:
    """Per-op data a kernel reads: the op, its attrs, the array module and ``env``, the
    runtime as kernels may see it (``kernel_env.KernelEnv``).

    ``OpDef.prepare`` may attach more (precomputed axes, a bound StateRef, an RNG).
    """

    donated = frozenset()       # inputs the kernel may write its result into
    # Where the op's result is a host array that a Send takes from this rank: an
    # allocator ``(shape, dtype) -> array`` the kernel may write it into, from buffers on
    # huge pages (MPI sends those about 2.5 times as fast) that are reused once nobody
    # holds them. None elsewhere: the kernel allocates as it likes.
    outgoing = None

    def __init__(self, op, xp, env):
        self.op = op
        self.attrs = op._attrs
        self.xp = xp
        self.env = env


class Compiled(NamedTuple):
    """What compiling gives a plan."""

    steps: list              # Step records, in order
    ops: list                # per step: the op it belongs to
    places: list             # per step: the GPU its kernel runs on (None: host)
    labels: list             # per step: what a trace calls it (None: its op's type)
    template: list           # the value slots as a step starts (refs filled in)
    feed_slots: list
    fetch_slots: list
    gpu: int | None          # the GPU a thread running the plan makes current
    has_transfers: bool
    donated: dict            # op -> the inputs its kernel may write its result into
    outgoing: frozenset      # ops whose kernels may write their results into send buffers


def own_device(op) -> str:
    return op.device


def compile_plan(order, run_var_ops, late_reads, fetch_tensors, feed_tensors, env,
                 device_of) -> Compiled:
    """Compile ``order`` (the ops to run, in order) for ``env``; ``device_of(op)`` says
    where an op is placed; ``late_reads`` (``schedule.reads_after_writes``) the ops that
    read a variable again after a write of it."""
    return _Compiler(fetch_tensors, feed_tensors, env, device_of).compile(
        order, run_var_ops, late_reads)


class _Compiler:
    def __init__(self, fetch_tensors, feed_tensors, env, device_of):
        self.env = env
        self.device_of = device_of
        self.fed = set(feed_tensors)
        self.fetch_tensors = list(fetch_tensors)
        self.slots = {}
        self.refs = []          # StateRefs handed to writer kernels; slot -1-k until placed
        self.steps, self.ops, self.places, self.labels = [], [], [], []
        # Where each slot's value lives (None: host memory; an int: that GPU). Values cross
        # between host and GPU only through copy steps added here, one per (tensor, place).
        self.where = {}
        self.copies = {}
        self.check_writes = config.get("MPIFLOW_CHECK_KERNEL_WRITES")
        self.has_transfers = False
        self.feed_slots = [self.slot_of(t) for t in feed_tensors]

    def slot_of(self, tensor) -> int:
        if tensor not in self.slots:
            self.slots[tensor] = len(self.slots)
        return self.slots[tensor]

    def emit(self, fn, ins, outs, kind, op, place=None, label=None) -> None:
        self.steps.append((fn, ins, outs, kind))
        self.ops.append(op)
        self.places.append(place)
        self.labels.append(label)

    def slot_at(self, tensor, place, consumer) -> int:
        """The slot holding ``tensor`` at ``place``, adding its copy for ``consumer``."""
        slot = self.slot_of(tensor)
        if self.where.get(slot) == place:
            return slot
        key = (slot, place)
        if key not in self.copies:
            self.copies[key] = self.slot_of(("copy", tensor, place))
            if tensor.op.type == "Const" and tensor not in self.fed:
                # A constant is copied once, here, not every step (shapes, axes).
                value = tensor.op.get_attr("value")
                if place is not None:
                    value = backend.to_device(value, place)
                self.emit(functools.partial(_constant, value), [], [self.copies[key]],
                          SINGLE, consumer, label="Const")
            else:
                mover = backend.to_host if place is None else \
                    functools.partial(backend.to_device, physical=place)
                self.emit(mover, [slot], [self.copies[key]], SINGLE, consumer, place,
                          "CopyToHost" if place is None else "CopyToGPU")
        return self.copies[key]

    def context(self, op, xp, place) -> KernelContext:
        ctx = KernelContext(op, xp, self.env)
        if place is not None:
            backend.activate_gpu(place)     # what prepare puts on the GPU goes there
        get_op_def(op.type).prepare(ctx)
        return ctx

    def compile(self, order, run_var_ops, late_reads) -> Compiled:
        fed = self.fed
        # Fetches that may share memory with a variable, a constant or a feed are copied
        # right where they are produced: the copy is taken before any later in-place
        # update of the same step, so a fetched read shows the value the step read. So
        # are fetches that may be read-only views (broadcasts): the caller owns a fetch.
        snapshot = {t for t in self.fetch_tensors if fetch_is_copied(t, fed)}
        runs = [op for op in order
                if not (op.type == "VariableV2" and op not in run_var_ops) and
                not (op.outputs and not get_op_def(op.type).stateful and
                     all(t in fed for t in op.outputs))]     # fed in full: a placeholder
        runs = sends_bunched(runs)
        kernel_at = {op: kernel_placement(op, self.device_of) for op in runs}
        fused_root, fused_inner = _fusion_groups(runs, kernel_at, fed, self.fetch_tensors)
        self.donations = _donations(runs, kernel_at, fed, set(self.fetch_tensors),
                                    fused_root.keys() | fused_inner)
        self.sent_from_host = _sent_from_host(runs, kernel_at, fed)
        for op in runs:
            if op in fused_inner:
                continue        # computed inside its group's fused kernel, at the root
            group = fused_root.get(op)
            for member in group.members if group else (op,):
                for variable in late_reads.get(member, ()):
                    self.read_again(variable, op)
            results = self.compile_op(op, kernel_at[op], group)
            for t in results:
                if t in snapshot and t not in fed:
                    self.emit(_copy, [self.slot_of(t)], [self.slot_of(("snapshot", t))],
                              SINGLE, op)
        fetch_slots = [self.slot_of(("snapshot", t) if t in snapshot and t not in fed else t)
                       for t in self.fetch_tensors]
        return self.finish(fetch_slots)

    def read_again(self, variable, consumer) -> None:
        """Read ``variable``'s buffer into its slot again, for ``consumer``: a read after a
        write of it in this step sees what the write left (``reads_after_writes``)."""
        slot = self.slot_of(variable.outputs[0])
        place = kernel_placement(variable, self.device_of)[1]
        self.where[slot] = place
        for key in [k for k in self.copies if k[0] == slot]:
            del self.copies[key]        # copies of the earlier read to other devices
        self.emit(self.env.ref(variable).read, [], [slot], SINGLE, consumer, place,
                  "VariableV2")

    def compile_op(self, op, placement, group) -> list:
        """Emit the step(s) of ``op`` (or of the fused ``group`` it is the root of);
        return the tensors it produces."""
        op_def = get_op_def(op.type)
        xp, place = placement
        ins = []
        for i, t in enumerate(group.inputs if group else op.inputs):
            if not group and i in op_def.ref_inputs:
                self.refs.append(self.env.ref(t.op))
                ins.append(-len(self.refs))
            else:
                ins.append(self.slot_at(t, None if not group and i in op_def.host_inputs
                                        else place, op))
        # A fed output keeps the fed value: the op's own result goes to a shadow slot.
        results = group.outputs if group else op.outputs
        outs = [self.slot_of(("shadow", t) if t in self.fed else t) for t in results]
        for s in outs:
            self.where[s] = None if op_def.host_outputs else place
        if group:
            self.emit_group(op, group, xp, place, ins, outs)
        elif op_def.transfer is not None:
            self.emit_transfer(op, op_def, place, ins, outs)
        else:
            self.emit_kernel(op, op_def, xp, place, ins, outs)
        return results

    def emit_group(self, op, group, xp, place, ins, outs) -> None:
        contexts = [self.context(m, xp, place) for m in group.members]
        kernel = kernel_fusion.FusedGroup(group, contexts, kernel_fusion.fuser(xp))
        label = f"Fused({kernel.name})"
        if self.check_writes:
            kernel = write_check.guarded(kernel, op)
        self.emit(kernel, ins, outs, MULTI if len(outs) > 1 else SINGLE, op, place, label)

    def emit_transfer(self, op, op_def, place, ins, outs) -> None:
        self.has_transfers = True
        edge, peer = op.get_attr("edge"), op.get_attr("peer")
        if op_def.transfer == "send":
            record = SendStep(edge, peer, variable_aliased(op.inputs[0]),
                              op.get_attr("to_gpu"))
            last = self.steps[-1] if self.steps else None
            if last is not None and last[3] == SEND and last[0].joins(record):
                # Right after another Send to the same peer: one message for both.
                self.steps[-1] = (SendGroup.of(last[0].sends + (record,)),
                                  list(last[1]) + list(ins), last[2], SEND)
            else:
                self.emit(SendGroup.of([record]), ins, outs, SEND, op, place)
        else:
            self.emit(RecvStep(edge, peer, place, op.get_attr("carries")), ins, outs, RECV,
                      op, place)

    def emit_kernel(self, op, op_def, xp, place, ins, outs) -> None:
        ctx = self.context(op, xp, place)
        donated = self.donations.get(op)
        if donated:
            ctx.donated = donated
        if op in self.sent_from_host:
            ctx.outgoing = backend.outgoing_empty
        if op_def.async_kernel:
            kind = ASYNC_MULTI if op_def.tuple_outputs else ASYNC
        else:
            kind = MULTI if op_def.tuple_outputs else (SINGLE if outs else NO_OUTPUT)
        kernel = functools.partial(op_def.kernel_for(ctx.xp), ctx.xp, ctx)
        if op._attrs.get(GATE_ATTR):
            kernel = _gated(kernel, op_def)
        if self.check_writes:
            kernel = write_check.guarded(kernel, op, writable=ctx.donated)
        if place is not None and kind in (SINGLE, MULTI) and \
                any(t.dtype is dtypes.bfloat16 for t in op.outputs):
            kernel = _keeping_dtypes(kernel, [t.dtype.np_dtype for t in op.outputs],
                                     kind == MULTI)
        self.emit(kernel, ins, outs, kind, op, place)

    def finish(self, fetch_slots) -> Compiled:
        # The GPU a thread running this plan makes current; a plan spanning several GPUs
        # switches before each kernel instead.
        gpus = {p for p in self.places if p is not None}
        steps = self.steps
        if steps and steps[-1][3] == SEND:      # its message may say the plan is done
            fn, ins, outs, kind = steps[-1]
            steps = steps[:-1] + [(fn._replace(last=True), ins, outs, kind)]
        if len(gpus) > 1:
            steps = [(_on_gpu(fn, place), ins, outs, kind)
                     if kind not in (SEND, RECV) else (fn, ins, outs, kind)
                     for (fn, ins, outs, kind), place in zip(steps, self.places)]
        n_tensors = len(self.slots)
        steps = [(fn, [s if s >= 0 else n_tensors - s - 1 for s in ins], outs, kind)
                 for fn, ins, outs, kind in steps]
        refs = set(range(n_tensors, n_tensors + len(self.refs)))
        return Compiled(_with_frees(steps, set(fetch_slots), refs), self.ops, self.places,
                        self.labels, [None] * n_tensors + self.refs, self.feed_slots,
                        fetch_slots, min(gpus) if gpus else None, self.has_transfers,
                        self.donations, frozenset(self.sent_from_host))


def sends_bunched(runs) -> list:
    """``runs`` with each Send moved down past the ops after it that may run first, so
    that Sends meet and leave as one message per peer (``SendGroup``).

    A ps answering a pull reads each variable and sends it: read, send, read, send. Sent
    one by one, each is its own message, and a large one moves only when its receiver,
    busy computing with the first, next looks (MPI's rendezvous). Its applies of a push
    each send a token back: one message per variable where one would do. An op may run
    before the Sends held back (``_may_pass``) when it waits for nobody, and either costs
    nothing (a read, a view, a constant) or everything held back is a token; a Recv, an
    op that waits, or one that writes a variable a held Send reads from lets them go
    first. Nothing else moves, so no wait of another rank ever depends on a Send later
    than it did, and a held Send is late by at most the cost of what passed it.
    """
    bunched, held = [], []
    for op in runs:
        op_def = get_op_def(op.type)
        if op_def.transfer == "send":
            held.append(op)
        elif held and _may_pass(op, op_def, held):
            bunched.append(op)
        else:
            bunched.extend(held)
            held.clear()
            bunched.append(op)
    return bunched + held


_COSTS_NOTHING = frozenset({"Const", "NoOp", "VariableV2"})


def _may_pass(op, op_def, held) -> bool:
    """Whether ``op`` may run before the Sends ``held`` back (see ``sends_bunched``)."""
    if op_def.transfer is not None or op_def.async_kernel or \
            any(c in held for c in op._control_inputs):
        return False
    free = op.type in _COSTS_NOTHING or op_def.aliases_input or op_def.aliases_state
    may_write = (op_def.stateful or op_def.ref_inputs) and op.type not in _COSTS_NOTHING
    if may_write and any(variable_aliased(send.inputs[0]) is not None for send in held):
        return False
    return free or all(_is_token(send) for send in held)


def _is_token(send) -> bool:
    """A Send of the token that carries a control edge across ranks (a Const that waits
    for its op: ``partition``), whose receiver only waits for it."""
    source = send.inputs[0].op
    return source.type == "Const" and bool(source._control_inputs)


def _gated(kernel, op_def):
    """``kernel`` run only in the steps where its op's last input, its gate, is true
    (``Graph.state_changes_only_if``); in the others the state stays as it is, and the
    output is what it would be without the change: the variable's value, or nothing."""
    ref = op_def.ref_inputs[0] if op_def.ref_inputs else None

    def run(*args):
        if args[-1]:
            return kernel(*args[:-1])
        return args[ref].get() if ref is not None else None
    return run


def _copy(value):
    return value.copy()


def _constant(value):
    return value


def kernel_device(op, op_def, device_of=own_device) -> str:
    """The device whose kernel runs ``op``: a writer runs where its variable lives, and an
    op without a GPU kernel runs on its task's host."""
    anchor = op.inputs[op_def.ref_inputs[0]].op if op_def.ref_inputs else op
    device = device_of(anchor)
    if backend.device_type(device) != "GPU" or op_def.gpu_kernel is True:
        return device
    if op_def.gpu_kernel == "collective" and _collectives().runs_on_gpu(
            op._attrs.get("algorithm", "auto"),
            [dtypes.as_dtype(d).np_dtype for d in op_def.carried_dtypes(op)]):
        return device
    return ""


def _collectives():
    """The collectives registry, imported when a plan places a collective: it imports
    mpi4py.MPI, which starts MPI, and ``import mpiflow`` must not (``mpiflow.run``'s
    supervising parent imports it and is no rank of the job)."""
    from mpiflow.comm import collectives  # noqa: PLC0415  (imports mpi4py.MPI)
    return collectives


def kernel_placement(op, device_of):
    """(array module, GPU or None) of the kernel that runs ``op``.

    Where this process has no GPU, the error names the op and the ways out, soft placement
    among them: a TF1 script written for a GPU node (``tf.device('/gpu:0')``) first meets
    this on a machine without one, and TensorFlow names the op there too."""
    device = kernel_device(op, get_op_def(op.type), device_of)
    if backend.device_type(device) == "GPU" and not backend.gpu_available():
        raise errors.PlacementError(
            f"Cannot place op '{op.name}' ({op.type}) on {device}: it needs cupy and a GPU, "
            f"which are not available here ({backend.gpu_reason()}); install "
            "mpiflow[cuda12], place the op on a CPU, or set "
            "ConfigProto(allow_soft_placement=True) to run it on the CPU", op)
    xp = backend.array_module(device)
    if backend.device_type(device) == "CPU":
        return xp, None
    return xp, backend.physical_gpu(DeviceSpec.from_string(device).device_index or 0)


def _sent_from_host(runs, kernel_at, fed) -> set:
    """The host ops whose single output a Send on the host takes (itself, or a view of
    it through ops whose output aliases their input)."""
    sent = set()
    for op in runs:
        if get_op_def(op.type).transfer != "send" or kernel_at[op][1] is not None:
            continue
        tensor = op.inputs[0]
        while tensor not in fed and get_op_def(tensor.op.type).aliases_input and \
                tensor.op.inputs:
            tensor = tensor.op.inputs[0]
        producer = tensor.op
        if tensor not in fed and producer in kernel_at and len(producer.outputs) == 1 and \
                kernel_at[producer][1] is None:
            sent.add(producer)
    return sent


def _donations(runs, kernel_at, fed, fetched, fused) -> dict:
    """{op: the inputs its kernel may write its result into}.

    An input is donated when its kernel owns it outright: a host array that a kernel of
    this step just made (``OpDef.fresh_output``: new memory nothing else references), that
    this op is the only reader of (so no view of it lives on either), neither fed nor
    fetched, and that is not written by the op as a variable. Writing into it then saves
    an allocation and a pass over memory (``var -= lr * grad`` scales the gradient in
    place, as a numpy user writes it) and can change nothing anyone else sees.
    """
    readers = {}
    for op in runs:
        if get_op_def(op.type).reads_values:
            for t in op.inputs:
                readers[t] = readers.get(t, 0) + 1
    made_here = set(runs)
    donations = {}
    for op in runs:
        op_def = get_op_def(op.type)
        if not op_def.donating_inputs or op_def.async_kernel or op in fused or \
                kernel_at[op][1] is not None:
            continue
        donated = frozenset(
            i for i in op_def.donating_inputs
            if i < len(op.inputs) and i not in op_def.ref_inputs and
            _owned(op.inputs[i], made_here, readers, fed, fetched, fused, kernel_at))
        if donated:
            donations[op] = donated
    return donations


def _owned(tensor, made_here, readers, fed, fetched, fused, kernel_at) -> bool:
    """Whether the one reader of ``tensor`` owns its memory outright."""
    producer = tensor.op
    if readers.get(tensor) != 1 or tensor in fed or tensor in fetched or \
            producer not in made_here or producer in fused or kernel_at[producer][1] is not None:
        return False
    size = tensor.shape.num_elements()
    if size is not None and size * tensor.dtype.np_dtype.itemsize < DONATE_MIN_BYTES:
        return False            # known to be small: allocating it is cheaper than checking
    op_def = get_op_def(producer.type)
    if op_def.fresh_output:
        return True
    return op_def.hands_over_input and bool(producer.inputs) and \
        _owned(producer.inputs[0], made_here, readers, fed, fetched, fused, kernel_at)


def _fusion_groups(runs, kernel_at, fed, fetch_tensors):
    """({root op: its kernel_fusion.Group}, {ops computed inside a group}) for ``runs``."""
    fusing = {}

    def fusion_place(op):
        xp, place = kernel_at[op]
        if xp not in fusing:
            fusing[xp] = kernel_fusion.fuser(xp) is not None
        return ("device", place) if fusing[xp] else None

    defs = [get_op_def(op.type) for op in runs]
    barriers = [op for op, d in zip(runs, defs)
                if d.ref_inputs or d.transfer == "recv" or d.async_kernel]
    groups = kernel_fusion.find_groups(runs, fusion_place, set(fed), set(fetch_tensors),
                                       barriers)
    return ({g.root: g for g in groups}, {op for g in groups for op in g.members[:-1]})


def _keeping_dtypes(kernel, declared, multi):
    """``kernel`` with its results cast to the ``declared`` dtypes where they differ.

    cupy's bfloat16 support is partial: some reductions, ``where`` and mixed scalar
    arithmetic give float32 for bfloat16 inputs, and the next kernel would then see the
    wrong dtype. Plans wrap the GPU kernels of ops with bfloat16 outputs in this (a no-op
    cast where cupy kept the dtype); other kernels are not wrapped.
    """
    if multi:
        def run(*args):
            return tuple(_as(value, dtype) for value, dtype in zip(kernel(*args), declared))
    else:
        def run(*args):
            return _as(kernel(*args), declared[0])
    return run


def _as(value, dtype):
    return value.astype(dtype, copy=False) if getattr(value, "dtype", dtype) != dtype \
        else value


def _on_gpu(fn, place):
    """``fn`` run with GPU ``place`` current (for plans that span several GPUs)."""
    if place is None:
        return fn

    def run(*args):
        backend.activate_gpu(place)
        return fn(*args)
    return run


def _with_frees(steps, keep, constant_slots) -> list:
    """Attach to each step the slots whose last reader it is (fetches are kept)."""
    last_use = {}
    for i, (_, ins, outs, _) in enumerate(steps):
        for s in outs:
            last_use.setdefault(s, i)       # an output nobody reads dies where it is born
        for s in ins:
            last_use[s] = i
    frees = [[] for _ in steps]
    for s, i in last_use.items():
        if s not in keep and s not in constant_slots:
            frees[i].append(s)
    compiled = []
    for (fn, ins, outs, kind), free in zip(steps, frees):
        out = outs if kind in (MULTI, ASYNC_MULTI) else (outs[0] if outs else None)
        compiled.append(Step(fn, tuple(ins), out, kind, tuple(free)))
    return compiled
