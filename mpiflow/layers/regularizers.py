"""Weight regularizers for ``kernel_regularizer=`` and ``get_variable(regularizer=)``.

TF1 scripts took them from ``tf.contrib.layers``, which mpiflow does not have (see
``mpiflow/unsupported.py``), so they live beside the layers that take them:
``mf.layers.l2_regularizer(scale)`` is contrib's, ``scale * sum(w ** 2) / 2``, i.e.
``scale * mf.nn.l2_loss(w)`` (Keras' ``l2`` has no ``/ 2``). A regularizer is a function
of one weight tensor returning a scalar loss, or None for no loss (a scale of 0).
"""

from __future__ import annotations

import numbers

from mpiflow import errors
from mpiflow.framework.scopes import name_scope
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.nn_ops import l2_loss
from mpiflow.ops.reduction_ops import reduce_sum


def _checked_scale(scale, which: str) -> float:
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise errors.InvalidArgumentError(
            f"{which}: scale must be a number, got {scale!r} ({type(scale).__name__})")
    if scale < 0:
        raise errors.InvalidArgumentError(
            f"{which}: scale must be >= 0 (0 disables the regularizer), got {scale}")
    return float(scale)


def _regularizer(which: str, scale, penalty, scope):
    """A regularizer computing ``scale * penalty(weights)``; None when ``scale`` is 0."""
    scale = _checked_scale(scale, which)
    if scale == 0:
        return lambda weights: None

    def regularize(weights):
        with name_scope(scope, which) as name:
            weights = convert_to_tensor(weights)
            factor = convert_to_tensor(scale, dtype=weights.dtype, name="scale")
            return math_ops.multiply(factor, penalty(weights), name=name)
    regularize.__name__ = which
    return regularize


def l1_regularizer(scale, scope=None):
    """Return a regularizer of ``scale * sum(|w|)`` (sparse weights)."""
    return _regularizer("l1_regularizer", scale,
                        lambda w: reduce_sum(math_ops.abs(w)), scope)


def l2_regularizer(scale, scope=None):
    """Return a regularizer of ``scale * sum(w ** 2) / 2`` (weight decay)."""
    return _regularizer("l2_regularizer", scale, l2_loss, scope)


def sum_regularizer(regularizer_list, scope=None):
    """Return a regularizer adding the losses of ``regularizer_list`` (None ones skipped)."""
    regularizers = [r for r in regularizer_list if r is not None]
    if not regularizers:
        return None

    def regularize(weights):
        with name_scope(scope, "sum_regularizer") as name:
            losses = [loss for loss in (r(weights) for r in regularizers) if loss is not None]
            return math_ops.add_n(losses, name=name) if losses else None
    return regularize


def l1_l2_regularizer(scale_l1=1.0, scale_l2=1.0, scope=None):
    """Return a regularizer of ``scale_l1 * sum(|w|) + scale_l2 * sum(w ** 2) / 2``."""
    return sum_regularizer([l1_regularizer(scale_l1), l2_regularizer(scale_l2)], scope)

