"""Partitioners: ``partitioner(shape, dtype) -> partitions per axis`` (TensorFlow's rules).

Pass one as ``get_variable(..., partitioner=...)`` or ``variable_scope(partitioner=...)``;
``partitioned_variables.py`` calls it with the full shape and cuts the variable along the
one axis whose count is above 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape


def _axis_of(shape: TensorShape, axis: int, who: str) -> int:
    if shape.ndims is None or not -shape.ndims <= axis < shape.ndims:
        raise errors.InvalidArgumentError(
            f"{who}: cannot partition a variable of shape {shape} along axis {axis}: it has "
            f"no such axis")
    return axis % shape.ndims


def _element_size(dtype, bytes_per_string_element) -> int:
    if getattr(dtype, "name", None) == "string":
        return bytes_per_string_element
    return dtypes.as_dtype(dtype).size


def _check_count(value, what, who, least=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise errors.InvalidArgumentError(
            f"{who}: {what} must be an integer >= {least}, got {value!r}")
    return int(value)


def fixed_size_partitioner(num_shards: int, axis: int = 0) -> Callable:
    """Return a partitioner cutting ``axis`` into ``num_shards`` parts (at most one row
    each: a dimension of 3 gives 3 parts)."""
    num_shards = _check_count(num_shards, "num_shards", "fixed_size_partitioner")

    def _partitioner(shape, dtype=None, **unused):
        shape = TensorShape(shape)
        a = _axis_of(shape, axis, "fixed_size_partitioner")
        partitions = [1] * shape.ndims
        partitions[a] = min(num_shards, shape[a])
        return partitions
    return _partitioner


def min_max_variable_partitioner(max_partitions: int = 1, axis: int = 0,
                                 min_slice_size: int = 256 << 10,
                                 bytes_per_string_element: int = 16) -> Callable:
    """Return a partitioner giving each part at least ``min_slice_size`` bytes, with at
    most ``max_partitions`` parts (and no more than the axis has rows). As in TensorFlow,
    every variable has at least one part, so ``max_partitions=0`` gives one part."""
    who = "min_max_variable_partitioner"
    max_partitions = _check_count(max_partitions, "max_partitions", who, least=0)
    min_slice_size = _check_count(min_slice_size, "min_slice_size", who)

    def _partitioner(shape, dtype=dtypes.float32, **unused):
        shape = TensorShape(shape)
        a = _axis_of(shape, axis, who)
        total_bytes = shape.num_elements() * _element_size(dtype, bytes_per_string_element)
        partitions = [1] * shape.ndims
        partitions[a] = max(1, min(shape[a], max_partitions,
                                   int(math.ceil(total_bytes / min_slice_size))))
        return partitions
    return _partitioner


def variable_axis_size_partitioner(max_shard_bytes: int, axis: int = 0,
                                   bytes_per_string_element: int = 16,
                                   max_shards: int | None = None) -> Callable:
    """Return a partitioner keeping each part under ``max_shard_bytes`` by cutting ``axis``
    (one row per part at most; ``max_shards`` caps the count and wins; as in TensorFlow,
    ``max_shards=0`` sets no cap, like None)."""
    who = "variable_axis_size_partitioner"
    max_shard_bytes = _check_count(max_shard_bytes, "max_shard_bytes", who)
    bytes_per_string_element = _check_count(bytes_per_string_element,
                                            "bytes_per_string_element", who)
    if max_shards is not None:
        max_shards = _check_count(max_shards, "max_shards", who, least=0)

    def _partitioner(shape, dtype=dtypes.float32, **unused):
        shape = TensorShape(shape)
        a = _axis_of(shape, axis, who)
        if not shape.is_fully_defined():
            raise errors.InvalidArgumentError(f"{who}: shape {shape} is not fully defined")
        partitions = [1] * shape.ndims
        if shape[a] == 0:
            return partitions
        bytes_per_slice = shape.num_elements() / shape[a] * _element_size(
            dtype, bytes_per_string_element)
        slices_per_shard = max(1, math.floor(max_shard_bytes / bytes_per_slice)) \
            if bytes_per_slice else shape[a]
        shards = int(math.ceil(shape[a] / slices_per_shard))
        partitions[a] = min(max_shards, shards) if max_shards else shards
        return partitions
    return _partitioner
