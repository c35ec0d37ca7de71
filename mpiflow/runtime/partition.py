"""Partition: split one step's ordered ops by task and join the pieces with Send/Recv.

Each tensor that a task needs from another task crosses once (one _Send/_Recv pair per
(tensor, destination task), keyed by a unique edge name); a control dependency that
crosses tasks becomes a tiny token sent the same way, one per (op, task it waits on) however
many of that task's ops it waits for (``transfers`` builds the nodes).
Every piece lists its nodes in the order of one global topological order of the whole
step, which is what lets each rank run its piece front to back without deadlock. A
Send/Recv pair sits in both pieces where its tensor is produced in that order (not where
it is first consumed): a rank then waits for what another sends it as early as the order
allows, so a ps whose piece changes state (an apply, an accumulator take) has received
everything of the step that does not depend on its own results before its first change,
and a client lost in the middle of a step leaves nothing half applied there. Fetches
alone cross at the end of the step (a read of a variable where it is read, as one
process copies it there). Feeds enter the client's piece as
placeholders; fetches computed elsewhere are sent to it. Ops keep their devices (CPU or
GPU): a Send sits on its tensor's device and a Recv on its first consumer's, so a GPU
tensor goes to MPI from the GPU and arrives for a GPU consumer; within one rank, values
cross between host and GPU through copies the executor adds where it compiles a piece.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mpiflow.framework import dtypes
from mpiflow.framework.graph_def import encode_attr, node_def
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.runtime import transfers
from mpiflow.runtime.schedule import fetch_is_copied

_INT32 = dtypes.int32
_SCALAR = TensorShape([])


@dataclasses.dataclass
class Partitions:
    """The pieces of one step: GraphDef node lists per task, and the client's names."""

    nodes: dict                 # (job, task) -> [node dict]
    feed_names: list            # client-piece tensor names standing for each feed
    fetch_names: list           # client-piece tensor names holding each fetch


def partition(order, task_of, feed_tensors, fetch_tensors, client_task, rank_of,
              device_of=None) -> Partitions:
    """Split ``order`` (ops in a global topological order) into per-task node lists.

    Args:
        order: the step's ops, each placed (``task_of(op) -> (job, task)``).
        feed_tensors: tensors fed by the client, in feed order.
        fetch_tensors: tensors the client fetches, in fetch order.
        client_task: the (job, task) of the process running the step.
        rank_of: ``(job, task) -> MPI rank``.
        device_of: ``op -> DeviceSpec`` of its placed device (default: its task's CPU).
    """
    builder = _Builder(order, task_of, client_task, rank_of, device_of)
    feed_names = builder.add_feeds(feed_tensors)
    for op in order:
        builder.add_op(op)
    # Fetches cross last, after every op of the step, the client waiting for them only
    # there; but a fetch that may be a variable's memory (a read of it, a view of one)
    # crosses where it is read, as one process copies it there: a fetched variable shows
    # the value it had at that point of the step in every mode, not what a later write of
    # the same step left (ps mode once fetched the global step after the step's increment,
    # one process and allreduce mode before it).
    fed = set(feed_tensors)
    fetch_names = [builder.tensor_on(t, client_task,
                                     at=None if fetch_is_copied(t, fed) else len(order))
                   for t in fetch_tensors]
    return Partitions(builder.pieces(), feed_names, fetch_names)


