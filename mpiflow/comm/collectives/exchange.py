"""The pairwise exchange the cross-rank check runs on, and the small tensor it can carry.

Recursive doubling over point-to-point messages: in step k every rank swaps its message
with the rank whose number differs in bit k, and folds what it received into its own, so
after log2(n) steps every rank holds what all hold. Ranks beyond the largest power of two
first hand their message to a partner below it and get the end result back from it.

A message is a 32-byte header (the call's fingerprint, the operation's number, a
"mismatch seen" flag, the payload's size) and, for a small allreduce, the tensor itself
(``Exchange``), summed on the way: the check and the data move in the same messages, so a
4 KiB allreduce costs one exchange's latency instead of two collectives'. Point-to-point
messages are safe whatever the sender sent: each lands in a buffer as long as any rank's
longest, and one of another size than expected (another call's) marks the mismatch,
which a collective with mismatched counts cannot do: that is why the data may travel
before the check has passed.

Sums are bit-identical on every rank: each step adds two partial sums that both partners
hold (``a + b`` on one, ``b + a`` on the other, equal in IEEE arithmetic; a NaN's payload
bits may differ, as they may through MPI's own sums).
"""

from __future__ import annotations

import contextlib
import math
import struct
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from mpiflow import half_floats
from mpiflow.comm.wire_dtypes import HALF_FLOATS
from mpiflow.config import CHECK_CARRY_MAX_BYTES

HEADER_BYTES = 32       # int64: fingerprint, operation number, mismatch flag, payload bytes
FLAG = 2                # the header's "mismatch seen" entry
_HEADER = struct.Struct("=4q")
# One tag on the check duplicate, matched in order: every rank sends to a partner in
# issue order (only the oldest check in flight moves past its first step).
EXCHANGE_TAG = 0x4D4A
# The longest message any rank's exchange sends: its header and the most a check carries.
LANDING_BYTES = HEADER_BYTES + CHECK_CARRY_MAX_BYTES


class Step(NamedTuple):
    """One step of a rank's exchange with ``partner``."""

    partner: int
    receive: str | None     # "incoming" (folded into this rank's message), "stage"
    #                         (replaces it: the end result), or None
    send: bool              # this rank's message goes to the partner
    fold: bool              # the received message is folded into this rank's


def doubling_steps(rank: int, size: int) -> tuple[Step, ...]:
    """Return the steps of ``rank`` in a recursive-doubling exchange among ``size``."""
    p = 1 << (size.bit_length() - 1)        # the largest power of two <= size
    if rank >= p:       # hand this rank's message down, take the end result back
        return (Step(rank - p, None, True, False), Step(rank - p, "stage", False, False))
    partner_above = rank + p < size
    steps = [Step(rank + p, "incoming", False, True)] if partner_above else []
    bit = 1
    while bit < p:
        steps.append(Step(rank ^ bit, "incoming", True, True))
        bit <<= 1
    if partner_above:
        steps.append(Step(rank + p, None, True, False))
    return tuple(steps)


def _fold_function(dtype):
    """How two partial sums of ``dtype`` are added, ``fold(mine, theirs, out)``
    (commutative, as the exchange needs)."""
    if dtype.kind == "b":
        return np.logical_or
    if dtype in HALF_FLOATS:          # kept in the format (compressed gradients)
        return half_floats.add
    return np.add


