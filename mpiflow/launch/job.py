"""One attempt of a launch: the MPI launcher started, its output tagged, the job watched
and ended when it cannot end by itself.

An MPI launcher ends the job when a rank exits non-zero, but waits without end for a
proxy on a host that vanished (power loss, a cut link) or a rank that hangs. Here a fault
a rank reported (``failed``, ``lost``) or saw (a rank that ``died``) starts a clock: the
launcher gets ``END_GRACE_S`` to end the job itself, then its whole process group gets
SIGTERM, and ``KILL_AFTER_S`` later SIGKILL. Ctrl-C / SIGTERM to ``mpiflow.launch`` go to
the launcher, which forwards them to the ranks, or, where it does not forward them as
they are (Open MPI, srun), to every rank over its line; they get the same bound.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from mpiflow.comm.launcher_reaper import END_GRACE_S, KILL_AFTER_S
from mpiflow.launch.launchers import Launcher
from mpiflow.launch.server import Fault, LaunchServer
from mpiflow.supervise import on_parent_death

# Lines mpiflow tagged itself: "[rank 2 (worker:1) on node3] ...", and the logger's
# "[worker:1 r3] ..." / "[r3] ...".
_TAGGED = re.compile(r"\[(?:rank \d+[ \]]|r\d+\]|[\w-]+:\d+ r\d+\])")
_LINE_END = re.compile(rb"(?<=[\r\n])")


@dataclass
class Outcome:
    code: int
    fault: Fault | None
    interrupted: int | None         # the signal that stopped the launch, if one did
    seconds: float
    ended_by_launch: bool = False   # the launcher did not end by itself: it was killed
    lost: list = field(default_factory=list)    # faults an elastic job went on without


class Job:
    """Run ``argv`` (the MPI launcher's command line) and watch it."""

    def __init__(self, launcher: Launcher, argv: list[str], env: dict, server: LaunchServer,
                 say, elastic: bool = False):
        self.launcher = launcher
        self.argv = argv
        self.env = env
        self.server = server
        self.say = say
        self.elastic = elastic          # a lost non-chief worker is no fault of the job
        self.lost = []                  # the faults the job went on without
        self.interrupted = None
        self._to_hand_over = []         # signals to give the ranks over their lines

    def run(self) -> Outcome:
        start = time.monotonic()
        # A session of its own: a terminal's Ctrl-C reaches the launcher through this
        # process only (twice would make MPICH's abort at once). It still ends if this
        # process is killed (SIGTERM on the parent's death).
        proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=on_parent_death(signal.SIGTERM))
        pumps = [threading.Thread(target=self._pump, args=(stream, out), daemon=True)
                 for stream, out in ((proc.stdout, sys.stdout.buffer),
                                     (proc.stderr, sys.stderr.buffer))]
        for pump in pumps:
            pump.start()
        previous = {s: signal.signal(s, self._on_signal(proc)) for s in
                    (signal.SIGINT, signal.SIGTERM)}
        fault, ended_by_launch = None, False
        try:
            end_by = None               # monotonic time to end the launcher ourselves
            while proc.poll() is None:
                if self._to_hand_over:
                    self._hand_over(proc, self._to_hand_over.pop(0))
                try:
                    found = self.server.faults.get(timeout=0.1)
                except queue.Empty:
                    found = None
                if found is not None and self.elastic and self.server.expendable(found):
                    self.server.announce_loss(found)
                    self.say(f"going on without {found.describe()}")
                    self.lost.append(found)
                elif found is not None and fault is None:
                    fault = found
                # Every rank has ended, but the MPI launcher still waits (for the proxy of
                # a host that vanished, in an elastic job): the job is over.
                done = self.elastic and self.server.all_ended()
                if (fault is not None or self.interrupted or done) and end_by is None:
                    end_by = time.monotonic() + END_GRACE_S
                    since = "the fault" if fault is not None else \
                        "the interrupt" if self.interrupted else "the end of every rank"
                if end_by is not None and time.monotonic() > end_by:
                    ended_by_launch = True
                    self._end(proc, since)
            for pump in pumps:
                pump.join(2.0)
            while fault is None and not self.server.faults.empty():
                found = self.server.faults.get_nowait()
                if self.elastic and self.server.expendable(found):
                    self.lost.append(found)
                else:
                    fault = found
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return Outcome(proc.returncode, fault, self.interrupted, time.monotonic() - start,
                       ended_by_launch, self.lost)

    def _on_signal(self, proc):
        def forward(signum, frame):
            if self.interrupted is None:
                self.interrupted = signum
            if self.launcher.forwards_interrupts:
                self._signal(proc, signum)
            else:
                self._to_hand_over.append(signum)   # the loop does it, out of the handler
        return forward

    def _hand_over(self, proc, signum: int) -> None:
        """Give ``signum`` to every rank over its line; with no rank on a line yet, to the
        MPI launcher after all."""
        if not self.server.interrupt_all(signum):
            self._signal(proc, signum)

    @staticmethod
    def _signal(proc, signum: int) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def _end(self, proc, since: str) -> None:
        """End the launcher's whole process group: SIGTERM, then SIGKILL."""
        self.say(f"the MPI launcher did not end within {END_GRACE_S:g} s of {since}; "
                 "ending it")
        for signum, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def _pump(self, stream, out) -> None:
        """Copy the launcher's output line by line, each tagged with its rank once."""
        if self.launcher.piece_marker is not None:
            self._pump_pieces(stream, out)
            return
        pending = b""
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                break
            # A bar redraws its line with '\r': those pieces count as lines too.
            *lines, pending = _LINE_END.split(pending + chunk)
            if lines:
                out.write(b"".join(self._tag_line(line) for line in lines))
                out.flush()
        # The last piece of a stream may lack its line end (Open MPI ends an aborted
        # rank's stream with a bare NUL): ended here, or this launcher's own last line
        # would be glued to it.
        last = pending.replace(b"\0", b"")
        if self.launcher.split_tag(last.decode("utf-8", errors="replace"))[1].strip():
            out.write(self._tag_line(last + b"\n"))
            out.flush()

    def _pump_pieces(self, stream, out) -> None:
        """``_pump`` for a launcher that marks every piece of output with its rank: the
        pieces are put back together into each rank's lines, tagged once."""
        pieces = _Pieces(self.launcher.piece_marker)
        while True:
            chunk = stream.read1(65536)
            lines = pieces.feed(chunk) if chunk else pieces.finish()
            if lines:
                out.write(b"".join(line if rank is None else self._titled(rank, line)
                                   for rank, line in lines))
                out.flush()
            if not chunk:
                break

    def _tag_line(self, raw: bytes) -> bytes:
        line = raw.replace(b"\0", b"").decode("utf-8", errors="replace")
        rank, text = self.launcher.split_tag(line)
        if rank is None:
            return line.encode()
        return self._titled(rank, text.encode())

    def _titled(self, rank: int, raw: bytes) -> bytes:
        """``raw``, a line of ``rank``'s, tagged with its name (kept as it is where
        mpiflow tagged it already)."""
        text = raw.decode("utf-8", errors="replace")
        if _TAGGED.match(text):
            return text.encode()
        state = self.server.ranks.get(rank)
        title = state.title() if state is not None and state.name else f"rank {rank}"
        return f"[{title}] {text}".encode()


