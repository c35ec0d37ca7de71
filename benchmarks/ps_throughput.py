"""Parameter-server throughput: pull/push bandwidth against raw MPI, and async MLP steps/s.

    mpiexec -n 2 python benchmarks/ps_throughput.py     # 1 ps + 1 worker
    mpiexec -n 4 python benchmarks/ps_throughput.py     # 1 ps + 3 workers
    MPIR_CVAR_CH4_CMA_ENABLE=0 mpiexec -n 3 ...         # MPICH copying in pieces

Part 1, per size (1, 16, 64 MiB of float32 variables, split over 4 variables): every
worker pulls the whole set from the ps (``sess.run(variables)``) and pushes a gradient
of the same size (an SGD apply on the ps), and the same bytes go through raw mpi4py
``Send``/``Recv`` between the same ranks in the same job, the raw push followed by the
same SGD update on the ps in numpy (in place, into buffers allocated once), so both sides
do the same work, each of its buffers allocated as its mpiflow counterpart is (the ps's
variables and every receive buffer by ``backend.lasting_host_empty``, on huge pages from
64 KiB; the worker's gradients as plain numpy arrays). The raw side runs twice: with one buffer
of all the bytes, and with one buffer per variable (4 messages each way, as mpiflow's
variables are 4 buffers; MPI moves 4 messages of 4 MiB here more slowly than one of
16 MiB, which no copy-free sender of 4 variables avoids). Bandwidth is per worker, all
workers at once. The three alternate in ``--rounds`` rounds, each timed over at least
``--round-seconds``: the ratios printed are the medians of the rounds' ratios (mpiflow /
raw, target >= 0.85), with their spread.
Part 2: asynchronous SGD on an MLP 784-512-512-10 at batch 128, every worker stepping
against the ps, against the same step in one process, both in this job: each of
``--mlp-rounds`` rounds first has the first worker step the model alone (through a local
``Session.run``, then hand-written in numpy as ``step_overhead.py`` does) while every other
rank waits idle, then every worker step it against the ps, then against a ps written by
hand in mpi4py and numpy that does the same work (``hand_written_ps``), each side for
``--seconds``. Printed: the async steps/s of all workers over the one-process rate
(target >= 0.9 with 1 worker) and over the compute floor, every core at the numpy rate
(target >= 0.75 with 2), and over the hand-written ps's (what mpiflow's ps path costs
beyond the work itself), whose own share of one numpy process says what any ps path keeps
here; medians of the rounds' ratios with their spread; and the CPU seconds each rank used
in the async parts (a ps that waits must not take a core from the workers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import mpiflow as mf
from mpiflow import backend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # run as a script
from mlp import build_mlp
from step_overhead import NumpyStep, init_params, sgd_apply

MiB = 1 << 20
WARMUP_S = 4.0


def timed(call, seconds, at_least=3):
    """Seconds per call of ``call``, run for ``seconds`` (and ``at_least`` times)."""
    count, start = 0, time.perf_counter()
    while count < at_least or time.perf_counter() - start < seconds:
        call()
        count += 1
    return (time.perf_counter() - start) / count


def raw_bandwidth(comm, nbytes, seconds, parts=1):
    """Per-worker MiB/s of the same exchanges done with raw mpi4py: a pull is a small
    request answered by ``nbytes`` from the ps, a push ``nbytes`` applied to the ps's
    variables (``var -= lr * grad``) and answered by a small ack; the bytes travel as
    ``parts`` buffers (messages) each way.

    Runs on a duplicate of ``comm``: the ps side probes for any tag, and a worker done
    here early may already be sending mpiflow's start-up messages on ``comm``."""
    comm = comm.Dup()
    try:
        return _raw_exchanges(comm, nbytes, seconds, parts)
    finally:
        comm.Free()


