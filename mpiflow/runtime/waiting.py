"""Waiting, with a deadline that says what was waited for: one driver for every wait.

A step of an in-process session waits for a signal from another thread (a sync-replicas
chief's loop); a rank of a cluster waits for messages, for collectives to finish, for
other ranks to register, reset, join or leave. Both go through ``wait_until``: one round
of work at a time (``step``), a back-off between idle rounds, the liveness checks there,
and a DeadlineExceededError that names what was waited for, for how long and which
setting bounds it.
"""

from __future__ import annotations

import os
import threading
import time

from mpiflow import config, errors
from mpiflow.runtime.whereabouts import NOW

DONE, MOVED, IDLE = "done", "moved", "idle"


def wait_until(step, describe=None, timeout=None, backoff=None, idle=None, busy=None,
               who="This process") -> None:
    """Call ``step()`` until it returns DONE.

    Args:
        step: one round of work; returns DONE (the wait is over), MOVED (something
            happened: go on at once) or IDLE (nothing to do yet).
        describe: ``describe()`` -> what is waited for; None waits without a deadline.
        timeout: seconds before DeadlineExceededError (default MPIFLOW_TIMEOUT).
        backoff: waits between idle rounds (``wait()``/``reset()``); None: ``step``
            blocks by itself.
        idle: called after each idle round (liveness checks; may raise).
        busy: ``busy()`` true while work advances only when polled (collectives,
            sends or payloads in flight): the round yields the CPU instead of sleeping.
        who: the subject of the timeout message ("Rank 3").

    Raises:
        DeadlineExceededError: ``timeout`` passed with ``describe`` given.
    """
    timeout = timeout or config.get("MPIFLOW_TIMEOUT")
    deadline = None if describe is None else time.monotonic() + timeout
    outer = NOW.waiting_for, NOW.since
    if describe is not None and threading.current_thread() is threading.main_thread():
        NOW.waiting_for, NOW.since = describe, time.monotonic()
    try:
        _wait(step, describe, timeout, deadline, backoff, idle, busy, who)
    finally:
        NOW.waiting_for, NOW.since = outer


def _wait(step, describe, timeout, deadline, backoff, idle, busy, who) -> None:
    while True:
        state = step()
        if state == DONE:
            return
        if state == MOVED:
            if backoff is not None:
                backoff.reset()
            continue
        if idle is not None:
            idle()
        if deadline is not None and time.monotonic() >= deadline:
            raise errors.DeadlineExceededError(
                f"{who} waited {timeout:g} s for {describe()} (MPIFLOW_TIMEOUT, or the "
                "run's RunOptions(timeout_in_ms))")
        if busy is not None and busy():
            os.sched_yield()
        elif backoff is not None:
            backoff.wait()
