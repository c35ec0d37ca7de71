"""Failure cases of the collectives; every rank prints what it raised, at any number of ranks.

Usage: collectives_errors.py CASE ALGORITHM [--absent R] [--warm] [--no-check]
  CASE mismatch   the last rank passes another shape (then dtype, then allgather columns,
                  then broadcast root); every rank must raise InvalidArgumentError naming
                  the ranks, and a correct allreduce must still work afterwards
  CASE absent     rank R never calls the allreduce; the others must raise
                  DeadlineExceededError within MPIFLOW_TIMEOUT naming rank R
  CASE late       rank R joins its second allreduce only after the others' deadline and
                  roll call, then makes two more; the ranks that timed out must refuse
                  every later collective at once (AbortedError), and the late rank must
                  say, at its own deadline, that they stopped
  CASE earlier    rank 0 issues two async allreduces, the others only the first; rank 0
                  waits the second (its deadline passes), then the first, which completed
                  on every rank and must still return its sum
  CASE fused      a fused allreduce of 3 buckets, rank 1 late for its third round: every
                  later round must say it follows a failed round, not wait again
  --cold          (late) no allreduce before the late one: the communicator's first
  --warm          one successful allreduce first (the absent rank drops out later)
  --no-check      no cross-rank check (the data phase itself times out)
  --stagger S     (absent) rank R issues its call R * S s late, all well within the
                  others' deadline: the ranks that wait reach their deadlines in turn
Each rank prints ``RAISED {"rank", "case", "error", "message", "seconds"}`` per failure,
``RETURNED {"rank", "case", "seconds", "correct"}`` per success, and ``DONE {...}``; all ranks meet at a world barrier, then leave with os._exit (MPI cannot be
finalized with a collective nobody will complete).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from mpiflow import config
from mpiflow.comm.collectives import get_collective
from mpiflow.errors import MpiflowError


def report(kind, **fields):
    sys.stdout.write(f"{kind} " + json.dumps(fields) + "\n")
    sys.stdout.flush()


def attempt(rank, case, call, expected=None):
    start = time.monotonic()
    try:
        result = call()
    except MpiflowError as exc:
        report("RAISED", rank=rank, case=case, error=type(exc).__name__, message=str(exc),
               seconds=time.monotonic() - start)
    else:
        correct = None if expected is None else bool((result == expected).all())
        report("RETURNED", rank=rank, case=case, seconds=time.monotonic() - start,
               correct=correct)


def mismatch(comm, algorithm):
    rank, size = comm.Get_rank(), comm.Get_size()
    last = rank == size - 1
    x = np.ones(1010 if last else 1009, dtype=np.float32)
    c = get_collective(algorithm, comm, x)
    attempt(rank, "shape", lambda: c.allreduce(x, name="grad/w"))
    y = np.ones(16, dtype=np.float64 if rank == 0 else np.float32)
    attempt(rank, "dtype", lambda: get_collective(algorithm, comm, y).allreduce(y))
    z = np.ones((rank + 1, 3 if last else 4), dtype=np.int32)
    attempt(rank, "allgather", lambda: c.allgather(z, name="rows"))
    b = np.ones(5, dtype=np.int64)
    attempt(rank, "root", lambda: c.broadcast(b, root=1 if last else 0))
    ok = np.full(1009, rank, dtype=np.float64)
    result = get_collective(algorithm, comm, ok).allreduce(ok)
    report("AFTER", rank=rank, correct=bool((result == size * (size - 1) / 2).all()))


def absent(comm, algorithm, absent_rank, warm, check, stagger):
    rank = MPI.COMM_WORLD.Get_rank()        # as the job numbers it: errors name these
    x = np.ones(1 << 16, dtype=np.float32)
    c = get_collective(algorithm, comm, x)
    if warm:
        c.allreduce(x, name="warm-up")
    if rank == absent_rank:
        return
    time.sleep(rank * stagger)
    attempt(rank, "absent", lambda: c.allreduce(x, name="grad/b", check=check))


def late(comm, algorithm, late_rank, cold):
    rank, size = comm.Get_rank(), comm.Get_size()
    timeout = config.get("MPIFLOW_TIMEOUT")
    x = np.full(1024, rank + 1, dtype=np.float32)
    total = np.full(1024, size * (size + 1) / 2, dtype=np.float32)
    c = get_collective(algorithm, comm, x)
    if not cold:
        c.allreduce(x, name="warm-up")
    if rank == late_rank:       # past the others' deadline and their roll call
        time.sleep(2 * timeout + 1.5)
    for case in ("first", "second", "third"):
        attempt(rank, case, lambda case=case: c.allreduce(x, name=f"grad/{case}"), total)


def earlier(comm, algorithm):
    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.full(1024, rank + 1, dtype=np.float32)
    total = np.full(1024, size * (size + 1) / 2, dtype=np.float32)
    c = get_collective(algorithm, comm, x)
    c.allreduce(x, name="warm-up")
    if rank == 0:
        first = c.allreduce_async(x, name="grad/first")
        second = c.allreduce_async(x, name="grad/second")
        attempt(rank, "second", second.wait)
        attempt(rank, "first", first.wait, total)
        attempt(rank, "after", lambda: c.allreduce(x, name="grad/after"), total)
    else:
        attempt(rank, "first", lambda: c.allreduce(x, name="grad/first"), total)


def fused(comm, algorithm):
    from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
    rank, size = comm.Get_rank(), comm.Get_size()
    timeout = config.get("MPIFLOW_TIMEOUT")
    lengths = (1000, 3000, 200000)
    specs = [TensorSpec(f"t{i}", np.dtype(np.float32), 4 * n) for i, n in enumerate(lengths)]
    fusion = FusedAllreduce(comm, specs, algorithm=algorithm, threshold_bytes=16 << 10)

    def one_round():
        for spec, n in zip(specs, lengths):
            fusion.add(spec.name, np.full(n, rank + 1, dtype=np.float32))
        results = fusion.wait_all()
        return np.concatenate([results[spec.name] for spec in specs])

    total = np.full(sum(lengths), size * (size + 1) / 2, dtype=np.float32)
    for r in range(4):
        if rank == 1 and r == 2:
            time.sleep(2 * timeout + 1.5)
        attempt(rank, f"round{r}", one_round, total)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=("mismatch", "absent", "late", "earlier", "fused"))
    parser.add_argument("algorithm")
    parser.add_argument("--absent", type=int, default=0)
    parser.add_argument("--late", type=int, default=0)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--stagger", type=float, default=0.0,
                        help="(absent) rank R issues its call R * STAGGER s after the others")
    parser.add_argument("--without-rank-0", action="store_true",
                        help="the collectives' communicator leaves the job's rank 0 out")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    comm = world.Dup()
    if args.without_rank_0:     # as the workers' group of a job with a ps at rank 0
        comm = world.Split(MPI.UNDEFINED if world.Get_rank() == 0 else 0)
        if comm == MPI.COMM_NULL:
            report("DONE", rank=0, timeout=config.get("MPIFLOW_TIMEOUT"))
            world.Barrier()
            os._exit(0)
    if args.case == "mismatch":
        mismatch(comm, args.algorithm)
    elif args.case == "late":
        late(comm, args.algorithm, args.late, args.cold)
    elif args.case == "earlier":
        earlier(comm, args.algorithm)
    elif args.case == "fused":
        fused(comm, args.algorithm)
    else:
        absent(comm, args.algorithm, args.absent, args.warm, not args.no_check,
               args.stagger)
    report("DONE", rank=world.Get_rank(), timeout=config.get("MPIFLOW_TIMEOUT"))
    world.Barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
