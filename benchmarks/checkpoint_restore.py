"""Does restoring a checkpoint stay linear in its size? Save and restore N variables.

For each N (many small variables, as a model with thousands of Adam slots has), builds N
float32 variables, saves them with ``mf.train.Saver`` and restores them in the same
process, twice each (the first call also compiles its plan). Prints seconds, the ratio
restore / save and the restore's microseconds per variable, which must stay flat as N
grows (a restore that re-read every shard's directory per variable grows with N
squared). A restore parses each piece and checks it (its header against the index,
its bytes against their CRC-32) where a save writes it: 2-3.5 times the save's time here.

Usage: python benchmarks/checkpoint_restore.py [--sizes 1000 3000 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

import mpiflow as mf


def measure(n: int, directory: str) -> dict:
    graph = mf.Graph()
    with graph.as_default():
        variables = [mf.Variable(np.float32(i), name=f"v{i}") for i in range(n)]
        saver = mf.train.Saver()
        init = mf.global_variables_initializer()
    times = {}
    with mf.Session(graph=graph) as sess:
        sess.run(init)
        for label in ("first", "again"):
            start = time.perf_counter()
            prefix = saver.save(sess, f"{directory}/m{n}")
            times[f"save_{label}"] = time.perf_counter() - start
            start = time.perf_counter()
            saver.restore(sess, prefix)
            times[f"restore_{label}"] = time.perf_counter() - start
        assert sess.run(variables[-1]) == n - 1
    times["ratio_first"] = times["restore_first"] / times["save_first"]
    times["ratio_again"] = times["restore_again"] / times["save_again"]
    return {"variables": n, **times}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for n in args.sizes:
            r = measure(n, directory)
            results.append(r)
            if not args.json:
                print(f"{n:6d} variables: save {r['save_first']:.2f} s, restore "
                      f"{r['restore_first']:.2f} s (x{r['ratio_first']:.2f}); again: save "
                      f"{r['save_again']:.2f} s, restore {r['restore_again']:.2f} s "
                      f"(x{r['ratio_again']:.2f}); restore "
                      f"{r['restore_again'] / n * 1e6:.0f} us per variable", flush=True)
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
