"""Reverse-mode autodiff over the graph: ``mf.gradients(ys, xs, grad_ys)``.

An iterative walk (no recursion, so deep graphs are fine) visits each op between ``xs``
and ``ys`` once all of its consumers have contributed, sums the gradients of each output
(``+=`` over every path), and asks the op's registered gradient for its inputs' share.
Sparse gradients stay ``IndexedSlices`` until something needs them dense.
"""

from __future__ import annotations

import collections
import enum

from mpiflow import errors
from mpiflow.framework.graph import Tensor
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.framework.traversal import op_consumers, reachable
from mpiflow.ops import array_ops, math_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import NOT_DEFINED, get_op_def
from mpiflow.ops.sparse_ops import indexed_slices_to_dense


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _as_tensor(value, what):
    convert = getattr(value, "_as_tensor", None)
    if callable(convert):
        return convert()
    if not isinstance(value, Tensor):
        raise errors.InvalidArgumentError(f"gradients: {what} must be Tensors or Variables, "
                                          f"got {type(value).__name__}")
    return value


class UnconnectedGradients(enum.Enum):
    """What ``gradients`` gives for an x that the ys do not depend on."""

    NONE = "none"
    ZERO = "zero"


class AggregationMethod:
    """How ``gradients`` sums the gradients a tensor gets from its consumers (TF1's
    names). mpiflow sums them with one AddN whichever is asked: the choice only changed
    memory use and summation order in TensorFlow, not the result."""

    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


_AGGREGATION_METHODS = (AggregationMethod.ADD_N, AggregationMethod.EXPERIMENTAL_TREE,
                        AggregationMethod.EXPERIMENTAL_ACCUMULATE_N)


