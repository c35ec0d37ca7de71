"""Where hybrid mode wins, and why: an embedding-dominated model in ps, allreduce and
hybrid mode at several worker counts, measured against the cost model of
``mpiflow.train.mode_cost``.

    python benchmarks/hybrid_cost.py                       # 2, 4, 8 workers, every mode
    python benchmarks/hybrid_cost.py --workers 4 --rows 1000000 --json

The model (``build``): a table of ``--rows`` x ``--dim`` (embedding_lookup of ``--fields``
ids per example, Zipf-distributed; with ``--pool K`` each field is a bag of K ids whose
rows are averaged, as a user's history or a document's words are) under a dense tower
``fields*dim -> hidden... -> 1`` of a few million parameters, Adagrad, batch ``--batch``. Each (mode, workers) is one mpiexec
launch (ps and hybrid with ``--ps`` ps ranks more; oversubscribed here, so steps/s are
of the same work on the same cores, not a cluster's); ``--rounds R`` launches every mode
R times in turn and shows the launch of median steps/s. Every rank reports:
- steps/s of all workers together, after a warm-up;
- bytes sent and received per worker step, by road (``mpiflow.comm.traffic``: what the
  transport and the collectives moved), for workers and for the ps;
- its peak resident memory (VmHWM), and the process's memory before the model was built.
The cost model's predictions for the same model are printed beside the measurements,
and for 64 workers. Run by hand (minutes); ``python -m benchmarks.report`` includes it.

With ``--simulate`` (root) every rank runs on a simulated host of its own (network
namespaces, ``tests/cluster/virtual_hosts.py``) and ``--link-mbit`` caps each host's link
each way, as a cluster's network does: the ps's link then carries what every worker
pulls and pushes, which is where a ps stops scaling and hybrid mode is meant to win.
The ranks still share this machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("ps", "allreduce", "hybrid")
RUNS = (*MODES, "auto")     # auto: TrainingMode("auto"), with the ps of ps and hybrid


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux's VmHWM), 0 where unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def build(mf, ids, labels, args):
    """The model: embeddings of every field, concatenated, through a dense tower."""
    table = mf.get_variable("embedding", [args.rows, args.dim],
                            initializer=mf.random_normal_initializer(0.0, 0.05))
    rows = mf.nn.embedding_lookup(table, mf.reshape(ids, [-1]), partition_strategy="div")
    if args.pool > 1:       # each field a bag of ids: the mean of its rows
        rows = mf.reduce_mean(mf.reshape(rows, [-1, args.pool, args.dim]), axis=1)
    h = mf.reshape(rows, [-1, args.fields * args.dim])
    width = args.fields * args.dim
    for i, hidden in enumerate(args.hidden):
        w = mf.get_variable(f"w{i}", [width, hidden])
        b = mf.get_variable(f"b{i}", [hidden], initializer=mf.zeros_initializer())
        h = mf.nn.relu(mf.matmul(h, w) + b)
        width = hidden
    logits = mf.reshape(mf.matmul(h, mf.get_variable("out", [width, 1])), [-1])
    return mf.reduce_mean(mf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                  logits=logits))


def batches(args, seed, count=16):
    import numpy as np
    rng = np.random.default_rng(seed)
    shape = (count, args.batch, args.fields) + ((args.pool,) if args.pool > 1 else ())
    ids = ((rng.zipf(1.2, size=shape) - 1) % args.rows)
    labels = (rng.random((count, args.batch)) < 0.3).astype(np.float32)
    return ids.astype(np.int64), labels


def job(args):
    """One launch: every rank measures itself; the chief prints the job's JSON line."""
    import numpy as np

    import mpiflow as mf
    from mpiflow.comm import traffic
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    cluster = mf.train.ClusterSpec.from_mpi(ps=0 if args.mode == "allreduce" else args.ps)
    server = mf.train.Server(cluster)
    baseline = peak_rss_bytes()
    is_ps = server.job_name == "ps"
    steps = np.zeros(1)
    elapsed = np.zeros(1)
    chosen = -1.0
    moved = None
    if is_ps:
        before = traffic.TRAFFIC.totals()
        server.join()           # serves every step of the run
        moved = traffic.between(before, traffic.TRAFFIC.totals())
    else:
        task = server.task_index
        mode = mf.train.TrainingMode(args.mode, cluster, task, shard_rows=args.rows,
                                     ids_per_step=ids_per_step(args))
        mf.set_random_seed(0)
        with mode.scope():
            ids = mf.placeholder(mf.int64, [None, args.fields] + (
                [args.pool] if args.pool > 1 else []), name="ids")
            labels = mf.placeholder(mf.float32, [None], name="labels")
            loss = build(mf, ids, labels, args)
            step = mf.train.get_or_create_global_step()
            train_op = mode.optimizer(mf.train.AdagradOptimizer(0.05)).minimize(
                loss, global_step=step)
        chosen = float(MODES.index(mode.mode))
        x, y = batches(args, seed=1 + task)
        with mf.Session(server.target) as sess:
            mode.initialize(sess, server.is_chief)
            run = sess.make_callable(train_op, [ids, labels])
            for i in range(args.warmup):
                run(x[i % len(x)], y[i % len(y)])
            before = traffic.TRAFFIC.totals()
            start = time.perf_counter()
            for i in range(args.steps):
                run(x[i % len(x)], y[i % len(y)])
            elapsed[0] = time.perf_counter() - start
            moved = traffic.between(before, traffic.TRAFFIC.totals())
            steps[0] = args.steps
        server.join()
    row = np.array([float(is_ps), steps[0], elapsed[0], moved["sent_total"],
                    moved["received_total"], float(peak_rss_bytes()), float(baseline), chosen])
    rows = np.zeros((world.Get_size(), row.size)) if world.Get_rank() == 0 else None
    world.Gather(row, rows, root=0)
    hosts = world.gather(socket.gethostname(), root=0)
    if world.Get_rank() != 0:
        return
    workers = rows[rows[:, 0] == 0]
    ps = rows[rows[:, 0] == 1]
    worker_steps = workers[:, 1].sum()
    served = worker_steps + len(workers) * args.warmup
    result = {
        "mode": args.mode, "workers": len(workers), "ps": len(ps),
        "chosen": MODES[int(workers[0, 7])],
        "steps_per_s": float(worker_steps / workers[:, 2].max()),
        # per worker step: what one worker moved, and what each ps moved for it
        "worker_sent": float(workers[:, 3].sum() / worker_steps),
        "worker_received": float(workers[:, 4].sum() / worker_steps),
        # a ps counts from the start: warm-up steps (and start-up) included
        "ps_sent": float(ps[:, 3].sum() / len(ps) / served) if len(ps) else 0.0,
        "ps_received": float(ps[:, 4].sum() / len(ps) / served) if len(ps) else 0.0,
        "worker_peak_rss": float(workers[:, 5].max()),
        "ps_peak_rss": float(ps[:, 5].max()) if len(ps) else 0.0,
        "baseline_rss": float(rows[:, 6].max()),
        "hosts": len(set(hosts)),       # the machines (or simulated hosts) the ranks ran on
    }
    print("RESULT " + json.dumps(result), flush=True)


