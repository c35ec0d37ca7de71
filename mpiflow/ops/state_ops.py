"""Stateful ops on variables: VariableV2, Assign*, Scatter*, IsVariableInitialized.

A variable's buffer lives in the runtime's variable store, not in the graph. Ops that
write a variable declare the ref input in ``ref_inputs``; the executor hands them a
``StateRef`` (``get()``/``set()``), and schedules every read of that variable in the
same step before the write, so reads never see a half-applied update. A read that
depends on the write (a control dependency) runs after it and sees what it left, as
TF1's reads of a ref do, even where the write replaced the buffer (a new shape) or made
it (an initializer).
"""

from __future__ import annotations

import hashlib

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import (
    REQUIRED, OpDef, add_at, apply_op, is_index, is_numeric, register_op, require_dtype)

VARIABLE_OP_TYPES = ("VariableV2",)


@register_op("VariableV2", attrs={"shape": REQUIRED, "dtype": REQUIRED, "container": "",
                                  "shared_name": ""})
class VariableOp(OpDef):
    stateful = True
    aliases_state = True

    def infer(self, b):
        return [(b.attrs["dtype"], b.attrs["shape"])]

    def prepare(self, ctx):
        ctx.ref = ctx.env.ref(ctx.op)

    # Gradients stop at the variable's ``read`` snapshot, never at the buffer itself.
    gradient = None

    def forward(self, xp, ctx):
        return ctx.ref.read()


def check_ref(b, what="ref"):
    """Check input 0 of a writer op comes straight from a variable."""
    producer = b.inputs[0].op
    if producer.type not in VARIABLE_OP_TYPES:
        raise b.error(f"Input 0 ({what}) must be a variable", expected="a VariableV2 output",
                      got=f"tensor '{b.inputs[0].name}' from a {producer.type} op")


class _Writer(OpDef):
    stateful = True
    aliases_state = True
    ref_inputs = (0,)
    gradient = None


@register_op("Assign", attrs={"validate_shape": True, "use_locking": True})
class AssignOp(_Writer):
    # A value only this Assign holds (an initializer's fresh draw) becomes the variable's
    # buffer where the variable has none of its shape yet, as TF's Assign forwards a
    # value nothing else references: a table on a ps is not made twice at its peak.
    donating_inputs = (1,)

    def infer(self, b):
        check_ref(b)
        if b.dtype(0) is not b.dtype(1):
            raise b.error("Assign value has the wrong dtype", expected=b.dtype(0).name,
                          got=b.dtype(1).name)
        if b.attrs["validate_shape"] and not b.shape(0).is_compatible_with(b.shape(1)):
            raise b.error("Assign value has the wrong shape", expected=b.shape(0),
                          got=b.shape(1))
        out = b.shape(1) if not b.attrs["validate_shape"] else b.shape(0).merge_with(b.shape(1))
        return [(b.dtype(0), out)]

    def forward(self, xp, ctx, ref, value):
        return ref.set(value, validate_shape=ctx.attrs["validate_shape"],
                       owned=bool(ctx.donated))


class _InPlaceUpdate(_Writer):
    attrs = {"use_locking": False}

    def infer(self, b):
        check_ref(b)
        if b.dtype(0) is not b.dtype(1):
            raise b.error("Update value has the wrong dtype", expected=b.dtype(0).name,
                          got=b.dtype(1).name)
        if not b.shape(0).is_compatible_with(b.shape(1)):
            raise b.error("Update value has the wrong shape", expected=b.shape(0),
                          got=b.shape(1))
        return [(b.dtype(0), b.shape(0))]


class _Arithmetic(_InPlaceUpdate):
    """An update that adds to the variable: a numeric one (TensorFlow's AssignAdd and
    AssignSub refuse bool, which numpy would take as a logical or)."""

    def infer(self, b):
        require_dtype(b, 0, is_numeric, "variable")
        return super().infer(b)


@register_op("AssignAdd", attrs={"use_locking": False})
class AssignAddOp(_Arithmetic):
    def forward(self, xp, ctx, ref, value):
        var = ref.get_checked(value.shape)
        var += value
        return var


@register_op("AssignSub", attrs={"use_locking": False})
class AssignSubOp(_Arithmetic):
    def forward(self, xp, ctx, ref, value):
        var = ref.get_checked(value.shape)
        var -= value
        return var


class _Scatter(_Writer):
    attrs = {"use_locking": False}

    def infer(self, b):
        check_ref(b)
        require_dtype(b, 1, is_index, "indices")
        if b.dtype(0) is not b.dtype(2):
            raise b.error("Scatter updates have the wrong dtype", expected=b.dtype(0).name,
                          got=b.dtype(2).name)
        ref, idx, upd = b.shape(0), b.shape(1), b.shape(2)
        if ref.ndims == 0:
            raise b.error("Scatter into a scalar", expected="a ref of rank >= 1 (rows to "
                          "update)", got=f"ref.shape {ref}")
        # A scalar update is written to every row indexed (TensorFlow's rule).
        if ref.ndims is not None and idx.ndims is not None and upd.ndims not in (None, 0):
            expected = TensorShape(idx.as_list() + ref.as_list()[1:])
            if not upd.is_compatible_with(expected):
                raise b.error("Scatter updates have the wrong shape",
                              expected=f"indices.shape + ref.shape[1:] = {expected}, or a "
                              "scalar", got=upd)
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, ref, indices, updates):
        var = ref.get()
        # Shapes the graph left open are checked here, as TensorFlow's kernel does: numpy
        # would broadcast a wrong but broadcastable ``updates`` into the rows silently.
        if var.ndim == 0:
            raise errors.op_error(errors.InvalidArgumentError, "Scatter into a scalar",
                                  ctx.op, expected="a ref of rank >= 1 (rows to update)",
                                  got="ref.shape []")
        expected = tuple(indices.shape) + tuple(var.shape[1:])
        if updates.ndim != 0 and tuple(updates.shape) != expected:
            raise errors.op_error(
                errors.InvalidArgumentError, "Scatter updates have the wrong shape", ctx.op,
                expected=f"updates.shape = indices.shape + ref.shape[1:] = {list(expected)} "
                f"(indices.shape {list(indices.shape)}, ref.shape {list(var.shape)}), or a "
                "scalar", got=f"updates.shape {list(updates.shape)}")
        if indices.size and (indices.min() < 0 or indices.max() >= var.shape[0]):
            bad = indices[(indices < 0) | (indices >= var.shape[0])].ravel()[0]
            raise errors.op_error(errors.InvalidArgumentError, "Index out of range", ctx.op,
                                  expected=f"indices in [0, {var.shape[0]})", got=int(bad))
        self.apply(xp, var, indices, updates)
        return var


