"""What a rank does when the job is interrupted: Ctrl-C, or SIGTERM from the launcher or
from Slurm at the time limit.

A launcher forwards Ctrl-C to every rank at once. Left to Python, every rank prints its
traceback, the failure hook prints it again with the rank's tag, and each rank tells the
others it "failed", so they blame each other in a circle. Here an interrupt is not a
failure: the rank unwinds its ``with`` blocks (temporary directories, open sessions),
prints one line (``interrupted (SIGINT)``), tells its peers, and is gone within
``EXIT_WITHIN_S`` even if its main thread is stuck in C code. A rank that hears of a
peer's interrupt before (or instead of) its own signal stops the same way and says whose
interrupt it was, in one line of its own.

Only the default handlers are replaced, and only in a rank of an MPI job (the rank service
installs them): a handler the script set itself, or an interactive session's, stays.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

from mpiflow.comm import launch_link

# From the signal to the process's end, at the most: long enough to unwind and print,
# short enough that a user pressing Ctrl-C sees the prompt at once.
EXIT_WITHIN_S = 1.5
HANDLED = (signal.SIGINT, signal.SIGTERM)


class _State:
    """The interrupt this process is handling: its own signal, or a peer's notice."""

    def __init__(self):
        # Reentrant: a second signal's handler can run inside the first one, in the main
        # thread, while it holds the lock (the launcher and the terminal both send Ctrl-C).
        self.lock = threading.RLock()
        self.signum = None          # the signal this rank got, once it got one
        self.peer = None            # "rank 1 (worker:0) on node2": whose interrupt a peer
        self.peer_signum = None     # told of, and its signal
        self.raising_for_peer = False   # the next SIGINT is interrupt_main's, for the peer
        self.prefix = str
        self.said = False
        self.timer = None
        self.watched = False        # a thread arms the exit timer from the wakeup fd


_STATE = _State()


def exit_code() -> int:
    """The shell's code for the interrupt being handled (128 + signal number)."""
    return 128 + int(_STATE.signum or _STATE.peer_signum or signal.SIGINT)


def interrupted() -> bool:
    """Whether this process is stopping because of an interrupt (its own or a peer's)."""
    return _STATE.signum is not None or _STATE.peer is not None


def _arm_exit_timer() -> None:
    """End the process ``EXIT_WITHIN_S`` from now, whatever its main thread is doing."""
    with _STATE.lock:
        if _STATE.timer is not None:
            return
        _STATE.timer = threading.Timer(EXIT_WITHIN_S, exit_now)
        _STATE.timer.daemon = True
        _STATE.timer.start()


# Called with the moment the job's ranks leave together, before this one leaves: a parent
# process that watches this rank (``mpiflow.run``'s) leaves at the same moment.
LEAVING_LISTENERS = []


def leave_at(moment: float) -> None:
    """Tell the listeners, wait until ``moment`` (seconds since the epoch), and exit."""
    for listener in LEAVING_LISTENERS:
        try:
            listener(moment)
        except Exception:       # leaving anyway
            pass
    time.sleep(max(0.0, moment - time.time()))
    exit_now()


def say_once() -> None:
    """Print this rank's line about the interrupt, unless it was printed already."""
    with _STATE.lock:
        if _STATE.said:
            return
        _STATE.said = True
    sys.stderr.write(_STATE.prefix() + report_line() + "\n")
    sys.stderr.flush()
    launch_link.tell("interrupted", why=report_line())


def set_line_prefix(prefix) -> None:
    """Start this rank's line with ``prefix()`` ("[rank 2 (worker:1) on node3] ", once
    the rank knows its role)."""
    _STATE.prefix = prefix


def exit_now() -> None:
    """Flush what the script printed and end the process with ``exit_code()``, having
    said why (also when the main thread never got to it: stuck in C, or slow to
    unwind)."""
    say_once()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:       # a closed or broken stream: leaving anyway
            pass
    os._exit(exit_code())


def _on_signal(signum, frame):
    with _STATE.lock:
        if _STATE.raising_for_peer:
            # interrupt_main's simulated SIGINT, for a peer's notice: unwind, as below.
            _STATE.raising_for_peer = False
            raise KeyboardInterrupt
        first = _STATE.signum is None and _STATE.peer is None
        if _STATE.signum is None:
            _STATE.signum = signum
    if not _STATE.watched:
        # No thread sees the signal arrive (the script owns the wakeup fd): arm it here.
        # Starting a thread in a handler is a last resort; the watcher does it otherwise.
        _arm_exit_timer()
    if first:
        # Both signals unwind the script as Ctrl-C does, so its cleanup (and a
        # ``except KeyboardInterrupt``) runs for SIGTERM too.
        raise KeyboardInterrupt
    # A second signal (the launcher and the terminal both forward Ctrl-C) changes nothing.


def _watch_wakeups(read_fd: int) -> None:
    """Arm the exit timer from a thread when a handled signal arrives, so a main thread
    blocked in C (a long kernel, an MPI call) cannot keep the process alive."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if any(b in HANDLED for b in data):
            _arm_exit_timer()


def install() -> bool:
    """Handle SIGINT and SIGTERM as interrupts of the job, where the defaults are still
    in place. Return whether they are now handled here (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    installed = False
    for signum in HANDLED:
        if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, _on_signal)
            installed = True
    if installed and signal.set_wakeup_fd(-1) == -1:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        _STATE.watched = True
        threading.Thread(target=_watch_wakeups, args=(read_fd,), name="mpiflow-interrupts",
                         daemon=True).start()
    return installed


def on_peer_interrupted(who: str, signum: int) -> None:
    """A peer says it was interrupted: stop this rank too, unless it is already stopping.

    The main thread gets the interrupt (its cleanup runs) and the exit timer bounds the
    time it may take."""
    with _STATE.lock:
        if _STATE.signum is not None or _STATE.peer is not None:
            return
        _STATE.peer = who
        _STATE.peer_signum = signum
        _STATE.raising_for_peer = True
    _arm_exit_timer()
    _thread.interrupt_main()


def report_line() -> str:
    """The one line this rank prints about the interrupt."""
    if _STATE.signum is not None:
        return f"interrupted ({signal.Signals(_STATE.signum).name})"
    if _STATE.peer is not None:
        return (f"interrupted: {_STATE.peer} got "
                f"{signal.Signals(_STATE.peer_signum).name}")
    return "interrupted (KeyboardInterrupt)"


def origin() -> tuple[int, str | None]:
    """The interrupt's signal, and whose it was: None for this rank's own."""
    if _STATE.signum is not None or _STATE.peer is None:
        return int(_STATE.signum or signal.SIGINT), None
    return int(_STATE.peer_signum), _STATE.peer
