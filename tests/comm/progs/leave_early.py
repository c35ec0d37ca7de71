"""Ranks that leave with exit code 130 one after another (rank r after r seconds), having
told the launcher first (``release``) or not, as an interrupted job's ranks leave on a
crowded node. Each prints ``LEAVING <rank> <whether the launcher acknowledged>`` just
before it exits."""

import os
import sys
import time

from mpi4py import MPI

from mpiflow.comm.launcher_release import release_from_launcher

rank = MPI.COMM_WORLD.rank
MPI.COMM_WORLD.Barrier()
time.sleep(1.0 * rank)
released = release_from_launcher() if sys.argv[1] == "release" else None
print(f"LEAVING {rank} {released}", flush=True)
os._exit(130)
