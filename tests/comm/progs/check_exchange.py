"""The cross-rank check's exchange, and the small allreduces it carries, at any number of
ranks (powers of two or not).

Usage: check_exchange.py CASE
  CASE sums       carried and uncarried allreduces (sizes around MPIFLOW_CHECK_CARRY_BYTES,
                  every kind of dtype, sum and average, blocking and async, in place) give
                  every rank the same bytes, the numpy reference within rounding; prints
                  ``SUMS {"rank", "cases", "failures"}``
  CASE numbers    rank 0 issues one collective more than the others before a checked one;
                  the checked one raises on every rank naming the operation numbers
  CASE threads    two threads wait on one carried handle (100 times); the allreduces after
                  it get their own sums; prints ``THREADS {"rank", "wrong"}``
  CASE half_wire  rank 0 averages float16 with half_on_wire, the others without; every
                  rank raises naming the reduction
  CASE steady     one carried signature called again and again (as training does: the
                  exchange's messages become persistent requests), sums, averages and in
                  place, with new values each call: every result equals the exact sum;
                  prints ``STEADY {"rank", "calls", "wrong", "persistent"}``
  CASE longer     rank 0's exchange expects a bare header, rank 1's carries the most any
                  rank may: each meets a message of another size, which must mark the
                  mismatch, and arrive whole (a receive into a buffer shorter than its
                  message: Open MPI writes past its end); prints
                  ``LONGER {"rank", "mismatch", "received"}`` (bytes)
  CASE carry      rank 0 carries nothing with its checks (MPIFLOW_CHECK_CARRY_BYTES=0),
                  the others carry a 4 KiB allreduce; every rank raises naming the carried
                  bytes, and a correct allreduce works afterwards. Uncarried checks run
                  first, so rank 0's 32-byte receive that meets the 4 KiB message is a
                  persistent one
Each failure case prints ``RAISED {"rank", "case", "error", "message"}`` and ``AFTER {...}``
where the communicator is still usable, then leaves with os._exit (a collective left
pending cannot be finalized).
"""

import argparse
import json
import os
import sys

import numpy as np
from mpi4py import MPI

from mpiflow import config
from mpiflow.comm.collectives import get_collective
from mpiflow.errors import MpiflowError

CARRY = config.default().get("MPIFLOW_CHECK_CARRY_BYTES")


def report(kind, **fields):
    sys.stdout.write(f"{kind} " + json.dumps(fields) + "\n")
    sys.stdout.flush()


