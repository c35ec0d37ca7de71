"""Map functions the dataset engine runs on each element, as tf.data does: ``Dataset.map``
before a ``batch`` (``ds.map(parse).shuffle(n).batch(b)``).

The iterator ops carry each traced function (``dataset.functions``) in their ``maps``
attr as plain data, ``[level, name, graph_def_bytes, input_names, output_names]``: it
applies after ``level`` batches, to each element of that depth (level 0: each example).
When the iterator starts, ``ElementMaps`` asks the kernel environment for a host function
of each (its graph imported once into a session of its own; a seeded random op inside
draws the same values again after each initialization, as a seeded shuffle does), and
``gather`` builds an item bottom-up: the examples' slices, each mapped, stacked into the
first batch, each of those mapped, and so on. Where no map sits below a depth, one
``np.take`` per array gathers the whole sub-batch, as without maps.

Cost: one function call per element. A parse function (uint8 [784] to float32 scaled,
a cast label) on MNIST-sized elements, batch 128: about 6 ms per batch on one core (some
50 us per element), against about 0.13 ms for the same map after the batch, run once on
the whole batch in the graph. So a map whose function is right on a batch (elementwise
arithmetic, casts, reshapes keeping the first axis) is faster after ``batch``.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors


class ElementMaps:
    """The traced functions of one iterator's pass, by the depth they apply at."""

    def __init__(self, specs, env):
        self._fns = {}
        for level, name, graph, inputs, outputs in specs:
            self._fns[int(level)] = (name, env.host_function(graph, inputs, outputs))

    def gather(self, arrays, indices: np.ndarray, op) -> tuple:
        """The item at ``indices`` (dense example indices, one axis per batch), every map
        applied at its depth.

        Raises:
            InvalidArgumentError: the elements a batch stacks have different shapes in a
                component (a map giving ragged outputs), which no array can hold.
        """
        return tuple(self._value(arrays, indices, op))

    def _value(self, arrays, indices, op) -> list:
        depth = indices.ndim
        if depth == 0 or not any(level < depth for level in self._fns):
            values = [np.take(a, indices, axis=0) for a in arrays]
        else:
            rows = [self._value(arrays, row, op) for row in indices]
            values = self._stack(rows, depth, op)
        fn = self._fns.get(depth)
        if fn is not None:
            values = list(fn[1](*values))
        return values

    def _stack(self, rows, depth: int, op) -> list:
        name = self._fns[max(level for level in self._fns if level < depth)][0]
        out = []
        for k in range(len(rows[0])):
            parts = [row[k] for row in rows]
            first = np.shape(parts[0])
            bad = next((i for i, p in enumerate(parts) if np.shape(p) != first), None)
            if bad is not None:
                raise errors.op_error(
                    errors.InvalidArgumentError, f"Cannot batch the outputs of {name}: "
                    f"component {k} has different shapes in elements of one batch (as "
                    "tf.data's batch, every element must have one shape per component)", op,
                    expected=f"shape {list(first)} (element 0)",
                    got=f"shape {list(np.shape(parts[bad]))} (element {bad})")
            out.append(np.stack(parts))
        return out
