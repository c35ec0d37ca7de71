"""What this process put on the wire and took off it, in bytes, by road.

A training mode's cost per step is mostly bytes: a ps worker pulls and pushes every
variable it uses, an allreduce worker moves twice its gradients, hybrid mode the dense
gradients plus the rows a batch touches. These counters measure it where it happens
(``benchmarks/hybrid_cost.py`` checks the cost model against them), so nothing here
estimates what a mode *should* cost.

Roads:
- ``p2p``: point-to-point messages of the runtime (``comm.transport``: headers and
  payloads: variables pulled, gradients and rows pushed, control messages);
- ``allreduce``, ``allgather``, ``broadcast``: collectives, counted per rank as the
  bandwidth-optimal algorithm moves them (the own ring moves exactly that; MPI's and
  NCCL's algorithms for large messages too, their small-message algorithms more):
  allreduce of N bytes over n ranks sends and receives 2(n-1)/n N, an allgather each
  rank's share of what it does not have, a broadcast N into every rank but the root.

Imports nothing of MPI: a process reads its counters whatever it runs.
"""

from __future__ import annotations

import threading

ROADS = ("p2p", "allreduce", "allgather", "broadcast")


class Traffic:
    """Bytes sent and received by this process, by road (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._counts = {road: [0, 0] for road in ROADS}      # road: [sent, received]

    def add(self, road: str, sent: int = 0, received: int = 0) -> None:
        # Every collective and message counts itself here (a 4 KiB allreduce takes 6 us):
        # kept to one lookup and two additions under the lock, taken without a ``with``
        # (the counts become Python ints in ``totals``, whatever integers callers pass).
        self._acquire()
        try:
            counts = self._counts[road]
            counts[0] += sent
            counts[1] += received
        finally:
            self._release()

    def totals(self) -> dict:
        """``{"sent": {road: bytes}, "received": {road: bytes}}`` since the start (or
        ``reset``); subtract two of them for what happened in between."""
        with self._lock:
            return {side: {road: int(counts[i]) for road, counts in self._counts.items()}
                    for i, side in enumerate(("sent", "received"))}

    def reset(self) -> None:
        with self._lock:
            self._counts = {road: [0, 0] for road in ROADS}


def between(before: dict, after: dict) -> dict:
    """What ``after`` counted that ``before`` had not, with the roads summed too
    (``"sent_total"``, ``"received_total"``)."""
    out = {side: {road: after[side][road] - before[side][road] for road in ROADS}
           for side in ("sent", "received")}
    out["sent_total"] = sum(out["sent"].values())
    out["received_total"] = sum(out["received"].values())
    return out


def allreduce_bytes(nbytes: int, size: int) -> int:
    """Bytes each rank sends (and receives) in a bandwidth-optimal allreduce."""
    return 2 * (size - 1) * nbytes // size if size > 1 else 0


TRAFFIC = Traffic()