@register_op("ScatterAdd", attrs={"use_locking": False})
class ScatterAddOp(_Scatter):
    def apply(self, xp, var, indices, updates):
        add_at(xp, var, indices, updates)


@register_op("ScatterSub", attrs={"use_locking": False})
class ScatterSubOp(_Scatter):
    def apply(self, xp, var, indices, updates):
        add_at(xp, var, indices, -updates)      # cupy has no subtract.at for floats


@register_op("ScatterUpdate", attrs={"use_locking": True})
class ScatterUpdateOp(_Scatter):
    def apply(self, xp, var, indices, updates):
        var[indices] = updates


@register_op("IsVariableInitialized")
class IsVariableInitializedOp(OpDef):
    stateful = True
    ref_inputs = (0,)
    gradient = None

    def infer(self, b):
        check_ref(b)
        return [(dtypes.bool_, [])]

    def forward(self, xp, ctx, ref):
        return xp.asarray(ref.initialized)


@register_op("InitializedValue")
class InitializedValueOp(OpDef):
    """The variable's value if it is initialized, else its initial value (input 1): what
    TF1's ``Variable.initialized_value()`` computes with a cond, here one kernel, since
    mpiflow's graphs have no control flow. Either is copied, so later writes to the
    variable never show through it."""

    stateful = True
    ref_inputs = (0,)
    gradient = None

    def infer(self, b):
        check_ref(b)
        if b.dtype(0) is not b.dtype(1):
            raise b.error("Initial value has the wrong dtype", expected=b.dtype(0).name,
                          got=b.dtype(1).name)
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, ref, initial_value):
        return xp.array(ref.read() if ref.initialized else initial_value, copy=True)


@register_op("VariablesHeld")
class VariablesHeldOp(OpDef):
    """The variables initialized on the device it runs on (a ps), as ``name_hash`` of
    their names: how a worker that waits for variables the chief never initialized where
    it looks tells a model built differently (placed or partitioned otherwise) from a
    chief that is late."""

    stateful = True
    gpu_kernel = False
    gradient = None

    def infer(self, b):
        return [(dtypes.int64, [None])]

    def forward(self, xp, ctx):
        return xp.asarray([name_hash(n) for n in ctx.env.variables_held()],
                          dtype="int64").reshape(-1)


def name_hash(name: str) -> int:
    """A stable int64 of a variable's name (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little",
                          signed=True)


def variables_held(name=None):
    """``name_hash`` of every variable initialized where the op is placed."""
    return apply_op("VariablesHeld", [], name=name).outputs[0]


def _ref_of(ref):
    """Return the VariableV2 output tensor of a Variable (or the tensor itself)."""
    get = getattr(ref, "_ref", None)
    return get() if callable(get) else ref


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    ref = _ref_of(ref)
    value = convert_to_tensor(value, dtype=ref.dtype)
    return apply_op("Assign", [ref, value],
                    {"validate_shape": True if validate_shape is None else validate_shape},
                    name=name).outputs[0]


def assign_add(ref, value, use_locking=None, name=None):
    ref = _ref_of(ref)
    return apply_op("AssignAdd", [ref, convert_to_tensor(value, dtype=ref.dtype)],
                    name=name).outputs[0]


def assign_sub(ref, value, use_locking=None, name=None):
    ref = _ref_of(ref)
    return apply_op("AssignSub", [ref, convert_to_tensor(value, dtype=ref.dtype)],
                    name=name).outputs[0]


def _scatter(type_name):
    def fn(ref, indices, updates, use_locking=None, name=None):
        ref = _ref_of(ref)
        return apply_op(type_name, [ref, convert_to_tensor(indices),
                                    convert_to_tensor(updates, dtype=ref.dtype)],
                        name=name).outputs[0]
    fn.__doc__ = f"{type_name}: update rows ``indices`` of ``ref`` in place."
    return fn


scatter_add = _scatter("ScatterAdd")
scatter_sub = _scatter("ScatterSub")
scatter_update = _scatter("ScatterUpdate")


def initialized_value(ref, initial_value, name=None):
    """The value of variable ``ref`` once initialized: its value if it is, else
    ``initial_value`` (see InitializedValueOp)."""
    return apply_op("InitializedValue", [_ref_of(ref), initial_value], name=name).outputs[0]


def is_variable_initialized(variable, name=None):
    return apply_op("IsVariableInitialized", [_ref_of(variable)], name=name).outputs[0]
