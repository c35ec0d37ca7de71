"""Tensors laid out on grids: eye, linspace and meshgrid, built from existing ops.

Sizes (eye's rows and columns, linspace's count) are fixed when the graph is built, as
mpiflow's layout arguments are; the values of linspace's ends and meshgrid's vectors may
be computed tensors, and the gradient goes through them.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import array_ops, indexing_ops, math_ops, random_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor


def eye(num_rows, num_columns=None, batch_shape=None, dtype=dtypes.float32, name=None):
    """Return the identity matrix ``[num_rows, num_columns]`` (square by default), repeated
    over ``batch_shape`` in front, as TensorFlow's ``tf.eye``: a constant.

    Raises:
        InvalidArgumentError: a size that is negative or not an int known when the graph
            is built.
    """
    rows = array_ops.static_axis(num_rows, "eye num_rows")
    columns = rows if num_columns is None else \
        array_ops.static_axis(num_columns, "eye num_columns")
    batch = [] if batch_shape is None else \
        array_ops.static_ints(batch_shape, "eye batch_shape").reshape(-1).tolist()
    if min([rows, columns] + batch) < 0:
        raise errors.InvalidArgumentError(
            f"eye: sizes must be non-negative, got num_rows={rows}, num_columns={columns}, "
            f"batch_shape={batch}")
    dtype = dtypes.as_dtype(dtype)
    value = np.broadcast_to(np.eye(rows, columns, dtype=dtype.np_dtype),
                            batch + [rows, columns])
    return constant(np.ascontiguousarray(value), dtype=dtype, name=name or "eye")


def linspace(start, stop, num, name=None, axis=0):
    """Return ``num`` evenly spaced values from ``start`` to ``stop``, both included, as
    TensorFlow's: ``start + i * ((stop - start) / (num - 1))`` for the inner ones, and
    ``stop`` itself last. Integer ends give float64; ends of any (equal) shape put the
    new dimension at ``axis``. ``num`` must be known when the graph is built.

    Raises:
        InvalidArgumentError: a ``num`` that is negative or not an int known when the
            graph is built, ends of different shapes, or an axis out of range.
    """
    count = array_ops.static_axis(num, "linspace num")
    if count < 0:
        raise errors.InvalidArgumentError(f"linspace: num must be >= 0, got {count}")
    with get_default_graph().name_scope(name or "linspace"):
        first = convert_to_tensor(start, name="start")
        if not first.dtype.is_floating:
            first = math_ops.cast(first, dtypes.float64)
        # A Python stop is converted straight to start's dtype (not through float32).
        last = math_ops.cast(stop, first.dtype) if hasattr(stop, "dtype") and \
            not isinstance(stop, np.ndarray) else \
            convert_to_tensor(np.asarray(stop, first.dtype.np_dtype), name="stop")
        if not first.shape.is_compatible_with(last.shape) or first.shape.ndims is None:
            raise errors.InvalidArgumentError(
                f"linspace: start and stop must have one known shape, got {first.shape} and "
                f"{last.shape}")
        rank = first.shape.ndims
        axis = array_ops.static_axis(axis, "linspace axis")
        if not -rank - 1 <= axis <= rank:
            raise errors.InvalidArgumentError(
                f"linspace: axis {axis} out of range for ends of shape {first.shape}: "
                f"expected an axis in [{-rank - 1}, {rank}]")
        axis %= rank + 1
        first, last = array_ops.expand_dims(first, axis), array_ops.expand_dims(last, axis)
        pieces = [first]
        if count > 2:
            steps = np.arange(1, count - 1).reshape(
                [-1 if d == axis else 1 for d in range(rank + 1)])
            delta = (last - first) / constant(count - 1, dtype=first.dtype)
            pieces.append(first + constant(steps, dtype=first.dtype) * delta)
        if count >= 2:
            pieces.append(last)
        if count == 0:
            return indexing_ops.slice(first, [0] * (rank + 1),
                                      [0 if d == axis else -1 for d in range(rank + 1)])
        return array_ops.concat(pieces, axis)


def meshgrid(*args, **kwargs):
    """Return one tensor per argument, each of shape ``[len(args[1]), len(args[0]),
    len(args[2]), ...]`` (``indexing="xy"``, the default) or ``[len(args[0]), ...]``
    (``indexing="ij"``), holding argument i's values along its dimension, as TensorFlow's.

    Arguments are flattened to vectors and must share a dtype.

    Raises:
        InvalidArgumentError: another indexing, another keyword, or arguments of
            different dtypes.
    """
    indexing = kwargs.pop("indexing", "xy")
    name = kwargs.pop("name", "meshgrid")
    if kwargs:
        raise errors.InvalidArgumentError(
            f"meshgrid: unknown keyword {sorted(kwargs)[0]!r}: expected indexing, name")
    if indexing not in ("xy", "ij"):
        raise errors.InvalidArgumentError(
            f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    with get_default_graph().name_scope(name):
        vectors = [array_ops.reshape(convert_to_tensor(a), [-1]) for a in args]
        if not vectors:
            return []
        kinds = {v.dtype for v in vectors}
        if len(kinds) > 1:
            raise errors.InvalidArgumentError(
                f"meshgrid: arguments must have one dtype, got "
                f"{', '.join(v.dtype.name for v in vectors)}")
        n = len(vectors)
        order = list(range(n))
        if indexing == "xy" and n > 1:
            order[0], order[1] = 1, 0       # x varies along columns, y along rows
        sizes = [v.shape[0] if v.shape[0] is not None else array_ops.size(v)
                 for v in vectors]
        ones = random_ops.ones([sizes[i] for i in order], dtype=vectors[0].dtype)
        outputs = []
        for i, v in enumerate(vectors):
            shape = [1] * n
            shape[order.index(i)] = -1
            outputs.append(math_ops.multiply(array_ops.reshape(v, shape), ones))
        return outputs
