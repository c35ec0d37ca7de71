"""Run mpiflow's benchmarks beside its peers and write BENCHMARKS.md with plots.

    python -m benchmarks.report [--size quick|full] [--out BENCHMARKS.md]

Needs the bench extra (``pip install ".[mpich,bench]"``: TensorFlow, PyTorch CPU,
matplotlib); a missing peer is reported as skipped. Every figure comes from this run on
this machine, each comparison measured back to back in the same environment:

- ps mode: the same TF1 script (benchmarks/peers/ps_mlp.py) under TensorFlow's
  ps/worker over gRPC and under mpiflow (mpiexec + mpiflow.run), async and sync, and async
  at 1, 2 and 3 workers (scaling);
- allreduce mode: mpiflow's AllreduceOptimizer (benchmarks/allreduce_step.py --hidden 512)
  against PyTorch DDP with gloo (benchmarks/peers/torch_ddp.py) on the same MLP;
- allreduce bandwidth: mpiflow's ring / mpi / auto and MPI's own Allreduce
  (benchmarks/allreduce_bw.py) against torch.distributed's gloo all_reduce;
- one process: a training step through Session.run against the same step in numpy
  (benchmarks/step_overhead.py), whose numpy rate sets the compute floor of TensorFlow's
  ps runs; mpiflow's async ps runs against one process and the floor measured in the
  same job (benchmarks/ps_throughput.py);
- the modes: an embedding model in ps, allreduce and hybrid mode at several worker
  counts, bytes and memory against the cost model (benchmarks/hybrid_cost.py);
- a straggler under asynchronous, bounded-staleness and synchronous training
  (benchmarks/staleness.py); compressed pushes to the ps (benchmarks/compression.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
SIZES = {"quick": {"steps": 100, "ddp_steps": 60, "budget": 0.5, "workers": (1, 2, 3),
                   "mode_workers": (2, 4)},
         "full": {"steps": 400, "ddp_steps": 200, "budget": 1.5, "workers": (1, 2, 3),
                  "mode_workers": (2, 4, 8)}}


ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "MPIFLOW_CPU_THREADS": "1"}


def _run(cmd, timeout=900, env=None):
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def _last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith(("{", "[")):
            return json.loads(line)
    if "SKIPPED" in text:
        return None
    raise RuntimeError(f"no JSON result in:\n{text[-2000:]}")


def _mpiexec():
    return str(Path(sys.executable).parent / "mpiexec")


PS_RUNS = [("example", "async", 1), ("example", "async", 2), ("example", "async", 3),
           ("example", "sync", 2), ("mlp512", "async", 1), ("mlp512", "async", 2),
           ("mlp512", "sync", 2)]
# The embedding models of the modes section: hybrid_cost.py's default (a dense tower of
# 2.4M parameters over a 1M x 32 table, 1024 ids a step) and one where the rows a step
# touches weigh more (8192 ids of 64 floats a step).
MODE_MODELS = {"dense-heavy": [], "rows-heavy": ["--fields", "64", "--dim", "64", "--batch",
                                                 "128", "--hidden", "512", "256"]}


def ps_mode(size, log):
    rows = []
    for model, mode, w in PS_RUNS:
        for framework in ("mpiflow", "tensorflow"):
            log(f"ps {model} {mode} {framework} {w} workers")
            steps = size["steps"] if model == "example" else size["ddp_steps"]
            try:
                out = _run([sys.executable, BENCH / "peers" / "ps_mlp.py", "--framework",
                            framework, "--model", model, "--workers", str(w), "--steps",
                            str(steps), "--timeout", "180", "--json"] +
                           (["--sync"] if mode == "sync" else []))
                result = _last_json(out)
            except RuntimeError as exc:      # a run that hangs or fails: say so, go on
                log(f"  failed: {str(exc).splitlines()[-1]}")
                result = None
            rows.append(result or {"framework": framework, "model": model, "mode": mode,
                                   "workers": w, "steps_per_s": None})
    return rows


def transfers(size, log):
    log("ps pull/push vs raw MPI Send/Recv")
    out = _run([_mpiexec(), "-n", "2", sys.executable, BENCH / "ps_throughput.py",
                "--sizes-mib", "1", "16", "--rounds", "3", "--round-seconds", "0.3",
                "--mlp-rounds", "1", "--seconds", "0.5", "--json"])    # (ps_floor: the MLP)
    return _last_json(out)["bandwidth"]


def ps_floor(size, log):
    """Item 4's ratios with both sides in one job (``ps_throughput.py``'s MLP part): 1 ps
    with 1 and with 2 workers, each against the one-process and numpy rates of the same
    launch."""
    found = {}
    for workers in (1, 2):
        log(f"async ps against one process and the floor, {workers} worker(s), one job")
        out = _run([_mpiexec(), "-n", str(workers + 1), sys.executable,
                    BENCH / "ps_throughput.py", "--sizes-mib", "--mlp-rounds", "3",
                    "--seconds", "2", "--json"])
        found[workers] = _last_json(out)
    return found


def single_process(size, log):
    log("one process, one thread: Session.run against numpy")
    return _last_json(_run([sys.executable, BENCH / "step_overhead.py", "--repeats", "5",
                            "--json"], env=ONE_THREAD))


def modes(size, log):
    results = {}
    for name, extra in MODE_MODELS.items():
        log(f"modes, {name} embedding model")
        results[name] = _last_json(_run([sys.executable, BENCH / "hybrid_cost.py",
                                         "--workers", *map(str, size["mode_workers"]),
                                         "--rounds", "3", "--json", *extra],
                                        timeout=6000))
        results[name]["args"] = extra
    return results


def example_modes(size, log):
    log("modes and auto on examples/embedding_hybrid.py")
    return _last_json(_run([sys.executable, BENCH / "modes.py", "--json", "--rounds", "3"],
                           timeout=1800))


def stragglers(size, log):
    log("a straggler: async, bounded staleness, sync")
    plot = BENCH / "plots" / "staleness.png"
    return {"runs": _last_json(_run([sys.executable, BENCH / "staleness.py", "--json",
                                     "--plot", str(plot)], timeout=1800)),
            "plot": plot}


def compression(size, log):
    log("compressed pushes to the ps")
    return _last_json(_run([sys.executable, BENCH / "compression.py", "--json"],
                           timeout=1200))


def allreduce_training(size, log):
    rows = []
    for w in (2, 3):
        log(f"allreduce training {w} workers")
        mine = _last_json(_run([_mpiexec(), "-n", str(w), sys.executable,
                                BENCH / "allreduce_step.py", "--hidden", "512", "--steps",
                                str(size["ddp_steps"]), "--json"]))
        torch = _last_json(_run([sys.executable, BENCH / "peers" / "torch_ddp.py",
                                 "--workers", str(w), "--steps", str(size["ddp_steps"]),
                                 "--json"]))
        rows.append({"workers": w, "mpiflow": mine["overlapped buckets"],
                     "torch": torch["steps_per_s"] if torch else None})
    return rows


def bandwidth(size, log):
    tables = {}
    for w in (2, 4):
        log(f"allreduce bandwidth {w} ranks")
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            _run([_mpiexec(), "-n", str(w), sys.executable, BENCH / "allreduce_bw.py",
                  "--json", f.name, "--budget", str(size["budget"])])
            mine = json.load(open(f.name))
        torch = _last_json(_run([sys.executable, BENCH / "peers" / "torch_ddp.py",
                                 "--workers", str(w), "--bandwidth", "--json"]))
        tables[w] = [{"bytes": row["bytes"], **{k: row["bus_MBps"][k]
                                                for k in ("MPI", "mpi", "ring", "auto")},
                      "torch": torch["bus_MBps"][str(row["bytes"])] if torch else None}
                     for row in mine["bandwidth"]]
    return tables


def _fmt(value, digits=1):
    return "skipped or failed" if value is None else f"{value:.{digits}f}"


def _ratio(a, b):
    return "-" if a is None or b is None or not b else f"{a / b:.2f}x"


def plots(results, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}

    ps = results["ps"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    groups = [(f"{model}\n{mode}, {w}w", _pick(ps, "mpiflow", mode, w, model),
               _pick(ps, "tensorflow", mode, w, model)) for model, mode, w in PS_RUNS]
    _bars(left, groups, "TensorFlow ps/worker (gRPC)",
          "ps mode: the same TF1 script")
    _bars(right, [(f"{r['workers']} workers", r["mpiflow"], r["torch"])
                  for r in results["allreduce"]], "PyTorch DDP (gloo)",
          "allreduce mode: MLP 784-512-512-10")
    left.set_ylabel("steps/s of the job")
    fig.tight_layout()
    files["steps"] = out_dir / "steps_per_second.png"
    fig.savefig(files["steps"], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(results["bandwidth"]), figsize=(9, 3.6), sharey=True)
    for ax, (w, rows) in zip(axes, sorted(results["bandwidth"].items())):
        sizes = [r["bytes"] for r in rows]
        for key, label in (("MPI", "MPI Allreduce"), ("ring", "mpiflow ring"),
                           ("auto", "mpiflow auto"), ("torch", "torch gloo")):
            values = [r[key] for r in rows]
            if all(v is not None for v in values):
                ax.plot(sizes, values, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{w} ranks")
        ax.set_xlabel("bytes")
    axes[0].set_ylabel("bus bandwidth, MB/s")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    files["bandwidth"] = out_dir / "allreduce_bandwidth.png"
    fig.savefig(files["bandwidth"], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(results["modes"]), figsize=(9, 3.6))
    for ax, (name, result) in zip(axes, results["modes"].items()):
        for mode in ("ps", "allreduce", "hybrid", "auto"):
            points = [(r["measured"]["workers"], r["measured"]["steps_per_s"])
                      for r in result["runs"] if r["measured"]["mode"] == mode]
            if points:
                ax.plot(*zip(*points), marker="x" if mode == "auto" else "o",
                        linestyle=":" if mode == "auto" else "-", label=mode)
        ax.set_title(f"{name} embedding model", fontsize=9)
        ax.set_xlabel("workers")
    axes[0].set_ylabel("steps/s of the job")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    files["modes"] = out_dir / "modes.png"
    fig.savefig(files["modes"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for framework in ("mpiflow", "tensorflow"):
        points = [(r["workers"], r["steps_per_s"]) for r in ps
                  if r["framework"] == framework and r["mode"] == "async" and
                  r["model"] == "example" and r["steps_per_s"]]
        if points:
            ax.plot(*zip(*points), marker="o", label=framework)
    ax.set_xlabel("workers (plus 1 ps)")
    ax.set_ylabel("async steps/s of the job")
    ax.set_title("ps mode, examples/mnist_ps.py's model, 2 cores", fontsize=9)
    ax.set_xticks([1, 2, 3])
    ax.legend(fontsize=8)
    fig.tight_layout()
    files["scaling"] = out_dir / "ps_scaling.png"
    fig.savefig(files["scaling"], dpi=110)
    plt.close(fig)
    return files


def _bars(ax, groups, peer, title):
    xs = range(len(groups))
    ax.bar([x - 0.2 for x in xs], [g[1] or 0 for g in groups], 0.4, label="mpiflow")
    ax.bar([x + 0.2 for x in xs], [g[2] or 0 for g in groups], 0.4, label=peer)
    ax.set_xticks(list(xs), [g[0] for g in groups], fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def _pick(rows, framework, mode, workers, model="example"):
    for r in rows:
        if (r["framework"], r["model"], r["mode"], r["workers"]) == \
                (framework, model, mode, workers):
            return r["steps_per_s"]
    return None


def markdown(results, files, size, elapsed):
    ps, lines = results["ps"], []
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}, {platform.system()}")
    lines += ["# Benchmarks", "",
              f"Written by `python -m benchmarks.report --size {size}` in {elapsed:.0f} s on "
              f"one machine ({machine}); every rank and every peer process on the same "
              "cores, so these are ratios of the same work on the same hardware, not "
              "cluster figures. Rerun it on your machine.", "",
              "## ps mode: mpiflow vs TensorFlow's ps/worker (gRPC)", "",
              "The same TF1 script (`benchmarks/peers/ps_mlp.py`, 1 ps), run by TensorFlow as "
              "a process per task over gRPC and by mpiflow under `mpiexec` with `python -m "
              "mpiflow.run`. `example` is the model of `examples/mnist_ps.py` (64-128-10, "
              "batch 32, Adam): small steps, where the runtime's per-step cost decides; "
              "`mlp512` is 784-512-512-10 at batch 128 with SGD, where compute weighs more. "
              "Every process gets the same share of the cores. Steps/s of the job, from "
              "the moment every worker has arrived.", "",
              "| model | mode | workers | mpiflow steps/s | TensorFlow steps/s | mpiflow / TF |",
              "| --- | --- | --- | --- | --- | --- |"]
    for model, mode, workers in PS_RUNS:
        a = _pick(ps, "mpiflow", mode, workers, model)
        b = _pick(ps, "tensorflow", mode, workers, model)
        lines.append(f"| {model} | {mode} | {workers} | {_fmt(a)} | {_fmt(b)} | "
                     f"{_ratio(a, b)} |")
    lines += ["", "With more processes than cores (here 2) adding workers adds no "
              "throughput: every process gets less CPU. On a cluster each rank has its own "
              "cores; rerun there for scaling.", "",
              "ps transfers against the MPI library's own Send/Recv between the same two "
              "ranks (`benchmarks/ps_throughput.py`), MiB/s; the raw push is followed by "
              "the same SGD update in numpy on the ps, so both sides do the same work, "
              "and each raw buffer is allocated as its mpiflow counterpart is (the ps's "
              "variables and every receive buffer on huge pages from 64 KiB, "
              "`backend.lasting_host_empty`; the pushed gradients plain numpy arrays). "
              "The raw side sends all the bytes as one buffer, and again as one buffer per "
              "variable (4 messages each way, as mpiflow's 4 variables travel):", "",
              "| MiB | raw pull | mpiflow pull | ratio | per variable | raw push | "
              "mpiflow push | ratio | per variable |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["transfers"]:
        per_pull = per_push = "-"
        if "pull_ratio_per_variable" in r:     # results of an older script lack them
            per_pull = (f"{r['pull_ratio_per_variable']:.2f} "
                        f"({_spread(r['pull_ratio_per_variable_range'])})")
            per_push = (f"{r['push_ratio_per_variable']:.2f} "
                        f"({_spread(r['push_ratio_per_variable_range'])})")
        lines.append(f"| {r['MiB']} | {r['raw_pull']:.0f} | {r['mpiflow_pull']:.0f} | "
                     f"{r['pull_ratio']:.2f} ({_spread(r['pull_ratio_range'])}) | "
                     f"{per_pull} | {r['raw_push']:.0f} | {r['mpiflow_push']:.0f} | "
                     f"{r['push_ratio']:.2f} ({_spread(r['push_ratio_range'])}) | "
                     f"{per_push} |")
    lines += ["", "(medians of alternating rounds, the rounds' spread in brackets; "
              "target 0.85)"]
    lines += floor_section(results)
    lines += ["", f"![steps/s]({files['steps'].relative_to(ROOT)})",
              f"![scaling]({files['scaling'].relative_to(ROOT)})", "",
              "## allreduce mode: mpiflow vs PyTorch DDP (gloo)", "",
              "MLP 784-512-512-10 without biases, batch 128, SGD; mpiflow's "
              "`AllreduceOptimizer` with overlapped 1 MiB buckets "
              "(`benchmarks/allreduce_step.py --hidden 512`), PyTorch's "
              "`DistributedDataParallel` over gloo (`benchmarks/peers/torch_ddp.py`).", "",
              "| workers | mpiflow steps/s | PyTorch DDP steps/s | mpiflow / DDP |",
              "| --- | --- | --- | --- |"]
    for row in results["allreduce"]:
        lines.append(f"| {row['workers']} | {_fmt(row['mpiflow'])} | {_fmt(row['torch'])} | "
                     f"{_ratio(row['mpiflow'], row['torch'])} |")
    lines += ["", "## allreduce bandwidth", "",
              "Bus bandwidth `2 (n-1)/n * bytes / time` in MB/s, float32: MPI's own "
              "Allreduce (the floor of what transport can do here), mpiflow's strategies "
              "(`benchmarks/allreduce_bw.py`, with the cross-rank check) and "
              "torch.distributed's gloo `all_reduce`.", ""]
    for w, rows in sorted(results["bandwidth"].items()):
        lines += [f"{w} ranks:", "",
                  "| bytes | MPI | mpiflow mpi | mpiflow ring | mpiflow auto | torch gloo | "
                  "auto / torch |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            size_text = (f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20
                         else f"{r['bytes'] >> 10} KiB")
            lines.append(f"| {size_text} | {r['MPI']:.0f} | {r['mpi']:.0f} | {r['ring']:.0f} "
                         f"| {r['auto']:.0f} | {_fmt(r['torch'], 0)} | "
                         f"{_ratio(r['auto'], r['torch'])} |")
        lines.append("")
    lines += [f"![bandwidth]({files['bandwidth'].relative_to(ROOT)})", ""]
    lines += single_process_section(results["single"])
    lines += modes_section(results["modes"], files)
    lines += example_modes_section(results["example_modes"])
    lines += straggler_section(results["stragglers"])
    lines += compression_section(results["compression"])
    return "\n".join(lines)


def compression_section(rows) -> list:
    lines = ["## compressed gradients", "",
             "MLP 784-512-512-10 at batch 128, SGD, each compression its own launch "
             "(`benchmarks/compression.py`): ps = 1 ps + 1 worker asynchronous "
             "(`GradientCompressionOptimizer`), allreduce = 2 workers "
             "(`AllreduceOptimizer(compression=...)`); the bytes worker 0 sent per step and "
             "its steps/s. Every rank shares the machine's memory here, so fewer bytes save "
             "little time, and the encoding costs CPU: converting to and from float16 "
             "most (`mpiflow/half_floats.py`).", "",
             "| mode | compression | steps/s | KiB sent per step | of none |",
             "| --- | --- | --- | --- | --- |"]
    base = {}
    for r in rows:
        base.setdefault(r["mode"], r["sent_per_step"])
        lines.append(f"| {r['mode']} | {r['compression']} | {r['steps_per_s']:.1f} | "
                     f"{r['sent_per_step'] / 1024:.1f} | "
                     f"{r['sent_per_step'] / base[r['mode']]:.3f} |")
    return lines + [""]


def straggler_section(stragglers) -> list:
    runs = stragglers["runs"]
    lines = ["## a straggler: asynchronous, bounded staleness, synchronous", "",
             "1 ps + 3 workers train the model of `examples/mnist_ps.py` to the same number "
             "of gradients applied (300); the last worker pauses 50 ms every 5 steps "
             "(`benchmarks/staleness.py`). `sspK` is `StalenessAwareOptimizer(staleness=K)`; "
             "staleness and leads as the ps recorded them.", "",
             "| mode | seconds | gradients/s | test loss | largest staleness | mean staleness "
             "| largest lead | waits |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        lines.append(f"| {r['mode']} | {r['seconds']:.2f} | {r['gradients_per_s']:.0f} | "
                     f"{r['test_loss']:.4f} | {r.get('max_staleness', '-')} | "
                     f"{_fmt(r.get('mean_staleness'), 2) if 'mean_staleness' in r else '-'} | "
                     f"{r.get('max_lead', '-')} | {r.get('waits', '-')} |")
    lines += ["", f"![stragglers]({stragglers['plot'].relative_to(ROOT)})", ""]
    return lines


def _spread(bounds):
    return f"{bounds[0]:.2f}-{bounds[1]:.2f}"


def floor_section(results) -> list:
    """ps mode against one process and the machine's compute floor (every core stepping
    the model as fast as numpy does in one thread), both sides in one job; TensorFlow's
    runs against the floor of ``step_overhead.py``'s launch."""
    single, ps, same_job = results["single"], results["ps"], results["floor"]
    floor = (os.cpu_count() or 1) * 1000.0 / single["mlp_step_ms_numpy"]
    lines = ["", "Against one process and the compute floor (`mlp512` in "
             "`benchmarks/ps_throughput.py`, async, 1 ps): in each of 3 rounds the first "
             "worker steps the model alone, through `Session.run` in one process and in "
             "numpy, then every worker steps it against the ps, then against a ps written by "
             "hand in mpi4py and numpy that does the same work (each layer's gradients pushed "
             "as the backward pass makes them, the step's update applied all at once), all "
             "in one job; the floor is every core at that numpy rate. Medians of the rounds' "
             "ratios, their spread in brackets. TensorFlow (`benchmarks/peers/ps_mlp.py`, its "
             "own launch) against the floor of `benchmarks/step_overhead.py` in this run "
             f"({floor:.0f} steps/s).",
             "", "| workers | mpiflow steps/s | one process | of one process | of the floor "
             "| hand-written ps steps/s | it of numpy in one process | it of the floor "
             "| mpiflow of it | TensorFlow steps/s | of the floor |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workers in (1, 2):
        run = same_job[workers]
        b = _pick(ps, "tensorflow", "async", workers, "mlp512")
        lines.append(f"| {workers} | {run['mlp_steps_per_s']:.0f} | "
                     f"{run['one_process_steps_per_s']:.0f} | {run['of_one_process']:.2f} "
                     f"[{_spread(run['of_one_process_range'])}] | {run['of_floor']:.2f} "
                     f"[{_spread(run['of_floor_range'])}] | "
                     f"{run['raw_async_steps_per_s']:.0f} | {run['raw_async_of_numpy']:.2f} "
                     f"[{_spread(run['raw_async_of_numpy_range'])}] | "
                     f"{run['raw_async_of_floor']:.2f} | {run['of_raw_async']:.2f} "
                     f"[{_spread(run['of_raw_async_range'])}] | "
                     f"{_fmt(b)} | {_share(b, floor)} |")
    lines += ["", "(targets: 1 ps + 1 worker at 0.9 of one process, 1 ps + 2 workers at 0.75 "
              "of the floor; the hand-written ps shows what any ps path keeps here, where "
              "every pull, push and apply is paid on the same two cores)"]
    return lines


def _share(value, of):
    return "-" if value is None or not of else f"{value / of:.2f}"


def single_process_section(single) -> list:
    return ["## one process", "",
            "One SGD step (one thread) of MLP 784-512-512-10 at batch 128 through "
            "`Session.run`, against "
            "the same step written by hand in numpy with its buffers allocated once and "
            "updates in place (`benchmarks/step_overhead.py`, medians):", "",
            "| mpiflow ms/step | numpy ms/step | ratio (target <= 1.10) | executor us/op |",
            "| --- | --- | --- | --- |",
            f"| {single['mlp_step_ms_mpiflow']:.3f} | {single['mlp_step_ms_numpy']:.3f} | "
            f"{single['mlp_ratio']:.3f} | {single['executor_overhead_us_per_op']:.2f} |", ""]


def modes_section(mode_results, files) -> list:
    from benchmarks.hybrid_cost import report as cost_report
    from mpiflow.train.mode_cost import ModelShape
    lines = ["## ps, allreduce or hybrid: measured against the cost model", "",
             "An embedding model trained in each mode and in `TrainingMode(\"auto\")` "
             "(`benchmarks/hybrid_cost.py`, 1 ps in "
             "ps, hybrid and auto mode, every process on the same cores; each mode launched 3 "
             "times in turn, the launch of median steps/s shown): steps/s, the bytes each "
             "worker and the ps moved per worker step (`mpiflow.comm.traffic`) and their peak "
             "memory, beside what `mpiflow.train.mode_cost` predicts (in brackets), then its "
             "predictions for 64 workers.", ""]
    for name, result in mode_results.items():
        args = _cost_args(result["args"])
        lines += [f"### {name}", "", cost_report(args, ModelShape(**result["shape"]),
                                                 result["runs"], result["predictions"]), ""]
    if "modes" in files:
        lines += [f"![modes]({files['modes'].relative_to(ROOT)})", ""]
    return lines


def example_modes_section(runs) -> list:
    lines = ["### auto against the fixed modes: examples/embedding_hybrid.py", "",
             "The example's click model (a 200,000 x 64 table, `python benchmarks/modes.py`) on "
             "3 ranks: 1 ps and 2 workers in ps, hybrid and auto mode, 3 workers in allreduce "
             "mode; the median of 3 launches of each, taken in turn (min-max).", "",
             "| mode | workers | steps/s | min-max |", "| --- | --- | --- | --- |"]
    for mode, r in runs.items():
        label = mode if mode != "auto" else f"auto: {', '.join(r['chosen'])}"
        low, high = r["spread"]
        lines.append(f"| {label} | {r['workers']} | {r['steps_per_s']:.1f} | "
                     f"{low:.0f}-{high:.0f} |")
    return lines + ["", f"auto: {runs['auto']['of_best']:.2f} of the best fixed mode "
                        "(target: at least 0.90)", ""]


def _cost_args(extra):
    from benchmarks.hybrid_cost import parser
    return parser().parse_args(extra)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--plots", default=str(BENCH / "plots"))
    args = parser.parse_args()
    size = SIZES[args.size]
    start = time.monotonic()

    def log(what):
        print(f"[{time.monotonic() - start:6.0f} s] {what}", flush=True)

    results = {"ps": ps_mode(size, log), "transfers": transfers(size, log),
               "allreduce": allreduce_training(size, log), "bandwidth": bandwidth(size, log),
               "single": single_process(size, log), "floor": ps_floor(size, log),
               "modes": modes(size, log),
               "example_modes": example_modes(size, log),
               "stragglers": stragglers(size, log), "compression": compression(size, log)}
    files = plots(results, Path(args.plots))
    Path(args.out).write_text(markdown(results, files, args.size, time.monotonic() - start))
    json_path = Path(args.plots) / "results.json"
    json_path.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1,
                                    default=str))
    log(f"wrote {args.out}, {', '.join(str(f) for f in files.values())}, {json_path}")


if __name__ == "__main__":
    main()
