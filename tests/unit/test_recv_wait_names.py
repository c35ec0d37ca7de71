"""A step that waits for a peer names what it waits for in the graph's own names: the
tensor a Recv brings (not only the partitioner's edge key), or, for a control edge, the
ops whose end the token tells; a timeout's message carries it."""

import mpiflow as mf
from mpiflow.framework.graph_def import decode_attr
from mpiflow.runtime.executor import schedule
from mpiflow.runtime.partition import partition
from mpiflow.runtime.transfers import RecvWait

PS, WORKER = ("ps", 0), ("worker", 0)


def _worker_recvs(fetches, targets):
    graph = mf.get_default_graph()
    order = schedule(graph, fetches, targets, set())
    pieces = partition(order, lambda op: PS if "/job:ps" in op.device else WORKER, [],
                       fetches, WORKER, {PS: 0, WORKER: 1}.__getitem__)
    return [node for node in pieces.nodes[WORKER] if node["op"] == "_Recv"]


def _describe(node):
    attr = {k: decode_attr(v) for k, v in node["attr"].items()}
    return RecvWait(attr["edge"], attr["peer"], attr["carries"]).describe(
        lambda rank: f"rank {rank}")


def test_a_wait_for_a_tensor_names_the_tensor_and_the_edge():
    with mf.device("/job:ps/task:0"):
        v = mf.get_variable("v", [3], initializer=mf.zeros_initializer())
        total = mf.reduce_sum(v, name="total")
    (recv,) = _worker_recvs([mf.identity(total)], [])
    said = _describe(recv)
    assert said.startswith("tensor 'total:0' from rank 0 (edge 'mpiflow_transfer/edge_"), said


def test_a_wait_for_a_control_edge_names_the_ops_it_follows():
    with mf.device("/job:ps/task:0"):
        v = mf.get_variable("v", [3], initializer=mf.zeros_initializer())
        bump = mf.assign_add(v, [1.0, 1.0, 1.0], name="bump")
    with mf.device("/job:worker/task:0"), mf.control_dependencies([bump]):
        done = mf.no_op(name="done")
    (recv,) = _worker_recvs([], [done])
    assert _describe(recv).startswith("the word that op(s) 'bump' ran from rank 0 (edge "), \
        _describe(recv)
