"""Learning-rate schedules of the global step (TF1's ``tf.train.*_decay``), built from ops.

Each returns a scalar Tensor to pass as an optimizer's ``learning_rate``; it is evaluated
every step from the current global step, so a restored global step resumes the schedule
where it was. Formulas are TensorFlow 1's, in the learning rate's dtype; ``staircase``
floors the fraction of ``decay_steps`` done, making the rate change in steps.
"""

from __future__ import annotations

import numbers

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor

__all__ = ["cosine_decay", "cosine_decay_restarts", "exponential_decay",
           "inverse_time_decay", "linear_cosine_decay", "natural_exp_decay",
           "piecewise_constant", "polynomial_decay"]


def _start(schedule: str, learning_rate, global_step):
    """The learning rate as a tensor and the global step in its dtype."""
    if global_step is None:
        raise errors.InvalidArgumentError(f"{schedule}: global_step is required")
    lr = convert_to_tensor(learning_rate, name="learning_rate")
    if not lr.dtype.is_floating:
        raise errors.InvalidArgumentError(
            f"{schedule}: expected a floating learning_rate, got {lr.dtype.name}")
    return lr, math_ops.cast(global_step, lr.dtype)


def _as(value, like):
    """``value`` in the dtype of ``like``: a Python number directly (no float32 rounding
    on the way to a float64 rate), a tensor by a cast."""
    if isinstance(value, numbers.Number):
        return constant(value, dtype=like.dtype)
    return math_ops.cast(convert_to_tensor(value), like.dtype)


def _fraction(step, decay_steps, staircase: bool):
    """global_step / decay_steps, floored with ``staircase``."""
    p = math_ops.divide(step, _as(decay_steps, step))
    return math_ops.floor(p) if staircase else p


def _half_cosine(fraction):
    """0.5 * (1 + cos(pi * fraction)): 1 at 0, 0 at 1."""
    pi = constant(np.pi, dtype=fraction.dtype)
    return 0.5 * (1.0 + math_ops.cos(pi * fraction))


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """Return learning_rate * decay_rate ^ (global_step / decay_steps).

    Raises:
        InvalidArgumentError: ``global_step`` is None.
    """
    with get_default_graph().name_scope(name or "ExponentialDecay"):
        lr, step = _start("exponential_decay", learning_rate, global_step)
        p = _fraction(step, decay_steps, staircase)
        return math_ops.multiply(lr, math_ops.pow(_as(decay_rate, lr), p))


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """Return learning_rate * exp(-decay_rate * global_step / decay_steps)."""
    with get_default_graph().name_scope(name or "NaturalExpDecay"):
        lr, step = _start("natural_exp_decay", learning_rate, global_step)
        p = _fraction(step, decay_steps, staircase)
        return math_ops.multiply(lr, math_ops.exp(-_as(decay_rate, lr) * p))


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                       name=None):
    """Return learning_rate / (1 + decay_rate * global_step / decay_steps)."""
    with get_default_graph().name_scope(name or "InverseTimeDecay"):
        lr, step = _start("inverse_time_decay", learning_rate, global_step)
        p = _fraction(step, decay_steps, staircase)
        return math_ops.divide(lr, 1.0 + _as(decay_rate, lr) * p)


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001,
                     power=1.0, cycle=False, name=None):
    """Return (learning_rate - end) * (1 - step / decay_steps) ^ power + end.

    Without ``cycle`` the step stops at ``decay_steps`` (the rate stays at
    ``end_learning_rate``); with it, ``decay_steps`` grows to the next multiple of itself
    above the step, so the rate climbs back and decays again, each time more slowly.
    """
    with get_default_graph().name_scope(name or "PolynomialDecay"):
        lr, step = _start("polynomial_decay", learning_rate, global_step)
        steps = _as(decay_steps, lr)
        end = _as(end_learning_rate, lr)
        if cycle:
            # ceil(step / steps), and 1 at step 0 so the first period is not empty.
            periods = -math_ops.floor(-(step / steps))
            one = constant(1.0, dtype=lr.dtype)
            steps = steps * math_ops.where(math_ops.equal(step, 0.0), one, periods)
        else:
            step = math_ops.minimum(step, steps)
        remaining = 1.0 - step / steps
        return (lr - end) * math_ops.pow(remaining, _as(power, lr)) + end


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """Return learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * t)) + alpha), where
    t = min(global_step, decay_steps) / decay_steps."""
    with get_default_graph().name_scope(name or "CosineDecay"):
        lr, step = _start("cosine_decay", learning_rate, global_step)
        steps = _as(decay_steps, lr)
        fraction = math_ops.minimum(step, steps) / steps
        alpha = _as(alpha, lr)
        return lr * ((1.0 - alpha) * _half_cosine(fraction) + alpha)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0,
                          m_mul=1.0, alpha=0.0, name=None):
    """Cosine decay with warm restarts (SGDR): the i-th period lasts
    first_decay_steps * t_mul ^ i steps and starts from learning_rate * m_mul ^ i.
    """
    with get_default_graph().name_scope(name or "SGDRDecay"):
        lr, step = _start("cosine_decay_restarts", learning_rate, global_step)
        done = step / _as(first_decay_steps, lr)
        t_mul_t, m_mul, alpha = _as(t_mul, lr), _as(m_mul, lr), _as(alpha, lr)
        if isinstance(t_mul, numbers.Real):     # known now: build only the formula needed
            restart, fraction = (_equal_periods(done) if t_mul == 1.0
                                 else _growing_periods(done, t_mul_t))
        else:   # no graph control flow: compute both, keep the one t_mul asks for
            equal_r, equal_f = _equal_periods(done)
            grow_r, grow_f = _growing_periods(done, t_mul_t)
            same = math_ops.equal(t_mul_t, 1.0)
            restart = math_ops.where(same, equal_r, grow_r)
            fraction = math_ops.where(same, equal_f, grow_f)
        start = math_ops.pow(m_mul, restart)
        return lr * ((1.0 - alpha) * start * _half_cosine(fraction) + alpha)


