"""Compressed gradients: bytes a worker sends and step time, against none.

    python benchmarks/compression.py [--modes ps allreduce] [--seconds 4] [--json]

The MLP 784-512-512-10 (batch 128, SGD) trained once per compression (none, fp16, bf16,
topk:0.01), each its own mpiexec launch: in ps mode by 1 ps + 1 worker, asynchronously
(``GradientCompressionOptimizer``); in allreduce mode by 2 workers
(``AllreduceOptimizer(compression=...)``, MPI's allreduce and the ring as "auto" picks).
Worker 0 reports its steps/s and the bytes it sent per step (``mpiflow.comm.traffic``:
gradients with their headers and the step's control messages, or the collectives' bytes),
after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("none", "fp16", "bf16", "topk:0.01")


def job(args):
    import numpy as np
    from mpi4py import MPI

    import mpiflow as mf
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # run as a script
    from mlp import build_mlp
    from mpiflow.comm import traffic
    from mpiflow.train.session_manager import broadcast_replicas

    spec = None if args.spec == "none" else args.spec
    cluster = mf.train.ClusterSpec.from_mpi(ps=1 if args.mode == "ps" else 0)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    device = mf.train.replica_device_setter(cluster=cluster, worker_device=f"/job:worker/"
                                            f"task:{task}") if args.mode == "ps" else \
        f"/job:worker/task:{task}"
    with mf.device(device):
        mf.set_random_seed(0)
        x, y, loss = build_mlp(mf)
        opt = mf.train.GradientDescentOptimizer(0.01)
        if args.mode == "allreduce":
            opt = mf.train.AllreduceOptimizer(opt, compression=spec)
        elif spec is not None:
            opt = mf.train.GradientCompressionOptimizer(opt, spec)
        train = opt.minimize(loss)
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((128, 784)).astype(np.float32)
    yb = rng.integers(0, 10, 128)
    with mf.Session(server.target) as sess:
        sess.run([mf.global_variables_initializer(), mf.local_variables_initializer()])
        if args.mode == "allreduce":
            broadcast_replicas(sess)        # every replica starts from worker 0's values
        run = sess.make_callable(train, [x, y])
        for _ in range(10):
            run(xb, yb)
        warm = time.perf_counter()
        for _ in range(10):
            run(xb, yb)
        steps = np.array([args.seconds / ((time.perf_counter() - warm) / 10)])
        if args.mode == "allreduce":
            # Every worker (here every rank) runs the same number of steps: one that
            # stopped on its own clock would leave the other waiting in a collective.
            MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, steps, op=MPI.MIN)
        steps = max(1, int(steps[0]))
        before = traffic.TRAFFIC.totals()
        start = time.perf_counter()
        for _ in range(steps):
            run(xb, yb)
        elapsed = time.perf_counter() - start
        moved = traffic.between(before, traffic.TRAFFIC.totals())
    if task == 0:
        print("RESULT " + json.dumps({"mode": args.mode, "compression": args.spec,
                                      "steps_per_s": steps / elapsed,
                                      "sent_per_step": moved["sent_total"] / steps,
                                      "received_per_step": moved["received_total"] / steps}),
              flush=True)
    server.join()


def launch(args, mode, spec):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", MPIFLOW_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("MPIFLOW_PS", None)
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, __file__, "--job", "--mode",
                           mode, "--spec", spec, "--seconds", str(args.seconds)],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in done.stdout.splitlines() if "RESULT " in line]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{spec} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1].split("RESULT ", 1)[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spec", default="none", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="ps", help=argparse.SUPPRESS)
    p.add_argument("--modes", nargs="*", choices=("ps", "allreduce"),
                   default=["ps", "allreduce"])
    p.add_argument("--specs", nargs="*", default=list(SPECS))
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.job:
        job(args)
        return
    results = [launch(args, mode, spec) for mode in args.modes for spec in args.specs]
    if args.json:
        print(json.dumps(results))
        return
    print("MLP 784-512-512-10 batch 128, SGD: ps = 1 ps + 1 worker (async), allreduce = 2 "
          "workers; per step of worker 0")
    print(f"{'mode':>9} {'compression':>12} {'steps/s':>8} {'KiB sent':>9} {'of none':>8}")
    base = {}
    for r in results:
        base.setdefault(r["mode"], r["sent_per_step"])
        print(f"{r['mode']:>9} {r['compression']:>12} {r['steps_per_s']:>8.1f} "
              f"{r['sent_per_step'] / 1024:>9.1f} "
              f"{r['sent_per_step'] / base[r['mode']]:>8.3f}")


if __name__ == "__main__":
    main()