def contribution(rank, dtype, count, seed):
    rng = np.random.default_rng(seed * 1000 + rank)
    if dtype == np.bool_:
        return rng.random(count) < 0.2
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, count).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def sums(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    failures, cases = [], 0
    counts = [0, 1, 1000, CARRY // 4, CARRY // 4 + 1]     # float32: up to and past the bound
    for seed, (dtype, count, op, how) in enumerate(
            (d, c, o, h) for d in (np.float32, np.float64, np.int32, np.bool_, np.float16)
            for c in counts for o in ("sum", "average") for h in ("blocking", "async",
                                                                  "in place")):
        if op == "average" and np.dtype(dtype).kind not in "f":
            continue
        x = contribution(rank, dtype, count, seed)
        c = get_collective("mpi", comm, x)
        half = dtype == np.float16
        if how == "blocking":
            got = c.allreduce(x, op=op, half_on_wire=half)
        elif how == "async":
            got = c.allreduce_async(x, op=op, half_on_wire=half).wait()
        else:
            got = x.copy()
            c.allreduce(got, op=op, out=got, half_on_wire=half)
        everyone = comm.allgather(got.tobytes())
        label = f"{np.dtype(dtype).name}[{count}] {op} {how}"
        cases += 1
        if len(set(everyone)) != 1:
            failures.append(f"{label}: ranks hold different bytes")
        parts = [contribution(r, dtype, count, seed) for r in range(size)]
        if dtype == np.bool_:
            expected = np.logical_or.reduce(parts) if count else np.zeros(0, bool)
            ok = np.array_equal(got, expected)
        else:
            wide = np.sum([p.astype(np.float64) for p in parts], axis=0) if count else \
                np.zeros(0)
            if op == "average":
                wide = wide / size
            tol = {np.float16: 5e-2, np.float32: 1e-4, np.float64: 1e-10}.get(dtype, 0)
            ok = got.dtype == dtype and np.allclose(got.astype(np.float64), wide,
                                                    rtol=tol, atol=tol * size)
        if not ok:
            failures.append(f"{label}: not the reference sum")
    report("SUMS", rank=rank, cases=cases, failures=failures)


def attempt(rank, case, call):
    try:
        call()
    except MpiflowError as exc:
        report("RAISED", rank=rank, case=case, error=type(exc).__name__, message=str(exc))
    else:
        report("RETURNED", rank=rank, case=case)


def numbers(comm):
    rank = comm.Get_rank()
    x = np.ones(64, dtype=np.float32)
    c = get_collective("mpi", comm, x)
    c.allreduce(x, name="warm-up")
    if rank == 0:       # one more collective here than anywhere else, unchecked
        c.allreduce_async(np.ones(64, dtype=np.float32), check=False)
    attempt(rank, "numbers", lambda: c.allreduce(x, name="grad/w"))


def steady(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.empty(1000, dtype=np.float32)
    c = get_collective("mpi", comm, x)
    calls, wrong = 300, 0
    for i in range(calls):
        # small integers: every order of the additions gives the exact sum
        x[:] = np.arange(1000) % 7 + rank * (i % 5)
        exact = size * (np.arange(1000) % 7) + (i % 5) * size * (size - 1) // 2
        how = i % 3
        if how == 0:
            got = c.allreduce(x, name="grad/w")
        elif how == 1:
            got = c.allreduce(x, op="average", name="grad/w")
            exact = exact / np.float32(size)
        else:
            got = c.allreduce(x, out=x, name="grad/w")
        wrong += not np.array_equal(got, exact.astype(np.float32))
    kept = [e for free in c.state.exchanges._free.values() for e in free]
    report("STEADY", rank=rank, calls=calls, wrong=int(wrong),
           persistent=bool(kept) and all(e._persistent is not None for e in kept))


def longer(comm):
    from mpiflow.comm.collectives.exchange import Exchange, doubling_steps

    rank, size = comm.Get_rank(), comm.Get_size()
    most = config.CHECK_CARRY_MAX_BYTES // 4        # float32 elements: the longest message
    exchange = Exchange() if rank == 0 else Exchange(np.float32, (most,))
    if rank == 1:
        exchange.load(np.full(most, 3.0, np.float32), np.empty(most, np.float32))
    exchange.begin(comm, doubling_steps(rank, size), fingerprint=77, seq=0)
    while not exchange.advance():
        pass
    report("LONGER", rank=rank, mismatch=exchange.mismatch,
           received=exchange._status.Get_count(MPI.BYTE))


def carry(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = config.Config(env={"MPIFLOW_CHECK_CARRY_BYTES": "0" if rank == 0 else "65536"})
    large = np.ones(20000, dtype=np.float32)    # past every rank's carry: checks alone
    for _ in range(3):
        get_collective("mpi", comm, large, settings).allreduce(large, name="warm-up")
    x = np.ones(1024, dtype=np.float32)
    c = get_collective("mpi", comm, x, settings)
    attempt(rank, "carry", lambda: c.allreduce(x, name="grad/w"))
    ok = np.full(1009, rank, dtype=np.float64)
    result = get_collective("mpi", comm, ok).allreduce(ok)
    report("AFTER", rank=rank, correct=bool((result == size * (size - 1) / 2).all()))


def threads(comm):
    """Two threads wait on one carried handle, then two allreduces of its signature run
    together: each must get its own sum (the handle finishes once, its buffers are given
    back once)."""
    import threading

    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.full(256, rank + 1, np.float32)
    c = get_collective("mpi", comm, x)
    total, wrong = size * (size + 1) / 2, 0
    for _ in range(100):
        handle = c.allreduce_async(x)
        start = threading.Barrier(2)

        def wait_for_it(handle=handle, start=start):
            start.wait()
            handle.wait()
        waiters = [threading.Thread(target=wait_for_it) for _ in range(2)]
        for t in waiters:
            t.start()
        for t in waiters:
            t.join()
        a, b = c.allreduce_async(x), c.allreduce_async(100 * x)
        if not ((a.wait() == total).all() and (b.wait() == 100 * total).all()):
            wrong += 1
    report("THREADS", rank=rank, wrong=wrong)


def half_wire(comm):
    rank = comm.Get_rank()
    x = np.ones(1024, dtype=np.float16)
    c = get_collective("mpi", comm, x)
    attempt(rank, "half_wire", lambda: c.allreduce(x, op="average", name="grad/w",
                                                   half_on_wire=rank == 0))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=("sums", "steady", "longer", "numbers", "carry",
                                         "threads", "half_wire"))
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    comm = world.Dup()
    {"sums": sums, "steady": steady, "longer": longer, "numbers": numbers, "carry": carry,
     "threads": threads, "half_wire": half_wire}[args.case](comm)
    report("DONE", rank=world.Get_rank())
    world.Barrier()
    if args.case not in ("sums", "steady", "longer", "threads"):
        os._exit(0)


if __name__ == "__main__":
    main()
