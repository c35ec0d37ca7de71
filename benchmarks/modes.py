"""Steps/s of the embedding model (examples/embedding_hybrid.py) in ps, allreduce,
hybrid and auto mode, on the same number of ranks, printed as a table with ratios to
hybrid, and what auto chose with its rate against the best fixed mode's.

    python benchmarks/modes.py [--ranks 3] [--vocab 200000] [--steps 200] [--json]

ps, hybrid and auto use 1 ps and ranks-1 workers; allreduce makes every rank a worker.
Each mode is its own mpiexec launch; steps/s counts the steps of all workers together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "embedding_hybrid.py"
MODES = ("ps", "allreduce", "hybrid", "auto")


def run_mode(mode, ranks, extra, timeout):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    env = dict(os.environ, MPIFLOW_PS="0" if mode == "allreduce" else "1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    cmd = [mpiexec, "-n", str(ranks), sys.executable, str(EXAMPLE), "--mode", mode,
           "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{mode} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden-dim", type=int, default=64, help="embedding dim")
    parser.add_argument("--rounds", type=int, default=3,
                        help="launches of each mode, taken in turn (the median is shown)")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extra = ["--vocab", str(args.vocab), "--steps", str(args.steps), "--dim",
             str(args.hidden_dim)]
    runs = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for m in MODES:
            runs[m].append(run_mode(m, args.ranks, extra, args.timeout))
    results = {m: {**r[-1], "steps_per_s": statistics.median(x["steps_per_s"] for x in r),
                   "spread": [min(x["steps_per_s"] for x in r),
                              max(x["steps_per_s"] for x in r)],
                   "chosen": sorted({x["mode"] for x in r})}
               for m, r in runs.items()}
    best = max(("ps", "allreduce", "hybrid"), key=lambda m: results[m]["steps_per_s"])
    results["auto"]["of_best"] = results["auto"]["steps_per_s"] / results[best]["steps_per_s"]
    if args.json:
        print(json.dumps(results))
        return
    hybrid = results["hybrid"]["steps_per_s"]
    print(f"embedding model, table {args.vocab} x {args.hidden_dim}, {args.ranks} ranks, "
          f"{args.steps} steps per worker, median of {args.rounds} launches (min-max)")
    print(f"{'mode':>10} {'workers':>8} {'steps/s':>9} {'min-max':>13} {'hybrid/mode':>12} "
          f"{'test loss':>10}")
    for mode, r in results.items():
        low, high = r["spread"]
        print(f"{mode:>10} {r['workers']:>8} {r['steps_per_s']:>9.1f} "
              f"{f'{low:.0f}-{high:.0f}':>13} {hybrid / r['steps_per_s']:>12.2f} "
              f"{r['test_loss']:>10.4f}")
    print(f"auto chose {', '.join(results['auto']['chosen'])}: "
          f"{results['auto']['of_best']:.2f} of the best fixed mode ({best})")


if __name__ == "__main__":
    main()
