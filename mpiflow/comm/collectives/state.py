"""What every collective on one communicator shares: a private duplicate, an operation
counter, the queue that starts operations in issue order, and reused scratch buffers.

The state hangs on the communicator itself (an MPI attribute), so every strategy and every
``Collective`` object built over the same communicator finds the same one, and it goes
away with the communicator.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from mpiflow import backend, errors
from mpiflow import config as config_lib
from mpiflow.comm.backoff import Backoff
from mpiflow.comm.collectives.exchange import Exchange, ExchangePool, doubling_steps

# Tags of the cross-rank check's point-to-point messages besides its exchange's
# (``exchange.EXCHANGE_TAG``). After a mismatch the records (CHECK) and their table
# (DETAIL) go on the check duplicate. The roll call at a deadline
# (PRESENT, VERDICT, DETAIL) goes on the caller's communicator itself: the duplicates are
# not usable before every rank has joined them, and the roll call is what names a rank
# that never does. Chosen far from the transport's 7101/7102 and below MPI's minimum
# TAG_UB.
CHECK_TAG = 0x4D46
VERDICT_TAG = 0x4D47
DETAIL_TAG = 0x4D48
PRESENT_TAG = 0x4D49
# A rank whose collective passed its deadline tells every other rank so (``stop``), on
# the caller's communicator too: read at their own deadlines, to say why they wait.
STOPPED_TAG = 0x4D4B
# Data tags on the duplicate cycle through [1, DATA_TAGS]: an operation's point-to-point
# messages carry its own tag, so operations in flight together never match each other.
DATA_TAGS = 32000
# How long a wait polls without yielding the core before its back-off: most small
# operations complete within microseconds of their issue. 0 on a crowded node
# (``backend.node_crowded``), where the rank waited for may need this very core:
# 4 ranks on 2 cores, a 4 KiB Iallreduce took 48 us polled so, 34 us yielding at once.
TIGHT_POLL_S = 10e-6

_keyval = []


class Stopped(NamedTuple):
    """What a rank that stopped its collectives (``CommState.stop``) told the others: the
    number of the collective whose deadline passed, and when it passed (its wall clock,
    ns; the stop itself may come later, after a roll call)."""

    seq: int
    deadline_ns: int


def wall_ns_ago(seconds: float) -> int:
    """The wall clock (ns) ``seconds`` ago: when a collective was issued or its deadline
    passed, as a stop notice carries it to ranks on other hosts (a monotonic clock is
    of this host alone)."""
    return time.time_ns() - int(max(seconds, 0.0) * 1e9)


def comm_state(comm: MPI.Intracomm) -> CommState:
    """Return the ``CommState`` of ``comm``, creating it on first use (local, no MPI call)."""
    if not _keyval:
        _keyval.append(MPI.Comm.Create_keyval())
    state = comm.Get_attr(_keyval[0])
    if state is None:
        state = CommState(comm)
        comm.Set_attr(_keyval[0], state)
    return state


def make_backoff(config: config_lib.Config) -> Backoff:
    """Return the polling rhythm of a rank waiting in a collective.

    Every rank of a collective is busy with it at the same time, so a rank that sleeps
    while its peer needs it stalls everyone: collectives yield for MPIFLOW_COLLECTIVE_SPIN_US
    (the peers get the core if they need it) before backing off to sleeps capped at
    MPIFLOW_POLL_MAX_SLEEP_US, which a long wait (a straggler) soon reaches.
    """
    return Backoff(spin_s=config.get("MPIFLOW_COLLECTIVE_SPIN_US") * 1e-6, first_s=5e-6,
                   max_s=config.get("MPIFLOW_POLL_MAX_SLEEP_US") * 1e-6)


class ScratchPool:
    """Grow-only byte buffers lent to operations in flight and given back when they end."""

    def __init__(self):
        self._free: list[np.ndarray] = []

    def take(self, nbytes: int) -> np.ndarray:
        """Return a uint8 buffer of at least ``nbytes`` that no operation in flight uses."""
        free = self._free
        fits = [i for i, b in enumerate(free) if b.nbytes >= nbytes]
        if fits:
            return free.pop(min(fits, key=lambda i: free[i].nbytes))
        if free:  # grow the largest one instead of keeping a small one around
            free.pop(max(range(len(free)), key=lambda i: free[i].nbytes))
        return np.empty(max(nbytes, 1), dtype=np.uint8)

    def give(self, buf: np.ndarray) -> None:
        self._free.append(buf)


def job_ranks_of(comm) -> list[int]:
    """Each rank of ``comm`` as the job numbers it (MPI_COMM_WORLD), as errors name them:
    a group's rank 0 may be the job's rank 1 (the workers of a job with a ps), and the
    lines of its output say ``[rank 1 ...]``."""
    ranks = MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())),
                                      MPI.COMM_WORLD.Get_group())
    return [i if r == MPI.UNDEFINED else r for i, r in enumerate(ranks)]


class CommState:
    """Per-communicator state shared by every collective strategy.

    Operations are numbered in the order they are issued; all ranks must issue them in the
    same order. An operation first runs its cross-rank check (if any) on ``check_comm``;
    its data then moves on ``data_comm``. Both are duplicates made at the first operation
    (the checks of operations in flight together, and their data phases, would otherwise
    be posted in different interleavings on different ranks). Checks are posted, and
    operations start their data phase, strictly in issue order, so MPI's
    non-blocking collectives (and NCCL calls) are entered in one order on every rank even
    when callers test their handles in different orders. Handles of one communicator may
    be tested from several threads: they advance under the state's lock.
    """

    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.lock = threading.RLock()
        self.scratch = ScratchPool()
        self.extras: dict = {}            # strategy-owned lazy state (e.g. the NCCL comm)
        # Bumped whenever a transfer completes: a waiter that sees it change keeps polling
        # instead of backing off to sleeps (over TCP, data moves only while it polls).
        self.transfers_done = 0
        self._seq = 0
        self._queue: collections.deque = collections.deque()
        self._sends: list = []            # [(request, keepalive)] of fire-and-forget sends
        # The private duplicates: data_comm carries the data, check_comm the cross-rank
        # checks (both made at the first operation, usable once ``idle()`` says so).
        self.data_comm: MPI.Intracomm | None = None
        self._dup_request = None
        self.check_comm: MPI.Intracomm | None = None
        self._check_dup_request = None
        self._unposted = collections.deque()   # checks not yet posted, in issue order
        self._active: list = []           # operations in their data phase, in issue order
        self._ready = False               # both duplicates made (then for good)
        self.tight_poll_s = 0.0 if backend.node_crowded() else TIGHT_POLL_S
        # This rank's steps in the checks' exchange (the same for every check), and the
        # exchange a blocking call's express check runs on (one at a time; a check that
        # outlives its express run takes it along and leaves a new one).
        self.doubling_steps = doubling_steps(self.rank, self.size)
        self.spare_exchange = Exchange()
        self.exchanges = ExchangePool()       # carried allreduces' (``run_carried_now``)
        # Why this rank's collectives here stopped (``stop``), or None.
        self.stopped: str | None = None
        self._stopped_at = -1
        self._abandoned: list = []        # operations given up on: MPI may still use them
        self._stopped_ranks: dict[int, Stopped] = {}     # ``stopped_elsewhere``'s findings

    @functools.cached_property
    def job_ranks(self) -> list[int]:
        """Each rank of the communicator as the job numbers it (``job_ranks_of``)."""
        return job_ranks_of(self.comm)

    def in_the_job(self, ranks) -> list[int]:
        """``ranks`` of the communicator, numbered as in the job (``job_ranks``)."""
        return [self.job_ranks[int(r)] for r in ranks]

    def others_in_the_job(self) -> list[int]:
        """The communicator's other ranks, numbered as in the job: what an error names
        where MPI does not say which of them a wait is for."""
        return [r for i, r in enumerate(self.job_ranks) if i != self.rank]

    def stop(self, seq: int, error: errors.MpiflowError, keepalive=None,
             overdue: float = 0.0) -> None:
        """Stop this rank's collectives here: operation ``seq`` passed its deadline,
        ``overdue`` s ago, with ``error`` (``keepalive``: what MPI may still write into,
        kept referenced).

        The ranks no longer agree on what is on the wire: a rank arriving late completes
        the operation from the message this rank sent at its issue, while its own message
        stays unreceived, where it would be taken for a later operation's. So no
        collective starts here any more: every later one, and every one not yet in its
        data phase, fails at once (``refusal``), as a collective executor stays aborted
        after a failure in TensorFlow; those already moving their data (their check
        passed on every rank) go on to their end or their own deadline. Every other rank
        is told, with the time its deadline passed (the wall clock: it is compared on
        other hosts), so that one waiting at its own deadline says why, and whether it
        issued that operation before or after the deadline here."""
        if self.stopped is not None:
            return
        self._stopped_at = seq
        self.stopped = f"collective #{seq} passed its deadline ({error})"
        self._abandoned.append(keepalive)
        notice = np.array([seq, wall_ns_ago(overdue)], dtype=np.int64)
        for rank in range(self.size):
            if rank != self.rank:
                self.track_send(self.comm.Isend([notice, MPI.INT64_T], rank, STOPPED_TAG),
                                notice)

    def refusal(self, seq: int | None = None) -> errors.AbortedError:
        """The error of operation ``seq`` (None: one being issued), refused after
        ``stop``."""
        which = "every later collective here fails at once" if seq is None or \
            seq > self._stopped_at else f"collective #{seq}, issued before it, cannot start"
        return errors.AbortedError(
            f"rank {self.rank}'s collectives on this communicator stopped when {self.stopped}"
            f"; a message of that collective may still arrive, so {which} instead of "
            f"taking it for its own: end the job, or build a new communicator")

    def stopped_elsewhere(self) -> dict[int, Stopped]:
        """The ranks that told this one they stopped (``stop``), with the number of the
        collective that stopped them and when; their notices are taken off the wire (a
        matched probe: threads that look at once never wait for a notice another one
        took)."""
        status, notice = MPI.Status(), np.empty(2, dtype=np.int64)
        with self.lock:
            while True:
                message = self.comm.Improbe(MPI.ANY_SOURCE, STOPPED_TAG, status)
                if message is None:
                    break
                message.Recv([notice, MPI.INT64_T])
                self._stopped_ranks.setdefault(status.Get_source(),
                                               Stopped(int(notice[0]), int(notice[1])))
            return dict(self._stopped_ranks)

    def submit(self, handle) -> int:
        """Number ``handle`` and queue it to start after the operations issued before it."""
        if self.stopped is not None:
            raise self.refusal()
        if self.data_comm is None and self._dup_request is None:
            # Non-blocking, so a rank that never joins surfaces as a deadline with the
            # check's diagnosis instead of a hang inside MPI_Comm_dup.
            self.data_comm, self._dup_request = self.comm.Idup()
            self.check_comm, self._check_dup_request = self.comm.Idup()
        seq = self._seq
        self._seq += 1
        self._queue.append(handle)
        return seq

    def idle(self) -> bool:
        """Whether an operation issued now could start at once: both duplicates ready,
        nothing issued before it waiting for its check to be posted or its data to start,
        and none in flight with a collective still to start."""
        if self._queue or self._unposted or (self._active and self._collectives_held()):
            return False
        if not self._ready:
            self._ready = self.data_comm is not None and self.dup_ready() and \
                self._check_dup_ready()
        return self._ready

    def start_now(self) -> int | None:
        """Number an operation that starts at once, without queueing it, where it can
        (``idle()``); None where it must queue (``submit``)."""
        if self.stopped is not None:
            raise self.refusal()
        if not self.idle():
            return None
        seq = self._seq
        self._seq += 1
        return seq

    def requeue_first(self, handle) -> None:
        """Put ``handle`` (numbered by ``start_now``, its check posted) at the head of the
        queue: it starts its data phase when its check passes, before anything issued
        after it."""
        self._queue.appendleft(handle)

    def _check_dup_ready(self) -> bool:
        if self._check_dup_request is not None and self._check_dup_request.Test():
            self._check_dup_request = None
            # An MPI error on the check's messages comes back as an exception this rank
            # reports, whatever the caller's communicator does (it may abort the job).
            self.check_comm.Set_errhandler(MPI.ERRORS_RETURN)
        return self._check_dup_request is None

    def submit_check(self, check) -> None:
        """Queue ``check`` to be posted after the checks issued before it (at once when
        the check communicator is ready)."""
        self._unposted.append(check)
        self._post_checks()

    def _post_checks(self) -> None:
        if not self._unposted or not self._check_dup_ready():
            return
        while self._unposted:
            self._unposted.popleft().post()

    def has_queued(self) -> bool:
        """Whether anything waits here to be posted, started or moved on (or sends to
        finish)."""
        return bool(self._queue or self._unposted or self._sends or self._active)

    def in_flight(self, handle) -> None:
        """Count ``handle`` among the operations in their data phase (``pump`` moves them
        on, in issue order)."""
        self._active.append(handle)

    def _collectives_held(self) -> bool:
        return any(handle.holds_collectives() for handle in self._active)

    def data_tag(self, seq: int) -> int:
        return 1 + seq % DATA_TAGS

    def track_send(self, request: MPI.Request, keepalive) -> None:
        """Keep ``keepalive`` (the send buffer) until ``request`` completes."""
        self._sends.append((request, keepalive))

    def dup_ready(self) -> bool:
        if self._dup_request is not None and self._dup_request.Test():
            self._dup_request = None
        return self._dup_request is None

    def pump(self) -> None:
        """Move on every operation in its data phase, post queued checks and start the
        data phase of operations, all in issue order.

        Every rank starts the collectives underneath in issue order whatever order its
        handles are tested in: an operation starts its data phase only when none before
        it has a collective step still to start (an allgather's second step waits for
        its first to finish), and each test moves every operation in flight on, so a
        rank waiting on a later handle does not stall an earlier one (a ring) that the
        other ranks wait on.
        """
        if self._sends:
            self._sends = [(r, k) for r, k in self._sends if not r.Test()]
        if self._active:
            self._active = [h for h in self._active if not h.progress()]
        if self.stopped is not None:     # nothing more starts here (``stop``)
            return
        self._post_checks()
        while self._queue:
            handle = self._queue[0]
            if handle.failed:
                self._queue.popleft()
                continue
            if not handle.check_passed():
                if handle.failed:      # its check raised: it never starts; go on
                    self._queue.popleft()
                    continue
                return
            if not self.dup_ready() or (self._active and self._collectives_held()):
                return
            self._queue.popleft()
            handle.begin_data()
            if not handle.progress():
                self.in_flight(handle)

    def blocking_head(self, handle):
        """Return the operation queued before ``handle`` that holds it back, or None."""
        for queued in self._queue:
            if queued is handle:
                return None
            if not queued.failed:
                return queued
        return None
