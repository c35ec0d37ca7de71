"""The op registry: for every op type, one ``OpDef`` with attrs, shape, kernel and gradient.

Each op module defines its ops as ``OpDef`` subclasses decorated with ``@register_op``,
right next to the Python function users call. ``apply_op`` is the only way ops enter a
graph: it validates attrs, runs the shape function (so shape errors surface at build
time, naming the op) and hands the result to ``Graph.create_op``.
"""

from __future__ import annotations

import difflib

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor, get_default_graph, validate_op_name
from mpiflow.framework.tensor_shape import TensorShape, as_shape

REQUIRED = object()          # attr default meaning "the caller must give it"
NOT_DEFINED = object()       # gradient not written (distinct from None = not differentiable)

_REGISTRY = {}


class OpDef:
    """How one op type behaves: attrs, static shape, kernel and gradient.

    Class attributes a subclass sets:
        attrs: {name: default}; ``REQUIRED`` for attrs without a default.
        stateful: the kernel has side effects or state (never pruned as pure, not cached).
        ref_inputs: input indices the kernel writes in place; the executor passes them as
            ``StateRef`` handles instead of arrays.
        aliases_input: the output may share memory with input 0 (views), so a fetch copies.
        aliases_state: the output may share memory with variable/constant storage.
        read_only_output: the output may be a read-only view (a broadcast: strides of 0),
            so a fetch of it, or of a view of it, is copied into an array the caller can
            write.
        tuple_outputs: the kernel returns a tuple (one array per output) rather than
            one array; set by ops with a variable or plural number of outputs.
        host_inputs: input indices the kernel reads as host (numpy) arrays wherever it
            runs: shapes, axes and counts it turns into Python values (TF's HostMemory),
            so a GPU kernel never waits on the device to learn a shape.
        host_outputs: the kernel returns host arrays wherever it runs (Shape, Size).
        gpu_kernel: False for ops that always run on the host (files, queues, tokens);
            placed on a GPU they run on the host of the same task, inputs copied there.
            "collective" for collectives: on a GPU only where the collectives registry
            says their algorithm ("auto" for ops without one) runs there for the op's
            ``carried_dtypes(op)`` (``comm.collectives.runs_on_gpu``), else their
            tensors are reduced or copied in host memory.
        gpu_forward: the kernel used on a GPU instead of ``forward`` (a fused cupy kernel,
            see ``fused_elementwise``); None = ``forward`` with cupy as ``xp``.
        fusable: ``forward`` is ufunc arithmetic on its inputs only (no reshapes, no
            values read on the host, no in-place writes to inputs), so the executor may
            run a chain of such ops on a GPU as one fused kernel (``kernel_fusion``).
        fusion_forward: the formula used inside a fused kernel where ``forward`` writes
            in place (which a fused formula cannot); None = ``forward``.
        gradient: a method ``gradient(self, op, *output_grads) -> [grad per input]``, or
            None when the op has no gradient on purpose.
        changes_shared_state: the kernel changes state that outlives the step beyond its
            ``ref_inputs`` (an accumulator, a sync token queue); such ops, like every
            writer of a ref input, run as late as their inputs allow (``schedule``).
        fresh_output: the kernel's output is always a new array nothing else references
            (never an input, a view of one, or state), so its one reader may own it.
        hands_over_input: the output is new memory, or input 0 itself or a view of it
            (Identity, Reshape): its one reader owns what this op's one input owned.
        reads_values: False for kernels that look at their inputs' shapes only (Shape,
            Size, Rank): they are no readers of the values another op may write over.
        trace_args: None, or ``trace_args(result) -> dict``: what a traced step shows of
            the kernel's result beside its span in the timeline (a gradient's staleness).
        donating_inputs: input indices the kernel may write its result into when the plan
            donates them (``ctx.donated``): host arrays freshly made by another kernel of
            the step that this op is the only reader of (``plan_compiler``). The result
            must be the one it computes without (same values, bit for bit).
    """

    type_name = None
    attrs = {}
    stateful = False
    ref_inputs = ()
    aliases_input = False
    aliases_state = False
    read_only_output = False
    tuple_outputs = False
    transfer = None          # "send" / "recv" for the cross-rank ops the executor runs
    async_kernel = False     # forward may return Wait(key) to be run again after key fires
    passes_sparse_gradients = False   # gradient accepts IndexedSlices (else densified)
    schedule_early = False   # run as soon as ready (starts communication to overlap)
    changes_shared_state = False
    fresh_output = False
    hands_over_input = False
    reads_values = True
    trace_args = None
    donating_inputs = ()
    host_inputs = ()
    host_outputs = False
    gpu_kernel = True
    gpu_forward = None
    fusable = False
    fusion_forward = None
    gradient = NOT_DEFINED

    def infer(self, b: "BuildContext"):
        """Return [(DType, TensorShape)] for the outputs; raise naming ``b`` on bad input."""
        raise NotImplementedError

    def forward(self, xp, ctx, *inputs):
        """Compute the outputs from ``inputs`` with array module ``xp``."""
        raise NotImplementedError

    def prepare(self, ctx) -> None:
        """Precompute per-plan data on ``ctx`` (once per plan, not per step)."""

    def kernel_for(self, xp):
        """The kernel that runs this op with array module ``xp``: ``gpu_forward`` where
        ``xp`` compiles kernels (cupy) and the op has one, else ``forward``."""
        if self.gpu_forward is not None and has_fused_kernels(xp):
            return self.gpu_forward
        return self.forward

    def fuses(self, op) -> bool:
        """Whether this op instance may join a fused elementwise kernel (an op whose
        formula depends on its attrs narrows ``fusable`` here)."""
        return self.fusable

    @property
    def differentiable(self) -> bool:
        return self.gradient is not None