def launch(args, mode, workers, hosts=None):
    """One launch of ``mode`` with ``workers``; on ``hosts`` (``VirtualHosts``) one rank
    per simulated host."""
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    ranks = workers + (0 if mode == "allreduce" else args.ps)
    start = [mpiexec, "-n", str(ranks)] if hosts is None else \
        hosts.mpiexec_argv(mpiexec, 1, hosts.names[:ranks])
    cmd = [*start, sys.executable, __file__, "--job", "--mode", mode,
           "--ps", str(args.ps), "--rows", str(args.rows), "--dim", str(args.dim),
           "--fields", str(args.fields), "--pool", str(args.pool), "--batch",
           str(args.batch), "--steps",
           str(args.steps), "--warmup", str(args.warmup), "--hidden",
           *map(str, args.hidden)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MPIFLOW_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("MPIFLOW_PS", None)
    if hosts is not None:
        cmd = hosts.command(hosts.names[0], cmd)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{mode} x {workers} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def ids_per_step(args) -> int:
    """The ids a worker step looks up: every field of every example, each bag whole."""
    return args.batch * args.fields * max(args.pool, 1)


def model_shape(args):
    """The model as the cost model sees it, from the same arguments that build it."""
    from mpiflow.train.mode_cost import ModelShape
    widths = [args.fields * args.dim, *args.hidden]
    dense = sum(a * b + b for a, b in zip(widths, widths[1:])) + widths[-1]
    return ModelShape(dense_bytes=4 * dense, table_bytes=4 * args.rows * args.dim,
                      row_bytes=4 * args.dim, ids_per_step=ids_per_step(args),
                      slots=1)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=RUNS, default="hybrid", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, nargs="*", default=[2, 4, 8])
    parser.add_argument("--modes", nargs="*", choices=RUNS, default=list(RUNS))
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--fields", type=int, default=16)
    parser.add_argument("--pool", type=int, default=1,
                        help="ids per field, their rows averaged (a bag of ids)")
    parser.add_argument("--hidden", type=int, nargs="*", default=[1536, 1024])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30, help="measured steps per worker")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1,
                        help="launches of every mode, taken in turn; the median is shown")
    parser.add_argument("--predict", type=int, nargs="*", default=[64],
                        help="worker counts the cost model predicts beyond the runs")
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--simulate", action="store_true",
                        help="every rank on a simulated host of its own (root)")
    parser.add_argument("--link-mbit", type=float, default=None,
                        help="with --simulate: each host's link capped at this many Mbit/s")
    parser.add_argument("--json", action="store_true")
    return parser


