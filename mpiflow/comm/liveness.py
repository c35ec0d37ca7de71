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

A background thread owns all of it, so beats go out while the main thread computes or
waits. Beats travel as UDP datagrams (``comm.datagrams``), not MPI messages: they keep
going to a peer for seconds after it died, and an MPI send to a dead process can crash
the network layer under every survivor. The thread only records what it found: the rank
service raises at its next wait, and if the main thread never waits again the thread ends
the job itself after a grace period. Asked where its rank is (hang forensics), the thread
answers over MPI, on its own duplicate of the communicator (MPI_THREAD_MULTIPLE).
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
from mpiflow.comm.datagrams import LOOPBACK, Datagrams, local_addresses

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
        self._datagrams = Datagrams(self.rank)
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
        # Where the others are: the monitor hands out its port, its addresses and the
        # job's token; the monitor learns every rank's address from its beats.
        monitor = self.comm.bcast(
            (int.from_bytes(os.urandom(8), "big"), self._datagrams.port, local_addresses())
            if self.rank == MONITOR else None, root=MONITOR)
        self._datagrams.token, port, addresses = monitor
        if self.hosts[self.rank] != self.hosts[MONITOR]:
            addresses = [a for a in addresses if a != LOOPBACK]
        elif LOOPBACK in addresses:
            addresses = [LOOPBACK]
        # rank -> where its beats go: the monitor's candidates until it answered from one.
        self._addresses = {} if self.rank == MONITOR else \
            {MONITOR: [(a, port) for a in addresses]}
        now = time.monotonic()
        self._last = {r: now for r in self._watched_ranks()}
        self._heard = set()           # ranks heard from at least once
        self._left = set()
        self._answered = set()
        self._sends = []              # whereabouts answers on their way
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
        """Leave: stop beating, and tell the peers, so that this rank's silence from now
        on is taken for what it is. Each peer answers ACK (or its own LEAVING); one that
        does not answer within a second is not waited for. Whereabouts answers still on
        their way over MPI are waited for too, so none is unreceived at MPI_Finalize.
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
        """Tell the peers this rank leaves (its silence from now on is no loss), resent
        until each answered or a second passed: a datagram can be lost."""
        waiting = [r for r in self._last if r not in self._left and r in self._addresses]
        self._answered = set()
        start = time.monotonic()
        next_send = start
        while time.monotonic() < start + 1.0:
            if time.monotonic() >= next_send:
                next_send += 2 * _TICK_S
                for rank in waiting:
                    if rank not in self._answered:
                        self._send(rank, LEAVING)
            self._receive()
            if self._answered.issuperset(waiting) and MPI.Request.Testall(self._sends):
                break
            time.sleep(0.001)
        self._datagrams.close()

    def _send(self, rank: int, code: int) -> None:
        for address in self._addresses.get(rank, ()):
            self._datagrams.send(address, code)

    def _send_beats(self) -> None:
        self._sends = [r for r in self._sends if not r.Test()]
        for rank in self._last:
            if rank not in self._left:
                self._send(rank, ALIVE)

    def forget(self, rank: int) -> None:
        """``rank`` is gone for good (lost, and the job goes on without it): no beat is sent
        to it or expected from it any more. Sends to a process that died can crash the
        network layer (UCX over TCP, once its connection was reset): whereabouts are no
        longer asked of it either."""
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
        for source, code, address in self._datagrams.receive():
            if source not in self._last:          # only the monitor, or only its ranks
                continue
            self._last[source] = now
            self._heard.add(source)
            # Beats go where the peer's own come from (the monitor: which of its
            # addresses answered; a rank: where it sends from).
            self._addresses[source] = [address]
            if code in (LEAVING, ACK):
                self._answered.add(source)
            if code == LEAVING:
                self._left.add(source)
                self._send(source, ACK)

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
        never = [r for r in ranks if r not in self._heard]
        ranks_word = "ranks" if len(never) > 1 else "rank"
        unheard = (f"; no heartbeat of {ranks_word} {rank_ranges(never)} ever arrived: "
                   "heartbeats are UDP datagrams, which a firewall between the hosts may drop "
                   "(MPIFLOW_HEARTBEAT_S=0 turns them off)") if never else ""
        return (f"lost contact with {'; '.join(parts)}: no heartbeat for more than "
                f"{self.timeout:g} s (MPIFLOW_PEER_TIMEOUT): its host died or its network is "
                f"cut, or the process hangs{unheard}")


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
