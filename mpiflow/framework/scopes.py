"""Module-level scope functions acting on the default graph (``mf.name_scope`` etc.)."""

from __future__ import annotations

from mpiflow.framework.graph import get_default_graph


def name_scope(name, default_name=None, values=None):
    """Open a name scope on the default graph (``default_name`` when ``name`` is None)."""
    return get_default_graph().name_scope(name if name is not None else default_name)


def device(device_name_or_function):
    """Place ops created inside on a device string or by a device function."""
    return get_default_graph().device(device_name_or_function)


def control_dependencies(control_inputs):
    return get_default_graph().control_dependencies(control_inputs)


def colocate_with(op, ignore_existing=False):
    return get_default_graph().colocate_with(op, ignore_existing)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key):
    return get_default_graph().get_collection_ref(key)