def main():
    args = parser().parse_args()
    if args.job:
        job(args)
        return

    from mpiflow.train.mode_cost import predict
    shape = model_shape(args)
    runs = []
    for workers in args.workers:
        launches = {mode: [] for mode in args.modes}
        with simulated_hosts(args, workers + args.ps) as hosts:
            for _ in range(args.rounds):      # the modes in turn: the machine drifts
                for mode in args.modes:
                    launches[mode].append(launch(args, mode, workers, hosts))
                    print(f"  {mode} x {workers}: "
                          f"{launches[mode][-1]['steps_per_s']:.1f} steps/s",
                          file=sys.stderr, flush=True)
        for mode in args.modes:
            measured = median_launch(launches[mode])
            chosen = measured["chosen"]
            cost = predict(chosen, shape, workers, 0 if chosen == "allreduce" else args.ps)
            runs.append({"measured": measured, "predicted": cost._asdict()})
    predictions = [{"mode": m, "workers": w, **predict(
        m, shape, w, 0 if m == "allreduce" else args.ps)._asdict()}
        for w in args.predict for m in MODES]
    if args.json:
        print(json.dumps({"shape": shape._asdict(), "runs": runs,
                          "predictions": predictions}))
        return
    print(report(args, shape, runs, predictions))


def simulated_hosts(args, count):
    """``count`` simulated hosts with their links capped as ``args`` say (``--simulate``),
    else a context of None: the ranks on this machine as they are."""
    if not args.simulate:
        return contextlib.nullcontext()
    sys.path.insert(0, str(ROOT))
    from tests.cluster.virtual_hosts import VirtualHosts, unavailable_reason
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"--simulate: {reason}")
    hosts = VirtualHosts(count)

    @contextlib.contextmanager
    def built():
        with hosts:
            if args.link_mbit:
                hosts.limit_links(args.link_mbit)
            yield hosts
    return built()


