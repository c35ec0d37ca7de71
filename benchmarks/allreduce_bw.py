"""Allreduce bus bandwidth: mpiflow's ring and MPI strategies against MPI's own Allreduce.

    mpiexec -n 2 python benchmarks/allreduce_bw.py
    mpiexec -n 4 python benchmarks/allreduce_bw.py [--json out.json] [--no-check]
    (set OMP_NUM_THREADS=1 MPIFLOW_CPU_THREADS=1 on a crowded machine)

For float32 buffers of 4 KiB .. 64 MiB, in one job and interleaved repeat by repeat:
``MPI`` (mpi4py's blocking ``comm.Allreduce``, the library itself), and mpiflow's
``mpi`` (Iallreduce + handle), ``ring`` and ``auto`` strategies (with the cross-rank check
unless --no-check; ``ring*`` is the ring without it). Each repeat times a batch of
back-to-back allreduces after warm-up; the time of a repeat is the slowest rank's; the
table shows the median repeat as bus bandwidth ``2 (n-1)/n * bytes / time`` (MB/s) and
the ratios ring/MPI, ring*/MPI, mpi/MPI and auto/max(ring, mpi). Then the fusion check:
200 tensors of 4 KiB through FusedAllreduce (copied in with ``add`` and out into given
arrays; and, without copies, written into ``buffer_view``) against one allreduce of their
800 KiB (time ratio, target <= 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from mpiflow import config as config_lib
from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
from mpiflow.comm.collectives import get_collective

KiB, MiB = 1 << 10, 1 << 20
SIZES = [4 * KiB << (2 * i) for i in range(8)]      # 4 KiB, 16 KiB, ..., 64 MiB


def batch_time(comm, run, iters):
    """Return the slowest rank's seconds per call of ``run`` over a batch of ``iters``."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    elapsed = np.array([(time.perf_counter() - start) / iters])
    comm.Allreduce(MPI.IN_PLACE, elapsed, op=MPI.MAX)
    return float(elapsed[0])


