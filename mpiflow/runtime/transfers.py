"""Send and Recv: how one step's tensors cross between ranks, in one place.

- The nodes: ``send_node``/``recv_node`` build the ``_Send``/``_Recv`` nodes the
  partitioner puts on each edge that crosses ranks, their attrs checked against the ops'
  definitions (``ops/comm_ops.py``), so a shipped partition holds only nodes
  ``import_graph_def`` accepts.
- The steps: a compiled plan runs a Send as ``SendStep`` (edge, peer, the variable whose
  buffer the tensor may be, whether the receiver is on a GPU), Sends that follow each
  other to one peer as one ``SendGroup``, and a Recv as ``RecvStep`` (edge, peer, the GPU
  to land it on); a step waiting for a tensor yields ``RecvWait``.
- The I/O: ``StepIO`` sends a group's tensors as one ``t`` message keyed by (client,
  step) and listing their edges; on arrival the rank service delivers each through the
  rendezvous (``comm/rendezvous.py``) to the step parked on it (``runtime/steps.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from mpiflow import backend
from mpiflow.framework.graph_def import encode_attr
from mpiflow.ops.registry import validated_attrs


class SendStep(NamedTuple):
    """What a compiled Send does: send its input to ``peer`` under ``edge``."""

    edge: str
    peer: int
    variable: str | None     # the variable whose buffer the value may be (zero-copy guard)
    to_gpu: bool             # the Recv sits on a GPU (CUDA-aware MPI lands it there)


class SendGroup(NamedTuple):
    """Sends that follow each other in a plan, to one peer and one side of it (host or
    GPU): they leave as one message, so a ps answering a pull of many variables sends
    one header and its payloads, and the worker handles one arrival, not one per tensor."""

    peer: int
    to_gpu: bool
    sends: tuple             # the SendSteps, in the order of their values
    edges: list              # their edges, as the message lists them
    guards: tuple            # per value: the variable whose buffer it may be, or None
    last: bool = False       # the plan's last step: nothing runs after it

    @classmethod
    def of(cls, sends) -> "SendGroup":
        sends = tuple(sends)
        return cls(sends[0].peer, sends[0].to_gpu, sends, [s.edge for s in sends],
                   tuple(s.variable for s in sends))

    def joins(self, send: SendStep) -> bool:
        """Whether ``send``, coming right after this group in a plan, can travel with it."""
        return send.peer == self.peer and send.to_gpu == self.to_gpu

    @property
    def label(self) -> str:
        return ", ".join(self.edges)


class RecvStep(NamedTuple):
    """What a compiled Recv does: wait for ``edge`` from ``peer``; land it on ``gpu``."""

    edge: str
    peer: int
    gpu: int | None


class RecvWait(NamedTuple):
    """What a step waiting in a Recv yields to whoever drives it."""

    edge: str
    peer: int

    def describe(self, describe_rank) -> str:
        return f"tensor '{self.edge}' from {describe_rank(self.peer)}"


def send_node(name: str, tensor_name: str, device: str, edge: str, peer: int,
              to_device: str) -> dict:
    """The ``_Send`` node of ``edge``: ``tensor_name`` to rank ``peer``, whose Recv is on
    ``to_device``."""
    attrs = validated_attrs("_Send", {"edge": edge, "peer": peer,
                                      "to_gpu": backend.device_type(to_device) == "GPU"}, name)
    return {"name": name, "op": "_Send", "input": [tensor_name], "device": device,
            "attr": {k: encode_attr(v) for k, v in attrs.items()}, "output": []}


def recv_node(name: str, device: str, edge: str, peer: int, dtype, shape) -> dict:
    """The ``_Recv`` node of ``edge``: a ``dtype`` tensor of ``shape`` from rank ``peer``."""
    attrs = validated_attrs("_Recv", {"edge": edge, "peer": peer, "dtype": dtype,
                                      "shape": shape}, name)
    return {"name": name, "op": "_Recv", "input": [], "device": device,
            "attr": {k: encode_attr(v) for k, v in attrs.items()},
            "output": [{"dtype": dtype.name, "shape": shape.dims}]}


class StepIO:
    """What a running partition sends its tensors of one step through.

    A partition run for another rank (its client) that ends by sending to that client
    says in that message that it is done (``said_done``): the client learns it with the
    tensors, one message and one wake-up fewer per step (a ps answering a pull).
    """

    __slots__ = ("client", "step", "transport", "said_done")

    def __init__(self, transport, client: int, step: int):
        self.transport = transport
        self.client = client
        self.step = step
        self.said_done = False

    def send(self, group: SendGroup, values) -> None:
        """Send ``values`` as ``group`` says, in one message; a variable's buffer is not
        written until the send is done with it (the transport's guard on its name)."""
        header = {"k": "t", "c": self.client, "s": self.step, "e": group.edges}
        if group.last and group.peer == self.client and self.client != \
                self.transport.rank:
            header["d"] = 1
            self.said_done = True
        self.transport.send(group.peer, header, values, guards=group.guards,
                            to_gpu=group.to_gpu)