def _equal_periods(done):
    restart = math_ops.floor(done)
    return restart, done - restart


def _growing_periods(done, t_mul):
    """(period index, fraction of it done) when period i lasts t_mul ^ i first periods:
    periods 0..i-1 together last (1 - t_mul ^ i) / (1 - t_mul)."""
    restart = math_ops.floor(math_ops.log(1.0 - done * (1.0 - t_mul)) / math_ops.log(t_mul))
    before = (1.0 - math_ops.pow(t_mul, restart)) / (1.0 - t_mul)
    return restart, (done - before) / math_ops.pow(t_mul, restart)


def linear_cosine_decay(learning_rate, global_step, decay_steps, num_periods=0.5, alpha=0.0,
                        beta=0.001, name=None):
    """Return learning_rate * ((alpha + linear) * cosine + beta), where over
    t = min(global_step, decay_steps) / decay_steps, linear = 1 - t and
    cosine = 0.5 * (1 + cos(pi * 2 * num_periods * t))."""
    with get_default_graph().name_scope(name or "LinearCosineDecay"):
        lr, step = _start("linear_cosine_decay", learning_rate, global_step)
        steps = _as(decay_steps, lr)
        fraction = math_ops.minimum(step, steps) / steps
        cosine = _half_cosine(2.0 * _as(num_periods, lr) * fraction)
        return lr * ((_as(alpha, lr) + (1.0 - fraction)) * cosine + _as(beta, lr))


def piecewise_constant(x, boundaries, values, name=None):
    """Return values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <=
    boundaries[i], and values[-1] after the last boundary.

    Raises:
        InvalidArgumentError: ``len(values) != len(boundaries) + 1``, values of
            different dtypes, or boundaries given as numbers that decrease.
    """
    if len(values) != len(boundaries) + 1:
        raise errors.InvalidArgumentError(
            f"piecewise_constant: values must have one more element than boundaries, got "
            f"{len(values)} values and {len(boundaries)} boundaries")
    _check_increasing(boundaries)
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


def _check_increasing(boundaries):
    """Refuse boundaries known now that decrease: the intervals between them would
    overlap, and the selection would silently keep the first value where TensorFlow
    fails at every step that falls in two intervals."""
    numbers_now = [b for b in boundaries if isinstance(b, (numbers.Real, np.number))]
    if len(numbers_now) != len(boundaries):
        return
    for i in range(len(boundaries) - 1):
        if boundaries[i] > boundaries[i + 1]:
            raise errors.InvalidArgumentError(
                f"piecewise_constant: boundaries must be increasing, got {list(boundaries)} "
                f"({boundaries[i]} before {boundaries[i + 1]})")
