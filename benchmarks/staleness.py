"""A slowed worker under asynchronous, bounded-staleness and synchronous ps training.

    python benchmarks/staleness.py [--workers 3] [--slow-ms 20] [--global-steps 300]
    python benchmarks/staleness.py --json        # the numbers, for benchmarks.report

1 ps and ``--workers`` workers train the MLP of ``examples/mnist_ps.py`` (digits,
64-128-10, SGD) in one mpiexec launch per mode; the last worker is a straggler: it pauses
``--burst`` x ``--slow-ms`` every ``--burst`` steps (worker 0, the chief, tests the loss as
training goes). Modes: ``async`` (StalenessAwareOptimizer without a bound, to record
staleness), ``ssp1``/``ssp2``/``ssp4`` (``staleness=k``), and ``sync``
(SyncReplicasOptimizer over every worker). Every mode trains to the same global step (an
apply of one worker's gradient counts one; a synchronous step averages every worker's,
so it counts one per worker's gradient too: ``--global-steps / workers`` rounds), at
``lr / workers`` per asynchronous apply so a round of updates moves as far as a
synchronous one. Prints, per mode: seconds to that step, gradients applied per second,
the test loss reached, the largest staleness and lead recorded on the ps; and writes
the loss-vs-time curves to ``--plot``.
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
MODES = {"async": None, "ssp1": 1, "ssp2": 2, "ssp4": 4, "sync": "sync"}


def job(args):
    """One launch: the chief evaluates the test loss as training goes; prints JSON."""
    import numpy as np

    import mpiflow as mf
    from mpiflow.data import batches, load_digits, shard

    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        server.join()
        return
    task, workers = server.task_index, cluster.num_tasks("worker")
    x_train, y_train, x_test, y_test = load_digits()
    x_train, y_train = shard([x_train, y_train], workers, task)
    bound = MODES[args.mode]
    with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                                  worker_device=f"/job:worker/task:{task}")):
        mf.set_random_seed(0)
        x = mf.placeholder(mf.float32, [None, 64], name="x")
        y = mf.placeholder(mf.int64, [None], name="y")
        hidden = mf.layers.dense(x, 128, activation=mf.nn.relu, name="hidden")
        logits = mf.layers.dense(hidden, 10, name="logits")
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        step = mf.train.get_or_create_global_step()
        if bound == "sync":
            opt = mf.train.SyncReplicasOptimizer(
                mf.train.GradientDescentOptimizer(args.lr), workers, workers)
            target = args.global_steps // workers
        else:
            opt = mf.train.StalenessAwareOptimizer(
                mf.train.GradientDescentOptimizer(args.lr / workers), staleness=bound)
            target = args.global_steps
        train = opt.minimize(loss, global_step=step)
        histogram = None if bound == "sync" else opt.staleness_histogram()
        record = opt.clocks_record() if isinstance(bound, int) else None
    hooks = [opt.make_session_run_hook(server.is_chief)] if bound == "sync" else []
    hooks.append(mf.train.StopAtStepHook(last_step=target))
    curve = []
    with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                           hooks=hooks, save_summaries_steps=None,
                                           log_step_count_steps=None,
                                           save_checkpoint_secs=None,
                                           progress_bar=False) as sess:
        start = time.perf_counter()
        epoch, mine = 0, 0
        while not sess.should_stop():
            for xb, yb in batches(x_train, y_train, 32, seed=epoch * workers + task):
                if sess.should_stop():
                    break
                if task == workers - 1 and args.slow_ms and mine % args.burst == 0:
                    time.sleep(args.slow_ms * args.burst / 1000)
                sess.run(train, {x: xb, y: yb})
                mine += 1
                if server.is_chief and mine % args.eval_every == 0 and not sess.should_stop():
                    curve.append((time.perf_counter() - start,
                                  float(sess.run(loss, {x: x_test, y: y_test}))))
            epoch += 1
        elapsed = time.perf_counter() - start
    server.join()               # every worker done: the figures below are final
    if not server.is_chief:
        server.join()
        return
    with mf.Session(server.target) as sess:
        result = {"mode": args.mode, "workers": workers, "seconds": elapsed,
                  "global_step": int(sess.run(step)),
                  "test_loss": float(sess.run(loss, {x: x_test, y: y_test})),
                  "curve": curve}
        if histogram is not None:
            values, counts, dropped = sess.run(histogram)
            result["max_staleness"] = int(values.max()) if values.size else 0
            result["mean_staleness"] = float((values * counts).sum() / max(counts.sum(), 1))
        if record is not None:
            _, max_lead, waits = sess.run(record)
            result.update(max_lead=int(max_lead), waits=int(waits))
    gradients = args.global_steps
    result["gradients_per_s"] = gradients / elapsed
    print("RESULT " + json.dumps(result), flush=True)
    server.join()


def launch(args, mode):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    cmd = [mpiexec, "-n", str(args.workers + 1), sys.executable, __file__, "--job", "--mode",
           mode, "--slow-ms", str(args.slow_ms), "--burst", str(args.burst),
           "--global-steps", str(args.global_steps),
           "--lr", str(args.lr), "--eval-every", str(args.eval_every)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MPIFLOW_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("MPIFLOW_PS", None)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if "RESULT " in line]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1].split("RESULT ", 1)[1])


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for r in results:
        if r["curve"]:
            ax.plot(*zip(*r["curve"]), marker=".", label=r["mode"])
    ax.set_xlabel("seconds")
    ax.set_ylabel("test loss")
    ax.set_title(f"{results[0]['workers']} workers, the last one slowed", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=sorted(MODES), default="async", help=argparse.SUPPRESS)
    p.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--slow-ms", type=float, default=10.0,
                   help="the straggler's mean delay per step")
    p.add_argument("--burst", type=int, default=5,
                   help="it pauses --burst x --slow-ms every --burst steps (1: every step)")
    p.add_argument("--global-steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.3)
    p.add_argument("--eval-every", type=int, default=5, help="chief steps between tests")
    p.add_argument("--plot", default=str(ROOT / "benchmarks" / "plots" / "staleness.png"))
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--json", action="store_true")
    return p


def main():
    args = parser().parse_args()
    if args.job:
        job(args)
        return
    results = [launch(args, mode) for mode in args.modes]
    if args.plot:
        plot(results, args.plot)
    if args.json:
        print(json.dumps(results))
        return
    print(f"1 ps + {args.workers} workers, the last pausing {args.slow_ms * args.burst:g} ms "
          f"every {args.burst} steps; "
          f"every mode to {args.global_steps} gradients applied")
    print(f"{'mode':>6} {'seconds':>8} {'grads/s':>8} {'test loss':>10} {'staleness':>16} "
          f"{'lead':>5} {'waits':>6}")
    for r in results:
        stale = (f"max {r['max_staleness']}, mean {r['mean_staleness']:.1f}"
                 if "max_staleness" in r else "-")
        print(f"{r['mode']:>6} {r['seconds']:>8.2f} {r['gradients_per_s']:>8.1f} "
              f"{r['test_loss']:>10.4f} {stale:>16} {r.get('max_lead', '-'):>5} "
              f"{r.get('waits', '-'):>6}")


if __name__ == "__main__":
    main()
