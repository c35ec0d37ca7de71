"""Run-time assertions: ``tf.Assert`` and the ``tf.assert_*`` family.

An Assert op has no outputs; it fails the step with InvalidArgumentError, naming the op
and printing its data, when its bool scalar condition is false. Make the ops that need
the check depend on it (``tf.control_dependencies``) or run it. As in TensorFlow, a
comparison of two constants is decided when the graph is built, and ``assert_rank`` and
``assert_type`` check what the static shape and dtype already tell.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Operation, Tensor
from mpiflow.framework.scopes import name_scope
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import rank as rank_of
from mpiflow.ops.constant_ops import convert_to_tensor, is_tensor_like
from mpiflow.ops.control_ops import no_op
from mpiflow.ops.print_ops import _format
from mpiflow.ops.reduction_ops import reduce_sum
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, const_value, register_op

_DEFAULT_SUMMARIZE = 3


@register_op("Assert", attrs={"kinds": REQUIRED, "texts": REQUIRED,
                              "summarize": _DEFAULT_SUMMARIZE})
class AssertOp(OpDef):
    """Input 0 is the condition; the others are the tensors printed when it is false,
    in the order ``kinds`` gives ("t" a tensor, "s" a text)."""

    stateful = True
    gradient = None
    gpu_kernel = False      # the condition is read on the host

    def infer(self, b):
        if b.dtype(0) is not dtypes.bool_ or not b.shape(0).is_compatible_with([]):
            raise b.error("The condition of an Assert must be a bool scalar",
                          expected="bool ()", got=f"{b.dtype(0).name} {b.shape(0)}")
        return []

    def forward(self, xp, ctx, condition, *data):
        if np.asarray(getattr(xp, "asnumpy", np.asarray)(condition)).item():
            return
        values, texts = iter(data), iter(ctx.attrs["texts"])
        parts = [_format(xp, next(values), ctx.attrs["summarize"]) if kind == "t"
                 else next(texts) for kind in ctx.attrs["kinds"]]
        raise errors.op_error(errors.InvalidArgumentError,
                              "assertion failed: [" + "] [".join(parts) + "]", ctx.op)


def Assert(condition, data, summarize=None, name=None) -> Operation:
    """Return an op that fails the step, printing ``data`` (tensors and texts), when the
    bool scalar ``condition`` is false."""
    kinds, texts, tensors = [], [], []
    for item in data:
        if is_tensor_like(item) or isinstance(item, np.ndarray):
            kinds.append("t")
            tensors.append(convert_to_tensor(item))
        else:
            kinds.append("s")
            texts.append(str(item))
    return apply_op("Assert", [convert_to_tensor(condition, dtype=dtypes.bool_)] + tensors,
                    {"kinds": "".join(kinds), "texts": texts,
                     "summarize": _DEFAULT_SUMMARIZE if summarize is None else int(summarize)},
                    name=name or "Assert")


def _all(elementwise: Tensor) -> Tensor:
    """True where every element of the bool tensor is (an empty one too)."""
    false = math_ops.cast(math_ops.logical_not(elementwise), dtypes.int32)
    return math_ops.equal(reduce_sum(false), 0)


def _comparison(fn, symbol, default_name):
    def check(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
        with name_scope(name or default_name):
            x = convert_to_tensor(x)
            y = convert_to_tensor(y, dtype=None if is_tensor_like(y) else x.dtype)
            text = f"Condition x {symbol} y did not hold element-wise:"
            static_x, static_y = const_value(x), const_value(y)
            if static_x is not None and static_y is not None and \
                    not np.all(_NUMPY[symbol](static_x, static_y)):
                raise errors.InvalidArgumentError(
                    f"{message + ' ' if message else ''}{text} x ({x.name}) = {static_x}, "
                    f"y ({y.name}) = {static_y}")
            if data is None:
                data = [text, f"x ({x.name}) = ", x, f"y ({y.name}) = ", y]
            if message is not None:
                data = [message] + list(data)
            return Assert(_all(fn(x, y)), data, summarize=summarize)
    check.__name__ = default_name
    check.__doc__ = f"Return an op that fails the step unless x {symbol} y everywhere."
    return check


_NUMPY = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
          ">": np.greater, ">=": np.greater_equal}
assert_equal = _comparison(math_ops.equal, "==", "assert_equal")
assert_none_equal = _comparison(math_ops.not_equal, "!=", "assert_none_equal")
assert_less = _comparison(math_ops.less, "<", "assert_less")
assert_less_equal = _comparison(math_ops.less_equal, "<=", "assert_less_equal")
assert_greater = _comparison(math_ops.greater, ">", "assert_greater")
assert_greater_equal = _comparison(math_ops.greater_equal, ">=", "assert_greater_equal")


def _sign_check(compare, default_name):
    def check(x, data=None, summarize=None, message=None, name=None) -> Operation:
        x = convert_to_tensor(x)
        return compare(x, 0, data=data, summarize=summarize, message=message,
                       name=name or default_name)
    check.__name__ = default_name
    return check


assert_positive = _sign_check(assert_greater, "assert_positive")
assert_negative = _sign_check(assert_less, "assert_negative")
assert_non_negative = _sign_check(assert_greater_equal, "assert_non_negative")
assert_non_positive = _sign_check(assert_less_equal, "assert_non_positive")


def assert_rank(x, rank, message=None, name=None) -> Operation:
    """Check that ``x`` has rank ``rank``: when the graph is built if its rank is known
    there (a NoOp is returned), else when the step runs."""
    x = convert_to_tensor(x)
    prefix = f"{message} " if message else ""
    if x.shape.ndims is not None:
        if x.shape.ndims != int(rank):
            raise errors.InvalidArgumentError(
                f"{prefix}Tensor '{x.name}' must have rank {int(rank)}: its shape is "
                f"{x.shape}")
        return no_op(name=name or "assert_rank")
    with name_scope(name or "assert_rank"):
        actual = rank_of(x)
        return Assert(math_ops.equal(actual, int(rank)),
                      [f"{prefix}Tensor {x.name} must have rank {int(rank)}; its rank is",
                       actual])


def assert_type(tensor, tf_type, message=None, name=None) -> Operation:
    """Check, when the graph is built, that ``tensor`` has dtype ``tf_type``."""
    tensor = convert_to_tensor(tensor)
    expected = dtypes.as_dtype(tf_type)
    if tensor.dtype is not expected:
        raise errors.InvalidArgumentError(
            f"{message + ' ' if message else ''}Tensor '{tensor.name}' must be of type "
            f"{expected.name}, got {tensor.dtype.name}")
    return no_op(name=name or "assert_type")


__all__ = ["Assert", "assert_equal", "assert_greater", "assert_greater_equal",
           "assert_less", "assert_less_equal", "assert_negative", "assert_non_negative",
           "assert_non_positive", "assert_none_equal", "assert_positive", "assert_rank",
           "assert_type"]
