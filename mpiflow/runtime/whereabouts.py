"""Where this rank is: its main thread's stack, what it waits for and since when, and how
many training steps (MonitoredSession.run calls) and Session.run calls it has made. Read
by another thread (the launcher's line, a peer asking why it waits) while the main thread
is stuck, so what it records costs two stores per wait.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback

from mpiflow import errors
from mpiflow.comm import launch_link


class _Now:
    def __init__(self):
        self.waiting_for = None     # describe() of the wait in progress, or None
        self.since = 0.0
        self.steps = 0              # Session.run calls, every one (hooks', saves', inits')
        # The training steps: MonitoredSession.run calls; None until a MonitoredSession
        # exists (counted by mpiflow.train, which runtime does not import).
        self.training_steps = None


NOW = _Now()
# What the steps this rank runs for others wait for (``Steps.parked``), set by the rank
# service: a ps whose main thread only serves (``join``) shows what its work waits on.
parked_steps = None


def main_thread_stack() -> str:
    """The main thread's Python stack as ``traceback`` prints it (most recent call last)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no main thread)\n"


def report() -> dict:
    """This rank's whereabouts, as plain data for a report."""
    found = {"stack": main_thread_stack(), "steps": NOW.steps}
    if NOW.training_steps is not None:
        found["training_steps"] = NOW.training_steps
    describe = NOW.waiting_for
    if describe is not None:
        try:
            found["waiting_for"] = describe()
        except Exception as exc:   # the wait's description failed: say that instead
            found["waiting_for"] = f"(cannot say: {type(exc).__name__}: {exc})"
        found["waiting_s"] = time.monotonic() - NOW.since
    if parked_steps is not None:
        try:
            serving = parked_steps()
        except Exception as exc:   # the steps moved under the reader: say that instead
            serving = [f"(cannot say: {type(exc).__name__}: {exc})"]
        if serving:
            found["serving"] = serving
    return found


def format_report(title: str, report: dict) -> str:
    """One rank's part of a whereabouts report: a header line naming it, what it waits
    for, its steps, what the steps it runs for other ranks wait for, then its main
    thread's stack."""
    lines = [f"=== {title}"]
    if "error" in report:
        lines.append(f"    ({report['error']})")
    if report.get("waiting_for"):
        lines.append(f"    waiting {report.get('waiting_s', 0):.1f} s for "
                     f"{report['waiting_for']}")
    if "training_steps" in report:
        lines.append(f"    steps run: {report['training_steps']} (MonitoredSession.run calls; "
                     f"{report.get('steps', '?')} Session.run calls in all, the hooks', "
                     "saves' and initialization's included)")
    elif "steps" in report:
        lines.append(f"    Session.run calls: {report['steps']}")
    lines += [f"    serving {line}" for line in report.get("serving", ())]
    lines += ["    " + line for line in report.get("stack", "").rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


# At most this many ranks are asked where they are for one error: a message naming a
# whole job must not make its report the size of the job.
MAX_RANKS_ASKED = 8
_RANK_NAMED = re.compile(r"\brank (\d+)\b")


def for_timeout(exc, own_rank: int | None, describe=None, heartbeat=None) -> str:
    """For a wait that timed out (DeadlineExceededError): where the ranks it waited for
    are, as text to print after the error; empty for any other error."""
    if not isinstance(exc, errors.DeadlineExceededError):
        return ""
    found = of_ranks_named_in(str(exc), own_rank, describe, heartbeat)
    return f"where the ranks it waited for are:\n{found}" if found else ""


def of_ranks_named_in(text: str, own_rank: int | None, describe=None,
                      heartbeat=None) -> str:
    """Where the ranks that ``text`` (an error message) names are, asked from their own
    threads: through ``mpiflow launch`` when the job runs under it, else through the
    heartbeat threads (``heartbeat``: this rank's, once the rank service runs). Empty
    when nobody can be asked."""
    ranks = []
    for found in _RANK_NAMED.finditer(text):
        rank = int(found.group(1))
        if rank != own_rank and rank not in ranks:
            ranks.append(rank)
    ranks = ranks[:MAX_RANKS_ASKED]
    if not ranks:
        return ""
    link = launch_link.current()
    if link is not None:
        reports = link.whereabouts_of(ranks)
    elif heartbeat is not None:
        reports = heartbeat.ask_whereabouts(ranks)
    else:
        return ""
    describe = describe or (lambda r: f"rank {r}")
    return "".join(format_report(describe(rank), reports.get(rank, {
        "error": "no answer: it has ended, or its thread cannot answer"})) for rank in ranks)


def job_report(rank: int, size: int, describe, heartbeat) -> str:
    """On rank 0: where every rank of the job is, in rank order (asked from the others'
    heartbeat threads); elsewhere nothing (rank 0 speaks for the job)."""
    if rank != 0:
        return ""
    others = heartbeat.ask_whereabouts(range(1, size)) if heartbeat is not None else {}
    parts = [format_report(describe(r), report() if r == rank else others.get(r, {
        "error": "no answer: it has ended, or has no heartbeat thread"}))
             for r in range(size)]
    return f"mpiflow: where every rank is ({size} ranks)\n" + "".join(parts)
