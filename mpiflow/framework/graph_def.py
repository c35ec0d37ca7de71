"""GraphDef: a graph as plain data (dicts, lists, str, int, float, bool, bytes).

The format mirrors TensorFlow's NodeDef (``name``, ``op``, ``input`` with ``^ctrl`` for
control inputs, ``device``, ``attr``) and adds ``output`` (dtype and static shape of each
output), so a GraphDef is self-contained: importing it needs no shape functions. Every
value is msgpack- and JSON-friendly; attrs that are DTypes, shapes or arrays are tagged
one-key dicts. This is what partitions are shipped to other ranks as.
"""

from __future__ import annotations

import heapq

import msgpack
import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Graph, Operation, get_default_graph, validate_op_name
from mpiflow.framework.tensor_shape import TensorShape

GRAPH_DEF_VERSION = 1
_PLAIN = (bool, int, float, str, bytes, type(None))


def encode_attr(value):
    """Return ``value`` as plain data, tagging DTypes, shapes and arrays."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dtypes.DType):
        return {"dtype": value.name}
    if isinstance(value, TensorShape):
        return {"shape": value.dims}
    if isinstance(value, np.ndarray):
        # np.ascontiguousarray would turn a 0-d array into shape (1,).
        array = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        return {"tensor": {"dtype": dtypes.from_numpy(array).name, "shape": list(array.shape),
                           "data": array.tobytes()}}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [encode_attr(v) for v in value]
    raise errors.InvalidArgumentError(
        f"Attr value {value!r} of type {type(value).__name__} cannot be serialised: expected "
        "bool, int, float, str, bytes, None, DType, TensorShape, ndarray or a list of them")


def decode_attr(value):
    """Invert ``encode_attr``; reject dicts that are not one of the known tags."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list):
        return [decode_attr(v) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        (tag, payload), = value.items()
        if tag == "dtype":
            return dtypes.as_dtype(payload)
        if tag == "shape":
            return TensorShape(payload)
        if tag == "tensor":
            dtype = dtypes.as_dtype(payload["dtype"]).np_dtype
            shape = tuple(payload["shape"])
            data = payload["data"]
            expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if not isinstance(data, (bytes, bytearray)) or len(data) != expected:
                raise errors.DataLossError(
                    f"Tensor attr of dtype {dtype} and shape {list(shape)}: expected "
                    f"{expected} bytes of data, got "
                    f"{len(data) if isinstance(data, (bytes, bytearray)) else type(data)}")
            return np.frombuffer(bytes(data), dtype=dtype).reshape(shape).copy()
    raise errors.InvalidArgumentError(f"Malformed attr value in GraphDef: {value!r}")


def node_def(op: Operation) -> dict:
    """Return one op as a NodeDef-like dict."""
    inputs = [t.name for t in op.inputs] + ["^" + c.name for c in op.control_inputs]
    return {
        "name": op.name,
        "op": op.type,
        "input": inputs,
        "device": op.device,
        "attr": {k: encode_attr(v) for k, v in sorted(op._attrs.items())},
        "output": [{"dtype": t.dtype.name, "shape": t.shape.dims} for t in op._outputs],
    }


def as_graph_def(graph: Graph, ops=None) -> dict:
    """Return ``graph`` (or just ``ops`` of it, in graph order) as a GraphDef dict."""
    selected = graph.get_operations() if ops is None else sorted(ops, key=lambda o: o._id)
    return {"versions": {"producer": GRAPH_DEF_VERSION},
            "node": [node_def(op) for op in selected]}


def to_bytes(graph_def: dict) -> bytes:
    """``graph_def`` as one bytes value (msgpack): how a graph travels as an op's attr (a
    ``Dataset.map`` function in its iterator's ops), since attr values hold no dicts."""
    return msgpack.packb(graph_def, use_bin_type=True)


def from_bytes(data: bytes) -> dict:
    """The GraphDef dict that ``to_bytes`` made ``data`` of."""
    return msgpack.unpackb(bytes(data), raw=False)


def import_graph_def(graph_def: dict, name: str = "import", graph: Graph = None,
                     input_map=None, return_elements=None, known_op_types=None,
                     infer=None):
    """Add the nodes of ``graph_def`` to ``graph`` (default graph) under prefix ``name``.

    Args:
        graph_def: a dict from ``as_graph_def`` (or msgpack/JSON of one).
        name: prefix for imported names; "" imports names unchanged.
        input_map: {"name:0": Tensor} replacing imported tensors by existing ones ("name"
            stands for "name:0"); each key must name an output of a node of ``graph_def``
            and each Tensor have that output's dtype.
        return_elements: names of imported tensors/ops to return.
        known_op_types: if given, a container of registered op types; unknown types fail.
        infer: if given, ``infer(op_type, name, inputs, attrs)`` returns the output specs
            of a node that reads a mapped tensor, directly or not (its stored shapes were
            those of the tensors it read before); otherwise they are taken as stored.

    Returns:
        The list of elements named in ``return_elements`` (or None).
    """
    graph = graph if graph is not None else get_default_graph()
    _check_graph_def(graph_def)
    nodes = {n["name"]: n for n in graph_def["node"]}
    prefix = (name + "/") if name else ""
    input_map = _checked_input_map(input_map, nodes)
    created = {}
    reinferred = set()          # nodes whose outputs' shapes follow a mapped tensor

    def resolve_tensor(ref, node_name):
        if ref in input_map:
            return input_map[ref]
        op_name, _, index = ref.rpartition(":")
        if op_name not in created:
            raise errors.InvalidArgumentError(
                f"GraphDef node '{node_name}' has input '{ref}' that names no node")
        outputs = created[op_name]._outputs
        if not index.isdigit() or int(index) >= len(outputs):
            raise errors.InvalidArgumentError(
                f"GraphDef node '{node_name}' has input '{ref}': node '{op_name}' has "
                f"{len(outputs)} outputs")
        return outputs[int(index)]

    for node in _topological(nodes):
        if known_op_types is not None and node["op"] not in known_op_types:
            raise errors.NotFoundError(
                f"GraphDef node '{node['name']}' has op type '{node['op']}', which is not "
                "registered")
        data_inputs = [i for i in node["input"] if not i.startswith("^")]
        ctrl_inputs = [i[1:] for i in node["input"] if i.startswith("^")]
        inputs = [resolve_tensor(i, node["name"]) for i in data_inputs]
        controls = [created[c] for c in ctrl_inputs]
        attrs = {k: decode_attr(v) for k, v in node["attr"].items()}
        if "_class" in attrs and prefix:
            attrs["_class"] = [g.replace("loc:@", "loc:@" + prefix, 1) for g in attrs["_class"]]
        specs = [(dtypes.as_dtype(o["dtype"]), TensorShape(o["shape"])) for o in node["output"]]
        full_name = prefix + node["name"]
        if infer is not None and any(i in input_map or i.rpartition(":")[0] in reinferred
                                     for i in data_inputs):
            specs = infer(node["op"], full_name, inputs, attrs)
            reinferred.add(node["name"])
        with graph.name_scope(None):    # names are full names, whatever scope is open
            if full_name in graph._ops_by_name:
                full_name = graph.unique_name(full_name)
            else:
                graph.unique_name(full_name)
        with graph.device(None), graph.colocate_with(None, ignore_existing=True), \
                graph.control_dependencies(None):
            op = graph.create_op(node["op"], inputs, attrs, specs, full_name,
                                 control_inputs=controls, device=node["device"] or None)
        created[node["name"]] = op
    if return_elements is None:
        return None
    result = []
    for ref in return_elements:
        op_name, sep, index = ref.rpartition(":")
        if sep and index.isdigit() and (ref in input_map or op_name in created):
            result.append(resolve_tensor(ref, "return_elements"))
        elif ref in created:
            result.append(created[ref])
        else:
            raise errors.NotFoundError(f"return_elements names '{ref}', which was not imported")
    return result


def _checked_input_map(input_map, nodes: dict) -> dict:
    """``input_map`` with "name" keys as "name:0", each key checked to name an output of
    a node of the GraphDef, and each Tensor to have that output's dtype."""
    checked = {}
    for key, tensor in (input_map or {}).items():
        ref = key if ":" in key else key + ":0"
        op_name, _, index = ref.rpartition(":")
        node = nodes.get(op_name)
        if node is None or not index.isdigit() or int(index) >= len(node["output"]):
            raise errors.InvalidArgumentError(
                f"import_graph_def: input_map key '{key}' names no output of a node in the "
                f"GraphDef: expected 'node_name:index' of one of its "
                f"{len(nodes)} nodes")
        expected = dtypes.as_dtype(node["output"][int(index)]["dtype"])
        if tensor.dtype is not expected:
            raise errors.InvalidArgumentError(
                f"import_graph_def: input_map maps '{ref}' ({expected.name}) to tensor "
                f"'{tensor.name}' of dtype {tensor.dtype.name}: expected a {expected.name} "
                "tensor")
        if ref in checked:
            raise errors.InvalidArgumentError(
                f"import_graph_def: input_map maps '{ref}' twice")
        checked[ref] = tensor
    return checked


def _check_graph_def(graph_def) -> None:
    if not isinstance(graph_def, dict) or not isinstance(graph_def.get("node"), list):
        raise errors.InvalidArgumentError(
            "Malformed GraphDef: expected a dict with a 'node' list")
    seen = set()
    for node in graph_def["node"]:
        if not isinstance(node, dict):
            raise errors.InvalidArgumentError(f"Malformed GraphDef node {node!r}: not a dict")
        missing = {"name", "op", "input", "device", "attr", "output"} - set(node)
        if missing:
            raise errors.InvalidArgumentError(
                f"Malformed GraphDef node {node.get('name', '?')!r}: missing {sorted(missing)}")
        validate_op_name(node["name"])
        if node["name"] in seen:
            raise errors.InvalidArgumentError(
                f"Malformed GraphDef: node name '{node['name']}' appears twice")
        seen.add(node["name"])


def _topological(nodes: dict) -> list:
    """Order NodeDefs so every node follows its inputs (Kahn, ties by position, so an
    already ordered GraphDef keeps its order); reject cycles."""
    def deps(node):
        return {i.lstrip("^").rpartition(":")[0] if not i.startswith("^") else i[1:]
                for i in node["input"]}
    pending = {}
    users = {name: [] for name in nodes}
    for name, node in nodes.items():
        known = {d for d in deps(node) if d in nodes}
        pending[name] = len(known)
        for d in known:
            users[d].append(name)
    position = {name: i for i, name in enumerate(nodes)}
    ready = [(position[n], n) for n in nodes if pending[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(nodes[name])
        for u in users[name]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, (position[u], u))
    if len(order) != len(nodes):
        stuck = sorted(n for n in nodes if pending[n] > 0)
        raise errors.InvalidArgumentError(f"GraphDef has a cycle through nodes {stuck[:5]}")
    return order