def fused_elementwise(name: str, in_params: str, body: str):
    """Return a ``gpu_forward``: the op's whole elementwise formula as one GPU kernel.

    ``in_params`` follow cupy's ElementwiseKernel ("T g, T y"; T is the inputs' dtype);
    ``body`` is the C statement per element, assigning ``out``. The numpy ``forward``
    stays the reference the GPU tests compare this with.
    """
    def gpu_forward(self, xp, ctx, *inputs):
        if not has_kernel_for(xp, inputs[0].dtype):    # other dtypes: the array calls
            return self.forward(xp, ctx, *inputs)
        return elementwise_kernel(xp, name, in_params, "T out", body)(*inputs)
    return gpu_forward


_fused_kernels = {}


def elementwise_kernel(xp, name: str, in_params: str, out_params: str, body: str):
    """Return the GPU array module's ElementwiseKernel for ``body``, compiled once.

    One launch does a whole chain of elementwise arithmetic, where the same chain written
    with array calls launches a kernel per call and moves every intermediate through GPU
    memory. ``xp`` is the module the executor handed the kernel (cupy on a GPU), so op
    modules never import an array library themselves.
    """
    kernel = _fused_kernels.get(name)
    if kernel is None:
        kernel = _fused_kernels[name] = xp.ElementwiseKernel(in_params, out_params, body,
                                                             name)
    return kernel


DONATE_MIN_BYTES = 1 << 14     # smaller results are allocated: a fresh small array is cheap


def donated_out(ctx, *inputs):
    """The input of an elementwise kernel its result may be written into: one the plan
    donated (``ctx.donated``) that already has the result's shape and dtype (every other
    input broadcasts into it); else None (the kernel allocates, as without donation).
    On every call of such a kernel: no numpy shape arithmetic here, only tuple checks."""
    for i in ctx.donated:
        out = inputs[i]
        # A kernel may have made a numpy scalar, not an array: nothing to write into then;
        # and a small array costs less to allocate than to check.
        if type(out) is not np.ndarray or out.nbytes < DONATE_MIN_BYTES or \
                out.dtype != ctx.op._outputs[0].dtype.np_dtype:
            continue
        shape = out.shape
        if all(a is out or _broadcasts_into(getattr(a, "shape", ()), shape) for a in inputs):
            return out
    return None


