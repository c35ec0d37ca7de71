"""The cluster of an MPI launch, for the examples that need several ranks.

Started without ``mpiexec`` (or with one rank), a ps/worker example would fail somewhere
inside with an error about a missing ps job; this says how to launch it instead.
"""

from __future__ import annotations

import sys

import mpiflow as mf


def cluster_of_launch(ps=None, policy=None, min_ranks=2, ranks_hint=3):
    """Return ``ClusterSpec.from_mpi(ps, policy)``; exit with the launch command to use
    when the job has fewer than ``min_ranks`` ranks."""
    cluster = mf.train.ClusterSpec.from_mpi(ps=ps, policy=policy)
    if cluster.num_ranks < min_ranks:
        script = " ".join(sys.argv)
        sys.stderr.write(
            f"{sys.argv[0]} trains on several MPI ranks, but this job has "
            f"{cluster.num_ranks}: launch it with an MPI launcher, e.g.\n"
            f"    mpiexec -n {ranks_hint} python {script}\n"
            f"(or srun inside a Slurm allocation; --ps N sets how many ranks are ps)\n")
        raise SystemExit(2)
    return cluster
