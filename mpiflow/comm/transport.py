"""Framed messages over MPI point-to-point: a msgpack header, then raw array buffers.

Every message is a small header (a msgpack dict, never pickle) on ``HEADER_TAG``, followed
by the payload buffers it announces on ``PAYLOAD_TAG``. The receiver probes for a header
from any source, then takes that many payloads from the same source; MPI keeps messages
of one (source, tag) in order, so concurrent senders cannot interleave. Arrays are sent
from and received into their own memory (buffer-based uppercase calls): no copy on either
side. GPU arrays go to MPI as they are where MPI is CUDA-aware, else through pinned host
memory (``backend``); a message for a GPU consumer says so, and a CUDA-aware receiver lands
it in device memory. Sends are non-blocking; a buffer that must not change while in flight can be
guarded by a name, and ``wait_guard(name)`` finishes those sends before a writer runs.

Waiting polls with a back-off (a short spin, then sleeps doubling up to a cap), so an
idle rank leaves its core to the ranks beside it. A payload whose header came is received
without blocking: its sender may die between the two (kill -9 during a push), and a
blocking receive would then wait forever; ``sender_lost`` (the owner's liveness check,
asked every ``SENDER_CHECK_S`` while a payload is awaited) drops such a message.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Callable

import msgpack
import numpy as np
from mpi4py import MPI

from mpiflow import backend, errors
from mpiflow.comm.backoff import Backoff, poll_until
from mpiflow.comm.cuda_aware import cuda_aware_mpi
from mpiflow.comm.traffic import TRAFFIC
from mpiflow.comm.wire_dtypes import from_wire, is_numeric, wire_name

HEADER_TAG = 7101
PAYLOAD_TAG = 7102
_BUFFERS_KEY = "_buf"    # header field listing [dtype, shape] of each payload
_TO_GPU_KEY = "_gpu"     # header field: the payloads are wanted in GPU memory
SENDER_CHECK_S = 0.1     # how often a payload still awaited asks whether its sender lives
_CANCEL_WAIT_S = 1.0     # how long cancelled receives are given to complete


class BufferPool:
    """Receive buffers reused once nobody holds them any more (warm memory, no page faults).

    A received array is handed to the graph and maybe to the user; the pool keeps a
    reference and gives the array out again only when its reference count shows that the
    pool's own reference is the last one, so nothing still in use is ever overwritten.
    """

    def __init__(self, max_per_key=4, min_bytes=1 << 16):
        self.max_per_key = max_per_key
        self.min_bytes = min_bytes
        self._free = {}

    def empty(self, shape, dtype):
        """Return an array of ``shape`` and ``dtype`` that nobody else references."""
        nbytes = dtype.itemsize * math.prod(shape)
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype)
        key = (shape, dtype)
        held = self._free.setdefault(key, [])
        for array in held:
            # One reference in the list, one as getrefcount's argument, one in ``array``.
            if sys.getrefcount(array) <= 3:
                return array
        array = np.empty(shape, dtype)
        if len(held) < self.max_per_key:
            held.append(array)
        return array


def _contiguous(value):
    if backend.is_device_array(value):
        return backend.ready_for_mpi(value) if cuda_aware_mpi() else \
            backend.staged_for_send(value)
    array = np.asarray(value)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


class Message:
    """A received message: who sent it, its header dict and its arrays."""

    __slots__ = ("source", "header", "arrays")

    def __init__(self, source, header, arrays):
        self.source = source
        self.header = header
        self.arrays = arrays

    def __repr__(self):
        return f"Message(from={self.source}, header={self.header})"


_MAX_PAYLOAD_BYTES = 1 << 40


def decode_header(raw: bytes, source: int, rank: int):
    """Decode a header; return (header dict, [(shape, dtype)] of its payloads).

    Anything that is not a msgpack map with well-formed buffer specs (numeric dtypes,
    non-negative dims, a sane size) is refused with DataLossError naming the sender;
    nothing from the wire is ever unpickled or executed.
    """
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as exc:
        raise errors.DataLossError(
            f"Rank {rank}: undecodable message header from rank {source}: {exc}") from None
    if not isinstance(header, dict):
        raise errors.DataLossError(
            f"Rank {rank}: message header from rank {source} is not a map")
    raw_specs = header.pop(_BUFFERS_KEY, [])
    if not isinstance(raw_specs, list):
        raise errors.DataLossError(
            f"Rank {rank}: buffer list from rank {source} is not a list: {raw_specs!r}")
    specs = []
    for spec in raw_specs:
        try:
            text, dims = spec
            if not isinstance(text, str) or not isinstance(dims, list):
                raise ValueError(spec)
            # Payloads are bool, ints, floats (bfloat16 too) or complex, never objects.
            dtype = from_wire(text)
            shape = tuple(dims)
            if not all(type(d) is int and d >= 0 for d in shape) or not is_numeric(dtype):
                raise ValueError(spec)
            nbytes = dtype.itemsize * math.prod(shape)   # exact: Python ints
            if nbytes > _MAX_PAYLOAD_BYTES:
                raise ValueError(spec)
        except (TypeError, ValueError):
            raise errors.DataLossError(
                f"Rank {rank}: bad buffer spec {spec!r} from rank {source}: expected "
                "[numeric dtype, [non-negative dims]]") from None
        specs.append((shape, dtype))
    return header, specs


class Transport:
    """Header-plus-buffers messaging on one communicator (use a Dup of the world)."""

    def __init__(self, comm, backoff: Backoff | None = None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.backoff = backoff or Backoff()
        self._pending = []           # [(dest, requests, keepalive objects)]
        self._guarded = {}           # name -> [(dest, request)]
        self._abandoned = []         # sends to dead ranks: never waited for again
        self._abandoned_receives = []   # (requests, buffers) of payloads never to come
        self._status = MPI.Status()
        self._pool = BufferPool()
        # Whether a rank was lost (its owner's liveness check; it may raise for a loss
        # the job cannot go on without). Asked only while a payload is awaited.
        self.sender_lost: Callable[[int], bool] = lambda rank: False
        # Whether a rank is known dead (its owner's knowledge, no check): nothing is sent
        # to it, since a send to a dead process can crash the network layer.
        self.receiver_dead: Callable[[int], bool] = lambda rank: False

    # -- sending ---------------------------------------------------------------------------
    def send(self, dest: int, header: dict, arrays=(), guards=(),
             to_gpu: bool = False) -> None:
        """Send ``header`` and ``arrays`` to ``dest`` without waiting for delivery.

        The arrays must not change until the send completes: ``guards`` names, per array,
        what a later writer of it waits for (``wait_guard(name)``; None for an array
        nobody writes). ``to_gpu`` says the receiver consumes them on a GPU. A message for
        a rank known dead (``receiver_dead``) is dropped.
        """
        if self.receiver_dead(dest):
            return
        arrays = [_contiguous(a) for a in arrays]
        if arrays:
            header = dict(header)
            header[_BUFFERS_KEY] = [[wire_name(a.dtype), list(a.shape)] for a in arrays]
            if to_gpu:
                header[_TO_GPU_KEY] = True
        packed = msgpack.packb(header, use_bin_type=True)
        requests = [self.comm.Isend([packed, MPI.BYTE], dest, HEADER_TAG)]
        sent = len(packed)
        for a in arrays:
            requests.append(self.comm.Isend([a, MPI.BYTE], dest, PAYLOAD_TAG))
            sent += a.nbytes
        TRAFFIC.add("p2p", sent=sent)
        self._pending.append((dest, requests, (packed, arrays)))
        for guard, request in zip(guards, requests[1:]):
            if guard is not None:
                self._guarded.setdefault(guard, []).append((dest, request))
        if len(self._pending) > 64:
            self.complete_sends()

    def has_pending_sends(self) -> bool:
        return bool(self._pending)

    def complete_sends(self) -> None:
        """Drop the sends that have completed (cheap test, never blocks)."""
        self._pending = [entry for entry in self._pending
                         if not MPI.Request.Testall(entry[1])]
        if self._abandoned:     # a send to a dead rank that completed after all
            self._abandoned = [entry for entry in self._abandoned
                               if not MPI.Request.Testall(entry[1])]
        if self._abandoned_receives:    # a cancel that completed late: buffers free again
            self._abandoned_receives = [entry for entry in self._abandoned_receives
                                        if not MPI.Request.Testall(entry[0])]
        if self._guarded:
            for name in list(self._guarded):
                reqs = [(d, r) for d, r in self._guarded[name] if r != MPI.REQUEST_NULL]
                if not reqs or MPI.Request.Testall([r for _, r in reqs]):
                    del self._guarded[name]
                else:
                    self._guarded[name] = reqs

    def forget(self, dest: int) -> None:
        """``dest`` is dead: stop waiting for the sends to it (they can never complete;
        a writer's guard or the flush at exit would wait for them without end). Their
        buffers stay referenced while MPI may still read them: until they complete, or
        the process ends (at most what was in flight to that rank when it died)."""
        kept = [entry for entry in self._pending if entry[0] == dest]
        self._abandoned.extend(kept)
        self._pending = [entry for entry in self._pending if entry[0] != dest]
        for name in list(self._guarded):
            self._guarded[name] = [(d, r) for d, r in self._guarded[name] if d != dest]

    def wait_guard(self, name: str) -> None:
        """Finish every in-flight send of arrays guarded by ``name``."""
        reqs = self._guarded.pop(name, None)
        if reqs:
            self._wait([r for _, r in reqs], f"sends of '{name}'")

    def flush(self, timeout: float | None = None) -> None:
        """Finish every pending send (before the process leaves MPI)."""
        for _, requests, _ in self._pending:
            self._wait(requests, "pending sends", timeout)
        self._pending = []
        self._guarded.clear()

    def _wait(self, requests, what, timeout=None):
        def expired(waited):
            return errors.DeadlineExceededError(
                f"Rank {self.rank}: {what} did not complete within {waited:.0f} s")
        poll_until(lambda: MPI.Request.Testall(requests), timeout, expired, self.backoff)

    # -- receiving ---------------------------------------------------------------------------
    def poll(self) -> Message | None:
        """Return the next message if one has arrived, else None (never blocks long)."""
        status = self._status
        if not self.comm.Iprobe(MPI.ANY_SOURCE, HEADER_TAG, status):
            return None
        source = status.Get_source()
        raw = bytearray(status.Get_count(MPI.BYTE))
        received = len(raw)
        self.comm.Recv([raw, MPI.BYTE], source, HEADER_TAG)
        header, specs = decode_header(bytes(raw), source, self.rank)
        on_gpu = header.pop(_TO_GPU_KEY, False) is True and cuda_aware_mpi()
        arrays = [backend.device_empty(shape, dtype) if on_gpu else
                  self._pool.empty(shape, dtype) for shape, dtype in specs]
        # Posted in order: MPI matches them to the sender's payloads in order.
        requests = [self.comm.Irecv([array, MPI.BYTE], source, PAYLOAD_TAG)
                    for array in arrays]
        if requests and not self._await_payloads(source, requests, arrays):
            return None         # its sender was lost before the payload came: dropped
        TRAFFIC.add("p2p", received=received + sum(a.nbytes for a in arrays))
        return Message(source, header, arrays)

    def _await_payloads(self, source: int, requests, arrays) -> bool:
        """Wait for a message's payloads (they follow its header at once, so this spins
        while the data moves); return False, their receives cancelled, if the sender is
        lost first."""
        next_check = time.monotonic() + SENDER_CHECK_S
        while not MPI.Request.Testall(requests):
            now = time.monotonic()
            if now >= next_check:
                next_check = now + SENDER_CHECK_S
                if self.sender_lost(source):
                    self._cancel(requests, arrays)
                    return False
            os.sched_yield()
        return True

    def _cancel(self, requests, arrays) -> None:
        """Cancel receives whose sender is lost; one that does not complete within
        ``_CANCEL_WAIT_S`` keeps its buffer referenced (MPI may still write it)."""
        for request in requests:
            if request != MPI.REQUEST_NULL:
                request.Cancel()
        deadline = time.monotonic() + _CANCEL_WAIT_S
        while not MPI.Request.Testall(requests):
            if time.monotonic() > deadline:
                self._abandoned_receives.append((requests, arrays))
                return
            os.sched_yield()
