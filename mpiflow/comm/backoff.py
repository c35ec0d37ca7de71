"""How a rank waits for MPI without holding a core: poll, yield, then sleep, with a deadline.

Imports no MPI, so the layout code can wait with it before anything else starts.
"""

from __future__ import annotations

import os
import time
from typing import Callable


class Backoff:
    """Polling rhythm of a waiting rank: yield the CPU for ``spin_s``, then sleep from
    ``first_s`` doubling to ``max_s``; after ``idle_s`` without a message, to 10 x ``max_s``.

    Replies usually come within microseconds while traffic is steady, and yielding keeps
    that latency without holding a core another rank on it could use; a rank that waits
    longer backs off to sleeps, and one that has been idle for a while (a ps between
    bursts) wakes rarely enough to cost about 2% of a core (an idle ps's service on a
    2-core VM, its liveness checks included: 1.8%).
    """

    def __init__(self, spin_s=500e-6, first_s=20e-6, max_s=200e-6, idle_s=0.05):
        self.spin_s = spin_s
        self.first_s = first_s
        self.max_s = max_s
        self.idle_s = idle_s
        self._start = None
        self._sleep = first_s

    def reset(self):
        self._start = None
        self._sleep = self.first_s

    def wait(self):
        """Pause once."""
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        waited = now - self._start
        if waited < self.spin_s:
            os.sched_yield()
            return
        time.sleep(self._sleep)
        cap = self.max_s if waited < self.idle_s else 10 * self.max_s
        self._sleep = min(self._sleep * 2, cap)


def poll_until(done: Callable[[], bool], timeout: float | None,
               expired: Callable[[float], Exception], backoff: Backoff | None = None) -> None:
    """Call ``done()`` until it is true, pausing with ``backoff`` between calls.

    Raises:
        the exception ``expired(waited_seconds)`` returns, once ``timeout`` has passed.
    """
    backoff = backoff or Backoff()
    backoff.reset()
    start = time.monotonic()
    while not done():
        waited = time.monotonic() - start
        if timeout is not None and waited > timeout:
            raise expired(waited)
        backoff.wait()
