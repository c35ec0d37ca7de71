"""This process as one rank of an MPI job: its rank service, started once, and what ends
the whole job when this rank fails.

The rank service (``rank_service``) is made on first use, with MPI; from then on an
uncaught exception, or ``sys.exit`` with a non-zero code, ends every rank at once with
this rank's reason printed once (``announce_failure``), where the launcher would
otherwise leave the others waiting until the scheduler's time limit. An interrupt
(Ctrl-C, SIGTERM) is not a failure: the rank says so in one line (``interrupts``).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback

from mpiflow.comm import arrival, launch_link, launcher_reaper
from mpiflow.runtime import interrupts, whereabouts

_SERVICE = []
# A rank other than the launch's first waits this much longer in MPI_Init, so that the
# first rank's report comes first whenever it is there itself.
_START_EXTRA_WAIT_S = 2.0


def start_mpi():
    """Return ``mpi4py.MPI``, importing it (which starts MPI) within MPIFLOW_TIMEOUT.

    MPI's start (MPI_Init) waits for every rank of the job to start MPI too (MPICH's ranks
    exchange their addresses there), so a rank stuck before it (a deadlock or a slow
    load before ``ClusterSpec.from_mpi``), or one that never starts MPI, kept every other
    rank in MPI_Init without end and without a word, before any wait of mpiflow's could
    name it. MPI_Init holds Python's lock, so no thread of this process can act: a small
    watcher process started here does, if MPI_Init has not returned in time. It says
    which wait it was (on this rank's stderr, and to ``mpiflow launch`` over this rank's
    line), then kills this rank; the MPI launcher then ends the job.
    """
    started = sys.modules.get("mpi4py.MPI")
    if started is not None:
        return started
    watcher = _watch_mpi_init()
    try:
        from mpi4py import MPI
    finally:
        if watcher is not None:
            try:
                # Its sleep too: a process left holding this rank's stderr would keep the
                # launch's output open.
                os.killpg(watcher.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            watcher.wait()
    return MPI


def _watch_mpi_init():
    """The watcher of ``start_mpi`` (None outside a launch: one process starts MPI
    alone, waiting for nobody)."""
    from mpiflow import config, logger
    rank = logger.launch_rank()
    if rank is None:
        return None
    base = config.get("MPIFLOW_TIMEOUT")
    timeout = base + (0.0 if rank == "0" else _START_EXTRA_WAIT_S)
    summary = (f"DeadlineExceededError: Start-up: rank {rank} waited {timeout:g} s in "
               f"MPI_Init (starting MPI), which waits for every rank of the job to start "
               f"MPI: a rank is stuck before it (before ClusterSpec.from_mpi or its "
               f"Server), has ended, or runs another program (MPIFLOW_TIMEOUT={base:g}); "
               f"this rank ends the job")
    pid = os.getpid()
    # Seconds one at a time, gone as soon as the rank is (killed by its launcher); it holds
    # none of the rank's output, which it reaches through /proc only when it speaks.
    script = (f"i=0; while [ $i -lt {math.ceil(timeout)} ]; do sleep 1; "
              f"kill -0 {pid} 2>/dev/null || exit 0; i=$((i+1)); done; "
              f'printf "%s\\n" "$1" > /proc/{pid}/fd/2; ')
    link, fds = launch_link.current(), ()
    if link is not None:
        fds = (link.fileno(),)
        script += f'printf "%s\\n" "$2" >&{fds[0]}; '
    script += f"kill -KILL {pid}"
    said = json.dumps({"k": "failed", "why": summary})
    try:
        return subprocess.Popen(["sh", "-c", script, "sh", logger.line_tag() + summary, said],
                                pass_fds=fds, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:
        return None             # no shell: MPI_Init may wait, as it would without this


def rank_service():
    """Return this process's rank service, starting it (and MPI) on first use."""
    if not _SERVICE:
        MPI = start_mpi()

        from mpiflow.runtime.rank_service import RankService
        # MPI_Comm_dup waits for every rank without end: meet first, naming the absent.
        arrival.meet(MPI.COMM_WORLD, "the start of the rank service (Server, or a Session "
                     "on a cluster)")
        service = RankService(MPI.COMM_WORLD.Dup())
        atexit.register(_leave_without_finalize_after_losses, service)   # after shutdown
        atexit.register(_shut_down, service)
        _install_abort_hook(service, MPI.COMM_WORLD)
        interrupts.set_line_prefix(lambda: f"[{service.describe_self()}] ")
        interrupts.STOP_LISTENERS.append(service.announce_stop)
        interrupts.dump_report = lambda: whereabouts.job_report(
            service.rank, service.size, service.describe, service.peers.heartbeat)
        interrupts.install()
        _fail_on_nonzero_exit(service, MPI.COMM_WORLD)
        _SERVICE.append(service)
    return _SERVICE[0]


