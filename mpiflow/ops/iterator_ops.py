"""Iterator ops of ``tf.data``: IteratorAnchor, IteratorInit, IteratorGetNext.

An iterator's position lives in the resource store of the task that runs its ops (the
session's own store in one process; the task's, like its variables, in a cluster), under
``iterator:<shared_name>``; it is never a Python global. The ops of one iterator share a
``shared_name`` and are colocated with its ``IteratorAnchor``, so they run on the worker
that builds the iterator (``replica_device_setter`` sends only variables to a ps):

- ``IteratorInit`` (the initializer of an initializable iterator) reads the dataset's
  arrays from its inputs and starts a new pass of the pipeline; running it again
  restarts the epoch.
- ``IteratorGetNext`` returns the next item, one output per array. A one-shot
  iterator's GetNext takes the arrays as inputs itself and starts on its first run.
  Past the end it raises ``OutOfRangeError``, the end-of-input signal that
  ``MonitoredTrainingSession`` and ``Coordinator`` treat as a clean stop.

What to produce is computed by ``dataset_streams`` on indices; the kernels gather, and
apply the maps a batch follows to each element (``dataset_maps``, the ``maps`` attr).
All three run on the host (the arrays are host memory; a GPU consumer gets a copy).
"""

from __future__ import annotations

import threading

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import dataset_streams
from mpiflow.ops.dataset_maps import ElementMaps
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, register_op


class IteratorResource:
    """One iterator's arrays and its position in the current pass."""

    def __init__(self):
        self.lock = threading.Lock()
        self.arrays = None
        self.maps = None                # ElementMaps of the pass, or None
        self._chunks = None
        self._chunk = None
        self._at = 0

    @property
    def initialized(self) -> bool:
        return self.arrays is not None

    def start(self, arrays, pipeline, slices: bool, op, maps=None) -> None:
        """Begin a new pass over ``arrays`` (examples along axis 0 when ``slices``, else
        each array is one example), applying ``maps`` (``ElementMaps``) to its elements."""
        arrays = [a if slices else a[np.newaxis] for a in arrays]
        counts = [int(a.shape[0]) if a.ndim else None for a in arrays]
        if None in counts:
            raise errors.op_error(errors.InvalidArgumentError, "Dataset arrays must have a "
                                  "dimension to slice", op, expected="rank >= 1",
                                  got=[list(a.shape) for a in arrays])
        if len(set(counts)) > 1:
            raise errors.op_error(errors.InvalidArgumentError, "Dataset arrays must have the "
                                  "same number of examples (their first dimension)", op,
                                  expected="equal first dimensions", got=counts)
        self.arrays = arrays
        self.maps = maps
        self._chunks = dataset_streams.build(counts[0], pipeline).chunks()
        self._chunk, self._at = None, 0

    def next_item(self):
        """The next item's index array, or None at the end of the input."""
        while self._chunk is None or self._at >= len(self._chunk):
            self._chunk = next(self._chunks, None)
            self._at = 0
            if self._chunk is None:
                return None
        item = self._chunk[self._at]
        self._at += 1
        return item


class _IteratorOp(OpDef):
    gpu_kernel = False      # the arrays and the position are host memory
    stateful = True
    gradient = None

    def prepare(self, ctx):
        ctx.key = f"iterator:{ctx.attrs['shared_name']}"


def _resource(ctx) -> IteratorResource:
    # Looked up at each run, not bound once per plan: Session.reset may clear the store
    # under a plan that lives on, which must then start from a fresh iterator.
    return ctx.env.resource(ctx.key, IteratorResource)


_SPEC_ATTRS = {"shared_name": REQUIRED, "output_types": REQUIRED, "output_shapes": REQUIRED}


@register_op("IteratorAnchor", attrs=dict(_SPEC_ATTRS))
class IteratorAnchorOp(_IteratorOp):
    """Where an iterator lives: its other ops are colocated with this one, which need
    never run (it only makes the resource)."""

    def infer(self, b):
        return []

    def forward(self, xp, ctx):
        _resource(ctx)


def _element_maps(ctx):
    """The ``ElementMaps`` of a starting pass, or None: a new session per function at each
    start, so a seeded random map draws the same values again, as a seeded shuffle."""
    specs = ctx.attrs["maps"]
    return ElementMaps(specs, ctx.env) if specs else None


def _check_inputs(b, what: str):
    if b.attrs.get("maps"):
        return      # the maps' input placeholders take the arrays' dtypes; checked there
    types = list(b.attrs["output_types"])
    for i, t in enumerate(b.inputs):
        if t.dtype is not types[i]:
            raise b.error(f"{what} array {i} has the wrong dtype", expected=types[i].name,
                          got=t.dtype.name)


@register_op("IteratorInit", attrs={"shared_name": REQUIRED, "output_types": REQUIRED,
                                    "pipeline": REQUIRED, "slices": True, "copy": [],
                                    "maps": []})
