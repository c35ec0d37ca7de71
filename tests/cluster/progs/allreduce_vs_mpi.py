"""Every allreduce algorithm equals the MPI library's own Allreduce on the same inputs.

Usage: mpiexec ... python allreduce_vs_mpi.py
Random inputs per rank (seeded by rank); for each algorithm, dtype and size the result is
compared with ``comm.Allreduce`` of the same arrays: integers exactly, floats to a
tolerance (the summation order differs). Prints ``ALLREDUCE {...}`` per rank.
"""

import json

import numpy as np
from mpi4py import MPI

from mpiflow.comm.collectives import get_collective

ALGORITHMS = ("ring", "mpi", "auto")
SIZES = (0, 1, 1009, 300_007)      # the last is over 1 MiB in float32: auto takes the ring
DTYPES = (np.float32, np.float64, np.int32, np.float16)
TOLERANCE = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}


def main():
    comm = MPI.COMM_WORLD.Dup()
    rank = comm.Get_rank()
    rng = np.random.default_rng(100 + rank)
    checked, failures = 0, []
    for dtype in DTYPES:
        for n in SIZES:
            mine = (rng.integers(-50, 50, n) if dtype == np.int32
                    else rng.standard_normal(n)).astype(dtype)
            want = np.empty_like(mine)
            # MPI has no float16 sum everywhere: its reference is the float32 sum.
            if dtype == np.float16:
                ref = np.empty(n, np.float32)
                comm.Allreduce(mine.astype(np.float32), ref)
                want = ref.astype(np.float16)
            else:
                comm.Allreduce(mine, want)
            for algorithm in ALGORITHMS:
                got = get_collective(algorithm, comm, mine).allreduce(mine, "sum")
                checked += 1
                tol = TOLERANCE.get(dtype)
                ok = np.array_equal(got, want) if tol is None else np.allclose(
                    got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
                if not ok:
                    failures.append(f"{algorithm} {np.dtype(dtype).name}[{n}]")
    print("ALLREDUCE " + json.dumps({"rank": rank, "checked": checked,
                                     "failures": failures}), flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
