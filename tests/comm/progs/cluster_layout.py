"""Print every rank's layout and role as one JSON line per (rank, policy); works at any -n.

Usage: cluster_layout.py [--ps N] [--fake-hosts K] [--env-only] [--absent-rank R]
  --ps N          number of ps passed to ClusterSpec (default: MPIFLOW_PS / the default)
  --fake-hosts K  simulate K hosts filled in rank order: rank r of n reports host
                  "fake<r * K // n>" (as a launcher that fills node after node)
  --env-only      build one cluster with ClusterSpec.from_mpi() and no arguments
  --absent-rank R rank R never joins the layout (the others must time out, not hang)
  --bind "0;0-1"  rank r first limits its affinity to the r-th processor list (as a
                  launcher's binding or a Slurm allocation would)
Each rank writes ``CLUSTER {...}`` per policy; rank 0 also ``SPEC {...}``.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

from mpi4py import MPI

from mpiflow.comm.cluster import Layout, parse_cpu_list
from mpiflow.train.cluster_spec import ClusterSpec


def report(comm, spec, policy):
    """Print this rank's line, after checking every rank agrees on the cluster."""
    layout = spec.layout
    job, task = spec.task_of_rank(layout.rank)
    assert spec.rank_of(job, task) == layout.rank
    assert spec.task_address(job, task) == f"mpi://{layout.host}/{layout.rank}"
    # Each rank computed the roles on its own: check they agree, with a buffer gather of
    # a digest of the spec (no pickle-based lowercase calls).
    text = json.dumps(spec.as_dict(), sort_keys=True).encode()
    digest = np.frombuffer(hashlib.sha256(text).digest()[:8], dtype=np.int64).copy()
    digests = np.empty(layout.size, dtype=np.int64)
    comm.Allgather(digest, digests)
    assert (digests == digest[0]).all(), f"ranks disagree on the cluster: {digests}"
    line = {"policy": policy, "rank": layout.rank, "size": layout.size, "host": layout.host,
            "node": layout.node, "local_rank": layout.local_rank,
            "local_size": layout.local_size, "job": job, "task": task,
            "cpu_threads": layout.cpu_threads, "node_cpus": layout.node_cpus}
    out = "CLUSTER " + json.dumps(line, sort_keys=True) + "\n"
    if layout.rank == 0:
        out += "SPEC " + json.dumps({"policy": policy, "spec": spec.as_dict()}) + "\n"
    # One write per report: mpiexec merges the ranks' output, at best line by line.
    sys.stdout.write(out)
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ps", type=int, default=None)
    parser.add_argument("--fake-hosts", type=int, default=0)
    parser.add_argument("--env-only", action="store_true")
    parser.add_argument("--absent-rank", type=int, default=None)
    parser.add_argument("--bind", default=None)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    if args.bind:
        os.sched_setaffinity(0, parse_cpu_list(args.bind.split(";")[comm.Get_rank()]))
    if comm.Get_rank() == args.absent_rank:
        return  # exits without joining; mpiexec tears it down when the others fail
    if args.env_only:
        report(comm, ClusterSpec.from_mpi(comm=comm), "env")
        comm.Free()
        return
    rank, size = comm.Get_rank(), comm.Get_size()
    host = f"fake{rank * args.fake_hosts // size}" if args.fake_hosts else None
    layout = Layout.from_comm(comm, host=host)
    for policy in ("block", "spread"):
        report(comm, ClusterSpec.from_layout(layout, ps=args.ps, policy=policy), policy)
    comm.Free()


if __name__ == "__main__":
    main()