def _raw_exchanges(comm, nbytes, seconds, parts):
    rank, size = comm.Get_rank(), comm.Get_size()
    PULL, PUSH, DATA, ACK, DONE = 11, 12, 13, 14, 15
    # Each buffer as mpiflow's counterpart is: the worker's gradients are plain numpy
    # arrays (fed, as the mpiflow side feeds them); the ps's variables and every reused
    # receive buffer come from backend.lasting_host_empty (huge pages from 64 KiB), as
    # mpiflow's do. MPI sends a buffer on 4 KiB pages 1.6-3 times slower, so a baseline
    # left to the allocator's luck would swing from run to run.
    shape = (nbytes // 4 // parts,)
    token = np.zeros(1, np.int64)
    if rank == 0:
        status = MPI.Status()
        variables = [backend.lasting_host_empty(shape, np.float32) for _ in range(parts)]
        grads = [backend.lasting_host_empty(shape, np.float32) for _ in range(parts)]
        for variable in variables:
            variable.fill(0)
        lr = np.float32(1e-6)
        finished = 0
        while finished < size - 1:
            comm.Probe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            src, tag = status.Get_source(), status.Get_tag()
            if tag == PULL:
                comm.Recv([token, MPI.BYTE], src, PULL)
                MPI.Request.Waitall([comm.Isend([v, MPI.BYTE], src, DATA)
                                     for v in variables])
            elif tag == PUSH:
                MPI.Request.Waitall([comm.Irecv([g, MPI.BYTE], src, PUSH) for g in grads])
                sgd_apply(variables, grads, lr)
                comm.Send([token, MPI.BYTE], src, ACK)
            else:
                comm.Recv([token, MPI.BYTE], src, DONE)
                finished += 1
        return 0.0, 0.0
    bufs = [np.ones(shape, np.float32) for _ in range(parts)]
    outs = [backend.lasting_host_empty(shape, np.float32) for _ in range(parts)]

    def pull():
        comm.Send([token, MPI.BYTE], 0, PULL)
        MPI.Request.Waitall([comm.Irecv([o, MPI.BYTE], 0, DATA) for o in outs])

    def push():
        MPI.Request.Waitall([comm.Isend([b, MPI.BYTE], 0, PUSH) for b in bufs])
        comm.Recv([token, MPI.BYTE], 0, ACK)
    timed(pull, 0.1), timed(push, 0.1)            # warm, as mpiflow's side is
    pull_s, push_s = timed(pull, seconds), timed(push, seconds)
    comm.Send([token, MPI.BYTE], 0, DONE)
    return nbytes / MiB / pull_s, nbytes / MiB / push_s


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


def mpiflow_bandwidth(server, graph_parts, nbytes, seconds, is_chief, warmup_s):
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
        timed(lambda: (pull_fn(), push_fn(*gvals)), warmup_s)
        pull_s = timed(pull_fn, seconds)
        push_s = timed(lambda: push_fn(*gvals), seconds)
    return nbytes / MiB / pull_s, nbytes / MiB / push_s


def bandwidth_round(world, server, graphs, sizes, seconds, warmup_s):
    """One round over ``sizes``: this worker's MiB/s of (raw pull, raw push, mpiflow pull,
    mpiflow push, raw pull and push with a buffer per variable) per size; zeros on a ps.
    Every rank of ``world`` calls it; ``graphs`` from ``build_transfer_graph`` (workers)."""
    results = np.zeros((len(sizes), 6))
    for i, n in enumerate(sizes):
        world.Barrier()
        raw = raw_bandwidth(world, n, seconds)
        world.Barrier()
        per_variable = raw_bandwidth(world, n, seconds, parts=4)
        if server.job_name == "worker":
            results[i, :2] = raw
            results[i, 4:] = per_variable
            results[i, 2:4] = mpiflow_bandwidth(server, graphs[n], n, seconds,
                                                server.is_chief, warmup_s)
        server.join()      # every worker done with this size (the ps serves meanwhile)
    return results


def bandwidth_table(per_round, sizes) -> list:
    """One row per size from ``bandwidth_round``'s results stacked as [size, round, 6]
    and averaged over the workers: the rates' medians over the rounds, and each ratio's
    median and range over the rounds (the ratios of one round are of the same moment)."""
    table = []
    for n, rounds in zip(sizes, per_round):
        pull_ratios = rounds[:, 2] / rounds[:, 0]
        push_ratios = rounds[:, 3] / rounds[:, 1]
        pull_v_ratios = rounds[:, 2] / rounds[:, 4]
        push_v_ratios = rounds[:, 3] / rounds[:, 5]
        median = np.median(rounds, axis=0)
        table.append({"MiB": n // MiB, "raw_pull": median[0], "mpiflow_pull": median[2],
                      "pull_ratio": float(np.median(pull_ratios)),
                      "pull_ratio_range": [float(pull_ratios.min()),
                                           float(pull_ratios.max())],
                      "raw_push": median[1], "mpiflow_push": median[3],
                      "push_ratio": float(np.median(push_ratios)),
                      "push_ratio_range": [float(push_ratios.min()),
                                           float(push_ratios.max())],
                      "raw_pull_per_variable": median[4], "raw_push_per_variable": median[5],
                      "pull_ratio_per_variable": float(np.median(pull_v_ratios)),
                      "pull_ratio_per_variable_range": [float(pull_v_ratios.min()),
                                                        float(pull_v_ratios.max())],
                      "push_ratio_per_variable": float(np.median(push_v_ratios)),
                      "push_ratio_per_variable_range": [float(push_v_ratios.min()),
                                                        float(push_v_ratios.max())]})
    return table


class AsyncMlp:
    """The MLP trained asynchronously against the ps by this worker: built (and, on the
    chief, initialized) once; ``rate(seconds)`` steps it and returns its steps/s."""

    def __init__(self, server, cluster, task, batch=128):
        g = mf.Graph()
        with g.as_default():
            mf.set_random_seed(0)
            with mf.device(mf.train.replica_device_setter(
                    cluster=cluster, worker_device=f"/job:worker/task:{task}")):
                x, y, loss = build_mlp(mf)
                step = mf.train.GradientDescentOptimizer(0.01).minimize(loss)
                ready = mf.stack([mf.is_variable_initialized(v)
                                  for v in mf.global_variables()])
                init = mf.global_variables_initializer()
        self.xb, self.yb = mlp_batch(task, batch)
        self.sess = mf.Session(server.target, graph=g)
        if server.is_chief:
            self.sess.run(init)
        while not self.sess.run(ready).all():
            time.sleep(0.01)
        self._step = self.sess.make_callable(step, [x, y])
        self._step(self.xb, self.yb)

    def rate(self, seconds):
        return 1.0 / timed(lambda: self._step(self.xb, self.yb), seconds)


def mlp_batch(seed, batch=128):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 784)).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def alone_rates(seconds, batch=128):
    """Steps/s of the same MLP step in this one process on one thread: through a local
    ``Session.run`` (mpiflow's one-process rate), and hand-written in numpy with in-place
    updates (``step_overhead.NumpyStep``: the compute floor's per-core rate)."""
    g = mf.Graph()
    with g.as_default():
        mf.set_random_seed(0)
        x, y, loss = build_mlp(mf)
        step = mf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = mf.global_variables_initializer()
    xb, yb = mlp_batch(0, batch)
    with mf.Session(graph=g) as sess:
        sess.run(init)
        run = sess.make_callable(step, [x, y])
        run(xb, yb)
        own = 1.0 / timed(lambda: run(xb, yb), seconds)
    numpy_step = NumpyStep(init_params(), batch)
    numpy_step(xb, yb, 0.01)
    return own, 1.0 / timed(lambda: numpy_step(xb, yb, 0.01), seconds)


