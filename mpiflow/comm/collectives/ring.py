"""mpiflow's own ring allreduce: reduce-scatter, then allgather, over non-blocking
point-to-point messages between ring neighbours, pipelined in chunks.

The buffer is split into ``size`` segments (divmod: the remainder spread over the first
ones), each segment into the same number of chunks of at most MPIFLOW_RING_CHUNK_BYTES.
Message ``m`` is chunk ``m % C`` of ring step ``t = m // C``; at every step (both phases)
a rank sends segment ``(rank - t) % size`` to its right neighbour and receives segment
``(rank - t - 1) % size`` from its left one, so a chunk can go on to the next step as soon
as it arrived (and, in the reduce-scatter, was added): transfers of one chunk overlap the
reduction of the previous one. Reduce-scatter receives land in a reused scratch buffer and
are added with ``np.add(mine, received, out=result)``; allgather receives land in the
result directly. Nothing loops over elements in Python, and ``Handle.test()`` alone
drives it: each call completes what arrived and posts what became possible.

Half floats on the wire (compressed gradients): the sums stay in a float32 working copy,
and each chunk crosses converted to the half format (received into the scratch buffer,
added, or in the allgather widened, into the float32 result): half the bytes, added in
float32, every rank ending with the same values.
"""

from __future__ import annotations

import collections

import numpy as np
from mpi4py import MPI

from mpiflow import backend, half_floats
from mpiflow.comm.collectives.base import CallStage, Collective, Stage
from mpiflow.comm.collectives.state import CommState


