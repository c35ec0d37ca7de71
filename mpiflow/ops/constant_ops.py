"""Graph inputs: constants, placeholders, and conversion of Python values to tensors."""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, register_op


@register_op("Const", attrs={"value": REQUIRED, "dtype": REQUIRED})
class ConstOp(OpDef):
    aliases_state = True
    gradient = None

    def infer(self, b):
        return [(b.attrs["dtype"], b.attrs["value"].shape)]

    def prepare(self, ctx):
        ctx.value = ctx.xp.asarray(ctx.attrs["value"])

    def forward(self, xp, ctx):
        return ctx.value


@register_op("Placeholder", attrs={"dtype": REQUIRED, "shape": TensorShape(None)})
class PlaceholderOp(OpDef):
    gradient = None

    def infer(self, b):
        return [(b.attrs["dtype"], b.attrs["shape"])]

    def forward(self, xp, ctx):   # the executor refuses plans with unfed placeholders
        raise errors.op_error(errors.InvalidArgumentError,
                              "You must feed a value for placeholder", ctx.op)


@register_op("PlaceholderWithDefault", attrs={"dtype": REQUIRED, "shape": TensorShape(None)})
class PlaceholderWithDefaultOp(OpDef):
    aliases_input = True

    def infer(self, b):
        if not b.shape(0).is_compatible_with(b.attrs["shape"]):
            raise b.error("Default value does not match the placeholder shape",
                          expected=b.attrs["shape"], got=b.shape(0))
        return [(b.dtype(0), b.attrs["shape"])]

    def forward(self, xp, ctx, x):
        return x

    def gradient(self, op, grad):
        return [grad]


def python_dtype(value):
    """The dtype a value that is not a tensor becomes, with TensorFlow's defaults: Python
    floats are float32, ints int32 (int64 if too big), numpy values keep theirs."""
    array = np.asarray(value)
    if array.dtype == np.float64 and not isinstance(value, np.ndarray) and \
            not isinstance(value, np.generic):
        return dtypes.float32
    if array.dtype.kind == "i" and not isinstance(value, (np.ndarray, np.generic)):
        if array.size and (array.max() > np.iinfo(np.int32).max or
                           array.min() < np.iinfo(np.int32).min):
            return dtypes.int64
        return dtypes.int32
    try:
        return dtypes.from_numpy(array)
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"Cannot convert {value!r} to a tensor: its numpy dtype {array.dtype} is not "
            "supported") from None


def _to_array(value, dtype: dtypes.DType, what: str):
    array = np.asarray(value)
    if array.dtype == object:
        raise errors.InvalidArgumentError(
            f"Cannot convert {value!r} to a tensor for {what}: ragged or non-numeric data")
    target = dtype.np_dtype
    if array.dtype != target:
        converted = array.astype(target)
        # Narrowing floats is what users mean; changing an integer or bool value is not.
        if target.kind in "iub" and array.size and \
                not np.array_equal(converted.astype(array.dtype), array):
            raise errors.InvalidArgumentError(
                f"Cannot convert {value!r} to {dtype.name} for {what}: the value would change")
        array = converted
    return array


def constant(value, dtype=None, shape=None, name="Const") -> Tensor:
    """Create a Const tensor from a Python or numpy value (broadcast to ``shape``)."""
    dt = dtypes.as_dtype(dtype) if dtype is not None else python_dtype(value)
    array = _to_array(value, dt, f"constant '{name}'")
    if shape is not None:
        shape = tuple(TensorShape(shape).as_list())
        if array.size == 1:
            array = np.full(shape, array.reshape(()), dtype=dt.np_dtype)
        elif array.size == int(np.prod(shape)):
            array = array.reshape(shape)
        else:
            raise errors.InvalidArgumentError(
                f"constant '{name}': cannot make shape {list(shape)} from a value with "
                f"{array.size} elements")
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return apply_op("Const", [], {"value": array, "dtype": dt}, name=name).outputs[0]


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None) -> Tensor:
    """Return ``value`` as a Tensor: Tensors pass through, Variables give their value,
    an IndexedSlices its dense tensor, Python and numpy values become Const ops.

    Raises:
        InvalidArgumentError: ``dtype`` is given and the tensor has another dtype.
    """
    convert = getattr(value, "_as_tensor", None)
    if callable(convert):
        value = convert()
    if type(value).__name__ == "IndexedSlices":    # densified, as TensorFlow does
        from mpiflow.ops.sparse_ops import densified_for_conversion  # (imports this)
        value = densified_for_conversion(value)
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not dtypes.as_dtype(dtype):
            raise errors.InvalidArgumentError(
                f"Tensor '{value.name}' has dtype {value.dtype.name}, expected "
                f"{dtypes.as_dtype(dtype).name}")
        return value
    if isinstance(value, (list, tuple)) and holds_tensor(value):
        return _packed(value, dtype, name or "packed")
    if dtype is None and preferred_dtype is not None:
        try:
            return constant(value, dtype=preferred_dtype, name=name or "Const")
        except errors.InvalidArgumentError:
            pass
    return constant(value, dtype=dtype, name=name or "Const")


