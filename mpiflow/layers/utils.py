"""Arguments the layers share: int tuples, padding, data_format and ``training``.

Each spelling is checked when the layer is made, so a typo fails at the line that wrote it,
with the layer's name, rather than inside an op built later.
"""

from __future__ import annotations

import numbers

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.layers.base import layer_error
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import transpose
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import const_value

# Keras spelling -> the ops' padding attr.
PADDINGS = {"valid": "VALID", "same": "SAME"}


class _Layout:
    """Where a data_format keeps the channels; the ops work channels-last only, so a
    channels-first layer transposes around them (one view each way)."""

    def __init__(self, channel_axis: int, channels_first: bool):
        self.channel_axis = channel_axis
        self.channels_first = channels_first

    def to_channels_last(self, x: Tensor) -> Tensor:
        if not self.channels_first:
            return x
        n = x.shape.ndims
        return transpose(x, [0] + list(range(2, n)) + [1])

    def from_channels_last(self, x: Tensor) -> Tensor:
        if not self.channels_first:
            return x
        n = x.shape.ndims
        return transpose(x, [0, n - 1] + list(range(1, n - 1)))


DATA_FORMATS = {"channels_last": _Layout(-1, False), "channels_first": _Layout(1, True)}


def normalize_tuple(layer, value, n: int, arg: str) -> tuple:
    """Return ``value`` (an int, or n ints) as a tuple of n positive ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (int(value),) * n
    try:
        value = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise layer_error(layer, f"Bad {arg}", expected=f"an int or {n} ints",
                          got=repr(value)) from None
    if len(value) != n or min(value) < 1:
        raise layer_error(layer, f"Bad {arg}", expected=f"an int or {n} positive ints",
                          got=repr(value))
    return value


def normalize_padding(layer, padding) -> str:
    """Return the ops' padding ('VALID' or 'SAME') for a layer's 'valid'/'same' (any case)."""
    key = padding.lower() if isinstance(padding, str) else padding
    if key not in PADDINGS:
        raise layer_error(layer, "Unknown padding", expected=" or ".join(map(repr, PADDINGS)),
                          got=repr(padding))
    return PADDINGS[key]


def normalize_data_format(layer, data_format) -> _Layout:
    key = "channels_last" if data_format is None else (
        data_format.lower() if isinstance(data_format, str) else data_format)
    if key not in DATA_FORMATS:
        raise layer_error(layer, "Unknown data_format",
                          expected=" or ".join(map(repr, DATA_FORMATS)), got=repr(data_format))
    return DATA_FORMATS[key]


def training_value(layer, training):
    """Return ``training`` as a Python bool when known at build time, else a bool tensor.

    None means inference, as a TF1 layer outside Keras' learning phase.
    """
    if training is None:
        return False
    if isinstance(training, (bool, np.bool_)) or (
            isinstance(training, numbers.Integral) and training in (0, 1)):
        return bool(training)  # TF1's smart_cond takes the ints 0 and 1 as bools too
    tensor = convert_to_tensor(training)
    if tensor.dtype is not dtypes.bool_ or tensor.shape.ndims not in (None, 0):
        raise layer_error(layer, "Bad training argument", expected="a Python bool (or "
                          "0 or 1) or a scalar bool tensor", got=f"{tensor.dtype.name} of shape "
                          f"{tensor.shape}")
    known = const_value(tensor)
    return bool(known) if known is not None else tensor


def smart_select(training, when_training, otherwise):
    """Build one branch when ``training`` is a bool; for a tensor build both and pick at
    run time with ``where`` (mpiflow has no cond op, and the layers' branches are cheap
    and free of side effects)."""
    if isinstance(training, bool):
        return (when_training if training else otherwise)()
    return math_ops.where(training, when_training(), otherwise())