def gradients(ys, xs, grad_ys=None, name="gradients", stop_gradients=None,
              colocate_gradients_with_ops=False, gate_gradients=False,
              aggregation_method=None, unconnected_gradients=UnconnectedGradients.NONE):
    """Return d(sum ys)/d(x) for each x in ``xs`` (None where x does not affect ys).

    Args:
        ys: a Tensor or list of Tensors to differentiate.
        xs: Tensors or Variables to differentiate against.
        grad_ys: initial gradients for ``ys`` (default: ones).
        stop_gradients: tensors treated as constants.
        aggregation_method: None or an ``AggregationMethod`` (all sum alike).
        unconnected_gradients: for an x the ys do not depend on, None ("none") or zeros
            shaped as x ("zero"), an ``UnconnectedGradients`` or its value.

    Raises:
        UnimplementedError: an op on the path has no gradient written.
        InvalidArgumentError: ``grad_ys`` do not match ``ys``; an unknown
            ``unconnected_gradients`` or ``aggregation_method``.
    """
    if aggregation_method is not None and (isinstance(aggregation_method, bool) or
                                           aggregation_method not in _AGGREGATION_METHODS):
        raise errors.InvalidArgumentError(
            f"gradients: invalid aggregation_method {aggregation_method!r}: expected None or "
            f"an AggregationMethod (ADD_N, EXPERIMENTAL_TREE, EXPERIMENTAL_ACCUMULATE_N: "
            f"{list(_AGGREGATION_METHODS)})")
    try:
        unconnected = UnconnectedGradients(unconnected_gradients)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"gradients: unconnected_gradients must be 'none' or 'zero', got "
            f"{unconnected_gradients!r}") from None
    ys = [_as_tensor(y, "ys") for y in _as_list(ys)]
    xs = [_as_tensor(x, "xs") for x in _as_list(xs)]
    grad_ys = _as_list(grad_ys) if grad_ys is not None else [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise errors.InvalidArgumentError(
            f"gradients: got {len(grad_ys)} grad_ys for {len(ys)} ys")
    graph = ys[0].graph
    # One tensor or a list, as TF takes it (``or []`` would ask a tensor for its truth).
    stops = {t.op for t in (_as_list(stop_gradients) if stop_gradients is not None else [])}
    with graph.as_default(), graph.name_scope(name):
        between = _ops_between(ys, xs)
        pending = _pending_counts(between)
        grads = collections.defaultdict(list)
        for y, gy in zip(ys, grad_ys):
            grads[y].append(_initial_grad(y, gy))
        # A y that no x reaches is not in ``between``: it contributes no gradient.
        ready = collections.deque(op for op in {y.op for y in ys}
                                  if op in between and pending[op] == 0)
        queued = set(ready)
        while ready:
            op = ready.popleft()
            out_grads = [_aggregate(grads.get(t)) for t in op.outputs]
            # An op none of whose inputs leads back to an x (e.g. the op of an x) has
            # nothing to pass on: building its gradient would only add dead ops.
            if op not in stops and any(g is not None for g in out_grads) and \
                    any(t.op in between for t in op.inputs):
                _backprop_op(op, out_grads, grads, between)
            for t in op.inputs:
                producer = t.op
                if producer in between:
                    pending[producer] -= 1
                    if pending[producer] == 0 and producer not in queued:
                        queued.add(producer)
                        ready.append(producer)
        results = [_aggregate(grads.get(x)) for x in xs]
        if unconnected is UnconnectedGradients.ZERO:
            results = [math_ops.zeros_like(x) if g is None else g
                       for g, x in zip(results, xs)]
        return results


def _backprop_op(op, out_grads, grads, between):
    op_def = get_op_def(op.type)
    if op_def.gradient is None:
        return
    if op_def.gradient is NOT_DEFINED:
        raise errors.UnimplementedError(
            f"No gradient defined for op '{op.name}' ({op.type}): it lies between ys and xs; "
            "wrap its input in mf.stop_gradient if no gradient should flow through it", op)
    if not op_def.passes_sparse_gradients:
        out_grads = [densify(g) for g in out_grads]
    if any(g is None for g in out_grads):
        out_grads = [g if g is not None or not t.dtype.is_floating
                     else math_ops.zeros_like(t) for g, t in zip(out_grads, op.outputs)]
    with op.graph.name_scope(op.name + "_grad"):
        in_grads = op_def.gradient(op, *out_grads)
    in_grads = list(in_grads) if in_grads is not None else []
    if len(in_grads) != len(op.inputs):
        raise errors.InternalError(
            f"Gradient of op '{op.name}' ({op.type}) returned {len(in_grads)} values, "
            f"expected {len(op.inputs)} (one per input)", op)
    for i, (t, g) in enumerate(zip(op.inputs, in_grads)):
        if g is None or not t.dtype.is_floating or t.op not in between:
            continue
        if isinstance(g, Tensor):
            _check_grad_shape(op, i, t, g)
        grads[t].append(g)


def _check_grad_shape(op, i, t, g):
    if not g.shape.is_compatible_with(t.shape):
        raise errors.InternalError(
            f"Gradient for input {i} of op '{op.name}' ({op.type}) has shape {g.shape}, "
            f"expected {t.shape}", op)


def _initial_grad(y, gy):
    if gy is None:
        if not y.dtype.is_floating:
            raise errors.InvalidArgumentError(
                f"gradients: y '{y.name}' has dtype {y.dtype.name}; only floating ys can be "
                "differentiated")
        return math_ops.ones_like(y)
    gy = convert_to_tensor(gy, dtype=y.dtype)
    if not gy.shape.is_compatible_with(y.shape):
        raise errors.InvalidArgumentError(
            f"gradients: grad_ys for '{y.name}' has shape {gy.shape}, expected {y.shape}")
    return gy


def _ops_between(ys, xs):
    """Ops on some path from an x to a y (plus the ops of the xs themselves)."""
    reached = reachable([x.op for x in xs], op_consumers)
    return reachable([y.op for y in ys if y.op in reached],
                     lambda op: [t.op for t in op.inputs if t.op in reached])


def _pending_counts(between):
    pending = {op: 0 for op in between}
    for op in between:
        for t in op.inputs:
            if t.op in between:
                pending[t.op] += 1
    return pending


def _aggregate(grad_list):
    """Sum the gradients arriving at one tensor from all its consumers."""
    if not grad_list:
        return None
    if len(grad_list) == 1:
        return grad_list[0]
    sparse = [g for g in grad_list if isinstance(g, IndexedSlices)]
    dense = [g for g in grad_list if not isinstance(g, IndexedSlices)]
    if sparse and not dense:
        return IndexedSlices(array_ops.concat([g.values for g in sparse], 0),
                             array_ops.concat([math_ops.cast(g.indices, "int64")
                                               for g in sparse], 0),
                             sparse[0].dense_shape)
    dense = dense + [indexed_slices_to_dense(g) for g in sparse]
    return math_ops.add_n(dense) if len(dense) > 1 else dense[0]


def densify(grad):
    """Return ``grad`` as a dense Tensor (IndexedSlices are scattered into zeros)."""
    if isinstance(grad, IndexedSlices):
        return indexed_slices_to_dense(grad)
    return grad