class Exchange:
    """One check's exchange: the buffers of its messages, this rank's (``stage``) and the
    partner's (``incoming``), each a header and, for a carried allreduce, the tensor
    (``acc``: the running sum in ``stage``; ``received``: the partner's in ``incoming``),
    and how far the steps have come. Reusable: ``begin`` starts it anew once the last
    run is over (a blocking call keeps one per signature, so a call allocates nothing).

    A partner's message lands in ``landing`` (``incoming`` is its start), as long as the
    longest message any rank sends (a header and ``config.CHECK_CARRY_MAX_BYTES``): a
    receive never meets a message longer than its buffer, which Open MPI 5 (shared
    memory) writes whole, past the buffer's end (MPICH stops at it with a truncation
    error). A message of another size than expected is another call's: it marks the
    mismatch and is not read.

    An exchange begun a second time on the same communicator and steps makes its
    messages MPI persistent requests, started again on every later run: a step then
    costs two ``Start`` calls instead of building two requests (0.6 of the 2 us a 2-rank
    step took here), which a small allreduce pays on every call. One begun once (an
    asynchronous check's) never makes them. They are freed when the exchange is
    collected, all of its steps done (inactive requests: MPI touches its buffers no more).

    Args:
        dtype, shape: the carried tensor's dtype and shape; None: the check alone.
    """

    __slots__ = ("_at", "_comm", "_delivered", "_divisor", "_out", "_persistent",
                 "_receive", "_send", "_status", "_steps", "acc", "fold", "header", "held",
                 "incoming", "key", "landing", "nbytes", "own_header", "received", "stage",
                 "their_header")

    def __init__(self, dtype=None, shape: tuple = ()):
        dtype = None if dtype is None else np.dtype(dtype)
        self.key = (dtype, tuple(shape))
        nbytes = 0 if dtype is None else math.prod(shape) * dtype.itemsize
        length = HEADER_BYTES + nbytes
        buf = np.empty(length + max(length, LANDING_BYTES), dtype=np.uint8)
        self.stage, self.landing = buf[:length], buf[length:]
        self.incoming = self.landing[:length]
        self.header = self.stage[:HEADER_BYTES].view(np.int64)
        self.own_header = memoryview(self.stage)[:HEADER_BYTES]
        self.their_header = memoryview(self.incoming)[:HEADER_BYTES]
        self.nbytes = nbytes
        self._steps: tuple[Step, ...] = ()
        self._at = 0
        self._comm = self._receive = self._send = None
        self._status = MPI.Status()
        # [(receive, send)] per step once persistent; None before (or after a cancel)
        self._persistent: list | None = None
        self._out = self._divisor = None
        self._delivered = False
        self.held = 0                   # what the pool counts it at (``ExchangePool``)
        if dtype is None:
            self.acc = self.received = self.fold = None
            return
        # Shaped as the tensor: copies in and out are plain assignments.
        self.acc = self.stage[HEADER_BYTES:].view(dtype).reshape(shape)
        self.received = self.incoming[HEADER_BYTES:].view(dtype).reshape(shape)
        self.fold = _fold_function(dtype)

    def load(self, send, out, divisor: int | None = None) -> None:
        """Copy this rank's tensor in (its dtype and shape): the sum starts from it and
        ends in ``out`` (C-contiguous, of its dtype and shape), divided by ``divisor``
        (an average) unless None. Where this rank's last step folds, the sum of that
        step is written straight into ``out``, once the check has passed."""
        self.acc[...] = send
        self._out, self._divisor, self._delivered = out, divisor, False

    def begin(self, comm, steps: tuple[Step, ...], fingerprint: int, seq: int) -> None:
        """Start the exchange on ``comm`` with this rank's ``steps`` (``doubling_steps``),
        for the call of ``fingerprint`` as operation number ``seq``."""
        _HEADER.pack_into(self.stage, 0, fingerprint, seq, 0, self.nbytes)
        if comm is not self._comm or steps is not self._steps:
            if self._persistent is not None:
                self._free_persistent()
        elif self._persistent is None:
            self._persistent = [self._requests_of(comm, step) for step in steps]
        self._comm, self._steps, self._at = comm, steps, 0
        self._start(0)

    def _requests_of(self, comm, step: Step) -> tuple:
        """A step's persistent (receive, send), None where it has none."""
        receive = send = None
        if step.receive is not None:
            receive = comm.Recv_init([self.landing, MPI.BYTE], step.partner, EXCHANGE_TAG)
        if step.send:
            send = comm.Send_init([self.stage, MPI.BYTE], step.partner, EXCHANGE_TAG)
        return receive, send

    def _start(self, at: int) -> None:
        persistent = self._persistent
        if persistent is not None:
            receive, send = persistent[at]
            if receive is not None:
                receive.Start()
                self._receive = receive
            if send is not None:
                send.Start()
                self._send = send
            return
        step = self._steps[at]
        if step.receive is not None:
            self._receive = self._comm.Irecv([self.landing, MPI.BYTE], step.partner,
                                             EXCHANGE_TAG)
        if step.send:
            self._send = self._comm.Isend([self.stage, MPI.BYTE], step.partner,
                                          EXCHANGE_TAG)

    def advance(self) -> bool:
        """Move the exchange on as far as it goes; return whether every step is done."""
        if self._at == len(self._steps):
            return True
        while True:
            receive = self._receive
            foreign = False
            if receive is not None:
                if not receive.Test(self._status):
                    return False
                self._receive = None
                foreign = self._status.Get_count(MPI.BYTE) != self.incoming.nbytes
                if foreign:                 # another call's message: a mismatch
                    self.header[FLAG] = 1
            if self._send is not None:
                if not self._send.Test():
                    return False
                self._send = None
            step = self._steps[self._at]
            if not foreign:
                if step.fold:
                    self._fold_in(self._at + 1 == len(self._steps))
                elif step.receive == "stage":   # the end result, from the partner below
                    self.stage[...] = self.incoming
            self._at += 1
            if self._at == len(self._steps):
                return True
            self._start(self._at)

    def _fold_in(self, last: bool) -> None:
        """Fold the partner's message into this rank's: a header that differs in any
        byte (another call, another operation number, a mismatch it saw) marks the
        mismatch, which then travels on to every rank. The last step's sum goes
        straight into ``out`` where both headers say no rank saw a mismatch (then none
        did: the check passed), saving ``deliver`` its copy."""
        if self.own_header != self.their_header:
            self.header[FLAG] = 1
        elif self.fold is not None:
            if last and self._out is not None and not self.header[FLAG]:
                self.fold(self.acc, self.received, self._out)
                if self._divisor is not None:
                    np.divide(self._out, self._divisor, out=self._out)
                self._delivered = True
            else:
                self.fold(self.acc, self.received, self.acc)

    @property
    def mismatch(self) -> bool:
        """Whether some rank made another call (valid once ``advance()`` returned True)."""
        return bool(self.header[FLAG])

    def waiting_for(self) -> str:
        """The step under way, for messages: e.g. "step 2 of 3: rank 5's message"."""
        if self._at >= len(self._steps):
            return "done"
        step = self._steps[self._at]
        return f"step {self._at + 1} of {len(self._steps)}, with rank {step.partner}"

    def cancel(self) -> None:
        """Give up the receive under way (past the deadline: its message never came). The
        exchange is not begun again (its communicator's collectives stop): persistent
        requests still active are left to MPI, unfreed, as one-shot ones are."""
        if self._receive is not None:
            self._receive.Cancel()
            self._receive = None
        self._persistent = None

    def deliver(self) -> None:
        """Write the sum into ``out`` (``load``'s), divided by its divisor, unless the
        last step wrote it there already; then let go of ``out`` (a pooled exchange
        must not keep the caller's array alive)."""
        if not self._delivered:
            if self._divisor is None:
                self._out[...] = self.acc
            else:
                np.divide(self.acc, self._divisor, out=self._out)
            self._delivered = True
        self._out = None

    def footprint(self) -> int:
        """Bytes it holds: its buffers, the objects around them and MPI's persistent
        requests."""
        requests = 0 if self._persistent is None else 2 * len(self._persistent)
        return self.stage.nbytes + self.landing.nbytes + _EXCHANGE_OVERHEAD_BYTES + \
            requests * _REQUEST_BYTES

    def _free_persistent(self) -> None:
        for pair in self._persistent:
            for request in pair:
                if request is not None:
                    request.Free()
        self._persistent = None

    def __del__(self, _finalized=MPI.Is_finalized, _shutdown=(AttributeError, MPI.Exception)):
        # Only once every step is done: a persistent request still active may be used by
        # MPI, with buffers about to go (an abandoned exchange keeps its requests).
        # What it needs is bound as defaults: at interpreter shutdown modules go first.
        if self._persistent is None or self._at != len(self._steps):
            return
        with contextlib.suppress(*_shutdown):
            if not _finalized():
                self._free_persistent()


