"""IndexedSlices: a sparse gradient (rows ``indices`` of a dense tensor hold ``values``).

Gradients of gather/embedding_lookup are IndexedSlices so an optimizer (or a ps) touches
only the rows a batch used; they are densified only where an op needs a dense value.
"""

from __future__ import annotations


class IndexedSlices:
    """values[i] belongs at row indices[i] of a tensor of shape dense_shape."""

    def __init__(self, values, indices, dense_shape=None):
        self.values = values
        self.indices = indices
        self.dense_shape = dense_shape

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def graph(self):
        return self.values.graph

    @property
    def name(self) -> str:
        return self.values.name

    @property
    def op(self):
        return self.values.op

    @property
    def device(self) -> str:
        return self.values.device

    def __repr__(self):
        return (f"IndexedSlices(values={self.values.name}, indices={self.indices.name}, "
                f"dense_shape={getattr(self.dense_shape, 'name', None)})")
