"""Compressed pushes to the ps: bytes a worker sends and step time, against none.

    python benchmarks/compression.py [--seconds 4] [--json]

1 ps + 1 worker train the MLP 784-512-512-10 (batch 128, SGD) asynchronously, once per
compression (none, fp16, bf16, topk:0.01; ``GradientCompressionOptimizer``), each its own
mpiexec launch; the worker reports its steps/s and the bytes it sent per step
(``mpiflow.comm.traffic``: the pushed gradients with their headers and the step's control
messages), after a warm-up.
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

    import mpiflow as mf
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # run as a script
    from mlp import build_mlp
    from mpiflow.comm import traffic

    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                                  worker_device="/job:worker/task:0")):
        mf.set_random_seed(0)
        x, y, loss = build_mlp(mf)
        opt = mf.train.GradientDescentOptimizer(0.01)
        if args.spec != "none":
            opt = mf.train.GradientCompressionOptimizer(opt, args.spec)
        train = opt.minimize(loss)
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((128, 784)).astype(np.float32)
    yb = rng.integers(0, 10, 128)
    with mf.Session(server.target) as sess:
        sess.run([mf.global_variables_initializer(), mf.local_variables_initializer()])
        run = sess.make_callable(train, [x, y])
        for _ in range(20):
            run(xb, yb)
        before = traffic.TRAFFIC.totals()
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            run(xb, yb)
            steps += 1
        elapsed = time.perf_counter() - start
        moved = traffic.between(before, traffic.TRAFFIC.totals())
    print("RESULT " + json.dumps({"compression": args.spec, "steps_per_s": steps / elapsed,
                                  "sent_per_step": moved["sent"]["p2p"] / steps,
                                  "received_per_step": moved["received"]["p2p"] / steps}),
          flush=True)
    server.join()


def launch(args, spec):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", MPIFLOW_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("MPIFLOW_PS", None)
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, __file__, "--job", "--spec",
                           spec, "--seconds", str(args.seconds)], capture_output=True,
                          text=True, env=env, timeout=600)
    lines = [line for line in done.stdout.splitlines() if "RESULT " in line]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{spec} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1].split("RESULT ", 1)[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spec", default="none", help=argparse.SUPPRESS)
    p.add_argument("--specs", nargs="*", default=list(SPECS))
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.job:
        job(args)
        return
    results = [launch(args, spec) for spec in args.specs]
    if args.json:
        print(json.dumps(results))
        return
    base = results[0]
    print("1 ps + 1 worker, MLP 784-512-512-10 batch 128, async SGD; per step of the worker")
    print(f"{'compression':>12} {'steps/s':>8} {'KiB sent':>9} {'of none':>8} {'KiB recv':>9}")
    for r in results:
        print(f"{r['compression']:>12} {r['steps_per_s']:>8.1f} "
              f"{r['sent_per_step'] / 1024:>9.1f} "
              f"{r['sent_per_step'] / base['sent_per_step']:>8.3f} "
              f"{r['received_per_step'] / 1024:>9.1f}")


if __name__ == "__main__":
    main()