class _Ring(Stage):
    """The state machine of one ring allreduce (see the module docstring)."""

    def __init__(self, state: CommState, tag: int, send, recv, average: bool,
                 chunk_bytes: int, window: int, wire=None):
        self.state, self.comm, self.tag = state, state.data_comm, tag
        n, r = state.size, state.rank
        self.n, self.r = n, r
        self.left, self.right = (r - 1) % n, (r + 1) % n
        self.src, self.dst = send.reshape(-1), recv.reshape(-1)
        self.average = average
        # Chunks cross as ``wire`` (half floats) while sums stay in src's float32.
        self.wire = np.dtype(wire) if wire is not None else None
        wire_dtype = self.wire if self.wire is not None else self.src.dtype
        q, rem = divmod(self.src.size, n)
        self.seg_off = [i * q + min(i, rem) for i in range(n + 1)]
        longest = q + (1 if rem else 0)
        self.C = max(1, -(-longest // max(1, chunk_bytes // self.src.itemsize)))
        self.M = 2 * (n - 1) * self.C               # messages each way
        self.W = max(1, min(window, self.M))        # receives in flight
        self.ag_first = (n - 1) * self.C             # first allgather message
        slot = -(-longest // self.C)
        self._raw = state.scratch.take(self.W * slot * wire_dtype.itemsize)
        self.scratch = self._raw[:self.W * slot * wire_dtype.itemsize].view(
            wire_dtype).reshape(self.W, slot)
        self.recvs: list = [None] * self.W
        self.sends: collections.deque = collections.deque()
        self.next_post = self.next_done = self.next_send = self.sends_done = 0
        self.finished = False

    @property
    def what(self) -> str:
        t, c = divmod(min(self.next_done, self.M - 1), self.C)
        phase = "reduce-scatter" if t < self.n - 1 else "allgather"
        return (f"ring {phase} step {t % (self.n - 1) + 1} of {self.n - 1}, chunk {c + 1} "
                f"of {self.C} (receives from rank {self.left}, sends to rank {self.right})")

    def pending_ranks(self) -> list[int]:
        ranks = [self.left] if self.next_done < self.M else []
        if self.sends and self.right not in ranks:
            ranks.append(self.right)
        return ranks

    def _bounds(self, seg: int, c: int) -> tuple[int, int]:
        start = self.seg_off[seg]
        q, rem = divmod(self.seg_off[seg + 1] - start, self.C)
        a = start + c * q + min(c, rem)
        return a, a + q + (1 if c < rem else 0)

    def test(self) -> bool:
        if self.finished:
            return True
        n, C, M, W = self.n, self.C, self.M, self.W
        while True:
            progressed = False
            while self.next_done < self.next_post and self.recvs[self.next_done % W].Test():
                self._received(self.next_done)
                self.next_done += 1
                progressed = True
            while self.next_post < M and self.next_post < self.next_done + W:
                m = self.next_post
                # An allgather receive overwrites a region that an earlier send read from:
                # that send must be complete first.
                if m >= self.ag_first and m - self.ag_first >= self.sends_done:
                    break
                t, c = divmod(m, C)
                a, b = self._bounds((self.r - t - 1) % n, c)
                target = self.scratch[m % W, :b - a] if t < n - 1 or self.wire is not None \
                    else self.dst[a:b]
                self.recvs[m % W] = self.comm.Irecv([target, MPI.BYTE], self.left, self.tag)
                self.next_post += 1
                progressed = True
            while self.next_send < M and self.next_send - C < self.next_done:
                t, c = divmod(self.next_send, C)
                a, b = self._bounds((self.r - t) % n, c)
                buf = (self.src if t == 0 else self.dst)[a:b]
                if self.wire is not None:
                    buf = half_floats.astype(buf, self.wire)   # kept by the request
                self.sends.append(self.comm.Isend([buf, MPI.BYTE], self.right, self.tag))
                self.next_send += 1
                progressed = True
            while self.sends and self.sends[0].Test():
                self.sends.popleft()
                self.sends_done += 1
                progressed = True
            if not progressed:
                break
            self.state.transfers_done += 1
        if self.next_done == M and not self.sends:
            self.finished = True
            self.state.scratch.give(self._raw)
            self.scratch = self._raw = None
        return self.finished

    def _received(self, m: int) -> None:
        t, c = divmod(m, self.C)
        a, b = self._bounds((self.r - t - 1) % self.n, c)
        if t >= self.n - 1:
            if self.wire is not None:   # allgather: the half-float chunk, widened
                self.dst[a:b] = half_floats.astype(self.scratch[m % self.W, :b - a],
                                                   self.dst.dtype)
            return  # allgather: the chunk arrived in place
        out = self.dst[a:b]
        chunk = self.scratch[m % self.W, :b - a]
        if self.wire is not None:
            chunk = half_floats.astype(chunk, self.src.dtype)
        np.add(self.src[a:b], chunk, out=out)
        if self.average and t == self.n - 2:
            # The last addition completes the segment: divide while it is in cache.
            np.divide(out, self.n, out=out)


# Where auto's ring starts when MPIFLOW_RING_MIN_BYTES is unset (the measurements are in
# the package's docstring): two ranks make a ring of two steps, each a half-exchange, and
# it beats MPI from 512 KiB; more ranks add dependent steps, and MPI keeps up to 4 MiB.
PAIR_RING_MIN_BYTES = 512 << 10
RING_MIN_BYTES = 4 << 20


def ring_min_bytes(ranks: int) -> int:
    """The smallest host array auto sends around the ring on ``ranks`` ranks, unless
    MPIFLOW_RING_MIN_BYTES says."""
    return PAIR_RING_MIN_BYTES if ranks == 2 else RING_MIN_BYTES


class RingCollective(Collective):
    """Allreduce by mpiflow's ring (module docstring); broadcast/allgather by MPI."""

    name = "ring"
    accumulates_wire_in_float32 = True

    def __init__(self, comm, config=None):
        super().__init__(comm, config)
        self.chunk_bytes = self.config.get("MPIFLOW_RING_CHUNK_BYTES")
        self.window = self.config.get("MPIFLOW_RING_WINDOW")

    @classmethod
    def enabled(cls, comm, array) -> tuple[bool, str]:
        if backend.is_device_array(array):
            return False, ("array is a cupy array: the ring reduces host arrays with numpy; "
                           "use 'nccl'")
        return True, ""

    @classmethod
    def preferred(cls, comm, array, config) -> tuple[bool, str]:
        ok, why = cls.enabled(comm, array)
        if not ok:
            return ok, why
        threshold = config.get("MPIFLOW_RING_MIN_BYTES")
        if threshold == 0:
            return False, "MPIFLOW_RING_MIN_BYTES=0: auto never takes the ring"
        if threshold is None:
            threshold = ring_min_bytes(comm.Get_size())
            named = (f"the ring's {threshold} on {comm.Get_size()} ranks "
                     "(MPIFLOW_RING_MIN_BYTES unset)")
        else:
            named = f"MPIFLOW_RING_MIN_BYTES={threshold}"
        if array.nbytes < threshold:
            return False, f"{array.nbytes} bytes is below {named}"
        return True, ""

    def _allreduce_stages(self, send, recv, op: str, seq: int, wire=None) -> list[Stage]:
        if send.size == 0:
            return []
        if self.size == 1:
            if send is recv:
                return []
            return [CallStage(lambda: np.copyto(recv, send), "the copy of a 1-rank ring")]
        return [_Ring(self.state, self.state.data_tag(seq), send, recv, op == "average",
                      self.chunk_bytes, self.window, wire)]