def current_service():
    """This process's rank service, if it has started one (a session on a cluster)."""
    return _SERVICE[0] if _SERVICE else None


def wait_for_other_workers(timeout: float) -> None:
    """In a cluster: wait up to ``timeout`` s until every other rank has left or serves
    (``JobMembership.wait_for_others_done``); alone, return at once."""
    if _SERVICE:
        _SERVICE[0].wait_for_others_done(timeout)


def _shut_down(service) -> None:
    """At exit: leave together with the other ranks (``shutdown`` waits for them). An
    interrupt while this rank waits there (Ctrl-C on a job whose other ranks still work,
    or a peer's interrupt) ends it as anywhere else: one line, and gone with the others.
    Python would print the KeyboardInterrupt as an exception ignored in an atexit
    callback and go on into MPI_Finalize, which waits for ranks that have left, without
    releasing the GIL: not even the exit timer could end the process then."""
    try:
        service.shutdown()
    except KeyboardInterrupt:
        _leave_interrupted(service)


def _leave_without_finalize_after_losses(service) -> None:
    """At exit, after the rank service's shutdown: a job that went on without a lost rank
    (MPIFLOW_ELASTIC) must not call MPI_Finalize, which waits for that rank without end.
    Leave with the code the script chose instead."""
    if not service.peers.lost_on_the_way:
        return
    launch_link.tell("bye")
    code = _EXIT_CODE[0]
    interrupts.leave_process(
        code if isinstance(code, int) and 0 <= code < 256 else (0 if code is None else 1))


# The code the script passed to sys.exit, once it did.
_EXIT_CODE = [None]


def report_failure(exc_type, exc, tb, prefix: str, rank: int | None, describe=None,
                   heartbeat=None) -> str:
    """Print an uncaught error once, each line starting with ``prefix``: its traceback
    (one line for a ``brief`` error), then, for a wait that timed out, where the ranks it
    waited for are. Return its one-line summary (for the other ranks and the launch)."""
    text = f"{exc_type.__name__}: {exc}" if getattr(exc, "brief", False) else \
        "".join(traceback.format_exception(exc_type, exc, tb)).rstrip()
    text += "\n" + whereabouts.for_timeout(exc, rank, describe, heartbeat)
    sys.stderr.write("".join(prefix + line + "\n" for line in text.splitlines()))
    sys.stderr.flush()
    return _summary(exc)


# How long a rank that follows another's report waits for that rank's abort to end the
# job: the reporter asks where the missing ranks are (up to a few seconds), prints, then
# aborts. Past this the follower ends the job itself.
FOLLOW_WAIT_S = 10.0
# How long the reporter gives the followers to say their line before its abort ends them.
FOLLOWERS_GRACE_S = 1.0


def follow_the_reporter(exc, prefix: str, rank: int | None) -> str | None:
    """For an error every rank raised and one of them reports (``exc.reported_by_rank``:
    a start-up wait rank 0 decided), on the other ranks: say it in one line, tell the
    launch this rank ends because of the reporter, and wait for the reporter's abort;
    return the summary when that abort never came (the caller then ends the job itself).
    None on the reporter and for any other error.

    Every rank that arrived raises the same start-up error at the same moment; were each
    to report and abort, the first abort could kill rank 0 before its report (where the
    missing ranks are) is out, and with it every line of the others."""
    reporter = getattr(exc, "reported_by_rank", None)
    if reporter is None or reporter == rank:
        return None
    summary = _summary(exc)
    sys.stderr.write(f"{prefix}{summary} (rank {reporter} reports it and ends the job)\n")
    sys.stderr.flush()
    launch_link.tell("aborted", why=f"rank {reporter} failed: {summary}")
    launcher_reaper.end_launcher_later()
    time.sleep(FOLLOW_WAIT_S)
    return summary


