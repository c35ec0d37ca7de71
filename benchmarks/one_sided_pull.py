"""Could a ps pull be one-sided? A worker reading a ps's variable with ``MPI_Get`` from a
window over it, against the two-sided request and reply every pull is today.

    mpiexec -n 2 python benchmarks/one_sided_pull.py     # 1 ps + 1 worker
    mpiexec -n 3 python benchmarks/one_sided_pull.py     # 1 ps + 2 workers

A pull through mpiflow is a request the ps's Python notices, a plan it runs and a reply
it sends: about 150 us of Python on the two sides of a 1 MiB pull, and a pull that
arrives while the ps applies a gradient waits for the apply. A one-sided read needs none
of the ps's Python. This measures, in one job and interleaved round by round, what each
way of moving the same bytes costs, per size (64 KiB, 1 MiB, 16 MiB of float32):

- ``two-sided``: the worker sends a token, the ps (blocked in ``Recv``) sends the buffer
  back, the worker receives it: the raw baseline of ``ps_throughput.py``, no Python
  between the calls beyond mpi4py's.
- ``get``: the worker locks the ps's window (shared), ``Get``s the buffer and unlocks,
  while the ps waits in a barrier (inside MPI, so it progresses what needs the target).
- ``get, ps busy``: the same while the ps computes in numpy and calls no MPI at all, as a
  ps applying a large gradient does: whether MPI completes the read without the target.
- ``epoch, ps busy``: one shared lock held over all the pulls, each pull a ``Get`` and a
  ``Flush``: whether it is the lock that needs the target; ``dynamic epoch, ps busy`` the
  same on the dynamic window.

Prints per size the workers' pull bandwidth of each (medians of ``--rounds`` rounds, each
timed over ``--seconds``) and the ratios get / two-sided. The window is made by
``Win.Allocate`` (MPI's own memory: on one node, shared memory the worker reads directly)
and, for comparison, by ``Win.Create`` over a buffer the ps allocated itself, as a window
over existing variables would be, and as a dynamic window (``Win.Create_dynamic``) the
buffer is attached to afterwards, as a ps would attach each variable it creates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from mpi4py import MPI

KiB, MiB = 1 << 10, 1 << 20
PULL, DONE = 11, 12


def two_sided(comm, nbytes, seconds):
    """Request-and-reply pulls; returns each worker's bytes/s (None on the ps)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    token = np.zeros(1, np.int64)
    if rank == 0:
        buffer = np.ones(nbytes // 8, np.float64)
        done, status = 0, MPI.Status()
        while done < size - 1:
            comm.Recv([token, MPI.BYTE], MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if status.Get_tag() == DONE:
                done += 1
            else:
                comm.Send([buffer, MPI.BYTE], status.Get_source(), PULL)
        return None
    into = np.empty(nbytes // 8, np.float64)
    pulls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        comm.Send([token, MPI.BYTE], 0, PULL)
        comm.Recv([into, MPI.BYTE], 0, PULL)
        pulls += 1
    elapsed = time.perf_counter() - start
    comm.Send([token, MPI.BYTE], 0, DONE)
    return pulls * nbytes / elapsed


def one_sided(comm, win, nbytes, seconds, busy, epoch=False):
    """Pulls by Get from the ps's window while the ps waits in MPI or, with ``busy``,
    computes without calling MPI; with ``epoch``, one shared lock held over all the pulls
    and each pull completed by a flush. Returns each worker's bytes/s (None on the ps)."""
    rank = comm.Get_rank()
    if rank == 0:
        if busy:        # numpy work and no MPI call for the workers' whole timed run
            a = np.ones((256, 256))
            end = time.perf_counter() + seconds + 0.2
            while time.perf_counter() < end:
                a = (a @ a) * (1.0 / 256)
        comm.Barrier()
        return None
    into = np.empty(nbytes // 8, np.float64)
    if epoch:
        win.Lock(0, MPI.LOCK_SHARED)
    pulls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if epoch:
            win.Get([into, MPI.BYTE], 0)
            win.Flush(0)
        else:
            win.Lock(0, MPI.LOCK_SHARED)
            win.Get([into, MPI.BYTE], 0)
            win.Unlock(0)
        pulls += 1
    elapsed = time.perf_counter() - start
    if epoch:
        win.Unlock(0)
    comm.Barrier()
    return pulls * nbytes / elapsed


class _Dynamic:
    """A dynamic window with the ps's buffer attached after it was made, as a ps would
    attach each variable when it is created; Gets address it by its absolute address,
    which the ps sends the workers."""

    def __init__(self, comm, own):
        self.win = MPI.Win.Create_dynamic(comm=comm)
        if own is not None:
            self.win.Attach(own)
        address = MPI.Get_address(own) if own is not None else 0
        self.address = comm.bcast(address, root=0)
        self._own = own

    def Lock(self, rank, kind):
        self.win.Lock(rank, kind)

    def Unlock(self, rank):
        self.win.Unlock(rank)

    def Flush(self, rank):
        self.win.Flush(rank)

    def Get(self, into, rank):
        self.win.Get(into, rank, target=(self.address, into[0].nbytes, MPI.BYTE))

    def Free(self):
        if self._own is not None:
            self.win.Detach(self._own)
        self.win.Free()


def windows(comm, nbytes):
    """The ps's windows of ``nbytes`` (workers expose nothing): allocated by MPI, created
    over a buffer the ps allocated, and dynamic with that buffer attached."""
    mine = nbytes if comm.Get_rank() == 0 else 0
    allocated = MPI.Win.Allocate(mine, 1, comm=comm)
    own = np.ones(mine // 8, np.float64)
    created = MPI.Win.Create(own if mine else None, 1, comm=comm)
    attached = np.ones(mine // 8, np.float64) if mine else None
    dynamic = _Dynamic(comm, attached)
    if mine:
        np.frombuffer(allocated.tomemory(), np.float64)[:] = 1.0
    return {"get": allocated, "get (Win.Create)": created,
            "get (dynamic)": dynamic}, (own, attached)


def ways_of(comm, wins, nbytes, seconds):
    """{name: a round's pulls of that way}, each returning this rank's bytes/s."""
    ways = {"two-sided": lambda: two_sided(comm, nbytes, seconds)}
    for name, win in wins.items():
        ways[name] = lambda win=win: one_sided(comm, win, nbytes, seconds, False)
    ways["get, ps busy"] = lambda: one_sided(comm, wins["get"], nbytes, seconds, True)
    ways["epoch, ps busy"] = lambda: one_sided(comm, wins["get"], nbytes, seconds, True,
                                               epoch=True)
    ways["dynamic epoch, ps busy"] = lambda: one_sided(comm, wins["get (dynamic)"], nbytes,
                                                       seconds, True, epoch=True)
    return ways


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[64, 1024, 16384])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--json", action="store_true",
                        help="end with one JSON line: {KiB: {way: bytes/s}}")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("run under mpiexec -n 2 or more: rank 0 is the ps")
    rank = comm.Get_rank()
    summary = {}
    if rank == 0:
        library = MPI.Get_library_version().splitlines()[0]
        print(f"1 ps + {comm.Get_size() - 1} worker(s); {library}")
        print("pull bandwidth per worker, MB/s (median of rounds); ratios to two-sided")
    for kib in args.sizes_kib:
        nbytes = kib * KiB
        wins, _own = windows(comm, nbytes)
        ways = ways_of(comm, wins, nbytes, args.seconds)
        rates = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, way in ways.items():
                comm.Barrier()
                rate = way()
                gathered = comm.gather(rate, root=0)
                if rank == 0:
                    rates[name].append(statistics.mean(r for r in gathered if r is not None))
        for win in wins.values():
            win.Free()
        if rank == 0:
            median = {name: statistics.median(r) for name, r in rates.items()}
            summary[kib] = median
            base = median["two-sided"]
            cells = "  ".join(f"{name} {median[name] / 1e6:8.0f}"
                              + ("" if name == "two-sided" else
                                 f" ({median[name] / base:.2f}x)") for name in ways)
            print(f"{kib:6d} KiB  {cells}", flush=True)
    if rank == 0 and args.json:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