def hand_written_ps(comm, batch=128, lr=0.01, seconds=None, steps=None):
    """Every worker of ``comm`` steps the MLP asynchronously, for ``seconds`` (after one
    step of warm-up) or ``steps``, against a ps on its rank 0 written by hand with mpi4py
    and numpy, as a careful user would: the ceiling of a ps path on this machine, since
    it does what mpiflow's does (each worker pulls every variable, computes in numpy,
    pushes each layer's gradients as the backward pass makes them, and waits until the
    ps has applied them all: one step's update all or nothing) and nothing more. The ps
    keeps a pull's sends in flight while it serves others, and waits for them before it
    writes the variables, as mpiflow's write barrier does. Runs on a duplicate of
    ``comm``, as ``raw_bandwidth``.

    Returns (this worker's steps/s, None) on a worker, (0.0, the variables as the pushes
    left them) on the ps."""
    comm = comm.Dup()
    try:
        if comm.Get_rank() == 0:
            return 0.0, _raw_ps(comm, lr)
        return _raw_worker(comm, batch, seconds, steps), None
    finally:
        comm.Free()


_PULL, _PARAM, _GRAD, _ACK, _DONE = 21, 22, 23, 24, 25
# The order a worker's gradients arrive in: the last layer's first (``layer_done``).
_ARRIVAL = (4, 5, 2, 3, 0, 1)


