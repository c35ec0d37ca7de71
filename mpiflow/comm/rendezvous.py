"""Rendezvous: where a sent tensor waits for the step that receives it, or the other way.

Keys are plain tuples ``(client_rank, step_id, edge_key)``; the table knows no graphs.
A tensor that arrives before its step asks is parked; a step that asks first is parked
as a waiter and resumed when the tensor comes.
"""

from __future__ import annotations

MISSING = object()


class Rendezvous:
    """Match arrived values with waiting consumers by key."""

    def __init__(self):
        self._values = {}
        self._waiters = {}

    def put(self, key, value):
        """Deliver ``value``; return the waiter parked on ``key`` (or None to keep it)."""
        waiter = self._waiters.pop(key, None)
        if waiter is None:
            self._values[key] = value
        return waiter

    def take_or_wait(self, key, waiter):
        """Return the value for ``key`` if it has arrived, else park ``waiter``; MISSING."""
        value = self._values.pop(key, MISSING)
        if value is MISSING:
            self._waiters[key] = waiter
        return value

    def take(self, key):
        """Return the value for ``key`` if it has arrived, else MISSING (nothing parked):
        a consumer that can go on without it (``StepIO.take``)."""
        return self._values.pop(key, MISSING)

    def drop(self, predicate) -> None:
        """Forget parked values and waiters whose key satisfies ``predicate``."""
        for table in (self._values, self._waiters):
            for key in [k for k in table if predicate(k)]:
                del table[key]

    def waiting_keys(self):
        return list(self._waiters)

    def __len__(self):
        return len(self._values)
