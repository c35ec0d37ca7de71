"""Asynchronous ps training of a model of many small variables against the same model in
one process: what the ps path costs per variable.

    mpiexec -n 2 python benchmarks/ps_many_variables.py            # 1 ps + 1 worker
    mpiexec -n 2 python benchmarks/ps_many_variables.py --variables 50 --size 16384

The model: ``--variables`` vectors of ``--size`` float32 each, the loss the sum of each
one's dot product with the fed batch, plain SGD: almost no compute, so each step is the
per-variable cost of a step (its kernels, and in ps mode the pull of every variable, the
push of every gradient and the applies on the ps). Real models have many such small
variables (biases, normalization scales). Each of ``--rounds`` rounds has the first
worker step the model alone through a local ``Session.run`` while every other rank waits
idle, then every worker step it against the ps, each for ``--seconds``. Printed: ms per
step of both, and the ratio of the one-process rate to the async rate of one worker
(medians of the rounds, with their spread).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import mpiflow as mf


def build(variables, size, cluster=None, task=0):
    graph = mf.Graph()
    setter = None if cluster is None else mf.train.replica_device_setter(
        cluster=cluster, worker_device=f"/job:worker/task:{task}")
    with graph.as_default(), mf.device(setter):
        mf.set_random_seed(0)
        x = mf.placeholder(mf.float32, [size])
        vectors = [mf.get_variable(f"v{i}", [size]) for i in range(variables)]
        loss = mf.add_n([mf.reduce_sum(v * x) for v in vectors])
        train = mf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = mf.global_variables_initializer()
        ready = mf.stack([mf.is_variable_initialized(v) for v in vectors])
    return graph, x, train, init, ready


def seconds_per_step(step, feed, seconds):
    for _ in range(10):
        step(feed)
    count, start = 0, time.perf_counter()
    while count < 20 or time.perf_counter() - start < seconds:
        step(feed)
        count += 1
    return (time.perf_counter() - start) / count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024, help="float32 per variable")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        raise SystemExit("run with mpiexec -n 2 or more (1 ps + workers)")
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    is_worker = server.job_name == "worker"
    first = is_worker and server.task_index == 0
    feed = np.ones(args.size, np.float32)
    if is_worker:
        graph, x, train, init, ready = build(args.variables, args.size, cluster,
                                             server.task_index)
        sess = mf.Session(server.target, graph=graph)
        if server.is_chief:
            sess.run(init)
        while not sess.run(ready).all():
            time.sleep(0.01)
        async_step = sess.make_callable(train, [x])
    if first:
        graph1, x1, train1, init1, _ = build(args.variables, args.size)
        alone = mf.Session(graph=graph1)
        alone.run(init1)
        local_step = alone.make_callable(train1, [x1])
    server.join()
    rounds = np.zeros((args.rounds, 2))        # (one process, async) seconds per step
    for r in range(args.rounds):
        if first:
            rounds[r, 0] = seconds_per_step(local_step, feed, args.seconds)
        server.join()       # the others idle meanwhile
        if is_worker:
            rounds[r, 1] = seconds_per_step(async_step, feed, args.seconds)
        server.join()
    if not first:
        return
    ratios = rounds[:, 0] / rounds[:, 1]       # async rate over one process's
    one, asynchronous = np.median(rounds, axis=0) * 1e3
    summary = {"variables": args.variables, "size": args.size,
               "workers": cluster.num_tasks("worker"), "one_process_ms": one,
               "async_ms": asynchronous, "async_of_one_process": float(np.median(ratios)),
               "range": [float(ratios.min()), float(ratios.max())]}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.variables} variables of {args.size} float32, 1 ps + "
          f"{summary['workers']} worker(s), medians of {args.rounds} rounds")
    print(f"  one process {one:.3f} ms/step; async against the ps {asynchronous:.3f} "
          f"ms/step (worker 0)")
    print(f"  async rate / one process {summary['async_of_one_process']:.2f} "
          f"[{ratios.min():.2f}-{ratios.max():.2f}]")


if __name__ == "__main__":
    main()
