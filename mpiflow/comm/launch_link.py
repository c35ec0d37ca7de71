"""A rank's line to ``mpiflow.launch``: who it is, how it ends, and its stack on demand.

An MPI launcher knows processes, not ranks: it cannot say which rank failed or why, it
may wait forever for a host that vanished, and nobody can ask it where a hung rank is.
Under ``mpiflow.launch`` every rank opens one TCP connection to the launcher at import
(the address is in ``MPIFLOW_LAUNCH_ADDRESS``) and says who it is, what its role became,
and how it ends: failed (the culprit), lost contact with a host, interrupted, or done.
A connection that closes without such a word is a rank that died. The launcher asks for
stacks over the same line, and a thread here answers from whatever the main thread is
doing (``whereabouts``, given by the runtime). It also tells the rank of a peer lost in
an elastic job (faster than the rank's own checks would find it), and hands it Ctrl-C
where the MPI launcher does not forward it.

Messages are JSON lines (control only; nothing here is on a step's path). Everything is
best effort: a launcher that cannot be reached costs a warning, never the training.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from typing import Callable

ADDRESS_VARIABLE = "MPIFLOW_LAUNCH_ADDRESS"
# The process whose line to the launcher this is, for the processes it starts: a helper
# script or a spawned worker of a rank that imports mpiflow inherits the rank's variables,
# and would otherwise say hello as that rank and be taken for it from then on.
OWNER_VARIABLE = "_MPIFLOW_LAUNCH_LINE_PID"
_CONNECT_TIMEOUT_S = 5.0


class LaunchLink:
    """One rank's connection to the launcher (module functions use the process's one)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._send_lock = threading.Lock()
        self.whereabouts: Callable[[], dict] = lambda: {}
        # Called from this link's thread with (rank, why) when the launcher says a rank is
        # lost and the job goes on without it (set by the runtime's ``Peers``).
        self.on_lost: Callable[[int, str], None] = lambda rank, why: None
        self._answers: dict[int, dict] = {}
        self._answered = threading.Condition()
        self._next_question = 0
        threading.Thread(target=self._serve, name="mpiflow-launch-link", daemon=True).start()

    def tell(self, kind: str, **fields) -> None:
        """Send one message; a launcher gone (it ends the job) is not this rank's error."""
        data = (json.dumps({"k": kind, **fields}) + "\n").encode()
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError:
                pass

    def ask(self, kind: str, answer_within: float, **fields) -> dict | None:
        """Send one message and wait up to ``answer_within`` seconds for the launcher's
        answer to it; None if none came (no launcher, or it did not answer in time)."""
        with self._answered:
            self._next_question += 1
            question = self._next_question
        self.tell(kind, id=question, **fields)
        with self._answered:
            self._answered.wait_for(lambda: question in self._answers, answer_within)
            return self._answers.pop(question, None)

    def whereabouts_of(self, ranks, wait_s: float = 3.0) -> dict[int, dict]:
        """Ask the launcher where ``ranks`` are (it asks them); ``{rank: report}``."""
        answer = self.ask("stacks_of", wait_s + 1.0, ranks=[int(r) for r in ranks],
                          wait_s=wait_s) or {}
        return {int(rank): report for rank, report in (answer.get("reports") or {}).items()}

    def fileno(self) -> int:
        """The line's socket, for a helper process that speaks for this rank when the rank
        itself cannot (``runtime.process.start_mpi``)."""
        return self._sock.fileno()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _serve(self) -> None:
        """Answer the launcher's requests (stacks) from this thread, so a main thread
        stuck anywhere, even before MPI, is still seen."""
        reader = self._sock.makefile("rb")
        for line in reader:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if request.get("k") == "answer":
                with self._answered:
                    self._answers[request.get("id")] = request
                    self._answered.notify_all()
            elif request.get("k") == "interrupt":
                # Ctrl-C at mpiflow.launch, where the MPI launcher does not forward it.
                os.kill(os.getpid(), int(request.get("sig", signal.SIGINT)))
            elif request.get("k") == "lost":
                self.on_lost(int(request.get("rank", -1)), str(request.get("why", "")))
            elif request.get("k") == "stacks":
                try:
                    report = self.whereabouts()
                except Exception as exc:        # a report that failed is still a report
                    report = {"error": f"{type(exc).__name__}: {exc}"}
                self.tell("stacks", id=request.get("id"), report=report)


_LINK: list[LaunchLink] = []


def connect_from_environment(rank: str | None) -> LaunchLink | None:
    """Open this process's line to the launcher named in ``MPIFLOW_LAUNCH_ADDRESS``, if
    any, and say hello as ``rank`` (from the launcher's rank variable)."""
    address = os.environ.get(ADDRESS_VARIABLE)
    if not address or _LINK or rank is None:
        return _LINK[0] if _LINK else None
    if os.environ.get(OWNER_VARIABLE, str(os.getpid())) != str(os.getpid()):
        return None             # started by the rank, not the rank: its line speaks for it
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S)
        sock.settimeout(None)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"[r{rank}] mpiflow: cannot reach mpiflow.launch at {address} "
                         f"({exc}); this rank runs without it\n")
        return None
    link = LaunchLink(sock)
    link.tell("hello", rank=int(rank), pid=os.getpid(), host=socket.gethostname())
    _LINK.append(link)
    os.environ[OWNER_VARIABLE] = str(os.getpid())
    return link


def current() -> LaunchLink | None:
    """The process's line to the launcher, or None (not under ``mpiflow.launch``)."""
    return _LINK[0] if _LINK else None


def tell(kind: str, **fields) -> None:
    """Send one message to the launcher, if this process has a line to it."""
    if _LINK:
        _LINK[0].tell(kind, **fields)


def watch() -> LaunchLink | None:
    """This process is not the rank but its watching parent (``mpiflow.supervise``): the
    launcher stops counting this connection as the rank (the child opens its own) and
    keeps it as the rank's watcher, which says how the child ended (``child_ended``)."""
    if not _LINK:
        return None
    link = _LINK.pop()
    link.tell("watching", pid=os.getpid())
    os.environ.pop(OWNER_VARIABLE, None)     # the child this process starts is the rank
    return link