def _tensors_in(value):
    """The Tensors (and Variables) nested lists or tuples ``value`` hold, in order."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif is_tensor_like(value):
        yield value


def holds_tensor(value) -> bool:
    """Whether nested lists or tuples ``value`` hold a Tensor (or a Variable) anywhere."""
    return next(_tensors_in(value), None) is not None


def convert_list_input(values, whole: bool = False) -> list:
    """Convert the items of one op's list input (stack's, concat's) as TensorFlow does:
    Python and numpy values take the dtype of the first tensor among them, so
    ``stack([t, 0])`` of a float32 ``t`` is float32 (a value that dtype cannot hold is
    refused). With no tensor among them, each is converted alone, or, where ``whole``
    (stack, which TensorFlow first tries to convert as one list), with the dtype of the
    whole list: ``stack([1, 2.0])`` is float32."""
    values = list(values)
    first = next((v for v in values if is_tensor_like(v)), None)
    if first is not None:
        target = convert_to_tensor(first).dtype
    elif whole and values:
        target = convert_to_tensor(values).dtype
    else:
        target = None
    return [convert_to_tensor(v) if is_tensor_like(v) else convert_to_tensor(v, dtype=target)
            for v in values]


def _packed(value, dtype, name) -> Tensor:
    """Stack nested lists of tensors and numbers into one tensor, as TensorFlow converts
    ``[t, 2.0]`` or ``[[a, b], [c, d]]``: the numbers take the tensors' dtype (the first
    one's, or ``dtype``), and every tensor must have it."""
    target = dtypes.as_dtype(dtype) if dtype is not None else \
        convert_to_tensor(next(_tensors_in(value))).dtype
    parts = []
    for i, item in enumerate(value):
        if isinstance(item, (list, tuple)) and holds_tensor(item):
            part = _packed(item, target, "packed")
        elif is_tensor_like(item):
            part = convert_to_tensor(item)
        else:
            part = constant(item, dtype=target)
        if part.dtype is not target:
            raise errors.InvalidArgumentError(
                f"Cannot pack a list into a tensor of dtype {target.name}: item {i}, tensor "
                f"'{part.name}', has dtype {part.dtype.name}; cast it first")
        parts.append(part)
    return apply_op("Pack", parts, {"axis": 0}, name=name).outputs[0]


def placeholder(dtype, shape=None, name=None) -> Tensor:
    """Create a Placeholder that must be fed through ``feed_dict``."""
    return apply_op("Placeholder", [], {"dtype": dtypes.as_dtype(dtype),
                                        "shape": TensorShape(shape)}, name=name).outputs[0]


def placeholder_with_default(input, shape, name=None) -> Tensor:
    """Return ``input`` unless a value is fed for the result."""
    x = convert_to_tensor(input)
    return apply_op("PlaceholderWithDefault", [x],
                    {"dtype": x.dtype, "shape": TensorShape(shape)}, name=name).outputs[0]


def is_tensor_like(value) -> bool:
    return isinstance(value, Tensor) or callable(getattr(value, "_as_tensor", None))


def graph_of(*values):
    """Return the graph of the first Tensor among ``values`` (else the default graph)."""
    for v in values:
        if isinstance(v, Tensor):
            return v.graph
    return get_default_graph()
