"""Parameter-server throughput: pull/push bandwidth against raw MPI, and async MLP steps/s.

    mpiexec -n 2 python benchmarks/ps_throughput.py     # 1 ps + 1 worker
    mpiexec -n 4 python benchmarks/ps_throughput.py     # 1 ps + 3 workers

Part 1, per size (1, 16, 64 MiB of float32 variables, split over 4 variables): every
worker pulls the whole set from the ps (``sess.run(variables)``) and pushes a gradient
of the same size (an SGD apply on the ps), and the same bytes go through raw mpi4py
``Send``/``Recv`` between the same ranks in the same job, the raw push followed by the
same SGD update on the ps in numpy (in place, into buffers allocated once), so both sides
do the same work. Bandwidth is per worker, all workers at once; the ratio is mpiflow /
raw (target >= 0.85).
Part 2: asynchronous SGD on an MLP 784-512-512-10 at batch 128, every worker stepping
against the ps; steps/s of the whole job, and the CPU seconds each rank used (a ps that
waits must not take a core from the workers).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import mpiflow as mf

MiB = 1 << 20
WARMUP_S = 4.0


def raw_bandwidth(comm, nbytes, repeats):
    """Per-worker MiB/s of the same exchanges done with raw mpi4py: a pull is a small
    request answered by ``nbytes`` from the ps, a push ``nbytes`` applied to the ps's
    variables (``var -= lr * grad``) and answered by a small ack."""
    rank, size = comm.Get_rank(), comm.Get_size()
    PULL, PUSH, DATA, ACK = 11, 12, 13, 14
    buf = np.ones(nbytes // 4, np.float32)
    token = np.zeros(1, np.int64)
    comm.Barrier()
    if rank == 0:
        status = MPI.Status()
        variables, grad = np.zeros_like(buf), np.empty_like(buf)
        lr = np.float32(1e-6)
        for _ in range(4 * repeats * (size - 1)):
            comm.Probe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            src, tag = status.Get_source(), status.Get_tag()
            if tag == PULL:
                comm.Recv([token, MPI.BYTE], src, PULL)
                comm.Send([buf, MPI.BYTE], src, DATA)
            else:
                comm.Recv([grad, MPI.BYTE], src, PUSH)
                grad *= lr
                variables -= grad
                comm.Send([token, MPI.BYTE], src, ACK)
        comm.Barrier()
        return 0.0, 0.0
    out = np.empty_like(buf)
    for _ in range(repeats):                 # warm-up, as for mpiflow
        comm.Send([token, MPI.BYTE], 0, PULL)
        comm.Recv([out, MPI.BYTE], 0, DATA)
        comm.Send([buf, MPI.BYTE], 0, PUSH)
        comm.Recv([token, MPI.BYTE], 0, ACK)
    start = time.perf_counter()
    for _ in range(repeats):
        comm.Send([token, MPI.BYTE], 0, PULL)
        comm.Recv([out, MPI.BYTE], 0, DATA)
    pull = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        comm.Send([buf, MPI.BYTE], 0, PUSH)
        comm.Recv([token, MPI.BYTE], 0, ACK)
    push = time.perf_counter() - start
    comm.Barrier()
    return nbytes / MiB * repeats / pull, nbytes / MiB * repeats / push


def build_transfer_graph(cluster, task, sizes):
    graphs = {}
    for nbytes in sizes:
        g = mf.Graph()
        with g.as_default(), mf.device(mf.train.replica_device_setter(
                cluster=cluster, worker_device=f"/job:worker/task:{task}")):
            part = nbytes // 4 // 4
            # Names differ per size: variables of one ps outlive a graph, by name.
            variables = [mf.Variable(mf.zeros([part]), name=f"v{nbytes // MiB}mib_{i}")
                         for i in range(4)]
            grads = [mf.placeholder(mf.float32, [part], name=f"g{i}") for i in range(4)]
            opt = mf.train.GradientDescentOptimizer(1e-6)
            push = opt.apply_gradients(list(zip(grads, variables)))
            ready = mf.stack([mf.is_variable_initialized(v) for v in variables])
            graphs[nbytes] = (g, variables, grads, push, ready,
                              mf.global_variables_initializer())
    return graphs


def mpiflow_bandwidth(server, graph_parts, nbytes, repeats, is_chief):
    g, variables, grads, push, ready, init = graph_parts
    with g.as_default(), mf.Session(server.target) as sess:
        if is_chief:
            sess.run(init)
        while not sess.run(ready).all():
            time.sleep(0.01)
        pull_fn = sess.make_callable(variables)
        push_fn = sess.make_callable(push, grads)
        gvals = [np.ones(v.shape.as_list(), np.float32) for v in variables]
        # Registration, then warm-up: on a VM the first touch of fresh memory (the ps's
        # buffers, the received arrays) is much slower than steady state; both sides of
        # the comparison are measured warm.
        warm_until = time.perf_counter() + WARMUP_S
        while time.perf_counter() < warm_until:
            pull_fn(), push_fn(*gvals)
        t = time.perf_counter()
        for _ in range(repeats):
            pull_fn()
        pull = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(repeats):
            push_fn(*gvals)
        push = time.perf_counter() - t
    return nbytes / MiB * repeats / pull, nbytes / MiB * repeats / push


def mlp_async(server, cluster, task, seconds, batch=128):
    g = mf.Graph()
    with g.as_default():
        mf.set_random_seed(0)
        with mf.device(mf.train.replica_device_setter(
                cluster=cluster, worker_device=f"/job:worker/task:{task}")):
            x = mf.placeholder(mf.float32, [None, 784], name="x")
            y = mf.placeholder(mf.int64, [None], name="y")
            h = x
            for i, width in enumerate((512, 512)):
                h = mf.nn.relu(mf.matmul(h, mf.get_variable(f"w{i}", [h.shape[1], width])) +
                               mf.get_variable(f"b{i}", [width],
                                               initializer=mf.zeros_initializer()))
            logits = mf.matmul(h, mf.get_variable("w2", [512, 10]))
            loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            step = mf.train.GradientDescentOptimizer(0.01).minimize(loss)
            ready = mf.stack([mf.is_variable_initialized(v) for v in mf.global_variables()])
            init = mf.global_variables_initializer()
        rng = np.random.default_rng(task)
        xb = rng.standard_normal((batch, 784)).astype(np.float32)
        yb = rng.integers(0, 10, batch)
        with mf.Session(server.target) as sess:
            if server.is_chief:
                sess.run(init)
            while not sess.run(ready).all():
                time.sleep(0.01)
            run = sess.make_callable(step, [x, y])
            run(xb, yb)
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                run(xb, yb)
                steps += 1
            return steps, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="*", default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if size < 2:
        raise SystemExit("run with mpiexec -n 2..4 (1 ps + workers)")
    sizes = [s * MiB for s in args.sizes_mib]

    raw = [raw_bandwidth(world, n, args.repeats) for n in sizes]

    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = np.zeros((len(sizes), 4) + (2,), np.float64)
    if server.job_name == "worker":
        graphs = build_transfer_graph(cluster, server.task_index, sizes)
        for i, n in enumerate(sizes):
            results[i, 0], results[i, 1] = raw[i]
            results[i, 2], results[i, 3] = mpiflow_bandwidth(server, graphs[n], n,
                                                             args.repeats, server.is_chief)
    server.join()          # every worker done with part 1 (the ps serves meanwhile)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    steps = np.zeros(2)
    if server.job_name == "worker":
        steps[:] = mlp_async(server, cluster, server.task_index, args.seconds)
    server.join()
    cpu2, wall2 = time.process_time(), time.perf_counter()

    per_rank = np.array([cpu1 - cpu0, wall1 - wall0, cpu2 - cpu1, wall2 - wall1,
                         steps[0], steps[1]])
    gathered = np.zeros((size, per_rank.size)) if rank == 0 else None
    world.Gather(per_rank, gathered, root=0)
    sums = np.zeros_like(results) if rank == 0 else None
    world.Reduce(results, sums, op=MPI.SUM, root=0)
    if rank != 0:
        return
    workers = size - 1
    table = []
    for i, n in enumerate(sizes):
        raw_pull, raw_push, mf_pull, mf_push = (sums[i, k, 0] / workers for k in range(4))
        table.append({"MiB": n // MiB, "raw_pull": raw_pull, "mpiflow_pull": mf_pull,
                      "pull_ratio": mf_pull / raw_pull, "raw_push": raw_push,
                      "mpiflow_push": mf_push, "push_ratio": mf_push / raw_push})
    total_steps = gathered[1:, 4].sum()
    step_wall = gathered[1:, 5].max()
    summary = {"workers": workers, "bandwidth": table,
               "mlp_steps_per_s": total_steps / step_wall,
               "cpu_s_mlp": {f"rank {r}": round(gathered[r, 2], 2) for r in range(size)},
               "wall_s_mlp": round(gathered[0, 3], 2)}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"1 ps + {workers} workers, MiB/s per worker (all workers at once)")
    print(f"{'MiB':>5} {'raw pull':>10} {'mpiflow':>10} {'ratio':>6} "
          f"{'raw push':>10} {'mpiflow':>10} {'ratio':>6}")
    for row in table:
        print(f"{row['MiB']:>5} {row['raw_pull']:>10.0f} {row['mpiflow_pull']:>10.0f} "
              f"{row['pull_ratio']:>6.2f} {row['raw_push']:>10.0f} "
              f"{row['mpiflow_push']:>10.0f} {row['push_ratio']:>6.2f}")
    print(f"async MLP 784-512-512-10 batch 128: {summary['mlp_steps_per_s']:.1f} steps/s "
          f"(all workers), over {summary['wall_s_mlp']} s")
    print("CPU seconds per rank during the MLP part: " + ", ".join(
        f"{k} {'(ps)' if k == 'rank 0' else ''}{v}" for k, v in summary["cpu_s_mlp"].items()))


if __name__ == "__main__":
    main()
