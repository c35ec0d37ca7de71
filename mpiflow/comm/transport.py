"""Framed messages over MPI point-to-point: a msgpack header, then raw array buffers.

Every message is a small header (a msgpack dict, never pickle) on ``HEADER_TAG``, followed
by the payload buffers it announces on ``PAYLOAD_TAG``. The receiver probes for a header
from any source, then takes that many payloads from the same source; MPI keeps messages
of one (source, tag) in order, so concurrent senders cannot interleave. The header lists
the payloads' dtypes and shapes as msgpack bytes: a step sends the same list every time,
so the sender packs each list once and the receiver checks each once. Arrays are sent
from and received into their own memory (buffer-based uppercase calls): no copy on either
side. Host payloads of at most ``INLINE_MAX_BYTES`` in all ride inside the header's
message instead (an inline frame: a marker byte msgpack never starts with, the header's
length, the header, the payloads 16-byte aligned): one copy on the sender, the receiver's
arrays are views of the message, and a message of many small tensors costs one MPI
message instead of one per tensor (a pull of 4 x 16 KiB: 18 us of MPI against 9). In a
larger message each host payload of at most ``SMALL_PAYLOAD_BYTES`` still rides inline
and the larger ones follow as their own messages (a mixed frame, whose header lists the
ones that follow): a pull of many small variables and a few large ones is one frame and a
message per large one. GPU arrays go to MPI as they are where MPI is CUDA-aware, else
through pinned host memory (``backend``); a message for a GPU consumer says so, and a
CUDA-aware receiver lands it in device memory. Sends are non-blocking; a buffer that must
not change while in flight can be guarded by a name, and ``wait_guard(name)`` finishes
those sends before a writer runs.

Waiting polls with a back-off (a short spin, then sleeps doubling up to a cap), so an
idle rank leaves its core to the ranks beside it. A payload whose header came is received
without blocking, while the rank serves other messages: its sender may be busy computing
(where MPI needs it to move the data) or die between the two (kill -9 during a push), and
a blocking receive would then wait forever; ``peer_lost`` (the owner's liveness check,
asked every ``PEER_CHECK_S`` while a payload is awaited) drops such a message. The same
holds for a send that a writer waits for (``wait_guard``): a receiver killed while a large
message to it was in flight never takes the rest of it, and the wait gives up on it once
``peer_lost`` says so. An MPI error on a message with a rank (MPICH fails the requests of
a rank whose process ended, in a job that goes on without it) goes to ``peer_failed``,
which raises where the job cannot go on without that rank, and the messages with it are
dropped: never a raw MPI exception from the service's loop.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
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
PEER_CHECK_S = 0.1       # how often a message still awaited asks whether its peer lives
INLINE_MAX_BYTES = 64 << 10   # host payloads up to this many bytes in all ride inline
# In a larger message of host arrays, each of at most this many bytes rides inline and
# the others follow as their own messages (a mixed frame): copying one costs less than a
# message of its own (a pull of 200 variables of 4 KiB: 1.26 ms as 200 messages).
SMALL_PAYLOAD_BYTES = 16 << 10
_FOLLOWING_KEY = "_fo"   # header field of a mixed frame: the payloads that follow it
_INLINE_MARK = 0xC1      # first byte of an inline frame: a byte msgpack never uses
_INLINE_ALIGN = 16
_INLINE_PREFIX = bytes([_INLINE_MARK])
_PADDING = bytes(_INLINE_ALIGN)
_BYTE = np.dtype(np.uint8)
_CANCEL_WAIT_S = 1.0     # how long cancelled receives are given to complete


def _contiguous(value):
    if type(value) is np.ndarray and value.flags.c_contiguous:     # the common case, first
        return value
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


@functools.lru_cache(maxsize=4096)
def _payload_spec(text: str, shape: tuple) -> tuple:
    """``(shape, dtype)`` of a payload a header announces as ``[text, dims]``, checked
    (the same few specs come every step: each is checked once).

    Raises:
        ValueError, TypeError: not a numeric dtype, a negative dim, too large (the
            caller checks that every dim is an int).
    """
    # Payloads are bool, ints, floats (bfloat16 too) or complex, never objects.
    dtype = from_wire(text)
    if not all(d >= 0 for d in shape) or not is_numeric(dtype):
        raise ValueError(shape)
    if dtype.itemsize * math.prod(shape) > _MAX_PAYLOAD_BYTES:    # exact: Python ints
        raise ValueError(shape)
    return shape, dtype


@functools.lru_cache(maxsize=4096)
def _wire_spec(dtype, shape: tuple) -> list:
    """The ``[dtype text, dims]`` a header carries for a payload (do not modify)."""
    return [wire_name(dtype), list(shape)]


@functools.lru_cache(maxsize=1024)
def _packed_specs(kinds: tuple) -> bytes:
    """The payload list a header carries, as msgpack bytes of ``[dtype text, dims]`` per
    payload, for the ``(dtype, shape)`` of each in ``kinds``. A step sends the same list
    every time (a pull of 200 variables: 64 us to pack as lists, 35 as these bytes)."""
    return msgpack.packb([_wire_spec(dtype, shape) for dtype, shape in kinds],
                         use_bin_type=True)


class _Payloads(tuple):
    """``(shape, dtype)`` of each payload a header announces, checked; and where an inline
    frame holds them (``inline_layout``), worked out once per list and kind of frame."""

    def __new__(cls, specs):
        payloads = super().__new__(cls, specs)
        payloads._layouts = {}      # following indices -> (layout, span)
        return payloads

    def inline_layout(self, following: tuple) -> tuple:
        """``([(index, offset, count, dtype, shape or None when 1-d)], span)`` of the
        payloads an inline frame holds (all but the indices ``following``): offsets from
        the first one's start (16-byte aligned, as each is), and where the last ends."""
        known = self._layouts.get(following)
        if known is not None:
            return known
        layout, end, after = [], 0, set(following)
        for index, (shape, dtype) in enumerate(self):
            if index in after:
                continue
            start = _aligned(end)
            count = math.prod(shape)
            end = start + count * dtype.itemsize
            layout.append((index, start, count, dtype, None if len(shape) == 1 else shape))
        if len(self._layouts) < 8:
            self._layouts[following] = layout, end
        return layout, end