# What an exchange holds besides its buffers (its views, memoryviews and slots: about
# 1.8 KB measured with tracemalloc), counted against the pool's cap with them; and each
# persistent request MPI keeps for it (about 0.5 KB each, measured as resident memory).
_EXCHANGE_OVERHEAD_BYTES = 2048
_REQUEST_BYTES = 512


class ExchangePool:
    """Exchanges of carried allreduces that no operation uses, by dtype and shape, for the
    next call of the same signature (training makes the same calls every step), up to
    ``max_bytes`` in all (buffers, the objects around them and their MPI requests): a
    program of ever new shapes, tiny ones too, keeps no more."""

    def __init__(self, max_bytes: int = 8 << 20):
        self.max_bytes = max_bytes
        self._free: dict[tuple, list[Exchange]] = {}
        self._bytes = 0

    def take(self, dtype, shape: tuple) -> Exchange:
        """A free exchange for a tensor of ``dtype`` and ``shape``, else a new one."""
        free = self._free.get((dtype, shape))
        if free:
            exchange = free.pop()
            self._bytes -= exchange.held
            return exchange
        return Exchange(dtype, shape)

    def give(self, exchange: Exchange) -> None:
        """Keep ``exchange`` (its run is over) for the next call of its signature."""
        size = exchange.footprint()
        if self._bytes + size <= self.max_bytes:
            exchange.held = size
            self._free.setdefault(exchange.key, []).append(exchange)
            self._bytes += size