def _raw_ps(comm, lr):
    params = []
    for value in init_params():
        params.append(backend.lasting_host_empty(value.shape, np.float32))
        params[-1][...] = value
    workers = range(1, comm.Get_size())
    grads = {w: [backend.lasting_host_empty(p.shape, np.float32) for p in params]
             for w in workers}
    arrived = dict.fromkeys(workers, 0)
    in_flight = []          # the pulls' sends of the variables
    token, status, lr = np.zeros(1, np.int64), MPI.Status(), np.float32(lr)
    finished = 0
    while finished < len(workers):
        comm.Probe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
        src, tag = status.Get_source(), status.Get_tag()
        if tag == _PULL:
            comm.Recv([token, MPI.BYTE], src, _PULL)
            in_flight += [comm.Isend([p, MPI.BYTE], src, _PARAM) for p in params]
        elif tag == _GRAD:
            comm.Recv([grads[src][_ARRIVAL[arrived[src]]], MPI.BYTE], src, _GRAD)
            arrived[src] += 1
            if arrived[src] == len(params):
                arrived[src] = 0
                MPI.Request.Waitall(in_flight)
                in_flight = []
                sgd_apply(params, grads[src], lr)
                comm.Send([token, MPI.BYTE], src, _ACK)
        else:
            comm.Recv([token, MPI.BYTE], src, _DONE)
            finished += 1
    MPI.Request.Waitall(in_flight)
    return params


def _raw_worker(comm, batch, seconds, steps):
    params = [backend.lasting_host_empty(p.shape, np.float32) for p in init_params()]
    model = NumpyStep(params, batch)
    x, y = mlp_batch(comm.Get_rank() - 1, batch)
    token, sends = np.zeros(1, np.int64), []

    def layer_done(layer):
        for name in NumpyStep.GRADIENT_NAMES[2 * layer:2 * layer + 2]:
            sends.append(comm.Isend([model.buf[name], MPI.BYTE], 0, _GRAD))

    def step():
        comm.Send([token, MPI.BYTE], 0, _PULL)
        MPI.Request.Waitall([comm.Irecv([p, MPI.BYTE], 0, _PARAM) for p in params])
        model.gradients(x, y, layer_done)
        MPI.Request.Waitall(sends)
        sends.clear()
        comm.Recv([token, MPI.BYTE], 0, _ACK)
    if steps is not None:
        for _ in range(steps):
            step()
        rate = 0.0
    else:
        step()
        rate = 1.0 / timed(step, seconds)
    comm.Send([token, MPI.BYTE], 0, _DONE)
    return rate


