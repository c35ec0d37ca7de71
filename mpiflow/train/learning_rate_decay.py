"""Learning-rate schedules of the global step (TF1's ``tf.train.*_decay``), built from ops.

Each returns a scalar Tensor to pass as an optimizer's ``learning_rate``; it is evaluated
every step from the current global step.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import convert_to_tensor


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """Return learning_rate * decay_rate ^ (global_step / decay_steps) (the exponent floored
    with ``staircase``).

    Raises:
        InvalidArgumentError: ``global_step`` is None.
    """
    if global_step is None:
        raise errors.InvalidArgumentError("exponential_decay: global_step is required")
    with get_default_graph().name_scope(name or "ExponentialDecay"):
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        step = math_ops.cast(global_step, dtype)
        p = math_ops.divide(step, math_ops.cast(decay_steps, dtype))
        if staircase:
            p = math_ops.floor(p)
        return math_ops.multiply(lr, math_ops.pow(math_ops.cast(decay_rate, dtype), p))


def piecewise_constant(x, boundaries, values, name=None):
    """Return values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <=
    boundaries[i], and values[-1] after the last boundary.

    Raises:
        InvalidArgumentError: ``len(values) != len(boundaries) + 1``.
    """
    if len(values) != len(boundaries) + 1:
        raise errors.InvalidArgumentError(
            f"piecewise_constant: values must have one more element than boundaries, got "
            f"{len(values)} values and {len(boundaries)} boundaries")
    with get_default_graph().name_scope(name or "PiecewiseConstant"):
        x = convert_to_tensor(x)
        values = [convert_to_tensor(v) for v in values]
        if any(v.dtype is not values[0].dtype for v in values):
            raise errors.InvalidArgumentError(
                "piecewise_constant: values must all have the same dtype, got "
                f"{[v.dtype.name for v in values]}")
        result = values[-1]
        for boundary, value in zip(reversed(boundaries), reversed(values[:-1])):
            below = math_ops.less_equal(x, convert_to_tensor(boundary, dtype=x.dtype))
            result = math_ops.where(below, value, result)
        return result
