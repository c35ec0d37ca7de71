"""import_graph_def for users: the framework importer plus a check that ops are registered,
TensorFlow's name scope for the imported names, and shapes re-inferred where an
``input_map`` replaces an imported tensor."""

from __future__ import annotations

from mpiflow.framework import graph_def as _graph_def
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import BuildContext, get_op_def, registered_op_types


def import_graph_def(graph_def, input_map=None, return_elements=None, name=None):
    """Import a GraphDef dict into the default graph; every op type must be registered.

    The imported names go under a new name scope ``name`` (default "import"), opened as
    ``mf.name_scope`` opens one: inside the current scope, made unique ("import_1" for a
    second import), re-entered as is if ``name`` ends with '/'; ``name=""`` keeps the
    GraphDef's names. ``input_map`` values may be anything ``convert_to_tensor`` takes.

    Returns:
        The elements named in ``return_elements`` (or None).
    """
    graph = get_default_graph()
    mapped = {key: convert_to_tensor(value) for key, value in (input_map or {}).items()}
    if name == "":
        prefix = ""
    else:
        with graph.name_scope("import" if name is None else name) as scope:
            prefix = scope[:-1]
    return _graph_def.import_graph_def(graph_def, name=prefix, graph=graph,
                                       input_map=mapped, return_elements=return_elements,
                                       known_op_types=set(registered_op_types()),
                                       infer=_infer_specs)


def _infer_specs(op_type, name, inputs, attrs):
    """Output specs of an imported node from the tensors it reads in this graph."""
    build = BuildContext(name, op_type, list(inputs), dict(attrs))
    return get_op_def(op_type).infer(build)