def compare_with_one_process(server, cluster, world, rounds, seconds):
    """Item 4's ratios, both sides in this job: in each round the first worker first
    steps the MLP alone (mpiflow in one process, then numpy) while every other rank
    waits idle in ``server.join()``, then every worker steps it against the ps, through
    mpiflow and then against the hand-written ps of ``hand_written_ps``. Returns, on rank
    0, per round: (one-process steps/s, numpy steps/s, the workers' async steps/s in all,
    the same against the hand-written ps), and every rank's CPU seconds in mpiflow's
    async parts and in the hand-written ones."""
    is_worker = server.job_name == "worker"
    model = AsyncMlp(server, cluster, server.task_index) if is_worker else None
    server.join()
    per_round = np.zeros((rounds, 4))
    cpu = np.zeros(2)
    for r in range(rounds):
        if is_worker and server.task_index == 0:
            per_round[r, :2] = alone_rates(seconds)
        server.join()      # the others idle meanwhile (a waiting rank sleeps)
        start = time.process_time()
        if is_worker:
            per_round[r, 2] = model.rate(seconds)
        server.join()
        cpu[0] += time.process_time() - start
        start = time.process_time()
        per_round[r, 3] = hand_written_ps(world, seconds=seconds)[0]
        cpu[1] += time.process_time() - start
    total = np.zeros_like(per_round) if world.Get_rank() == 0 else None
    world.Reduce(per_round, total, op=MPI.SUM, root=0)
    cpus = np.zeros((world.Get_size(), 2)) if world.Get_rank() == 0 else None
    world.Gather(cpu, cpus, root=0)
    return total, cpus


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="*", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.4)
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="MLP part: seconds of each side in each round")
    parser.add_argument("--mlp-rounds", type=int, default=3,
                        help="MLP part: rounds (0: bandwidth only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.mlp_rounds < 0 or args.rounds < 1:
        parser.error("--rounds must be at least 1 and --mlp-rounds at least 0")
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if size < 2:
        raise SystemExit("run with mpiexec -n 2..4 (1 ps + workers)")
    sizes = [s * MiB for s in args.sizes_mib]

    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    is_worker = server.job_name == "worker"
    # [size, round, (raw pull, raw push, mpiflow pull, mpiflow push, raw pull and push
    # with a buffer per variable)] MiB/s of this worker
    results = np.zeros((len(sizes), args.rounds, 6))
    graphs = build_transfer_graph(cluster, server.task_index, sizes) if is_worker else {}
    for r in range(args.rounds):
        results[:, r] = bandwidth_round(world, server, graphs, sizes, args.round_seconds,
                                        warmup_s=2.0 if r == 0 else 0.3)
    mlp, cpus = compare_with_one_process(server, cluster, world, args.mlp_rounds,
                                         args.seconds) if args.mlp_rounds else (None, None)
    sums = np.zeros_like(results) if rank == 0 else None
    world.Reduce(results, sums, op=MPI.SUM, root=0)
    if rank != 0:
        return
    workers = size - 1
    table = bandwidth_table(sums / workers, sizes)
    summary = {"workers": workers, "rounds": args.rounds, "bandwidth": table}
    if mlp is not None:
        summary.update(_mlp_summary(mlp, cpus, args))
    if args.json:
        print(json.dumps(summary))
        return
    _print_bandwidth(args, workers, table)
    if mlp is not None:
        _print_mlp(args, workers, summary)


def _mlp_summary(mlp, cpus, args) -> dict:
    cores = os.cpu_count() or 1
    own, numpy_rate, async_rate, raw_rate = mlp[:, 0], mlp[:, 1], mlp[:, 2], mlp[:, 3]
    of_own, of_floor = async_rate / own, async_rate / (cores * numpy_rate)
    of_raw, raw_of_numpy = async_rate / raw_rate, raw_rate / numpy_rate
    return {"mlp_steps_per_s": float(np.median(async_rate)),
            "one_process_steps_per_s": float(np.median(own)),
            "numpy_steps_per_s": float(np.median(numpy_rate)), "cores": cores,
            "raw_async_steps_per_s": float(np.median(raw_rate)),
            "of_one_process": float(np.median(of_own)),
            "of_one_process_range": [float(of_own.min()), float(of_own.max())],
            "of_floor": float(np.median(of_floor)),
            "of_floor_range": [float(of_floor.min()), float(of_floor.max())],
            "of_raw_async": float(np.median(of_raw)),
            "of_raw_async_range": [float(of_raw.min()), float(of_raw.max())],
            "raw_async_of_numpy": float(np.median(raw_of_numpy)),
            "raw_async_of_numpy_range": [float(raw_of_numpy.min()),
                                         float(raw_of_numpy.max())],
            "raw_async_of_floor": float(np.median(raw_of_numpy)) / cores,
            "mlp_rounds": args.mlp_rounds, "seconds": args.seconds,
            "cpu_s_mlp": {f"rank {r}": round(float(cpu), 2) for r, cpu in enumerate(cpus[:, 0])},
            "cpu_s_raw_async": {f"rank {r}": round(float(cpu), 2)
                                for r, cpu in enumerate(cpus[:, 1])}}


def _print_bandwidth(args, workers, table):
    print(f"1 ps + {workers} workers, MiB/s per worker (all workers at once); medians of "
          f"{args.rounds} alternating rounds, ratio spread in brackets")
    print(f"{'MiB':>5} {'raw pull':>10} {'mpiflow':>10} {'ratio':>6} {'':>11} "
          f"{'raw push':>10} {'mpiflow':>10} {'ratio':>6}")
    for row in table:
        print(f"{row['MiB']:>5} {row['raw_pull']:>10.0f} {row['mpiflow_pull']:>10.0f} "
              f"{row['pull_ratio']:>6.2f} [{row['pull_ratio_range'][0]:.2f}-"
              f"{row['pull_ratio_range'][1]:.2f}] {row['raw_push']:>10.0f} "
              f"{row['mpiflow_push']:>10.0f} {row['push_ratio']:>6.2f} "
              f"[{row['push_ratio_range'][0]:.2f}-{row['push_ratio_range'][1]:.2f}]")
    print("against raw MPI with one buffer per variable (4 messages each way, as mpiflow):")
    for row in table:
        print(f"{row['MiB']:>5} {row['raw_pull_per_variable']:>10.0f} "
              f"{row['mpiflow_pull']:>10.0f} {row['pull_ratio_per_variable']:>6.2f} "
              f"[{row['pull_ratio_per_variable_range'][0]:.2f}-"
              f"{row['pull_ratio_per_variable_range'][1]:.2f}] "
              f"{row['raw_push_per_variable']:>10.0f} {row['mpiflow_push']:>10.0f} "
              f"{row['push_ratio_per_variable']:>6.2f} "
              f"[{row['push_ratio_per_variable_range'][0]:.2f}-"
              f"{row['push_ratio_per_variable_range'][1]:.2f}]")


def _print_mlp(args, workers, summary):
    cores = summary["cores"]
    print(f"MLP 784-512-512-10 batch 128, medians of {args.mlp_rounds} rounds of "
          f"{args.seconds:g} s per side: async, {workers} worker(s) against the ps "
          f"{summary['mlp_steps_per_s']:.1f} steps/s in all; one process "
          f"{summary['one_process_steps_per_s']:.1f}; numpy {summary['numpy_steps_per_s']:.1f}"
          f" (floor {cores} x that); against a ps written by hand in mpi4py and numpy "
          f"{summary['raw_async_steps_per_s']:.1f}")
    print(f"  async / one process {summary['of_one_process']:.2f} "
          f"[{_spread(summary['of_one_process_range'])}] (target >= 0.9 with 1 worker); "
          f"async / floor {summary['of_floor']:.2f} [{_spread(summary['of_floor_range'])}] "
          f"(target >= 0.75 with 2)")
    print(f"  async / hand-written ps {summary['of_raw_async']:.2f} "
          f"[{_spread(summary['of_raw_async_range'])}] (what mpiflow's ps path costs over "
          f"MPI and numpy alone); hand-written ps / numpy in one process "
          f"{summary['raw_async_of_numpy']:.2f} [{_spread(summary['raw_async_of_numpy_range'])}]"
          f" (what any ps path keeps of one process here)")
    for part, key in (("mpiflow's async parts", "cpu_s_mlp"),
                      ("the hand-written ones", "cpu_s_raw_async")):
        print(f"CPU seconds per rank in {part}: " + ", ".join(
            f"{k} {'(ps)' if k == 'rank 0' else ''}{v}" for k, v in summary[key].items()))


def _spread(bounds):
    return f"{bounds[0]:.2f}-{bounds[1]:.2f}"


if __name__ == "__main__":
    main()
