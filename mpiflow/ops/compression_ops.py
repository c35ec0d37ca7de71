"""Ops behind compressed gradients: picking the largest entries to send (top-k).

``TopKByMagnitude`` returns the flat positions of the ``k`` entries of largest magnitude
(ties broken by position, so every run picks the same ones): what a worker sends of a
gradient under ``compression="topk:R"``, the rest staying behind in its residual.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops.registry import REQUIRED, OpDef, register_op, require_dtype


@register_op("TopKByMagnitude", attrs={"k": REQUIRED})
class TopKByMagnitudeOp(OpDef):
    """int64 [k]: flat indices of the ``k`` largest ``|x|`` of ``x`` (any shape), in
    ascending index order."""

    gradient = None
    gpu_kernel = False          # argpartition on the host; the values stay where they are

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt.is_floating, "x")
        k = b.attrs["k"]
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise b.error("k must be a positive int", expected="k >= 1", got=k)
        n = b.shape(0).num_elements()
        if n is not None and k > n:
            raise b.error("k is larger than the tensor", expected=f"k <= {n}", got=k)
        return [(dtypes.int64, [k])]

    def forward(self, xp, ctx, x):
        flat = np.abs(np.asarray(x).reshape(-1))
        k = ctx.attrs["k"]
        if k > flat.size:
            raise errors.op_error(errors.InvalidArgumentError, "k is larger than the tensor",
                                  ctx.op, expected=f"k <= {flat.size}", got=k)
        if k == flat.size:
            return np.arange(k, dtype=np.int64)
        # Stable choice among equal magnitudes: order by (-|x|, position).
        picked = np.argpartition(-flat, k - 1, kind="introselect")[:k]
        threshold = flat[picked].min()
        above = np.flatnonzero(flat > threshold)
        at = np.flatnonzero(flat == threshold)[:k - above.size]
        return np.sort(np.concatenate([above, at])).astype(np.int64)
