"""Where this rank is: its main thread's stack, what it waits for and since when, and how
many steps it has run. Read by another thread (the launcher's line, a peer asking why it
waits) while the main thread is stuck, so what it records costs two stores per wait.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback


class _Now:
    def __init__(self):
        self.waiting_for = None     # describe() of the wait in progress, or None
        self.since = 0.0
        self.steps = 0


NOW = _Now()


def main_thread_stack() -> str:
    """The main thread's Python stack as ``traceback`` prints it (most recent call last)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no main thread)\n"


def report() -> dict:
    """This rank's whereabouts, as plain data for a report."""
    found = {"stack": main_thread_stack(), "steps": NOW.steps}
    describe = NOW.waiting_for
    if describe is not None:
        try:
            found["waiting_for"] = describe()
        except Exception as exc:   # the wait's description failed: say that instead
            found["waiting_for"] = f"(cannot say: {type(exc).__name__}: {exc})"
        found["waiting_s"] = time.monotonic() - NOW.since
    return found