def median_launch(launches) -> dict:
    """The launch of median steps/s among ``launches`` of one mode (its bytes and memory
    stand for all), with every launch's steps/s and choice in launch order."""
    middle = sorted(launches, key=lambda m: m["steps_per_s"])[(len(launches) - 1) // 2]
    return dict(middle, steps_per_s_launches=[m["steps_per_s"] for m in launches],
                chosen_launches=[m["chosen"] for m in launches])


def _mib(value):
    return f"{value / (1 << 20):.2f}"


def auto_against_the_best(runs) -> list:
    """A line per worker count: auto's steps/s as a fraction of the best fixed mode's."""
    lines = []
    for workers in sorted({r["measured"]["workers"] for r in runs}):
        rates = {r["measured"]["mode"]: r["measured"] for r in runs
                 if r["measured"]["workers"] == workers}
        fixed = [m for m in MODES if m in rates]
        if "auto" not in rates or not fixed:
            continue
        best = max(fixed, key=lambda m: rates[m]["steps_per_s"])
        auto = rates["auto"]
        choices = auto["chosen_launches"]
        chose = auto["chosen"] if len(set(choices)) == 1 else ", ".join(
            f"{mode} in {choices.count(mode)} of {len(choices)} launches"
            for mode in sorted(set(choices), key=choices.index))
        per_round = [a / b for a, b in zip(auto["steps_per_s_launches"],
                                           rates[best]["steps_per_s_launches"])]
        spread = (f"; per round {min(per_round):.2f}-{max(per_round):.2f}, medians of "
                  f"{len(per_round)} launches of each taken in turn"
                  if len(per_round) > 1 else "")
        lines.append(f"- {workers} workers: auto chose {chose}, "
                     f"{auto['steps_per_s'] / rates[best]['steps_per_s']:.2f} of the best "
                     f"fixed mode ({best}{spread})")
    return [""] + lines if lines else []


def report(args, shape, runs, predictions) -> str:
    """The tables: measured against predicted, then the predictions beyond."""
    where = "" if not args.simulate else (
        "; every rank on a simulated host of its own" + (
            f", each link capped at {args.link_mbit:g} Mbit/s each way" if args.link_mbit
            else ""))
    lines = [f"model: table {args.rows} x {args.dim} ({_mib(shape.table_bytes)} MiB), dense "
             f"{shape.dense_bytes // 4:,} parameters ({_mib(shape.dense_bytes)} MiB), "
             f"{shape.ids_per_step} ids per worker step, Adagrad; {args.ps} ps in ps and "
             f"hybrid mode{where}", "",
             "| mode | workers | steps/s | worker sent MiB/step (model) | worker received "
             "(model) | ps received (model) | worker peak RSS MiB (model state) | ps peak RSS "
             "(model state) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        m, p = run["measured"], run["predicted"]
        label = m["mode"] if m["mode"] != "auto" else f"auto: {m['chosen']}"
        lines.append(
            f"| {label} | {m['workers']} | {m['steps_per_s']:.1f} | "
            f"{_mib(m['worker_sent'])} ({_mib(p['worker_sent'])}) | "
            f"{_mib(m['worker_received'])} ({_mib(p['worker_received'])}) | "
            f"{_mib(m['ps_received'])} ({_mib(p['ps_received'])}) | "
            f"{_mib(m['worker_peak_rss'])} ({_mib(p['worker_state'])}) | "
            f"{_mib(m['ps_peak_rss'])} ({_mib(p['ps_state'])}) |")
    lines += auto_against_the_best(runs)
    lines += ["", "Predicted beyond the runs (per worker step; ps load: bytes through each "
              "ps per global step of every worker):", "",
              "| mode | workers | worker sent+received MiB | ps load MiB | worker state MiB | "
              "ps state MiB | elements applied per worker step |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in predictions:
        lines.append(f"| {p['mode']} | {p['workers']} | "
                     f"{_mib(p['worker_sent'] + p['worker_received'])} | "
                     f"{_mib(p['ps_load'])} | {_mib(p['worker_state'])} | "
                     f"{_mib(p['ps_state'])} | {p['worker_applied'] + p['ps_applied']:,} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
