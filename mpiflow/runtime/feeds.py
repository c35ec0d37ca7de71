"""What ``Session.run`` feeds: ``feed_dict`` keys resolved to tensors of the session's
graph, and values converted to a tensor's dtype only where that keeps their meaning.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Tensor


def feed_tensor(graph, key):
    """The Tensor of ``graph`` a ``feed_dict`` key (a Tensor or its name) stands for."""
    try:
        return graph.as_graph_element(key, allow_operation=False)
    except errors.OpError as exc:
        raise errors.InvalidArgumentError(
            f"Cannot interpret feed_dict key {key!r} as a Tensor of the session's graph: "
            f"{exc.message}") from None


def sorted_feeds(graph, feed_dict):
    """``(tensors, values)`` of ``feed_dict`` in graph order (one plan per set of feeds,
    whatever the dict's order), each value checked by ``check_feed``."""
    if not feed_dict:
        return (), ()
    if not hasattr(feed_dict, "items"):
        raise errors.InvalidArgumentError(
            f"feed_dict must be a dict of {{tensor or name: value}}, got "
            f"{type(feed_dict).__name__}")
    keys = {k: feed_tensor(graph, k) for k in feed_dict}
    items = sorted(((keys[k], v) for k, v in feed_dict.items()),
                   key=lambda kv: (kv[0].op._id, kv[0].value_index))
    tensors = tuple(t for t, _ in items)
    twice = fed_twice(tensors)
    if twice is not None:
        named = " and ".join(repr(k) if isinstance(k, str) else
                             f"the {type(k).__name__} {getattr(k, 'name', k)!r}"
                             for k, t in keys.items() if t is twice)
        raise errors.InvalidArgumentError(
            f"feed_dict feeds Tensor '{twice.name}' twice, by the keys {named}: each "
            "tensor takes one value")
    return tensors, [check_feed(t, v) for t, v in items]


def fed_twice(tensors):
    """The first of ``tensors`` that appears a second time, or None."""
    seen = set()
    for tensor in tensors:
        if tensor in seen:
            return tensor
        seen.add(tensor)
    return None


def check_feed(tensor, value):
    """Convert ``value`` to ``tensor``'s dtype if that keeps its meaning; check the shape.

    A feed is never wrapped or overflowed: int64 ids fed to an int32 tensor are converted
    only if every one fits (2**40 + 5 must not become 5 and train another row). Integers
    go to unsigned tensors where they fit, and to bool ones where each is 0 or 1 (Python
    ints arrive as int64); an empty value takes any dtype. Floats never become integers.
    """
    if isinstance(value, Tensor) or callable(getattr(value, "_as_tensor", None)):
        raise errors.InvalidArgumentError(
            f"The value fed for Tensor '{tensor.name}' is a graph element, "
            f"{getattr(value, 'name', value)!r}: a feed value is a numpy array or a Python "
            "value (evaluate the tensor with Session.run first, or build the graph on it "
            "instead of a placeholder)", tensor.op)
    try:
        array = np.asarray(value)
    except ValueError as exc:       # nested lists of uneven lengths
        raise errors.InvalidArgumentError(
            f"Cannot feed a ragged value for Tensor '{tensor.name}' (shape {tensor.shape}): "
            f"every row must have the same length ({exc})", tensor.op) from None
    target = tensor.dtype.np_dtype
    if array.dtype != target:
        if array.dtype == object or not _convertible(array, target):
            raise errors.InvalidArgumentError(
                f"Cannot feed value of dtype {array.dtype} for Tensor '{tensor.name}', which "
                f"has dtype {tensor.dtype.name}", tensor.op)
        if array.size and not np.can_cast(array.dtype, target, casting="safe"):
            check_fits(tensor, array)
        array = array.astype(target)
    if not tensor.shape.admits(array.shape):
        raise errors.InvalidArgumentError(
            f"Cannot feed value of shape {array.shape} for Tensor '{tensor.name}', which has "
            f"shape {tensor.shape}", tensor.op)
    return array


def _convertible(array, target) -> bool:
    """Whether ``array``'s dtype may become ``target`` (values then checked to fit)."""
    if array.size == 0 or np.can_cast(array.dtype, target, casting="same_kind"):
        return True
    return array.dtype.kind in "iu" and target.kind in "ub"


def check_fits(tensor, array) -> None:
    """Refuse values of ``array`` that ``tensor``'s narrower dtype cannot hold."""
    dtype = tensor.dtype
    if dtype.is_bool:
        bad = array[~np.isin(array, (0, 1))]
        if bad.size:
            raise errors.InvalidArgumentError(
                f"Cannot feed value {bad.flat[0].item()!r} for Tensor '{tensor.name}', which "
                f"has dtype bool: only 0 and 1 mean False and True; feed booleans", tensor.op)
        return
    if dtype.is_floating:
        finite = array[np.isfinite(array)]      # inf and nan stay what they are
        low, high = (finite.min(), finite.max()) if finite.size else (0, 0)
    else:
        low, high = array.min(), array.max()
    if low < dtype.min or high > dtype.max:
        bad = (low if low < dtype.min else high).item()
        raise errors.InvalidArgumentError(
            f"Cannot feed value {bad!r} for Tensor '{tensor.name}', which has dtype "
            f"{dtype.name}: it does not fit (range [{dtype.min}, {dtype.max}]); feed "
            f"{array.dtype} to a tensor of that dtype, or values that fit", tensor.op)