def measure(comm, runners, iters, repeats, warmup):
    """Return {name: median seconds per call}, the runners interleaved repeat by repeat."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            times[name].append(batch_time(comm, run, iters))
    return {name: statistics.median(t) for name, t in times.items()}


def bandwidth_table(comm, check, budget_s):
    n = comm.Get_size()
    rows = []
    for nbytes in SIZES:
        x = np.full(nbytes // 4, 1.0 + comm.Get_rank(), dtype=np.float32)
        out = np.empty_like(x)
        strategies = {name: get_collective(name, comm, x) for name in ("mpi", "ring", "auto")}
        runners = {"MPI": lambda x=x, out=out: comm.Allreduce(x, out, op=MPI.SUM)}
        for name, collective in strategies.items():
            runners[name] = lambda c=collective, x=x, out=out: c.allreduce(x, out=out,
                                                                           check=check)
        if check:   # what the cross-rank check costs
            runners["ring*"] = lambda c=strategies["ring"], x=x, out=out: c.allreduce(
                x, out=out, check=False)
        # Size the batches from one probe so that each size takes about budget_s.
        probe = batch_time(comm, runners["MPI"], 2)
        calls = max(8, int(budget_s / max(probe, 1e-6) / len(runners)))
        repeats = 7 if calls >= 14 else 5
        iters = max(1, calls // repeats)
        t = measure(comm, runners, iters, repeats, warmup=max(2, min(iters, 20)))
        bus = {k: 2 * (n - 1) / n * nbytes / v / 1e6 if n > 1 else nbytes / v / 1e6
               for k, v in t.items()}
        rows.append({"bytes": nbytes, "auto_is": strategies["auto"].name,
                     "seconds": t, "bus_MBps": bus,
                     "ring/MPI": bus["ring"] / bus["MPI"], "mpi/MPI": bus["mpi"] / bus["MPI"],
                     "ring*/MPI": bus.get("ring*", bus["ring"]) / bus["MPI"],
                     "auto/best": bus["auto"] / max(bus["ring"], bus["mpi"])})
    return rows


def fusion_check(comm, check, repeats=15):
    count, each = 200, 4 * KiB
    rank = comm.Get_rank()
    specs = [TensorSpec(f"grad/{i:03d}", np.dtype(np.float32), each) for i in range(count)]
    tensors = [np.full(each // 4, i + rank, dtype=np.float32) for i in range(count)]
    outs = [np.empty_like(t) for t in tensors]
    fused = FusedAllreduce(comm, specs, algorithm="auto", check=check)
    whole = np.ones(count * each // 4, dtype=np.float32)
    whole_out = np.empty_like(whole)
    single = get_collective("auto", comm, whole)

    def fused_step():
        for spec, t, o in zip(specs, tensors, outs):
            fused.add(spec.name, t, o)
        fused.wait_all()

    # A producer that writes each tensor into its slot of the fusion buffer: no copies.
    views = FusedAllreduce(comm, specs, algorithm="auto", check=check)
    slots = [(spec.name, views.buffer_view(spec.name)) for spec in specs]
    for _, view in slots:
        view[...] = 0       # summed in place call after call: zeros stay finite

    def views_step():
        for name, view in slots:
            views.add(name, view, view)
        views.wait_all()

    runners = {"fused": fused_step, "views": views_step,
               "one": lambda: single.allreduce(whole, out=whole_out, check=check),
               "MPI": lambda: comm.Allreduce(whole, whole_out, op=MPI.SUM)}
    t = measure(comm, runners, iters=10, repeats=repeats, warmup=10)
    expected = count and (np.arange(count) * comm.Get_size()
                          + comm.Get_size() * (comm.Get_size() - 1) / 2)
    assert all((o == e).all() for o, e in zip(outs, expected)), "fused results are wrong"
    return {"tensors": count, "tensor_bytes": each, "buckets": len(fused.buckets),
            "seconds": t, "fused/one": t["fused"] / t["one"], "views/one": t["views"] / t["one"],
            "fused/MPI": t["fused"] / t["MPI"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results to this file (rank 0)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip mpiflow's cross-rank check (MPI has none)")
    parser.add_argument("--budget", type=float, default=1.5,
                        help="seconds of measurement per size (default 1.5)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    check = not args.no_check
    cfg = config_lib.default()
    rows = bandwidth_table(comm, check, args.budget)
    fusion = fusion_check(comm, check)
    if rank != 0:
        return
    knobs = {k: cfg.get(k) for k in ("MPIFLOW_RING_CHUNK_BYTES", "MPIFLOW_RING_WINDOW",
                                     "MPIFLOW_RING_MIN_BYTES", "MPIFLOW_COLLECTIVE_SPIN_US",
                                     "MPIFLOW_POLL_MAX_SLEEP_US")}
    print(f"# {n} ranks, {os.cpu_count()} cores, {MPI.Get_library_version().splitlines()[0]}, "
          f"check={check}, {knobs}")
    print("bus bandwidth in MB/s; ring* = ring without the cross-rank check")
    print(f"{'size':>8} | {'MPI':>7} {'mpi':>7} {'ring':>7} {'ring*':>7} {'auto':>7} | "
          f"{'ring/MPI':>8} {'ring*/MPI':>9} {'mpi/MPI':>7} {'auto/best':>9} | auto is")
    for row in rows:
        b = row["bus_MBps"]
        size = row["bytes"]
        label = f"{size // MiB} MiB" if size >= MiB else f"{size // KiB} KiB"
        print(f"{label:>8} | {b['MPI']:7.0f} {b['mpi']:7.0f} {b['ring']:7.0f} "
              f"{b.get('ring*', b['ring']):7.0f} {b['auto']:7.0f} | {row['ring/MPI']:8.2f} "
              f"{row['ring*/MPI']:9.2f} {row['mpi/MPI']:7.2f} {row['auto/best']:9.2f} | "
              f"{row['auto_is']}")
    s = fusion["seconds"]
    print(f"fusion: {fusion['tensors']} x {fusion['tensor_bytes'] // KiB} KiB in "
          f"{fusion['buckets']} bucket(s): {s['fused'] * 1e3:.3f} ms (copied in and out), "
          f"{s['views'] * 1e3:.3f} ms (written into buffer_view); one 800 KiB allreduce "
          f"(auto) {s['one'] * 1e3:.3f} ms, MPI Allreduce {s['MPI'] * 1e3:.3f} ms")
    print(f"fusion ratios: fused/one = {fusion['fused/one']:.2f} (target <= 2), "
          f"views/one = {fusion['views/one']:.2f}, fused/MPI = {fusion['fused/MPI']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": n, "check": check, "knobs": knobs, "bandwidth": rows,
                       "fusion": fusion}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