def _broadcasts_into(shape, target) -> bool:
    if shape == target or not shape:
        return True
    if len(shape) > len(target):
        return False
    return all(d == 1 or d == t for d, t in zip(reversed(shape), reversed(target)))


def add_at(xp, target, indices, values) -> None:
    """``target[indices] += values`` in place, duplicates summed (numpy's ``add.at``).

    cupy's ``add.at`` has no bfloat16 loop: on a GPU the touched rows of a bfloat16
    target are summed in float32 and rounded once (the rest of the table is not read),
    where the host rounds after each add; the two agree to bfloat16 precision.
    """
    if has_fused_kernels(xp) and target.dtype == dtypes.bfloat16.np_dtype:
        rows, inverse = xp.unique(indices.reshape(-1), return_inverse=True)
        sums = xp.zeros((rows.size,) + target.shape[1:], dtype=np.float32)
        xp.add.at(sums, inverse.reshape(indices.shape), values.astype(np.float32))
        target[rows] = (target[rows].astype(np.float32) + sums).astype(target.dtype)
        return
    if _rows_at_applies(xp, target, indices, values):
        _add_rows_at(target, indices, values)
        return
    xp.add.at(target, indices, values)


# Elements of values ``_add_rows_at`` indexes at a time: its flat indices (8 bytes each)
# stay a few hundred KiB whatever the batch.
_ROWS_AT_BLOCK = 1 << 15


def _rows_at_applies(xp, target, indices, values) -> bool:
    """Whether ``_add_rows_at`` does exactly what ``add.at`` would: numpy arrays, integer
    row indices (a mask or a float index means something else to numpy), values of the
    target's dtype and shape (no broadcasting), not a view of the target (numpy reads
    them once, before any add)."""
    return xp is np and type(target) is np.ndarray and type(indices) is np.ndarray and \
        type(values) is np.ndarray and indices.dtype.kind in "iu" and target.ndim > 1 and \
        target.flags.c_contiguous and values.dtype == target.dtype and \
        values.shape == indices.shape + target.shape[1:] and \
        not np.may_share_memory(values, target)


