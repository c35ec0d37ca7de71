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

import time
from typing import NamedTuple

import numpy as np

from mpiflow import backend
from mpiflow.comm.rendezvous import Rendezvous
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
    """What a compiled Recv does: wait for ``edge`` from ``peer``; land it on ``gpu``.
    ``carries``: what travels on the edge, in the user's names (for messages)."""

    edge: str
    peer: int
    gpu: int | None
    carries: str = ""


class RecvWait(NamedTuple):
    """What a step waiting in a Recv yields to whoever drives it."""

    edge: str
    peer: int
    carries: str = ""

    def describe(self, describe_rank) -> str:
        if not self.carries:
            return f"tensor '{self.edge}' from {describe_rank(self.peer)}"
        return f"{self.carries} from {describe_rank(self.peer)} (edge '{self.edge}')"


def send_node(name: str, tensor_name: str, device: str, edge: str, peer: int,
              to_device: str) -> dict:
    """The ``_Send`` node of ``edge``: ``tensor_name`` to rank ``peer``, whose Recv is on
    ``to_device``."""
    attrs = validated_attrs("_Send", {"edge": edge, "peer": peer,
                                      "to_gpu": backend.device_type(to_device) == "GPU"}, name)
    return {"name": name, "op": "_Send", "input": [tensor_name], "device": device,
            "attr": {k: encode_attr(v) for k, v in attrs.items()}, "output": []}


def recv_node(name: str, device: str, edge: str, peer: int, dtype, shape,
              carries: str = "") -> dict:
    """The ``_Recv`` node of ``edge``: a ``dtype`` tensor of ``shape`` from rank ``peer``;
    ``carries`` says what, in the graph's names, for a wait's message."""
    attrs = validated_attrs("_Recv", {"edge": edge, "peer": peer, "dtype": dtype,
                                      "shape": shape, "carries": carries}, name)
    return {"name": name, "op": "_Recv", "input": [], "device": device,
            "attr": {k: encode_attr(v) for k, v in attrs.items()},
            "output": [{"dtype": dtype.name, "shape": shape.dims}]}


# A partition holds back the small host tensors it sends (gradients pushed to a ps as
# the backward pass makes them) and sends them together: at most this many bytes to a
# peer, which leave as one inline message (``comm.transport.INLINE_MAX_BYTES``; not
# imported: plans of one process never load MPI)...
HOLD_MAX_BYTES = 64 << 10
# ... no later than this after the first of them was held (checked between kernels), and
# at once where the partition waits for anything or ends.
HOLD_S = 100e-6


class StepIO:
    """What a running partition sends its tensors of one step through.

    A partition run for another rank (its client) that ends by sending to that client
    says in that message that it is done (``said_done``): the client learns it with the
    tensors, one message and one wake-up fewer per step (a ps answering a pull).

    Small host tensors are held back and leave together (``HOLD_MAX_BYTES``, ``HOLD_S``):
    every message costs both ranks tens of microseconds of Python, and a model of many
    small variables pushed one message per gradient spent more on that than on its
    compute (200 variables of 4 KiB, 1 ps + 1 worker: 6.9 ms a step against 3.4 in one
    process). A held tensor is late by at most ``HOLD_S`` of this partition's kernels; it
    is never held past a wait of this partition, so no rank ever waits on another for a
    tensor held back. The executor flushes (``flush``) when ``send`` says it holds
    something and the partition is about to wait, ends, or is past ``hold_deadline``.
    What is held is referenced, not copied: a sent tensor is never written in place
    (a Send reads it, so no kernel owns it outright), and a variable's buffer (a guarded
    value) is never held.
    """

    __slots__ = ("_held", "_rendezvous", "client", "hold_deadline", "said_done", "step",
                 "transport")

    def __init__(self, transport, client: int, step: int, rendezvous=None):
        self.transport = transport
        self.client = client
        self.step = step
        self.said_done = False
        self._held = {}                 # peer -> [edges, values, bytes]
        self.hold_deadline = 0.0
        # Where the rank's delivered tensors wait, by (client, step, edge).
        self._rendezvous = Rendezvous() if rendezvous is None else rendezvous

    def take(self, edge):
        """The tensor of ``edge`` if it has arrived (taken: it is this step's), else
        MISSING: a Recv whose tensor came with an earlier one (a pull's message of many)
        goes on without parking its step."""
        return self._rendezvous.take((self.client, self.step, edge))

    def send(self, group: SendGroup, values) -> bool:
        """Send ``values`` as ``group`` says, or hold them back to leave with later ones;
        return whether any tensor is held now. A variable's buffer is not written until
        the send is done with it (the transport's guard on its name)."""
        held = self._held.get(group.peer)
        if not group.to_gpu and not group.last and group.guards.count(None) == \
                len(group.guards):
            nbytes = 0
            for value in values:
                if type(value) is not np.ndarray:
                    break
                nbytes += value.nbytes
            else:
                if held is None:
                    if nbytes <= HOLD_MAX_BYTES:
                        if not self._held:
                            self.hold_deadline = time.perf_counter() + HOLD_S
                        self._held[group.peer] = [list(group.edges), list(values), nbytes]
                        return True
                elif held[2] + nbytes <= HOLD_MAX_BYTES:
                    held[0].extend(group.edges)
                    held[1].extend(values)
                    held[2] += nbytes
                    return True
        if group.last and self._held:
            for peer in [p for p in self._held if p != group.peer]:
                self._send(peer, *self._held.pop(peer)[:2])
        edges, guards = group.edges, group.guards
        if held is not None:            # what waits for this peer leaves first
            del self._held[group.peer]
            if group.to_gpu:            # on its own: it lands in host memory
                self._send(group.peer, *held[:2])
            else:                       # with this message
                edges, values = held[0] + list(edges), held[1] + list(values)
                guards = (None,) * len(held[1]) + tuple(guards)
        self._send(group.peer, edges, values, guards, group.to_gpu, group.last)
        return bool(self._held)

    def flush(self) -> None:
        """Send every tensor held back, one message per peer."""
        held, self._held = self._held, {}
        for peer, (edges, values, _) in held.items():
            self._send(peer, edges, values)

    def _send(self, peer, edges, values, guards=(), to_gpu=False, last=False) -> None:
        header = {"k": "t", "c": self.client, "s": self.step, "e": edges}
        if last and peer == self.client and self.client != self.transport.rank:
            header["d"] = 1
            self.said_done = True
        self.transport.send(peer, header, values, guards=guards, to_gpu=to_gpu)
