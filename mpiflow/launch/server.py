"""The launcher's end of every rank's line (``comm.launch_link``): who each rank is, how
it ended, and the stacks of all of them on demand.

A thread per connection reads it. A rank says ``hello`` (its rank,
pid, host), its ``name`` once it has a role, and how it ends: ``failed`` (it is the
culprit), ``lost`` (it lost contact with a host: that host is), ``aborted`` (another
rank failed), ``interrupted`` or ``bye``. A connection that closes without one of those
is a rank that died. Faults go to the job's watcher as events, in the order they came.

Every launched rank runs under a watching parent (``mpiflow.supervise``) that keeps a
line of its own (``watching``): a rank killed by a signal is named by its parent
(``child_ended``), which waits for the answer before it exits. Only then can the MPI
launcher see a process end and kill the others, so the first death reported is the
victim's, never a rank the launcher killed after it.

In an elastic job the launcher tells the survivors of a rank it goes on without
(``lost``), as soon as it hears of the loss.

A stacks client (``python -m mpiflow.stacks``) connects to the same port and says
``stacks``: every rank is asked, the answers are merged in rank order and sent back.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

from mpiflow.comm.cluster import may_be_left_behind
from mpiflow.runtime.whereabouts import format_report

FAULTS = ("failed", "lost", "died")
ENDINGS = ("failed", "lost", "aborted", "interrupted", "bye")
STACKS_WAIT_S = 3.0
_LAST_WORDS_WAIT_S = 0.5        # for a rank's own line to close after its process ended
_DIED = "its process ended without a word (killed by a signal, the OOM killer, or os._exit)"


@dataclass
class RankState:
    rank: int
    pid: int
    host: str
    name: str = ""
    ended: str | None = None        # one of ENDINGS, or "died"
    why: str = ""
    silent: bool = False            # its line closed without a word; its watcher will say
    watchers: int = 0               # open lines of watching parents (mpiflow.supervise)
    # False while the only hello is its watcher's: the rank's own process has not (yet)
    # imported mpiflow (a program that never does, or one that failed before it did).
    spoke: bool = True
    # Set when the rank's own line has been read to its end.
    line_closed: threading.Event = field(default_factory=threading.Event)
    fault: Fault | None = None      # the fault its end was reported as, if it was one

    def title(self) -> str:
        return self.name or f"rank {self.rank} on {self.host}"

    @property
    def role(self) -> str:
        """"worker:1" from the name "rank 2 (worker:1) on node3" ("" until it has one)."""
        found = re.match(r"rank \d+ \((\w+:\d+)\)", self.name)
        return found.group(1) if found else ""


@dataclass
class Fault:
    kind: str                       # one of FAULTS
    culprit: str                    # who, e.g. "rank 2 (worker:1) on node2"
    why: str
    role: str = ""                  # the culprit's role, e.g. "worker:1"
    rank: int = -1                  # the culprit's rank
    at: float = field(default_factory=time.monotonic)

    def describe(self) -> str:
        return f"{self.culprit}: {self.why}" if self.why else self.culprit


class LaunchServer:
    """Listen for the ranks of one launch (reused across restarts: ``reset``)."""

    def __init__(self, bind_host: str = "0.0.0.0"):
        self._listener = socket.create_server((bind_host, 0), backlog=1024)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.faults: queue.Queue[Fault] = queue.Queue()
        self.ranks: dict[int, RankState] = {}
        self.chief_can_move = False
        self._conns: dict[socket.socket, dict] = {}    # conn -> {"rank": its rank or None}
        self._answers: dict[int, dict] = {}
        self._next_request = 0
        threading.Thread(target=self._accept_forever, name="mpiflow-launch-server",
                         daemon=True).start()

    def all_ended(self) -> bool:
        """Whether every rank that said hello has ended, one way or another."""
        with self._lock:
            return bool(self.ranks) and all(s.ended is not None for s in self.ranks.values())

    def expendable(self, fault: Fault) -> bool:
        """Whether an elastic job goes on without the culprit of ``fault``: a worker that
        lost its own life (not a rank that lost contact), not the chief (unless its
        duties move), and not the last worker; or a rank the job's ranks already went on
        without ("gone")."""
        if fault.kind == "gone":
            return True
        with self._lock:
            roles = [s.role for s in self.ranks.values()]
            # A job with no worker left has nothing to go on with: the last loss fails it.
            survivors = [s for s in self.ranks.values() if s.role.startswith("worker:") and
                         s.role != fault.role and s.ended in (None, "bye")]
        return fault.kind in ("failed", "died") and bool(survivors) and \
            may_be_left_behind(fault.role, roles, self.chief_can_move)

    def announce_loss(self, fault: Fault) -> None:
        """Tell every other rank at once that the culprit of ``fault`` is lost and the job
        goes on without it: a survivor then sends it nothing more. The launcher hears of
        a killed rank within milliseconds (its watcher's word), the survivors' own checks
        take up to MPIFLOW_PEER_TIMEOUT across hosts, and an MPI send to a dead process
        in between can crash the survivor's network layer (UCX over TCP)."""
        if fault.rank < 0:
            return
        with self._lock:
            for conn, state in self._conns.items():
                if state.get("rank") not in (None, fault.rank):
                    _send(conn, {"k": "lost", "rank": fault.rank, "why": fault.why})

    def interrupt_all(self, signum: int) -> int:
        """Hand ``signum`` to every rank over its line (each signals itself); return how
        many ranks were told."""
        with self._lock:
            lines = [conn for conn, state in self._conns.items()
                     if state.get("rank") is not None]
            for conn in lines:
                _send(conn, {"k": "interrupt", "sig": int(signum)})
        return len(lines)

    def reset(self) -> None:
        """Forget the ranks of the previous attempt (a restart starts from nothing)."""
        with self._lock:
            self.ranks.clear()
            self.chief_can_move = False
            self.faults = queue.Queue()

    # -- stacks ----------------------------------------------------------------------------
    def collect_stacks(self, wait_s: float = STACKS_WAIT_S, ranks=None) -> dict[int, dict]:
        """Ask every connected rank (or those of ``ranks``) where it is; return
        ``{rank: report}`` (a rank that did not answer within ``wait_s`` has
        ``{"error": "no answer ..."}``)."""
        with self._lock:
            self._next_request += 1
            request = self._next_request
            self._answers[request] = {}
            asked = {state["rank"]: conn for conn, state in self._conns.items()
                     if state.get("rank") is not None and (ranks is None or
                                                           state["rank"] in ranks)}
            for conn in asked.values():
                _send(conn, {"k": "stacks", "id": request})
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._answers[request]) >= len(asked):
                    break
            time.sleep(0.02)
        with self._lock:
            answers = self._answers.pop(request)
        return {rank: answers.get(rank, {"error": f"no answer within {wait_s:g} s"})
                for rank in sorted(asked)}

    def stacks_report(self) -> str:
        """Every rank's whereabouts, merged into one text ordered by rank."""
        answers = self.collect_stacks()
        if not answers:
            return "no rank is connected to this launch (yet)\n"
        return "".join(format_report(self._title(rank), report)
                       for rank, report in answers.items())

    def _title(self, rank: int) -> str:
        state = self.ranks.get(rank)
        return state.title() if state is not None else f"rank {rank}"

    # -- the threads -----------------------------------------------------------------------
    def _accept_forever(self) -> None:
        while True:
            conn, _ = self._listener.accept()
            with self._lock:
                self._conns[conn] = {"rank": None}
            threading.Thread(target=self._read_forever, args=(conn,), daemon=True,
                             name="mpiflow-launch-rank").start()

    def _read_forever(self, conn) -> None:
        """One thread per rank, blocked on its connection: when a rank dies and the MPI
        launcher then kills the others, the first connection to close wakes its thread
        first, so the first death is the one reported."""
        state = self._conns[conn]
        with conn.makefile("rb") as reader:
            while True:
                try:
                    line = reader.readline()
                except OSError:
                    line = b""
                if not line.endswith(b"\n"):
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self._handle(conn, state, message)
        self._closed(conn, state)

    def _closed(self, conn, state) -> None:
        """A line closed. The rank's own, without a word: it died, and its watcher (if it
        has one) says how; a watcher's, and its rank is silent: say it died."""
        conn.close()
        with self._lock:
            del self._conns[conn]
            watched = self.ranks.get(state.get("watching", -1))
            if watched is not None:
                watched.watchers -= 1
            rank = self.ranks.get(state["rank"]) if state["rank"] is not None else watched
            if rank is not None and rank is not watched:
                rank.line_closed.set()
            if rank is None or rank.ended is not None:
                return
            if rank.watchers > 0 and rank is not watched:
                rank.silent = True
            elif rank.silent or rank is not watched:
                self._died(rank, _DIED)

    def _died(self, rank: RankState, why: str) -> None:
        rank.ended, rank.why = "died", why
        self._report(rank, "died")

    def _report(self, rank: RankState, kind: str) -> None:
        rank.fault = Fault(kind, rank.title(), rank.why, rank.role, rank.rank)
        self.faults.put(rank.fault)

    def _handle(self, conn, state, message) -> None:
        kind = message.get("k")
        with self._lock:
            rank = self.ranks.get(state["rank"]) if state["rank"] is not None else None
            if kind == "hello":
                number = int(message["rank"])
                state["rank"] = number
                watched_by = self.ranks[number].watchers if number in self.ranks else 0
                self.ranks[number] = RankState(number, int(message.get("pid", 0)),
                                               str(message.get("host", "?")),
                                               watchers=watched_by)
                state["said"] = self.ranks[number]
            elif kind == "watching" and rank is not None:
                # A watching parent: its child is the rank (and says hello itself, maybe
                # before this line was read: the rank is the newest hello).
                state["rank"], state["watching"] = None, rank.rank
                if state.get("said") is rank:       # no hello of the rank's own yet
                    rank.spoke = False
                rank.watchers += 1
            elif kind == "child_ended":
                threading.Thread(target=self._child_ended, daemon=True,
                                 args=(conn, self.ranks.get(state.get("watching", -1)),
                                       message)).start()
            elif kind == "gone":
                # A rank says another was lost and the job goes on without it (elastic):
                # that one's line may hang open (its host vanished).
                lost = self.ranks.get(int(message.get("rank", -1)))
                if lost is not None and lost.ended is None:
                    lost.ended, lost.why = "gone", str(message.get("why", ""))
                    self._report(lost, "gone")
            elif kind == "chief_moves":
                self.chief_can_move = True      # an elastic job's chief may be lost too
            elif kind == "name" and rank is not None:
                rank.name = str(message.get("name", ""))
            elif kind in ENDINGS and rank is not None:
                if rank.ended is None:
                    rank.ended, rank.why = kind, str(message.get("why", ""))
                    if kind in FAULTS:
                        self._report(rank, kind)
            elif kind == "stacks" and rank is not None:
                answers = self._answers.get(message.get("id"))
                if answers is not None:
                    answers[rank.rank] = message.get("report") or {}
            elif kind == "report":
                threading.Thread(target=self._answer_report, args=(conn,),
                                 daemon=True).start()
            elif kind == "stacks_of":
                threading.Thread(target=self._answer_stacks_of, args=(conn, message),
                                 daemon=True).start()

    def _child_ended(self, conn, watched: RankState | None, message: dict) -> None:
        """A watcher says its rank's process ended. The rank's last words (``bye``) are
        read by another thread: its line, closed with the process, is read to its end
        first (a moment), so a rank that ended well is never taken for one that died."""
        if watched is not None:
            if watched.spoke:
                watched.line_closed.wait(_LAST_WORDS_WAIT_S)
            code = int(message.get("code", 0))
            with self._lock:
                if watched.ended is None and not watched.spoke and code == 0:
                    # A program that never imported mpiflow (a shell command, a tool) and
                    # ended well: its exit code is all it can say.
                    watched.ended = "bye"
                elif watched.ended is None:
                    self._died(watched, _how_it_ended(code, watched.spoke))
                elif watched.ended == "gone" and code != 0 and watched.fault is not None:
                    # The others' guess ("no longer runs (killed?)") came first: the
                    # watcher knows how it ended, and the job's last word names that.
                    watched.why = watched.fault.why = _how_it_ended(code, watched.spoke)
        _send(conn, {"k": "answer", "id": message.get("id")})

    def _answer_report(self, conn) -> None:
        _send(conn, {"k": "report", "text": self.stacks_report()})

    def _answer_stacks_of(self, conn, message) -> None:
        """A rank that gives up waiting asks where the ranks it waited for are."""
        wait_s = min(float(message.get("wait_s", STACKS_WAIT_S)), STACKS_WAIT_S)
        reports = self.collect_stacks(wait_s, set(message.get("ranks", [])))
        _send(conn, {"k": "answer", "id": message.get("id"), "reports": reports})


def _how_it_ended(code: int, spoke: bool = True) -> str:
    """Why a rank ended without a word, from its watcher's exit code (negative: signal);
    ``spoke``: whether the rank's process had imported mpiflow (said hello itself)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its process was killed by {name} (signal {-code})"
    if not spoke:
        # Python's own error (a syntax error, a failed import, a missing script) was
        # printed above by the rank, before mpiflow could report anything.
        return (f"its process exited with code {code} before it imported mpiflow (an error "
                "in the script or its imports, or no such file: see its output above)")
    return f"its process exited with code {code} without a word (os._exit?)"


def _send(conn, message: dict) -> None:
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass
