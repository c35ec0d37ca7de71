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

SIGTERM while the rank trains in a ``MonitoredTrainingSession`` (or serves as a ps) is
a graceful stop instead (what Slurm sends before its time limit, with ``--signal``): the
session stops after its current step, its hooks end (the chief writes its checkpoint),
the ps keep serving until the workers are done, and the job ends with exit code 0, every
rank saying ``stopping (SIGTERM)`` once. Peers hear of it and stop the same way. A second
signal of another kind (Ctrl-C) interrupts at once; ``MPIFLOW_STOP_GRACE_S`` bounds it.

SIGUSR1 (MPICH's ``mpiexec`` forwards it to every rank) prints where every rank is: rank
0 asks the others from a thread and prints one report (``whereabouts``); not in an
elastic job, where MPICH sends SIGUSR1 itself when a rank ends.

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
import traceback

from mpiflow import config
from mpiflow.comm import launch_link, launcher_release

# From the signal to the process's end, at the most: long enough to unwind and print,
# short enough that a user pressing Ctrl-C sees the prompt at once.
EXIT_WITHIN_S = 1.5
HANDLED = (signal.SIGINT, signal.SIGTERM)
GRACEFUL = signal.SIGTERM
DUMP = signal.SIGUSR1

# What can stop at a step boundary, while it can: ``request_stop()`` of each is called on a
# graceful stop (an open MonitoredSession; a ps serving in ``Server.join``, which just
# keeps serving). Empty: SIGTERM interrupts like Ctrl-C.
STOPPABLE = []
# Called with the signal when this rank begins a graceful stop of its own: the rank
# service tells its peers, which stop too.
STOP_LISTENERS = []
# Returns the report SIGUSR1 prints ("" prints nothing); the rank service sets it.
dump_report = None


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
        self.stopping = None        # the signal of a graceful stop under way
        self.stop_origin = None     # who got it (None: this rank)
        self.watched = False        # a thread arms the exit timer from the wakeup fd


_STATE = _State()


def exit_code() -> int:
    """The shell's code for the interrupt being handled (128 + signal number)."""
    return 128 + int(_STATE.signum or _STATE.peer_signum or _STATE.stopping or signal.SIGINT)


def stopping() -> bool:
    """Whether this rank is stopping gracefully (SIGTERM while training)."""
    return _STATE.stopping is not None


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


def leave_at(moment: float, release_launcher: bool = False) -> None:
    """Tell the listeners, wait until ``moment`` (seconds since the epoch), and exit.

    ``release_launcher`` (every rank agreed to leave): first tell the launcher this exit
    is no crash, so a rank that leaves a few milliseconds before the others does not make
    it kill them (MPICH's would, and the job would end "killed" instead of interrupted).
    """
    for listener in LEAVING_LISTENERS:
        try:
            listener(moment)
        except Exception:       # leaving anyway
            pass
    time.sleep(max(0.0, moment - time.time()))
    if release_launcher:
        launcher_release.release_from_launcher()
    exit_now()


def say_once() -> None:
    """Print this rank's line about the interrupt, unless it printed its one line already
    (about a graceful stop, perhaps)."""
    _say(report_line())
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
    leave_process(exit_code())


def leave_process(code: int) -> None:
    """Flush what the script printed and end the process at once with ``code`` (no
    atexit handlers, no MPI_Finalize)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:       # a closed or broken stream: leaving anyway
            pass
    os._exit(code)


def graceful_stop_applies(signum) -> bool:
    """Whether ``signum`` stops this rank gracefully (see the module's docstring)."""
    return signum == GRACEFUL and _STATE.signum is None and _STATE.peer is None and \
        (_STATE.stopping is not None or bool(STOPPABLE))


def _on_signal(signum, frame):
    if signum == DUMP:
        return              # the watcher thread prints the report
    if graceful_stop_applies(signum):
        return              # the watcher thread begins the stop (no MPI from a handler)
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
        for signum in data:
            if signum == DUMP:
                threading.Thread(target=_print_dump, daemon=True,
                                 name="mpiflow-whereabouts").start()
            elif graceful_stop_applies(signum):
                begin_stop(signum, None)
            elif signum in HANDLED:
                _arm_exit_timer()


def install_early_dump(own_report) -> None:
    """From ``import mpiflow`` in a launched rank until the rank service exists
    (``install``): SIGUSR1 prints ``own_report(stack)``, where this rank is (``stack``:
    its main thread's, where the signal found it), each rank for itself (no rank can ask
    the others yet), instead of ending the process, SIGUSR1's default action, which ends
    the whole job: a start-up that hangs is when one asks."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(DUMP) != signal.SIG_DFL:
        return

    def on_dump(signum, frame):
        if config.get("MPIFLOW_ELASTIC"):
            return      # MPICH sends it when a rank ends (see _print_dump)
        stack = "".join(traceback.format_stack(frame))
        # Written from a thread: a write in a handler could land inside one the main
        # thread was making.
        threading.Thread(target=_write_report, args=(lambda: own_report(stack),),
                         daemon=True, name="mpiflow-whereabouts").start()

    _EARLY_DUMP.append(on_dump)
    signal.signal(DUMP, on_dump)


_EARLY_DUMP = []       # the handler ``install_early_dump`` set, which ``install`` replaces


def _write_report(make_report) -> None:
    try:
        text = make_report()
    except Exception as exc:    # a report that failed says so instead
        text = f"mpiflow: no whereabouts report: {type(exc).__name__}: {exc}\n"
    sys.stderr.write(text)
    sys.stderr.flush()


def install() -> bool:
    """Handle SIGINT and SIGTERM as interrupts of the job, where the defaults are still
    in place, and SIGUSR1 with the job's report. Return whether they are now handled
    here (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    installed = False
    for signum in (*HANDLED, DUMP):
        if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL,
                                        *_EARLY_DUMP):
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


def begin_stop(signum: int, who: str | None) -> None:
    """Stop gracefully for ``signum`` that this rank (``who`` None) or ``who`` got: every
    stoppable stops at its next step boundary, the peers hear of it, and the rank ends
    within MPIFLOW_STOP_GRACE_S whatever happens. Called from a thread, never a handler."""
    with _STATE.lock:
        if _STATE.stopping is not None:
            if who is None:
                _STATE.stop_origin = None   # a peer's word came first, but it got it too
            return
        _STATE.stopping, _STATE.stop_origin = signum, who
        # A serving rank says nothing yet: the workers may still be interrupted instead
        # (then so is it), or it says "stopped" when its serving ends (``say_stopped``).
        speaks = any(not getattr(s, "silent", False) for s in STOPPABLE)
    if speaks:
        _say(_stop_line("stopping", "after the current step"))
    for stoppable in list(STOPPABLE):
        stoppable.request_stop()
    if who is None:
        for listener in STOP_LISTENERS:
            try:
                listener(signum)
            except Exception:       # the peers stop on their own signal, or time out
                pass
    with _STATE.lock:
        if _STATE.timer is None:
            _STATE.timer = threading.Timer(config.get("MPIFLOW_STOP_GRACE_S"), exit_now)
            _STATE.timer.daemon = True
            _STATE.timer.start()


def _stop_line(verb: str, how: str) -> str:
    name = signal.Signals(_STATE.stopping).name
    return f"{verb} ({name}): {how}" if _STATE.stop_origin is None else \
        f"{verb}: {_STATE.stop_origin} got {name}"


def _say(line: str) -> None:
    with _STATE.lock:
        if _STATE.said:
            return
        _STATE.said = True
    sys.stderr.write(f"{_STATE.prefix()}{line}\n")
    sys.stderr.flush()


def say_stopped(how: str) -> None:
    """A serving rank's one line at the end of a graceful stop (if it is one)."""
    if _STATE.stopping is not None and not interrupted():
        _say(_stop_line("stopped", how))


def on_peer_stopping(who: str, signum: int) -> None:
    """A peer stops gracefully: stop the same way, or be interrupted where nothing here
    can stop at a step boundary."""
    if STOPPABLE or _STATE.stopping is not None:
        begin_stop(signum, who)
    else:
        on_peer_interrupted(who, signum)


def _print_dump() -> None:
    """SIGUSR1: print the report of where the ranks are, in one write.

    Not in an elastic job: there MPICH's launcher (``-disable-auto-cleanup``) sends SIGUSR1
    to every rank when one ends, and asking a rank that just died where it is can crash
    the network layer; ``mpiflow stacks`` asks through the launch instead."""
    if config.get("MPIFLOW_ELASTIC"):
        return
    _write_report(lambda: dump_report() if dump_report is not None else "")


def on_peer_interrupted(who: str, signum: int) -> None:
    """A peer says it was interrupted: stop this rank too, unless it is already stopping.

    The main thread gets the interrupt (its cleanup runs) and the exit timer bounds the
    time it may take."""
    with _STATE.lock:
        if _STATE.signum is not None or _STATE.peer is not None:
            return
        if _STATE.stopping is not None and _STATE.stop_origin is None:
            # This rank got the signal itself (and was waiting to stop gracefully): it is
            # interrupted by its own signal, not by the peer's.
            _STATE.signum = _STATE.stopping
        else:
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
    if _STATE.stopping is not None:
        return (f"interrupted: the stop for {signal.Signals(_STATE.stopping).name} took "
                f"longer than MPIFLOW_STOP_GRACE_S={config.get('MPIFLOW_STOP_GRACE_S'):g} s")
    return "interrupted (KeyboardInterrupt)"


def origin() -> tuple[int, str | None]:
    """The interrupt's signal, and whose it was: None for this rank's own."""
    if _STATE.signum is not None or _STATE.peer is None:
        return int(_STATE.signum or signal.SIGINT), None
    return int(_STATE.peer_signum), _STATE.peer