def _add_rows_at(target, indices, values) -> None:
    """numpy's ``add.at`` of whole rows through its fast 1-D loop: each row index becomes
    the flat indices of its elements. Rows of 64 float32, 32768 ids (a sparse update's
    duplicates summed): 3.8 ms where ``add.at`` on the rows takes 15. The elements are
    added in the same order, so the sums are the same to the bit; a negative index
    counts from the end (its flat indices do too) and one out of range still raises."""
    row = values.size // max(indices.size, 1)
    flat_target = target.reshape(-1)
    ids = indices.reshape(-1).astype(np.intp, copy=False)
    rows = target.shape[0]
    if ids.size and (ids.min() < -rows or ids.max() >= rows):
        bad = ids[(ids < -rows) | (ids >= rows)][0]
        raise IndexError(f"index {bad} is out of bounds for axis 0 with size {rows}")
    flat_values = values.reshape(ids.size, row)
    offsets = np.arange(row, dtype=np.intp)
    step = max(1, _ROWS_AT_BLOCK // max(row, 1))
    for start in range(0, ids.size, step):
        block = ids[start:start + step]
        flat = block[:, None] * row + offsets
        np.add.at(flat_target, flat.reshape(-1), flat_values[start:start + step].reshape(-1))


def has_fused_kernels(xp) -> bool:
    """Whether ``xp`` compiles elementwise kernels (cupy does, numpy does not). numpy is
    answered first: asking numpy for a name it lacks raises inside its module
    ``__getattr__`` (1.5 us, paid by every variable update on the host)."""
    return xp is not np and hasattr(xp, "ElementwiseKernel")


def has_kernel_for(xp, dtype) -> bool:
    """Whether the hand-written GPU kernels (``elementwise_kernel`` bodies) run ``dtype``
    with ``xp``: cupy, float32 or float64. Other dtypes (half floats among them) take the
    op's array calls."""
    return has_fused_kernels(xp) and dtype.char in "fd"


class Wait:
    """What an async kernel returns when it cannot finish yet: the event to wait for.

    The executor parks the step until something signals ``key`` (the kernel context's
    ``state.notify(key)``), then runs the kernel again with the same inputs.
    """

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __repr__(self):
        return f"Wait({self.key!r})"


class BuildContext:
    """What a shape function sees: the pending op's name, type, inputs and attrs."""

    __slots__ = ("name", "type", "inputs", "attrs", "device")

    def __init__(self, name, op_type, inputs, attrs):
        self.name = name
        self.type = op_type
        self.inputs = inputs
        self.attrs = attrs
        self.device = ""

    def error(self, what, expected=None, got=None, cls=errors.InvalidArgumentError):
        """Return an error in the project's template naming this op."""
        return errors.op_error(cls, what, self, expected, got)

    def shape(self, i) -> TensorShape:
        return self.inputs[i].shape

    def dtype(self, i) -> dtypes.DType:
        return self.inputs[i].dtype


def register_op(type_name: str, attrs: dict | None = None):
    """Class decorator: register an ``OpDef`` subclass under ``type_name``."""
    def wrap(cls):
        if type_name in _REGISTRY:
            raise errors.AlreadyExistsError(f"Op type '{type_name}' is registered twice")
        cls.type_name = type_name
        if attrs is not None:
            cls.attrs = dict(attrs)
        _REGISTRY[type_name] = cls()
        return cls
    return wrap


def get_op_def(type_name: str) -> OpDef:
    """Return the OpDef of ``type_name``; an unknown type lists the closest names."""
    try:
        return _REGISTRY[type_name]
    except KeyError:
        close = difflib.get_close_matches(type_name, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise errors.NotFoundError(f"Op type '{type_name}' is not registered{hint}") from None


def registered_op_types() -> list:
    return sorted(_REGISTRY)


def apply_op(op_type: str, inputs, attrs=None, name=None, control_inputs=(), graph=None):
    """Validate and add an op of ``op_type`` to the default graph; return the Operation."""
    op_def = get_op_def(op_type)
    graph = graph if graph is not None else get_default_graph()
    exact = name is not None and name.endswith("/")   # a scope name: used as is
    if name is not None:
        validate_op_name(name[:-1] if exact else name)
    base = name or op_type
    pending_name = name[:-1] if exact else (
        (graph.get_name_scope() + "/" + base) if graph.get_name_scope() else base)
    full_attrs = _check_attrs(op_def, attrs or {}, pending_name)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise errors.InvalidArgumentError(
                f"Input {i} of op '{pending_name}' ({op_type}): expected a Tensor, got "
                f"{type(t).__name__}")
        if t.graph is not graph:
            raise graph.foreign_input_error(t, pending_name, op_type, i)
    build = BuildContext(pending_name, op_type, list(inputs), full_attrs)
    specs = [(dtypes.as_dtype(d), as_shape(s)) for d, s in op_def.infer(build)]
    unique = pending_name if exact else graph.unique_name(base)
    inputs = list(inputs)
    gate = graph.current_state_gate()
    if gate is not None and (op_def.ref_inputs or op_def.changes_shared_state):
        _check_gate(op_def, gate, pending_name)
        inputs.append(gate)         # the last input; the plan runs the kernel if it holds
        full_attrs[GATE_ATTR] = True
    return graph.create_op(op_type, inputs, full_attrs, specs, unique,
                           control_inputs=control_inputs)


GATE_ATTR = "_gate"     # set on an op whose last input says whether it changes state


def _check_gate(op_def, gate, op_name) -> None:
    if gate.dtype is not dtypes.bool_ or gate.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"state_changes_only_if: the predicate of op '{op_name}' must be a bool scalar, "
            f"got {gate.dtype.name} of shape {gate.shape}")
    if op_def.async_kernel or op_def.tuple_outputs:
        raise errors.UnimplementedError(
            f"Op '{op_name}' ({op_def.type_name}) cannot change state only under a "
            "predicate (state_changes_only_if): it "
            f"{'waits for other steps' if op_def.async_kernel else 'has several outputs'}")


def validated_attrs(op_type: str, attrs: dict, op_name: str) -> dict:
    """``attrs`` of an op of ``op_type`` named ``op_name``, completed with the defaults and
    checked as ``apply_op`` checks them (for nodes built as plain data, e.g. a partition's
    Send and Recv)."""
    return _check_attrs(get_op_def(op_type), attrs, op_name)


def _check_attrs(op_def, given, op_name):
    unknown = sorted(set(given) - set(op_def.attrs) - {"_class"})
    if unknown:
        raise errors.InvalidArgumentError(
            f"Unknown attr '{unknown[0]}' for op '{op_name}' ({op_def.type_name}): expected "
            f"attrs {sorted(op_def.attrs)}")
    out = {}
    for key, default in op_def.attrs.items():
        if key in given:
            out[key] = given[key]
        elif default is REQUIRED:
            raise errors.InvalidArgumentError(
                f"Missing attr '{key}' for op '{op_name}' ({op_def.type_name})")
        else:
            out[key] = default
    return out


# -- helpers shared by shape functions -------------------------------------------------

def broadcast_shapes(b: BuildContext, a: TensorShape, c: TensorShape) -> TensorShape:
    """Return numpy's broadcast of two static shapes; raise naming the op if impossible."""
    if a.ndims is None or c.ndims is None:
        return TensorShape(None)
    x, y = a.as_list(), c.as_list()
    n = max(len(x), len(y))
    x = [1] * (n - len(x)) + x
    y = [1] * (n - len(y)) + y
    out = []
    for da, dc in zip(x, y):
        if da == 1:
            out.append(dc)
        elif dc == 1:
            out.append(da)
        elif da is None or dc is None:
            out.append(da if dc is None else dc)
        elif da == dc:
            out.append(da)
        else:
            raise b.error("Incompatible shapes for broadcasting", expected="shapes that "
                          "broadcast", got=f"{a} and {c}")
    return TensorShape(out)


def same_dtype(b: BuildContext, indices=None) -> dtypes.DType:
    """Check the inputs at ``indices`` share one dtype; return it."""
    indices = range(len(b.inputs)) if indices is None else indices
    kinds = [b.dtype(i) for i in indices]
    if any(k is not kinds[0] for k in kinds):
        raise b.error("Inputs must have the same dtype", expected=kinds[0].name,
                      got=", ".join(k.name for k in kinds))
    return kinds[0]


def require_dtype(b: BuildContext, i: int, allowed, what="input") -> dtypes.DType:
    """Check input ``i``'s dtype is one of ``allowed`` (a predicate or a tuple of DTypes)."""
    dt = b.dtype(i)
    ok = allowed(dt) if callable(allowed) else dt in allowed
    if not ok:
        names = getattr(allowed, "__doc__", None) if callable(allowed) else \
            ", ".join(d.name for d in allowed)
        raise b.error(f"Unsupported dtype for {what} {i}", expected=names, got=dt.name)
    return dt


def is_float(dt):
    """a floating dtype"""
    return dt.is_floating


def is_numeric(dt):
    """a numeric (non-bool) dtype"""
    return not dt.is_bool


def is_index(dt):
    """int32 or int64"""
    return dt in (dtypes.int32, dtypes.int64)


def normalize_axis(b: BuildContext, axis: int, ndims: int) -> int:
    if not -ndims <= axis < max(ndims, 1):
        raise b.error("Axis out of range", expected=f"axis in [{-ndims}, {ndims})",
                      got=axis)
    return axis % ndims if ndims else 0


def const_value(t: Tensor):
    """Return the numpy value of ``t`` if it is known at build time (a Const), else None."""
    if t.op.type == "Const":
        return t.op.get_attr("value")
    return None


def np_dtype(dt) -> np.dtype:
    return dtypes.as_dtype(dt).np_dtype