def _checked_specs(raw_specs) -> _Payloads:
    """``[(shape, dtype)]`` of a header's list of ``[dtype text, dims]``.

    Raises:
        TypeError, ValueError: a spec that is not ``[numeric dtype, [non-negative
            ints]]``; ``args[0]`` is the spec.
    """
    if not isinstance(raw_specs, list):
        raise TypeError(raw_specs)
    specs = []
    for spec in raw_specs:
        try:
            text, dims = spec
            # Checked before the cache: True and 1.0 would find the entry of 1.
            if not isinstance(text, str) or not isinstance(dims, list):
                raise TypeError(spec)
            for d in dims:
                if type(d) is not int:
                    raise TypeError(spec)
            specs.append(_payload_spec(text, tuple(dims)))
        except (TypeError, ValueError):
            raise TypeError(spec) from None
    return _Payloads(specs)


@functools.lru_cache(maxsize=1024)
def _unpacked_specs(packed: bytes) -> _Payloads:
    """``_checked_specs`` of a payload list sent as msgpack bytes (``_packed_specs``),
    each list checked once: a pull of 200 variables decodes in 7 us instead of 80."""
    try:
        raw_specs = msgpack.unpackb(packed, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise ValueError(packed[:64]) from None
    return _checked_specs(raw_specs)


def decode_header(raw, source: int, rank: int):
    """Decode a header (bytes, or a view of them); return (header dict, [(shape, dtype)]
    of its payloads).

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
    try:
        specs = _unpacked_specs(raw_specs) if type(raw_specs) is bytes else \
            _checked_specs(raw_specs)
    except (TypeError, ValueError) as exc:
        bad = exc.args[0] if exc.args else raw_specs
        raise errors.DataLossError(
            f"Rank {rank}: bad buffer spec {bad!r} from rank {source}: expected "
            "[numeric dtype, [non-negative dims]]") from None
    return header, specs


def _padding(offset: int) -> int:
    """Bytes from ``offset`` to the next payload's start in an inline frame (the one rule
    its writer and reader share)."""
    return -offset % _INLINE_ALIGN


def _aligned(offset: int) -> int:
    return offset + _padding(offset)


def inline_frame(packed: bytes, arrays) -> bytes:
    """One message holding the header ``packed`` and the C-contiguous host ``arrays``
    (copied once): the marker, the header's length (4 bytes, little-endian), the header,
    then each array at the next 16-byte offset; nothing after the last. The arrays go to
    the join as they are: it takes their bytes whatever their dtype (bfloat16 too), with
    no view of each to make (200 arrays: 35 us against 78)."""
    parts = [_INLINE_PREFIX, len(packed).to_bytes(4, "little"), packed]
    end = 5 + len(packed)
    for a in arrays:
        pad = _padding(end)
        if pad:
            parts.append(_PADDING[:pad])
        parts.append(a)
        end += pad + a.nbytes
    return b"".join(parts)


def read_inline_frame(raw, source: int, rank: int):
    """The header and arrays of an inline frame (``inline_frame``, received into ``raw``,
    a bytearray or a uint8 array nothing else holds), and ``[(index, shape, dtype)]`` of
    the payloads that follow it as their own messages (a mixed frame; their places in
    the arrays are None). The arrays are views of ``raw``. A frame whose lengths do not
    add up is refused with DataLossError naming the sender."""
    def refuse(why):
        return errors.DataLossError(
            f"Rank {rank}: malformed inline message from rank {source}: {why}")
    if len(raw) < 5:
        raise refuse(f"{len(raw)} bytes")
    size = len(raw)
    view = memoryview(raw)
    length = int.from_bytes(view[1:5], "little")
    if 5 + length > size:
        raise refuse(f"a header of {length} bytes in a message of {size}")
    header, specs = decode_header(view[5:5 + length], source, rank)
    if header.get(_TO_GPU_KEY) is not None:
        raise refuse("a GPU payload inline")
    following = header.pop(_FOLLOWING_KEY, [])
    if type(following) is not list or any(type(i) is not int for i in following) or \
            following != sorted(set(following)) or \
            (following and not 0 <= following[0] <= following[-1] < len(specs)):
        raise refuse(f"its following payloads are not indices of its {len(specs)}: "
                     f"{following!r}")
    layout, span = specs.inline_layout(tuple(following))
    base = _aligned(5 + length)
    end = base + span if layout else 5 + length
    if end > size:
        raise refuse(f"payloads past its end ({size} bytes)")
    if end != size:
        raise refuse(f"{size - end} bytes after its payloads")
    arrays = [None] * len(specs)
    for index, offset, count, dtype, shape in layout:
        if not count:
            arrays[index] = np.empty(shape or (0,), dtype)
            continue
        array = np.frombuffer(raw, dtype, count, base + offset)
        arrays[index] = array if shape is None else array.reshape(shape)
    return header, arrays, [(i, *specs[i]) for i in following]


class _Arrival:
    """A received header whose payloads are still arriving (``Transport.poll``)."""

    __slots__ = ("message", "nbytes", "next_check", "requests")

    def __init__(self, message: Message, requests: list, nbytes: int):
        self.message = message
        self.requests = requests
        self.nbytes = nbytes
        self.next_check = time.monotonic() + PEER_CHECK_S


class Transport:
    """Header-plus-buffers messaging on one communicator (use a Dup of the world)."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._pending = []           # [(dest, requests, keepalive objects)]
        self._guarded = {}           # name -> [(dest, request)]
        self._abandoned = []         # sends to dead ranks: never waited for again
        self._abandoned_receives = []   # (requests, buffers) of payloads never to come
        self._arriving: list[_Arrival] = []     # messages whose payloads are on the way
        self._status = MPI.Status()
        self._pool = backend.HostBufferPool()   # receive buffers, reused warm
        # Whether a rank was lost (its owner's liveness check; it may raise for a loss
        # the job cannot go on without). Asked only while a message with it is awaited.
        self.peer_lost: Callable[[int], bool] = lambda rank: False
        # MPI failed a request of a message with a rank: the owner raises where the job
        # cannot go on without it; else the messages with it are dropped.
        self.peer_failed: Callable[[int, Exception], None] = _raise_failure
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
        inline = following = None
        if arrays:
            arrays = [_contiguous(a) for a in arrays]
            header = dict(header)
            header[_BUFFERS_KEY] = _packed_specs(tuple([(a.dtype, a.shape) for a in arrays]))
            if to_gpu:
                header[_TO_GPU_KEY] = True
            else:
                nbytes = 0
                for a in arrays:
                    if type(a) is not np.ndarray:       # a GPU array never rides inline
                        break
                    nbytes += a.nbytes
                else:
                    if nbytes <= INLINE_MAX_BYTES:
                        inline = arrays
                    else:
                        following = [i for i, a in enumerate(arrays)
                                     if a.nbytes > SMALL_PAYLOAD_BYTES]
                        if len(following) < len(arrays):
                            if following:
                                header[_FOLLOWING_KEY] = following
                            inline = [a for a in arrays if a.nbytes <= SMALL_PAYLOAD_BYTES]
        packed = msgpack.packb(header, use_bin_type=True)
        if inline is not None:  # copied into one message: nothing of them left to guard
            packed = inline_frame(packed, inline)
            if len(inline) == len(arrays):
                arrays, guards = [], ()
            else:
                guards = [guards[i] for i in following] if guards else ()
                arrays = [arrays[i] for i in following]
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
        failed = set()      # ranks MPI failed a send to: given up below (``forget``)
        self._pending = [entry for entry in self._pending
                         if entry[0] in failed or not self._sent(entry[0], entry[1], failed)]
        if self._abandoned:     # a send to a dead rank that completed after all
            self._abandoned = [entry for entry in self._abandoned
                               if not _settled(entry[1])]
        if self._abandoned_receives:    # a cancel that completed late: buffers free again
            self._abandoned_receives = [entry for entry in self._abandoned_receives
                                        if not _settled(entry[0])]
        if self._guarded:
            for name in list(self._guarded):
                reqs = [(d, r) for d, r in self._guarded[name]
                        if r != MPI.REQUEST_NULL and d not in failed]
                if not reqs or all(self._sent(d, [r], failed) for d, r in reqs):
                    del self._guarded[name]
                else:
                    self._guarded[name] = reqs
        for dest in failed:
            self.forget(dest)

    def _sent(self, dest: int, requests, failed: set) -> bool:
        """Whether ``requests`` (sends to ``dest``) completed. One that MPI failed goes to
        ``peer_failed`` (which raises where the job cannot go on without ``dest``) and
        ``dest`` joins ``failed``, for the caller to ``forget``: the requests stay
        referenced until MPI is done with them."""
        try:
            return MPI.Request.Testall(requests)
        except MPI.Exception as exc:
            self.peer_failed(dest, exc)
            failed.add(dest)
            return False

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
        """Finish every in-flight send of arrays guarded by ``name``; a send to a rank
        found lost meanwhile (``peer_lost``) is given up (``forget``)."""
        reqs = self._guarded.pop(name, None)
        if not reqs:
            return
        by_dest = {}
        for dest, request in reqs:
            by_dest.setdefault(dest, []).append(request)
        next_check = time.monotonic() + PEER_CHECK_S

        def done():
            nonlocal next_check
            failed = set()
            for dest in [d for d, waiting in by_dest.items() if self._sent(d, waiting,
                                                                          failed)]:
                del by_dest[dest]
            for dest in failed:
                del by_dest[dest]
                self.forget(dest)
            if by_dest and time.monotonic() >= next_check:
                next_check = time.monotonic() + PEER_CHECK_S
                for dest in [d for d in by_dest if self.peer_lost(d)]:
                    del by_dest[dest]
                    self.forget(dest)
            return not by_dest
        self._poll(done, f"sends of '{name}'")

    def flush(self, timeout: float | None = None) -> None:
        """Finish every pending send (before the process leaves MPI)."""
        for _, requests, _ in self._pending:
            self._wait(requests, "pending sends", timeout)
        self._pending = []
        self._guarded.clear()

    def _wait(self, requests, what, timeout=None):
        self._poll(lambda: MPI.Request.Testall(requests), what, timeout)

    def _poll(self, done, what, timeout=None):
        def expired(waited):
            return errors.DeadlineExceededError(
                f"Rank {self.rank}: {what} did not complete within {waited:.0f} s")
        # Yielding between tests, never sleeping: where MPI copies through shared memory
        # in pieces (no CMA), a send moves only while its sender is in MPI.
        poll_until(done, timeout, expired, Backoff(spin_s=math.inf))

    # -- receiving ---------------------------------------------------------------------------
    def poll(self) -> Message | None:
        """Return the next message whose payloads are all here, else None (never blocks).

        A message's payloads are received while this rank goes on: where MPI copies a
        large one in pieces that its sender puts in from inside MPI (shared memory
        without single-copy CMA), a sender busy computing would otherwise hold this
        rank, and every other rank it serves, until its next call into MPI. Messages of
        one sender come out in the order sent; those of different senders as they
        complete."""
        if self._arriving:
            message = self._next_arrived()
            if message is not None:
                return message
        status = self._status
        if not self.comm.Iprobe(MPI.ANY_SOURCE, HEADER_TAG, status):
            return None
        source = status.Get_source()
        received = status.Get_count(MPI.BYTE)
        # Inline payloads are views of it: a large one comes from the pool, warm.
        raw = self._pool.empty((received,), _BYTE) if received >= self._pool.min_bytes \
            else bytearray(received)
        self.comm.Recv([raw, MPI.BYTE], source, HEADER_TAG)
        if received and raw[0] == _INLINE_MARK:
            header, arrays, following = read_inline_frame(raw, source, self.rank)
            message = Message(source, header, arrays)
            if not following:
                if not self._arriving:
                    TRAFFIC.add("p2p", received=received)
                    return message
                self._arriving.append(_Arrival(message, [], received))
                return self._next_arrived()
            for index, shape, dtype in following:
                arrays[index] = self._pool.empty(shape, dtype)
            awaited = [arrays[index] for index, _, _ in following]
        else:
            header, specs = decode_header(bytes(raw), source, self.rank)
            on_gpu = header.pop(_TO_GPU_KEY, False) is True and cuda_aware_mpi()
            arrays = awaited = [backend.device_empty(shape, dtype) if on_gpu else
                                self._pool.empty(shape, dtype) for shape, dtype in specs]
            message = Message(source, header, arrays)
        # Posted in order: MPI matches them to the sender's payloads in order.
        requests = [self.comm.Irecv([array, MPI.BYTE], source, PAYLOAD_TAG)
                    for array in awaited]
        self._arriving.append(_Arrival(message, requests,
                                       received + sum(a.nbytes for a in awaited)))
        return self._next_arrived()

    def receiving(self) -> bool:
        """Whether a message's payloads are still arriving (they move while polled)."""
        return bool(self._arriving)

    def _next_arrived(self) -> Message | None:
        """The oldest message whose payloads are all here and whose sender has none
        older still arriving; a message whose sender was lost before its payloads came
        is dropped, its receives cancelled (asked every ``PEER_CHECK_S`` per message)."""
        held = set()            # senders with an older message still arriving
        now = None
        for i, arrival in enumerate(self._arriving):
            source = arrival.message.source
            if source in held:
                continue
            try:
                arrived = not arrival.requests or MPI.Request.Testall(arrival.requests)
            except MPI.Exception as exc:    # its sender's process ended (MPICH says so)
                self.peer_failed(source, exc)
                self._drop_arrivals(source)
                return self._next_arrived()
            if arrived:
                del self._arriving[i]
                TRAFFIC.add("p2p", received=arrival.nbytes)
                return arrival.message
            now = now or time.monotonic()
            if now >= arrival.next_check:
                arrival.next_check = now + PEER_CHECK_S
                if self.peer_lost(source):
                    self._drop_arrivals(source)
                    return self._next_arrived()
            held.add(source)
        return None

    def _drop_arrivals(self, source: int) -> None:
        """Give up the messages still arriving from ``source`` (lost): their receives
        cancelled, their buffers kept while MPI may still write them."""
        for arrival in [a for a in self._arriving if a.message.source == source]:
            self._arriving.remove(arrival)
            self._cancel(arrival.requests, arrival.message.arrays)

    def _cancel(self, requests, arrays) -> None:
        """Cancel receives whose sender is lost; one that does not complete within
        ``_CANCEL_WAIT_S`` keeps its buffer referenced (MPI may still write it)."""
        for request in requests:
            if request != MPI.REQUEST_NULL:
                with contextlib.suppress(MPI.Exception):    # failed already: nothing to do
                    request.Cancel()
        deadline = time.monotonic() + _CANCEL_WAIT_S
        while not _settled(requests):
            if time.monotonic() > deadline:
                self._abandoned_receives.append((requests, arrays))
                return
            os.sched_yield()


def _settled(requests) -> bool:
    """Whether MPI is done with ``requests`` (of a rank given up on): completed or
    failed, either way their buffers are free."""
    try:
        return MPI.Request.Testall(requests)
    except MPI.Exception:
        return True


def _raise_failure(rank: int, exc: Exception) -> None:
    """``Transport.peer_failed`` where nobody owns the transport's peers: the error
    stands."""
    raise exc
