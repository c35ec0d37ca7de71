"""Compressed gradients on the wire from the workers to the ps.

``GradientCompressionOptimizer(opt, compression)`` changes only what travels: each
gradient of a variable on another task is encoded where it is computed and decoded where
its variable lives, and the wrapped optimizer applies the decoded gradient there, in the
variable's dtype.

- ``"fp16"`` / ``"bf16"``: the gradient crosses as float16 / bfloat16 (half the bytes of
  float32); the update is computed in the variable's dtype. The result is the
  uncompressed one within the half format's rounding of the gradient.
- ``"topk:R"``: of each dense gradient only the ``ceil(R * size)`` entries of largest
  magnitude cross, with their int64 positions; the rest is kept on the worker in a
  residual (a local variable beside the gradient) and added to the next step's gradient
  (error feedback), so nothing is lost, only delayed. The ps rebuilds the dense gradient
  (zeros elsewhere) and applies it with the wrapped optimizer's dense update. Gradients
  that are sparse already (embedding rows) cross as they are.

The bytes saved are counted where they move: ``mpiflow.comm.traffic`` on each rank.
"""

from __future__ import annotations

import math

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.device_spec import job_and_task
from mpiflow.framework.graph import GraphKeys
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import array_ops, control_ops, math_ops, sparse_ops, state_ops
from mpiflow.ops.random_ops import zeros
from mpiflow.ops.registry import apply_op
from mpiflow.ops.variables import Variable
from mpiflow.train.optimizer import WrappingOptimizer

_WIRE_DTYPES = {"fp16": dtypes.float16, "bf16": dtypes.bfloat16}


def parse_compression(spec):
    """``(kind, parameter)`` of a compression spec: (None, None), ("cast", dtype) or
    ("topk", ratio); anything else is refused, saying what is accepted."""
    if spec is None or spec == "none":
        return None, None
    if spec in _WIRE_DTYPES:
        return "cast", _WIRE_DTYPES[spec]
    if isinstance(spec, str) and spec.startswith("topk:"):
        try:
            ratio = float(spec[len("topk:"):])
        except ValueError:
            ratio = None
        if ratio is not None and 0.0 < ratio <= 1.0:
            return "topk", ratio
    raise errors.InvalidArgumentError(
        f"Unknown gradient compression {spec!r}: expected None, 'fp16', 'bf16' or "
        "'topk:R' with 0 < R <= 1 (e.g. 'topk:0.01')")


class GradientCompressionOptimizer(WrappingOptimizer):
    """Compress the gradients that cross to another task (see the module docstring).

    Args:
        opt: the optimizer that applies the (decoded) gradients.
        compression: "fp16", "bf16" or "topk:R".
    """

    def __init__(self, opt, compression, use_locking=False, name="CompressedGradients"):
        super().__init__(opt, use_locking, name)
        self._kind, self._parameter = parse_compression(compression)
        self.compression = compression
        self.residuals = []         # topk: the error-feedback variables, one per gradient

    def compute_gradients(self, loss, *args, **kwargs):
        pairs = self._opt.compute_gradients(loss, *args, **kwargs)
        return [(self._across(g, v), v) for g, v in pairs]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def _across(self, grad, var):
        """``grad`` as it arrives beside ``var``: encoded where it is made, decoded there."""
        if grad is None or self._kind is None or not _crosses(grad, var):
            return grad
        graph = var.graph
        with graph.name_scope(f"{self._name}/{var.op.name}"):
            if self._kind == "cast":
                return self._cast_across(graph, grad, var)
            if isinstance(grad, IndexedSlices):
                return grad                 # rows of a table: sparse already
            return self._topk_across(graph, grad, var)

    def _cast_across(self, graph, grad, var):
        wire = self._parameter
        values = grad.values if isinstance(grad, IndexedSlices) else grad
        with graph.colocate_with(values.op):
            sent = math_ops.cast(values, wire, name="encode")
        with graph.colocate_with(var.op):
            back = math_ops.cast(sent, var.dtype, name="decode")
        if isinstance(grad, IndexedSlices):
            return IndexedSlices(back, grad.indices, grad.dense_shape)
        return back

    def _topk_across(self, graph, grad, var):
        positions, sent, residual = top_k_with_feedback(graph, grad, var, self._parameter,
                                                        self._name)
        self.residuals.append(residual)
        with graph.colocate_with(var.op):
            dense = sparse_ops.unsorted_segment_sum(sent, positions,
                                                    var.shape.num_elements())
            return array_ops.reshape(dense, var.shape.as_list(), name="decode")


def top_k_with_feedback(graph, grad, var, ratio, owner):
    """Encode dense ``grad`` (of ``var``) where it is made: ``(positions, values,
    residual)``, the ``ceil(ratio * size)`` entries of largest magnitude of the gradient
    plus what earlier steps left behind; the residual (a local variable beside the
    gradient) keeps the rest, for the next step to add."""
    if not var.shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"{owner}: top-k compression needs the shape of '{var.op.name}' fully defined, "
            f"got {var.shape}")
    size = var.shape.num_elements()
    k = max(1, math.ceil(ratio * size))
    with graph.colocate_with(grad.op):
        with graph.control_dependencies(None):
            residual = Variable(zeros([size], grad.dtype), trainable=False,
                                collections=[GraphKeys.LOCAL_VARIABLES],
                                name=f"{var.op.name}_residual")
        total = array_ops.reshape(grad, [-1]) + residual.value()
        positions = apply_op("TopKByMagnitude", [total], {"k": k}, name="top_k").outputs[0]
        picked = sparse_ops.gather(total, positions)
        # What is not sent stays behind: the residual is the sum with the picked entries
        # taken out, for the next step to add.
        with graph.control_dependencies([picked]):
            kept = state_ops.assign(residual, total)
        with graph.control_dependencies([kept]):
            taken = state_ops.scatter_update(residual, positions, zeros([k], grad.dtype))
        with graph.control_dependencies([taken]):
            sent = control_ops.identity(picked, name="encode")
    return positions, sent, residual


def _crosses(grad, var) -> bool:
    """Whether ``grad`` is made on another task than ``var`` lives on (it travels)."""
    values = grad.values if isinstance(grad, IndexedSlices) else grad
    return job_and_task(values.device) != job_and_task(var.device)


__all__ = ["GradientCompressionOptimizer", "parse_compression", "top_k_with_feedback"]
