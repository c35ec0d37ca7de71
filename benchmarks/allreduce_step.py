"""Allreduce-mode training step: overlapped gradient buckets vs one fused allreduce at the
end of the backward pass, in the same job, on the same MLP.

    mpiexec -n 2 python benchmarks/allreduce_step.py [--hidden 1024] [--steps 50]

Every rank is a worker with its own copy of an MLP 784-H-H-10 (batch 128); the table
gives steps/s of the whole job for each variant and their ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import mpiflow as mf


def build(hidden, overlap, threshold):
    graph = mf.Graph()
    with graph.as_default():
        mf.set_random_seed(0)
        x = mf.placeholder(mf.float32, [None, 784])
        y = mf.placeholder(mf.int64, [None])
        h = x
        for i, width in enumerate((hidden, hidden)):
            h = mf.nn.relu(mf.matmul(h, mf.get_variable(f"w{i}", [h.shape[1], width])))
        logits = mf.matmul(h, mf.get_variable("out", [hidden, 10]))
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.01),
                                          overlap=overlap, fusion_threshold_bytes=threshold)
        train = opt.minimize(loss)
        init = mf.global_variables_initializer()
        broadcast = opt.broadcast_variables_op()
    return graph, x, y, train, init, broadcast


def steps_per_second(server, parts, steps, batch):
    graph, x, y, train, init, broadcast = parts
    rng = np.random.default_rng(server.task_index)
    xb = rng.standard_normal((batch, 784)).astype(np.float32)
    yb = rng.integers(0, 10, batch)
    with graph.as_default(), mf.Session(server.target) as sess:
        sess.run(init)
        sess.run(broadcast)
        run = sess.make_callable(train, [x, y])
        for _ in range(3):
            run(xb, yb)
        start = time.perf_counter()
        for _ in range(steps):
            run(xb, yb)
        return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threshold-bytes", type=int, default=1 << 20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    rates = {}
    for name, overlap in (("one fused allreduce", False), ("overlapped buckets", True),
                          ("one fused allreduce again", False)):
        parts = build(args.hidden, overlap, args.threshold_bytes)
        rates[name] = steps_per_second(server, parts, args.steps, args.batch)
        server.join()          # the variants start together on every rank
    if server.task_index != 0:
        return
    workers = cluster.num_tasks("worker")
    base = (rates["one fused allreduce"] + rates["one fused allreduce again"]) / 2
    if args.json:
        print(json.dumps({"workers": workers, "hidden": args.hidden, **rates}))
        return
    print(f"allreduce mode, MLP 784-{args.hidden}-{args.hidden}-10, batch {args.batch}, "
          f"{workers} workers, buckets of {args.threshold_bytes} bytes")
    for name, rate in rates.items():
        print(f"  {name:<26} {rate:8.1f} steps/s per worker")
    print(f"  overlapped / fused          {rates['overlapped buckets'] / base:8.2f}")


if __name__ == "__main__":
    main()