class _Builder:
    def __init__(self, order, task_of, client_task, rank_of, device_of):
        self.task_of = task_of
        self.device_of = device_of
        self.client_task = client_task
        self.rank_of = rank_of
        self.nodes = {client_task: []}  # task -> [(place in the global order, node)]
        self.at = -1                # the place of the op being added; feeds: -1
        self.produced_at = {}       # tensor or op -> its place in the global order
        self.located = {}           # tensor -> (task, name) where its value is produced
        self.devices = {}           # tensor name -> device string of its producer
        self.received = {}          # (name, task) -> local name of the received copy
        taken = {op.name for op in order}
        prefix = "mpiflow_transfer"
        while any(name.startswith(prefix) for name in taken):
            prefix += "_"
        self.prefix = prefix
        self.count = 0

    def _append(self, task, node, at=None) -> None:
        """Add ``node`` to ``task``'s piece at place ``at`` (default: the op being
        added's); ties keep the order of appending."""
        piece = self.nodes.setdefault(task, [])
        piece.append(((self.at if at is None else at, len(piece)), node))

    def pieces(self) -> dict:
        """Each task's nodes, in the global order."""
        return {task: [node for _, node in sorted(keyed, key=lambda k: k[0])]
                for task, keyed in self.nodes.items()}

    def _device(self, task):
        return f"/job:{task[0]}/replica:0/task:{task[1]}/device:CPU:0"

    def _op_device(self, op, task):
        return self._device(task) if self.device_of is None else \
            self.device_of(op).to_string()

    def _fresh(self, kind):
        self.count += 1
        return f"{self.prefix}/{kind}_{self.count}"

    def add_feeds(self, feed_tensors):
        names = []
        for t in feed_tensors:
            name = self._fresh("feed")
            self._append(self.client_task, {
                "name": name, "op": "Placeholder", "input": [],
                "device": self._device(self.client_task),
                "attr": {"dtype": encode_attr(t.dtype), "shape": encode_attr(t.shape)},
                "output": [{"dtype": t.dtype.name, "shape": t.shape.dims}]})
            self.located[t] = (self.client_task, f"{name}:0")
            self.produced_at[t] = -1
            names.append(f"{name}:0")
        return names

    def add_op(self, op):
        self.at += 1
        self.produced_at[op] = self.at
        task = self.task_of(op)
        node = node_def(op)
        node["device"] = self._op_device(op, task)
        node["input"] = [self.tensor_on(t, task, node["device"]) for t in op.inputs] + \
            ["^" + name for name in self._controls_on(op.control_inputs, task)]
        self._append(task, node)
        for t in op.outputs:
            self.located.setdefault(t, (task, t.name))
            self.produced_at.setdefault(t, self.at)
            self.devices.setdefault(t.name, node["device"])

    def tensor_on(self, tensor, task, device=None, at=None) -> str:
        """Name of ``tensor``'s value on ``task``, adding a Send/Recv pair if it crosses
        (the Recv on ``device``, the consumer's; both where ``tensor`` is produced in the
        global order, or at ``at``)."""
        src_task, name = self.located[tensor]
        if src_task == task:
            return name
        key = (name, task)
        if key not in self.received:
            self.received[key] = self._transfer(
                name, src_task, task, tensor.dtype, tensor.shape,
                self.produced_at[tensor] if at is None else at, device)
        return self.received[key]

    def _controls_on(self, ops, task) -> list:
        """Names on ``task`` to wait for before an op with control inputs ``ops``: the ops
        of ``task`` itself, and one token per other task for all of that task's ops."""
        names, elsewhere = [], {}
        for op in ops:
            src_task = self.task_of(op)
            if src_task == task:
                names.append(op.name)
            else:
                elsewhere.setdefault(src_task, []).append(op)
        for src_task, src_ops in elsewhere.items():
            names.append(self._token_on(src_task, src_ops, task))
        return names

    def _token_on(self, src_task, ops, task) -> str:
        """A token sent from ``src_task`` to ``task`` once all of ``ops`` (on
        ``src_task``) have run: one scalar however many ops, sent where the last of them
        is in the global order (a push's applies owe their worker one token, not one
        each)."""
        key = ("^", tuple(sorted(op.name for op in ops)), task)
        if key not in self.received:
            token = self._fresh("token")
            at = max(self.produced_at[op] for op in ops)
            self._append(src_task, {
                "name": token, "op": "Const", "input": ["^" + op.name for op in ops],
                "device": self._device(src_task),
                "attr": {"value": encode_attr(np.zeros((), np.int32)),
                         "dtype": encode_attr(_INT32)},
                "output": [{"dtype": "int32", "shape": []}]}, at)
            names = ", ".join(f"'{op.name}'" for op in sorted(ops, key=lambda o: o.name)[:3])
            more = f" and {len(ops) - 3} more" if len(ops) > 3 else ""
            recv = self._transfer(f"{token}:0", src_task, task, _INT32, _SCALAR, at,
                                  carries=f"the word that op(s) {names}{more} ran")
            self.received[key] = recv.rsplit(":", 1)[0]
        return self.received[key]

    def _transfer(self, name, src_task, dst_task, dtype, shape, at,
                  dst_device=None, carries=None) -> str:
        """Add a Send/Recv pair for ``name``, both at ``at``: where it was produced;
        ``carries`` says what for a wait's message (default: tensor ``name``)."""
        edge = self._fresh("edge")
        send, recv = self._fresh("send"), self._fresh("recv")
        dst_device = dst_device or self._device(dst_task)
        self._append(src_task, transfers.send_node(
            send, name, self.devices.get(name, self._device(src_task)), edge,
            self.rank_of(dst_task), dst_device), at)
        self._append(dst_task, transfers.recv_node(
            recv, dst_device, edge, self.rank_of(src_task), dtype, shape,
            f"tensor '{name}'" if carries is None else carries), at)
        return f"{recv}:0"
