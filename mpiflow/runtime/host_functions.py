"""Graphs a kernel runs by itself on the host: the function of a ``Dataset.map`` that the
dataset engine applies to each element (``ops.dataset_maps``).

A function is imported once into a Graph of its own and run by a session of its own,
in this process, with every GPU hidden (the dataset's arrays are host memory and an
element is small: a copy to a device and back per element would cost more than the
function), through ``make_callable``, the session's fast path. ``kernel_env`` imports
this module when a kernel first asks for a function, as the session imports it.
"""

from __future__ import annotations

from mpiflow.framework.graph import Graph
from mpiflow.framework.graph_def import from_bytes, import_graph_def
from mpiflow.runtime.session import Session
from mpiflow.runtime.session_options import ConfigProto


class FunctionSession(Session):
    """A function's session. Its runs are parts of the step of the kernel that calls it,
    not steps of their own: they are not counted in the rank's whereabouts (a report
    would show one step per element), traced or timed out apart from that step."""

    def _run_plan(self, plan, feed_values, options, run_metadata):
        return plan.run(feed_values, None, None)


def host_function(graph_def: bytes, inputs, outputs):
    """``f(*values)``: the values of ``outputs`` (tensor names of the graph in
    ``graph_def``, msgpack bytes) with ``inputs`` fed ``values``, as a list."""
    graph = Graph()
    with graph.as_default():
        import_graph_def(from_bytes(graph_def), name="")
    session = FunctionSession(graph=graph, config=ConfigProto(
        device_count={"GPU": 0}, allow_soft_placement=True))
    return session.make_callable(list(outputs), list(inputs))