class _Pieces:
    """Whole lines out of a launcher's stream in which every piece a rank wrote starts
    with a marker naming the rank (MPICH's ``-prepend-pattern``). hydra writes the marker
    before each piece of a line as it reads it from the rank (up to and including a line
    end), so a line written in parts, unbuffered, comes in several pieces, between which
    other ranks' pieces may come. Text after a piece's line end and before the next
    marker is the launcher's own (its messages). ``feed`` returns the lines completed,
    as (rank or None for the launcher's own, the line); a line ends at '\\n' or '\\r' (a
    progress bar redrawing its line)."""

    def __init__(self, marker: re.Pattern):
        self.marker = marker
        self.pending = b""          # the start of a marker cut off by the end of a read
        self.rank = None            # whose piece is being read (None: the launcher's text)
        self.partial: dict[int | None, bytes] = {}     # each writer's unfinished line

    def feed(self, data: bytes) -> list[tuple[int | None, bytes]]:
        data, self.pending = self.pending + data.replace(b"\0", b""), b""
        lines: list[tuple[int | None, bytes]] = []
        at = 0
        for found in self.marker.finditer(data):
            self._take(data[at:found.start()], lines)
            self.rank, at = int(found.group(1)), found.end()
        rest = data[at:]
        cut = rest.rfind(b"\x02")
        if cut != -1 and b"\x03" not in rest[cut:]:
            rest, self.pending = rest[:cut], rest[cut:]
        self._take(rest, lines)
        return lines

    def finish(self) -> list[tuple[int | None, bytes]]:
        """The unfinished lines at the end of the stream, each ended."""
        lines = self._take(self.pending, [])
        lines += [(writer, text + b"\n") for writer, text in self.partial.items() if text]
        self.partial.clear()
        return lines

    def _take(self, text: bytes, lines: list) -> list:
        while text:
            if self.rank is None:
                piece, text = text, b""
            else:
                # A rank's piece ends with its first line end; what follows is not its.
                end = text.find(b"\n")
                piece, text = (text, b"") if end == -1 else (text[:end + 1], text[end + 1:])
            writer = self.rank
            *done, self.partial[writer] = _LINE_END.split(self.partial.get(writer, b"") +
                                                          piece)
            lines += [(writer, line) for line in done]
            if piece.endswith(b"\n"):
                self.rank = None
        return lines
