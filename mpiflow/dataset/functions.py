"""``Dataset.map`` functions traced into graphs of their own, as tf.data traces them.

``map()`` calls its function at once on placeholders of one element (its dtypes and
static shapes) in a private ``FunctionGraph``: that gives the mapped dataset's
``output_types`` and ``output_shapes`` without an iterator, and a graph the dataset
engine can run on each element by itself (``ops.dataset_maps``), which a map followed by
a ``batch`` needs: TF calls the function per element, and a function run on a whole batch
instead is silently wrong for many functions (``x - tf.reduce_mean(x)``, a random flip
per image). The traced graph travels in the iterator's ops as plain data (``attr``).

A function that reads a tensor of the outer graph (a placeholder, a variable) cannot run
outside that graph, so tracing it fails (``CaptureError``); ``Dataset`` keeps the failure
and raises it only where the trace is needed, since a map after the last batch still
runs in the outer graph, on the batch, as before.
"""

from __future__ import annotations

from typing import NamedTuple

from mpiflow import errors
from mpiflow.dataset import structure
from mpiflow.framework.graph import Graph, Tensor
from mpiflow.framework.graph_def import to_bytes
from mpiflow.ops.constant_ops import convert_to_tensor, placeholder

# Op types a traced function may not hold: the engine runs it in a session of its own,
# where a variable would be a new, uninitialized one rather than the model's.
_REFUSED_TYPES = {"VariableV2": "creates a variable"}


class CaptureError(errors.UnimplementedError):
    """A map function reads a tensor of the outer graph."""


class FunctionGraph(Graph):
    """The private graph a map function is traced in; it has the outer graph's seed, so
    random ops inside draw from (graph seed, op seed) as mpiflow's random ops do."""

    def __init__(self, what: str, seed):
        super().__init__()
        self.seed = seed
        self.what = what

    def foreign_input_error(self, tensor, op_name: str, op_type: str, index: int):
        return _capture_error(self.what, tensor, f"op '{op_name}' ({op_type})")


def _capture_error(what: str, tensor, where: str) -> CaptureError:
    return CaptureError(
        f"{what} reads tensor '{tensor.name}' of the outer graph ({where} of the function): "
        "mpiflow runs a map function on each element in a graph of its own, as tf.data "
        "does, and it cannot read a placeholder or variable of your graph there; pass the "
        "value as a component of the dataset (Dataset.zip or from_tensor_slices), or map "
        "after batching, where the function runs in your graph on the batch")


class Traced(NamedTuple):
    """One or more map functions traced as one: the GraphDef (msgpack bytes), the names
    of the element's input and output tensors, and the structure it gives."""

    name: str
    graph: bytes
    inputs: tuple
    outputs: tuple
    template: object
    specs: tuple

    def attr(self, level: int) -> list:
        """Plain data for the iterator's ``maps`` attr (``ops.dataset_maps``): applied
        after ``level`` batches, to each element of that depth."""
        return [int(level), self.name, self.graph, list(self.inputs), list(self.outputs)]


def describe(map_funcs) -> str:
    """``Dataset.map(parse)`` or ``Dataset.map(parse).map(<lambda>)``, for messages."""
    return "Dataset" + "".join(
        f".map({getattr(fn, '__name__', type(fn).__name__)})" for fn in map_funcs)


def call(fn, element):
    """``fn`` on one element as tf.data calls it (a plain tuple's parts as arguments),
    its result's leaves made tensors."""
    out = fn(*element) if type(element) is tuple else fn(element)
    if isinstance(out, list):
        out = tuple(out)
    leaves, template = structure.flatten(out)
    return structure.pack(template, [convert_to_tensor(v) for v in leaves])


def trace(map_funcs, template, specs, seed) -> Traced:
    """Trace ``map_funcs`` (applied in order) on one element of ``template``/``specs``.

    Raises:
        CaptureError: a function reads a tensor of the outer graph.
        UnimplementedError: a function creates a variable.
    """
    what = describe(map_funcs)
    graph = FunctionGraph(what, seed)
    with graph.as_default():
        args = [placeholder(dt, shape, name=f"args_{i}") for i, (dt, shape) in enumerate(specs)]
        element = structure.pack(template, args)
        for fn in map_funcs:
            element = call(fn, element)
    leaves, out_template = structure.flatten(element)
    for i, t in enumerate(leaves):
        if isinstance(t, Tensor) and t.graph is not graph:
            raise _capture_error(what, t, f"output {i}")
    for op in graph.get_operations():
        if op.type in _REFUSED_TYPES:
            raise errors.UnimplementedError(
                f"{what} {_REFUSED_TYPES[op.type]} ('{op.name}'): a map function runs on "
                "each element in a graph of its own and cannot hold model state; create "
                "variables outside the function")
    return Traced(what, to_bytes(graph.as_graph_def()), tuple(t.name for t in args),
                  tuple(t.name for t in leaves), out_template,
                  tuple((t.dtype, t.shape) for t in leaves))
