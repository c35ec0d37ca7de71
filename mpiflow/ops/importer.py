"""import_graph_def for users: the framework importer plus a check that ops are registered."""

from __future__ import annotations

from mpiflow.framework import graph_def as _graph_def
from mpiflow.ops.registry import registered_op_types


def import_graph_def(graph_def, input_map=None, return_elements=None, name=None):
    """Import a GraphDef dict into the default graph; every op type must be registered.

    Returns:
        The elements named in ``return_elements`` (or None).
    """
    return _graph_def.import_graph_def(graph_def, name="import" if name is None else name,
                                       input_map=input_map, return_elements=return_elements,
                                       known_op_types=set(registered_op_types()))
