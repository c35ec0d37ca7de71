"""Bandwidth between hosts: ps pull/push and allreduce against raw MPI on the same links.

    mpiexec -hosts a,b -ppn 1 python benchmarks/multinode.py      # ranks on 2+ hosts
    sudo python benchmarks/multinode.py --simulate 3              # 3 simulated hosts here

Part 1: rank 0 is the ps, every other rank a worker (place one rank per host, so each
transfer crosses the network); each worker pulls a set of float32 variables from the ps
and pushes a gradient of the same size (a fused SGD apply on the ps), next to raw mpi4py
Send/Recv of the same bytes between the same ranks (the request/answer pattern of a ps).
Part 2: mpiflow's ring and auto allreduce across all ranks next to MPI's own Allreduce
(without the cross-rank check, as graph ops run after their first round). Ratios are
mpiflow / MPI, measured in one job, interleaved.

``--simulate N`` builds N hosts as network namespaces (root; the test bed of
tests/cluster), runs this script across them with one rank each, and tears them down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20
ALLREDUCE_SIZES = [64 * KiB, MiB, 4 * MiB, 16 * MiB]


def simulate(num_hosts: int, argv: list[str]) -> int:
    """Run this script across ``num_hosts`` simulated hosts, one rank each."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.cluster.virtual_hosts import VirtualHosts, unavailable_reason
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"--simulate: {reason}")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    with VirtualHosts(num_hosts) as hosts:
        cmd = hosts.mpiexec_argv(mpiexec, 1) + [sys.executable, str(Path(__file__).resolve()),
                                                *argv]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(root), os.environ.get("PYTHONPATH")) if p))
        return subprocess.run(hosts.command(hosts.names[0], cmd), env=env).returncode


def ps_part(world, sizes, rounds, seconds):
    """Per-worker MiB/s of raw and mpiflow pulls and pushes on rank 0, as
    ``ps_throughput.bandwidth_table`` rows: medians over the rounds of the workers' mean."""
    import numpy as np
    from mpi4py import MPI
    from ps_throughput import bandwidth_round, bandwidth_table, build_transfer_graph

    import mpiflow as mf

    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    graphs = (build_transfer_graph(cluster, server.task_index, sizes)
              if server.job_name == "worker" else {})
    # [size, round, (raw pull, raw push, mpiflow pull, mpiflow push, raw per-variable
    # pull and push)]
    results = np.stack([bandwidth_round(world, server, graphs, sizes, seconds,
                                        warmup_s=1.0 if r == 0 else 0.3)
                        for r in range(rounds)], axis=1)
    sums = np.zeros_like(results)
    world.Reduce(results, sums, op=MPI.SUM, root=0)
    if world.Get_rank() != 0:
        return []
    return bandwidth_table(sums / (world.Get_size() - 1), sizes)


def allreduce_part(world, budget_s):
    import numpy as np
    from allreduce_bw import batch_time, measure
    from mpi4py import MPI

    from mpiflow.comm.collectives import get_collective

    comm = world.Dup()
    n = comm.Get_size()
    rows = []
    for nbytes in ALLREDUCE_SIZES:
        x = np.full(nbytes // 4, 1.0 + comm.Get_rank(), dtype=np.float32)
        out = np.empty_like(x)
        runners = {"MPI": lambda x=x, out=out: comm.Allreduce(x, out, op=MPI.SUM)}
        for name in ("ring", "auto"):
            collective = get_collective(name, comm, x)
            runners[name] = lambda c=collective, x=x, out=out: c.allreduce(x, out=out,
                                                                           check=False)
        probe = batch_time(comm, runners["MPI"], 2)
        iters = max(1, int(budget_s / max(probe, 1e-6) / len(runners) / 5))
        t = measure(comm, runners, iters, repeats=5, warmup=2)
        bus = {k: 2 * (n - 1) / n * nbytes / v / MiB for k, v in t.items()}
        rows.append({"bytes": nbytes, "bus_MiBps": bus, "ring/MPI": bus["ring"] / bus["MPI"],
                     "auto/MPI": bus["auto"] / bus["MPI"]})
    comm.Free()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", type=int, metavar="N",
                        help="build N simulated hosts (root) and run across them")
    parser.add_argument("--sizes-mib", type=int, nargs="*", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=3,
                        help="ps part: rounds (medians are reported)")
    parser.add_argument("--seconds", type=float, default=0.4,
                        help="ps part: seconds of each measurement in each round")
    parser.add_argument("--budget", type=float, default=1.5,
                        help="seconds of allreduce measurement per size")
    parser.add_argument("--json", help="also write the results to this file (rank 0)")
    args, rest = parser.parse_known_args()
    if args.simulate:
        passed, skip = [], False
        for arg in sys.argv[1:]:
            if not skip and not arg.startswith("--simulate"):
                passed.append(arg)
            skip = arg == "--simulate"
        return simulate(args.simulate, passed)
    if rest:
        parser.error(f"unknown arguments {rest}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from mpi4py import MPI

    from mpiflow.comm.cluster import Layout
    world = MPI.COMM_WORLD
    layout = Layout.from_comm(world)
    if world.Get_size() < 2:
        raise SystemExit("run with 2 or more ranks, one per host")
    ps_rows = ps_part(world, [s * MiB for s in args.sizes_mib], args.rounds, args.seconds)
    ar_rows = allreduce_part(world, args.budget)
    if world.Get_rank() != 0:
        return 0
    print(f"# {layout.describe()}; {MPI.Get_library_version().splitlines()[0]}")
    print("ps (rank 0) <-> each worker, MiB/s per worker (ratio: against raw as one "
          "buffer; per var: against raw as a buffer per variable, as mpiflow sends)")
    print(f"{'size':>8} | {'raw pull':>8} {'mpiflow':>8} {'ratio':>6} {'per var':>7} | "
          f"{'raw push':>8} {'mpiflow':>8} {'ratio':>6} {'per var':>7}")
    for r in ps_rows:
        print(f"{r['MiB']:>4} MiB | {r['raw_pull']:8.0f} {r['mpiflow_pull']:8.0f} "
              f"{r['pull_ratio']:6.2f} {r['pull_ratio_per_variable']:7.2f} | "
              f"{r['raw_push']:8.0f} {r['mpiflow_push']:8.0f} {r['push_ratio']:6.2f} "
              f"{r['push_ratio_per_variable']:7.2f}")
    print("allreduce over all ranks, bus bandwidth MiB/s")
    print(f"{'size':>8} | {'MPI':>7} {'ring':>7} {'auto':>7} | {'ring/MPI':>8} {'auto/MPI':>8}")
    for r in ar_rows:
        b, size = r["bus_MiBps"], r["bytes"]
        label = f"{size // MiB} MiB" if size >= MiB else f"{size // KiB} KiB"
        print(f"{label:>8} | {b['MPI']:7.0f} {b['ring']:7.0f} {b['auto']:7.0f} | "
              f"{r['ring/MPI']:8.2f} {r['auto/MPI']:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"layout": layout.describe(), "ps": ps_rows, "allreduce": ar_rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