def let_the_followers_speak(exc, rank: int | None) -> None:
    """On the reporter of an error the other ranks follow: give them a moment to say
    their line before the abort ends them."""
    if rank is not None and getattr(exc, "reported_by_rank", None) == rank:
        time.sleep(FOLLOWERS_GRACE_S)


def _summary(exc) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def _install_abort_hook(service, world):
    """Make an uncaught exception end the whole MPI job at once, printed with its rank.

    Without it the failed rank waits in MPI_Finalize and its peers wait for it until the
    scheduler's time limit; with it the job ends in seconds with a non-zero exit code.
    """
    def hook(exc_type, exc, tb):
        # Once interrupted, what else goes wrong (a peer that already left) is part of
        # the interrupt, not a failure to report.
        if issubclass(exc_type, KeyboardInterrupt) or interrupts.interrupted():
            _leave_interrupted(service)
        service.failed = True
        prefix = f"[{service.describe_self()}] "
        summary = follow_the_reporter(exc, prefix, service.rank) or report_failure(
            exc_type, exc, tb, prefix, service.rank, service.describe,
            service.peers.heartbeat)
        if service.peers.expendable(service.rank) and not service.lost_contact:
            # MPIFLOW_ELASTIC: the job goes on without this worker (or, where it cannot,
            # the ranks that need it say so); no MPI_Abort, no finalize with the others.
            launch_link.tell("failed", why=summary)
            service.leave_failed(summary)
            interrupts.leave_process(1)
        # A rank that lost contact with a host names that host: it is the fault.
        launch_link.tell("lost" if service.lost_contact else "failed", why=summary)
        launcher_reaper.end_launcher_later()
        # Tell the other ranks who failed, so each prints one line instead of vanishing.
        service.announce_failure(summary)
        if service.lost_contact:
            os._exit(1)     # MPI_Abort could wait forever for the rank it cannot reach
        let_the_followers_speak(exc, service.rank)
        world.Abort(1)

    sys.excepthook = hook


def _leave_interrupted(service) -> None:
    """An interrupt is no failure: one line, a word to the peers (those not interrupted
    themselves stop too), and gone together (no MPI_Abort: its message would be one more
    line)."""
    interrupts.say_once()
    signum, origin = interrupts.origin()
    moment, agreed = service.announce_interrupt(signum, origin,
                                                grace_s=interrupts.EXIT_WITHIN_S * 0.8)
    interrupts.leave_at(moment, release_launcher=agreed)


def _fail_on_nonzero_exit(service, world) -> None:
    """Make a script that ends with ``sys.exit(code)``, code not 0, end the whole job as
    a failure of this rank, named as such (as an uncaught exception does), instead of
    leaving quietly while the others wait for it.

    The code is noted when ``sys.exit`` is called and acted on at exit (Python tells
    nobody at exit how it is exiting); a script that catches that ``SystemExit`` and goes
    on still ends as a failure. ``raise SystemExit(code)`` and ``os._exit`` are not seen
    (see the README on launchers for the latter).
    """
    original = sys.exit

    def exit(code=None):
        _EXIT_CODE[0] = code
        original(code)

    def at_exit():
        code = _EXIT_CODE[0]
        if code in (None, 0):
            return
        summary = f"it called sys.exit({code!r})"
        service.leaving_how = summary
        sys.stderr.write(f"[{service.describe_self()}] {summary}; "
                         "the job ends\n")
        sys.stderr.flush()
        launch_link.tell("failed", why=summary)
        launcher_reaper.end_launcher_later()
        service.announce_failure(summary)
        world.Abort(code if isinstance(code, int) and 0 < code < 256 else 1)

    sys.exit = exit
    atexit.register(at_exit)         # registered after shutdown: runs before it
