"""Cross-host liveness: heartbeats that notice a dead host or a cut network.

A rank killed on a live kernel closes its sockets, and the launcher usually ends the job;
a rank on the same host that dies is seen through /proc (the rank service checks it).
But a node that loses power, hangs, or drops off the network closes nothing: its peers
would wait for it until MPIFLOW_TIMEOUT or the scheduler's time limit, and could not say
who was lost. Heartbeats say it within MPIFLOW_PEER_TIMEOUT, naming the host and ranks.

Heartbeats form a star around a monitor rank (rank 0), so a job of K ranks sends 2(K-1)
tiny messages per interval, not K^2: every rank tells the monitor it lives, and the
monitor tells every rank. The monitor sees any silent rank (and, since every rank of a
dead host falls silent at once, names the whole host); every other rank sees a silent
monitor. The rank that notices fails as any failing rank does: it prints the error and
tells the others, who each print one "aborted because" line naming the lost host.

A background thread owns all of it, on its own duplicate of the communicator, so beats
go out while the main thread computes or waits (MPI runs with MPI_THREAD_MULTIPLE). It
only records what it found: the rank service raises at its next wait, and if the main
thread never waits again the thread ends the job itself after a grace period.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Callable, Sequence

import numpy as np
from mpi4py import MPI

from mpiflow.comm import launch_link, launcher_reaper
from mpiflow.comm.cluster import rank_ranges

HEARTBEAT_TAG = 7201
WHEREABOUTS_ASK_TAG = 7202      # "where are you?" (any rank to any rank)
WHEREABOUTS_TAG = 7203          # the answer: this rank's whereabouts as JSON
ALIVE, LEAVING, ACK = 0, 1, 2
MONITOR = 0
_TICK_S = 0.05      # how often the thread looks for messages (beats go every ``interval``)


class Heartbeat:
    """Send and watch heartbeats for one rank of ``comm`` from a daemon thread.

    Args:
        comm: the job's communicator (duplicated here: collective over ``comm``).
        hosts: the host name of every rank (from the launch layout).
        describe: ``describe(rank)`` -> e.g. "rank 2 (worker:1)", for messages.
        interval: seconds between beats.
        timeout: seconds of silence after which a rank counts as lost.
        on_unhandled: called with the loss description when the main thread has not
            ended the process ``grace`` seconds after the loss was found.
    """

    def __init__(self, comm, hosts: Sequence[str], describe: Callable[[int], str],
                 interval: float, timeout: float,
                 on_unhandled: Callable[[str], None] | None = None, grace: float = 5.0):
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.hosts = list(hosts)
        self.describe = describe
        self.interval = interval
        self.timeout = timeout
        self.grace = max(grace, 2 * interval)
        self.on_unhandled = on_unhandled
        # What this rank answers when asked where it is (set by the runtime): the thread
        # answers, so a rank whose main thread is stuck still does.
        self.whereabouts: Callable[[], dict] = lambda: {}
        self.lost: str | None = None          # what was lost, once it was
        self.lost_ranks: list[int] = []
        # Ranks the job can go on without (``expendable(rank)``): their silence is no loss
        # of the job; they are listed in ``expended`` (appended by the thread) instead.
        self.expendable: Callable[[int], bool] = lambda rank: False
        self.expended: list[int] = []
        now = time.monotonic()
        self._last = {r: now for r in self._watched_ranks()}
        self._left = set()
        self._sends = []
        self._answered = set()
        self._beat = np.array([ALIVE], dtype=np.int64)
        self._ack = np.array([ACK], dtype=np.int64)
        self._leaving = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpiflow-heartbeat",
                                        daemon=True)

    def _watched_ranks(self):
        return [r for r in range(self.size) if r != self.rank] if self.rank == MONITOR \
            else [MONITOR]

    def start(self) -> "Heartbeat":
        if self.size > 1:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Leave: stop beating, and return once no beat is on its way here any more.

        This rank sends LEAVING to each peer it beats with; a peer answers ACK (or its own
        LEAVING) and never beats here again, and MPI keeps one sender's messages in order,
        so after that answer nothing of that peer's can arrive unreceived at MPI_Finalize.
        A peer that does not answer within a second is not waited for.
        """
        if not self._thread.is_alive():
            return
        self._leaving.set()
        self._thread.join(1.0 + 2 * _TICK_S)

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        found_at = None
        next_beat = 0.0
        while not self._leaving.wait(_TICK_S):
            self._receive()
            now = time.monotonic()
            if self.lost is None and now >= next_beat:
                next_beat = now + self.interval
                self._send_beats()
                self._check_silence()
            if self.lost is not None and found_at is None:
                found_at = now
            if found_at is not None and now - found_at > self.grace and self.on_unhandled:
                self.on_unhandled(self.lost)
                return
        self._leave()

    def _leave(self) -> None:
        leaving = np.array([LEAVING], dtype=np.int64)
        waiting = [r for r in self._last if r not in self._left]
        for rank in waiting:
            self._sends.append(self.comm.Isend(leaving, rank, HEARTBEAT_TAG))
        self._answered = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            self._receive()
            if self._answered.issuperset(waiting) and MPI.Request.Testall(self._sends):
                return
            time.sleep(0.001)

    def _send_beats(self) -> None:
        self._sends = [r for r in self._sends if not r.Test()]
        for rank in self._last:
            if rank not in self._left:
                self._sends.append(self.comm.Isend(self._beat, rank, HEARTBEAT_TAG))

    def forget(self, rank: int) -> None:
        """``rank`` is gone for good (lost, and the job goes on without it): no beat is sent
        to it or expected from it any more. Sends to a process that died can crash the
        network layer (UCX over TCP, once its connection was reset)."""
        self._left.add(rank)

    def ask_whereabouts(self, ranks, wait_s: float = 2.0) -> dict[int, dict]:
        """Ask ``ranks`` where they are (their threads answer); ``{rank: report}`` of those
        that answered within ``wait_s``. Called from the main thread."""
        ranks = [r for r in ranks if r != self.rank and 0 <= r < self.size and
                 r not in self._left]
        if not ranks or not self._thread.is_alive():
            return {}
        ask = np.zeros(1, np.uint8)
        sends = [self.comm.Isend(ask, r, WHEREABOUTS_ASK_TAG) for r in ranks]
        found, status = {}, MPI.Status()
        deadline = time.monotonic() + wait_s
        while len(found) < len(ranks) and time.monotonic() < deadline:
            if not self.comm.Iprobe(MPI.ANY_SOURCE, WHEREABOUTS_TAG, status):
                time.sleep(0.005)
                continue
            data = np.empty(status.Get_count(MPI.BYTE), np.uint8)
            self.comm.Recv(data, status.Get_source(), WHEREABOUTS_TAG)
            try:
                found[status.Get_source()] = json.loads(data.tobytes())
            except ValueError:
                continue
        for request in sends:
            if not request.Test():
                request.Cancel()
        return found

    def _answer_whereabouts(self, source: int) -> None:
        self.comm.Recv(np.empty(1, np.uint8), source, WHEREABOUTS_ASK_TAG)
        try:
            report = self.whereabouts()
        except Exception as exc:        # a report that failed is still an answer
            report = {"error": f"{type(exc).__name__}: {exc}"}
        data = np.frombuffer(json.dumps(report).encode(), np.uint8)
        self._sends.append(self.comm.Isend(data, source, WHEREABOUTS_TAG))

    def _receive(self) -> None:
        status = MPI.Status()
        now = time.monotonic()
        while self.comm.Iprobe(MPI.ANY_SOURCE, WHEREABOUTS_ASK_TAG, status):
            self._answer_whereabouts(status.Get_source())
        while self.comm.Iprobe(MPI.ANY_SOURCE, HEARTBEAT_TAG, status):
            source, count = status.Get_source(), status.Get_count(MPI.INT64_T)
            if count != 1:
                # Take it off the wire, then ignore it: never act on a malformed notice.
                self.comm.Recv(np.empty(status.Get_count(MPI.BYTE), np.uint8), source,
                               HEARTBEAT_TAG)
                continue
            message = np.empty(count, dtype=np.int64)
            self.comm.Recv(message, source, HEARTBEAT_TAG)
            if source in self._last:
                self._last[source] = now
            code = int(message[0])
            if code in (LEAVING, ACK):
                self._answered.add(source)
            if code == LEAVING and source not in self._left:
                self._left.add(source)
                if not self._leaving.is_set():
                    self._sends.append(self.comm.Isend(self._ack, source, HEARTBEAT_TAG))

    def _check_silence(self) -> None:
        now = time.monotonic()
        quiet = {r: now - t for r, t in self._last.items() if r not in self._left}
        for rank in [r for r, s in quiet.items() if s > self.timeout and self.expendable(r)]:
            self._left.add(rank)          # no beat expected from it any more
            del quiet[rank]
            self.expended.append(rank)
        if not any(s > self.timeout for s in quiet.values()):
            return
        # Ranks of one dead host fall silent within a beat or two of each other.
        ranks = sorted(r for r, s in quiet.items() if s > self.timeout - 2 * self.interval)
        self.lost_ranks = ranks
        self.lost = self.explain(ranks)

    def explain(self, ranks) -> str:
        """Say which hosts and ranks fell silent, e.g. for an error message."""
        by_host = {}
        for rank in ranks:
            by_host.setdefault(self.hosts[rank], []).append(rank)
        parts = []
        for host, lost in by_host.items():
            on_host = [r for r in range(self.size) if self.hosts[r] == host]
            names = ", ".join(self.describe(r) for r in lost)
            if len(lost) == len(on_host) and len(lost) > 1:
                parts.append(f"host {host} (all its ranks: {names})")
            elif self.rank != MONITOR and len(on_host) > 1 and host != self.hosts[self.rank]:
                # Only the monitor is watched from here; its host-mates are likely lost too.
                others = [r for r in on_host if r not in lost]
                parts.append(f"{names} on host {host} (with it probably the other ranks "
                             f"of {host}: {rank_ranges(others)})")
            else:
                parts.append(f"{names} on host {host}")
        return (f"lost contact with {'; '.join(parts)}: no heartbeat for more than "
                f"{self.timeout:g} s (MPIFLOW_PEER_TIMEOUT): its host died or its network is "
                f"cut, or the process hangs")


def leave_job(who: str, what: str) -> None:
    """End this process after printing why (when the main thread never got to say it).

    Not MPI_Abort: it can wait forever for a rank it cannot reach, which after a lost
    host is the very situation; the launcher ends the job's other ranks on this exit.
    """
    sys.stderr.write(f"[{who}] {what}; ending the job\n")
    sys.stderr.flush()
    launch_link.tell("lost", why=what)
    launcher_reaper.end_launcher_later()
    os._exit(1)