class IteratorInitOp(_IteratorOp):
    """Start the iterator over the arrays given as inputs (copied where ``copy`` says so:
    a fed array the caller may change later)."""

    def infer(self, b):
        if len(b.inputs) != len(b.attrs["output_types"]):
            raise b.error("IteratorInit needs one input per dataset array",
                          expected=len(b.attrs["output_types"]), got=len(b.inputs))
        _check_inputs(b, "Dataset")
        return []

    def forward(self, xp, ctx, *arrays):
        copies = list(ctx.attrs["copy"]) or [False] * len(arrays)
        arrays = [np.array(a) if c else np.asarray(a) for a, c in zip(arrays, copies)]
        iterator = _resource(ctx)
        with iterator.lock:
            iterator.start(arrays, ctx.attrs["pipeline"], ctx.attrs["slices"], ctx.op,
                           _element_maps(ctx))


@register_op("IteratorGetNext", attrs={"shared_name": REQUIRED, "output_types": REQUIRED,
                                       "output_shapes": REQUIRED, "pipeline": [],
                                       "slices": True, "maps": []})
class IteratorGetNextOp(_IteratorOp):
    """The next item of the iterator; with inputs (a one-shot iterator), they are the
    dataset's arrays, read on the first run only."""
    tuple_outputs = True

    def infer(self, b):
        types = [dtypes.as_dtype(t) for t in b.attrs["output_types"]]
        shapes = [TensorShape(s) for s in b.attrs["output_shapes"]]
        if len(types) != len(shapes) or not types:
            raise b.error("IteratorGetNext needs one dtype and one shape per output",
                          got=f"{len(types)} dtypes and {len(shapes)} shapes")
        maps = b.attrs["maps"]
        arrays = len(maps[0][3]) if maps else len(types)    # the first map's inputs
        if b.inputs and len(b.inputs) != arrays:
            raise b.error("A one-shot IteratorGetNext needs one input per dataset array",
                          expected=arrays, got=len(b.inputs))
        _check_inputs(b, "Dataset")
        return list(zip(types, shapes))

    def prepare(self, ctx):
        super().prepare(ctx)
        # Per output, its static dims (None: any size) or None for an unknown rank.
        shapes = [TensorShape(s) for s in ctx.attrs["output_shapes"]]
        ctx.static = [None if s.ndims is None else s.as_list() for s in shapes]

    def forward(self, xp, ctx, *arrays):
        iterator = _resource(ctx)
        with iterator.lock:
            if not iterator.initialized:
                if not arrays:
                    raise errors.op_error(
                        errors.FailedPreconditionError, "GetNext() failed because the "
                        "iterator has not been initialized: run its initializer "
                        "(sess.run(iterator.initializer)) before getting the next element",
                        ctx.op)
                iterator.start([np.asarray(a) for a in arrays], ctx.attrs["pipeline"],
                               ctx.attrs["slices"], ctx.op, _element_maps(ctx))
            item = iterator.next_item()
            if item is None:
                again = "" if arrays else " (run its initializer to start again)"
                raise errors.op_error(
                    errors.OutOfRangeError, "End of sequence: the iterator has returned "
                    f"every element of its dataset{again}", ctx.op)
            indices = dataset_streams.dense_indices(item, ctx.op)
            if iterator.maps is not None:
                out = iterator.maps.gather(iterator.arrays, indices, ctx.op)
            else:
                # np.take copies, so no value handed out aliases the dataset's arrays.
                out = tuple(np.take(a, indices, axis=0) for a in iterator.arrays)
        _check_shapes(out, ctx)
        return out


def _check_shapes(values, ctx) -> None:
    """As TF's GetNext: a value must fit the static shape its tensor promises (a
    ``from_structure`` iterator's shapes may be narrower than a dataset's, e.g. a batch
    dimension of 4 where the last batch is shorter), else code that trusts the static
    shape would compute with the wrong size."""
    for i, (value, dims) in enumerate(zip(values, ctx.static)):
        if dims is None:
            continue
        if len(dims) != value.ndim or any(
                d is not None and d != n for d, n in zip(dims, value.shape)):
            raise errors.op_error(
                errors.InvalidArgumentError, f"Incompatible shapes at component {i} of the "
                "iterator's element", ctx.op,
                expected=[-1 if d is None else d for d in dims], got=list(value.shape))


def iterator_anchor(shared_name: str, output_types, output_shapes, name=None):
    return apply_op("IteratorAnchor", [],
                    {"shared_name": shared_name, "output_types": list(output_types),
                     "output_shapes": [TensorShape(s) for s in output_shapes]},
                    name=name or "Iterator")


def iterator_init(shared_name: str, arrays, output_types, pipeline, slices: bool, copy,
                  maps=(), name=None):
    return apply_op("IteratorInit", list(arrays),
                    {"shared_name": shared_name, "output_types": list(output_types),
                     "pipeline": pipeline, "slices": bool(slices),
                     "copy": [bool(c) for c in copy], "maps": list(maps)},
                    name=name or "MakeIterator")


def iterator_get_next(shared_name: str, output_types, output_shapes, arrays=(),
                      pipeline=(), slices: bool = True, maps=(), name=None) -> list:
    op = apply_op("IteratorGetNext", list(arrays),
                  {"shared_name": shared_name, "output_types": list(output_types),
                   "output_shapes": [TensorShape(s) for s in output_shapes],
                   "pipeline": list(pipeline), "slices": bool(slices), "maps": list(maps)},
                  name=name or "IteratorGetNext")
    return list(op.outputs)
