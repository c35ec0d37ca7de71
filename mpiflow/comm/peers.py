"""The other ranks of the job as this rank knows them: who is active, who has left and
how, who is dead, and the checks that notice a dead one.

A rank leaves with a "bye" (``mark_left``, saying how: "its script ended"); one that dies
says nothing, so the checks find it: its process gone from /proc when it shares this
host, the heartbeats' verdict when it does not (``comm.liveness``). ``check`` runs while
a rank waits and raises UnavailableError naming the lost rank. Ranks are named by their
role in messages ("rank 2 (worker:1)"), which is a label here: comm knows no graphs.
"""

from __future__ import annotations

import os
import time

import numpy as np

from mpiflow import errors
from mpiflow.comm import launch_link
from mpiflow.comm.cluster import chief_role, may_be_left_behind
from mpiflow.comm.liveness import Heartbeat, leave_job

ACTIVE, GONE = "active", "gone"
_CHECK_PERIOD_S = 0.5        # how often a waiting rank looks at /proc and the heartbeats


class Peers:
    """The other ranks of ``comm`` (collective: every rank makes its own at once).

    Args:
        comm: the job's communicator.
        layout: the job's ``Layout`` (which ranks share this node).
        host: this rank's host name, for messages.
        heartbeat: ``(interval, peer timeout)`` seconds; interval 0 = no heartbeats.
    """

    def __init__(self, comm, layout, host: str, heartbeat: tuple[float, float],
                 elastic: bool = False):
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.host = host
        self.elastic = elastic          # MPIFLOW_ELASTIC: see ``expendable``
        self.chief_can_move = False     # the chief said its duties can move (async)
        self.hosts = list(layout.hosts)
        self.lost_on_the_way = []       # ranks lost that the job went on without
        self.newly_lost = []            # ... not yet handled by the service
        self.role_names = {}            # rank -> "job:task", once the cluster is known
        self._state = {r: ACTIVE for r in range(self.size) if r != self.rank}
        self._dead = set()              # found dead, not merely left with a "bye"
        self._left = {}                 # rank -> (when it said "bye", how it left)
        self._told_lost = {}            # rank -> why: the launcher said it is lost (thread)
        self._pids = _local_peer_pids(comm, layout)
        self._next_check = 0.0
        interval, timeout = heartbeat
        self.heartbeat = None
        if interval > 0 and self.size > 1:
            self.heartbeat = Heartbeat(
                comm, layout.hosts, self.describe, interval, timeout,
                on_unhandled=lambda what: leave_job(
                    f"{self.describe(self.rank)} on {self.host}", what))
            self.heartbeat.expendable = self.expendable
            self.heartbeat.start()
        link = launch_link.current()
        if link is not None:
            link.on_lost = self._told_lost.__setitem__

    # -- names and states ---------------------------------------------------------------
    def describe(self, rank: int) -> str:
        role = self.role_names.get(rank)
        return f"rank {rank} ({role})" if role else f"rank {rank}"

    def ranks(self) -> list:
        """Every other rank, gone or not."""
        return list(self._state)

    def active(self) -> list:
        return [r for r, state in self._state.items() if state != GONE]

    def is_gone(self, rank: int) -> bool:
        return self._state.get(rank) == GONE

    def is_dead(self, rank: int) -> bool:
        """Whether ``rank`` died (found here, told by a peer, or by the launcher): nothing
        may be sent to it any more. Safe from any thread."""
        return rank in self._dead or rank in self._told_lost

    def all_gone(self) -> bool:
        return all(state == GONE for state in self._state.values())

    def mark_left(self, rank: int, how: str) -> None:
        """``rank`` said "bye": it has left the job, ``how`` ("its script ended")."""
        self._state[rank] = GONE
        self._left[rank] = (time.monotonic(), how)

    # -- elastic training -----------------------------------------------------------------
    def expendable(self, rank: int) -> bool:
        """Whether the job goes on without ``rank`` when it is lost: with MPIFLOW_ELASTIC,
        a worker that is not the chief (task 0 of "chief", else of "worker"), or the chief
        too once it said its duties can move (``chief_can_move``). Whether a loss can be
        absorbed (async ps: yes; allreduce: no) is the waits' to find out."""
        return self.elastic and may_be_left_behind(
            self.role_names.get(rank, ""), self.role_names.values(), self.chief_can_move)

    def chief(self) -> int | None:
        """The chief's rank (``cluster.chief_role``)."""
        chief = chief_role(set(self.role_names.values()))
        return next((r for r, role in self.role_names.items() if role == chief), None)

    def successor(self) -> int | None:
        """The worker that takes the chief's duties over: the lowest task still here."""
        alive = [(int(role.partition(":")[2]), r) for r, role in self.role_names.items()
                 if role.startswith("worker:") and r != self.chief() and
                 (r == self.rank or not self.is_gone(r))]
        return min(alive)[1] if alive else None

    def lose(self, rank: int, how: str, found_here: bool = True) -> bool:
        """``rank`` is lost and the job goes on without it (``expendable``); ``found_here``
        (not told by a peer): the service tells the others. Return whether it is news."""
        if rank in self.lost_on_the_way:
            return False
        self.mark_left(rank, how)
        self._dead.add(rank)
        self.lost_on_the_way.append(rank)
        if found_here:
            self.newly_lost.append(rank)
        return True

    def take_newly_lost(self) -> list:
        """The ranks lost since the last call (the service forgets them and tells the
        others)."""
        found, self.newly_lost[:] = list(self.newly_lost), []
        return found

    def how_it_left(self, rank: int) -> str:
        return self._left.get(rank, (0.0, "its process died"))[1]

    def check_not_gone(self, rank: int, what: str) -> None:
        """Raise UnavailableError if ``rank`` has left (``what``: "run a step on")."""
        if self.is_gone(rank):
            raise errors.UnavailableError(
                f"Cannot {what} {self.describe(rank)}: it has left the job")

    def departed(self, job: str) -> list:
        """The tasks of ``job`` that have left the job or died, as ``(task, "rank R
        (job:T) (how it left, T s ago)")``: what a wait that needs them names."""
        now = time.monotonic()
        out = []
        for rank in sorted(set(self._left) | self._dead):
            role = self.role_names.get(rank, "")
            if role.partition(":")[0] != job:
                continue
            at, how = self._left.get(rank, (now, "its process died"))
            out.append((int(role.partition(":")[2]),
                        f"{self.describe(rank)} ({how}, {now - at:.0f} s ago)"))
        return out

    def tasks_of(self, job: str) -> int:
        """How many tasks ``job`` has in the job's layout."""
        return sum(1 for role in self.role_names.values() if role.partition(":")[0] == job)

    def tasks_among(self, job: str, ranks) -> list:
        """The task indices of ``job`` that ``ranks`` run."""
        out = []
        for rank in ranks:
            name, _, task = self.role_names.get(rank, "").partition(":")
            if name == job:
                out.append(int(task))
        return sorted(out)

    # -- finding the dead ---------------------------------------------------------------
    def check(self) -> None:
        """Raise UnavailableError if a rank was found dead (at most every half second)."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + _CHECK_PERIOD_S
        self._check_told()
        self._check_local()
        self._check_heartbeats()

    def _check_told(self) -> None:
        """Ranks the launcher said are lost: handled as if found here."""
        for rank, why in list(self._told_lost.items()):
            if rank in self._state and rank not in self.lost_on_the_way:
                self.lose(rank, why or "its process died")

    def _check_local(self) -> None:
        """A rank of this host whose process is gone: a launcher that keeps the job after
        a rank is killed would otherwise leave the others waiting until the timeout."""
        for rank, pid in self._pids.items():
            if not self.is_gone(rank) and not _process_alive(pid) and self.expendable(rank):
                self.lose(rank, f"its process {pid} on {self.host} no longer runs (killed?)")
            elif not self.is_gone(rank) and not _process_alive(pid):
                self._state[rank] = GONE
                self._dead.add(rank)
                error = errors.UnavailableError(
                    f"{self.describe(rank)} on {self.host} is gone: its process {pid} no "
                    f"longer runs (killed?); rank {self.rank} cannot continue")
                error.brief = True      # where this rank waited says nothing: no traceback
                raise error

    def _check_heartbeats(self) -> None:
        if self.heartbeat is None:
            return
        while self.heartbeat.expended:
            rank = self.heartbeat.expended.pop(0)
            self.lose(rank, f"no heartbeat for more than {self.heartbeat.timeout:g} s "
                            "(MPIFLOW_PEER_TIMEOUT): its host died or its network is cut, or "
                            "it hangs")
        if self.heartbeat.lost is None:
            return
        for rank in self.heartbeat.lost_ranks:
            if rank in self._state:
                self._state[rank] = GONE
                self._dead.add(rank)
        error = errors.UnavailableError(
            f"{self.describe(self.rank)} on {self.host} {self.heartbeat.lost}; it cannot "
            "continue")
        error.brief = True      # where this rank happened to wait says nothing: no traceback
        raise error

    @property
    def lost_contact(self) -> bool:
        """Whether the heartbeats found a rank lost (then MPI_Abort may never return)."""
        return self.heartbeat is not None and self.heartbeat.lost is not None

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()


def _local_peer_pids(comm, layout) -> dict:
    """Return {rank: pid} of the other ranks on this node (collective over ``comm``)."""
    pids = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather(np.array([os.getpid()], dtype=np.int64), pids)
    return {r: int(pid) for r, pid in enumerate(pids)
            if r != layout.rank and layout.nodes[r] == layout.node}


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
