"""``mf.timeline``: traced steps as a Chrome trace (chrome://tracing, Perfetto).

Trace a few steps with ``options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE)``;
every rank that takes part records its kernels, sends, receives and collectives. Then

- ``mf.timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format()`` gives
  one rank's part of one step (TensorFlow's API), and
- ``mf.timeline.write_chrome_trace(path)``, called by every rank (a ps after its
  ``join()``), writes one trace of the whole job: a process row per rank, named by rank,
  role and host, with clocks aligned to rank 0's.
"""

from __future__ import annotations

import json

import msgpack
import numpy as np

from mpiflow.runtime.tracing import TRACER, now_ns

_PINGS = 8


class Timeline:
    """The events of one step (``RunMetadata.step_stats``) as a Chrome trace."""

    def __init__(self, step_stats, graph=None):
        self._events = list(step_stats)

    def generate_chrome_trace_format(self, show_dataflow=True, show_memory=False) -> str:
        return json.dumps(chrome_trace({0: (TRACER.describe(), self._events)}))


def chrome_trace(ranks: dict) -> dict:
    """``{rank: (name, events)}`` (events on one clock, in ns) -> a Chrome trace dict."""
    starts = [e["ts"] for _, events in ranks.values() for e in events]
    origin = min(starts) if starts else 0
    trace = []
    for rank, (name, events) in sorted(ranks.items()):
        trace.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": name}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": rank,
                      "args": {"sort_index": rank}})
        threads = {}
        for e in events:
            tid = threads.setdefault(e["tid"], len(threads))
            trace.append({"ph": "X", "cat": e["cat"], "name": e["name"], "pid": rank,
                          "tid": tid, "ts": (e["ts"] - origin) / 1e3, "dur": e["dur"] / 1e3,
                          "args": e["args"]})
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str, comm=None) -> str | None:
    """Write the traced events of every rank of ``comm`` (default: the whole job) to
    ``path`` on rank 0, and forget them everywhere. Collective: every rank must call it.

    Returns:
        ``path`` on rank 0, None on the others.
    """
    from mpi4py import MPI
    comm = (comm or MPI.COMM_WORLD).Dup()
    try:
        offset = _clock_offset(comm)
        events = TRACER.take()
        for e in events:
            e["ts"] -= offset
        payload = np.frombuffer(msgpack.packb({"name": TRACER.describe(), "events": events},
                                              use_bin_type=True), dtype=np.uint8)
        sizes = np.zeros(comm.Get_size(), dtype=np.int64)
        comm.Gather(np.array([payload.size], dtype=np.int64), sizes, root=0)
        everything = np.empty(int(sizes.sum()), dtype=np.uint8) if comm.Get_rank() == 0 \
            else None
        comm.Gatherv(payload, [everything, sizes] if everything is not None else None, root=0)
        if comm.Get_rank() != 0:
            return None
        ranks, start = {}, 0
        for rank, size in enumerate(sizes.tolist()):
            part = msgpack.unpackb(everything[start:start + size].tobytes(), raw=False)
            ranks[rank] = (part["name"], part["events"])
            start += size
        with open(path, "w") as f:
            json.dump(chrome_trace(ranks), f)
        return path
    finally:
        comm.Free()


def _clock_offset(comm) -> int:
    """This rank's clock minus rank 0's, in ns (the ping of least round trip wins)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    stamp = np.zeros(1, dtype=np.int64)
    if rank != 0:
        for _ in range(_PINGS):
            comm.Recv(stamp, 0, tag=77)
            stamp[0] = now_ns()
            comm.Send(stamp, 0, tag=78)
        offset = np.zeros(1, dtype=np.int64)
        comm.Recv(offset, 0, tag=79)
        return int(offset[0])
    for peer in range(1, size):
        best = None
        for _ in range(_PINGS):
            sent = now_ns()
            comm.Send(stamp, peer, tag=77)
            comm.Recv(stamp, peer, tag=78)
            back = now_ns()
            if best is None or back - sent < best[0]:
                best = (back - sent, int(stamp[0]) - (sent + back) // 2)
        comm.Send(np.array([best[1]], dtype=np.int64), peer, tag=79)
    return 0
