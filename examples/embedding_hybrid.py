"""A click model with a big embedding table, trained in ps, allreduce or hybrid mode.

    mpiexec -n 3 python examples/embedding_hybrid.py --mode hybrid      # 1 ps + 2 workers
    mpiexec -n 3 python examples/embedding_hybrid.py --mode ps
    mpiexec -n 3 python examples/embedding_hybrid.py --mode allreduce   # 3 workers, no ps
    mpiexec -n 3 python examples/embedding_hybrid.py --mode auto        # chosen, 1 ps

The model code is the same in every mode; ``mf.train.TrainingMode`` decides where the
variables live and how gradients travel. Synthetic click-style data: each example has
``--fields`` categorical ids drawn (Zipf-like) from ``--vocab`` ids, and a click label
from a hidden logistic model of them, drawn as training goes (a pool of batches reused,
so memory does not grow with ``--steps``). Prints steps/s and the loss on held-out data;
the chief shows progress.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import mpiflow as mf
from launched import cluster_of_launch
from mpiflow import config


def synthetic_clicks(n, vocab, fields, seed):
    """Return (ids [n, fields] int64, labels [n] float32) from a hidden logistic model."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, size=(n, fields)) - 1) % vocab
    weights = np.random.default_rng(1234).standard_normal(vocab).astype(np.float32)
    logits = weights[ids].sum(axis=1) / np.sqrt(fields)
    labels = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    return ids.astype(np.int64), labels


class ClickBatches:
    """Endless batches of one worker's clicks: a pool of at most ``POOL`` batches drawn
    once, then reused, so a long run needs no more memory than a short one."""

    POOL = 64

    def __init__(self, steps, batch_size, vocab, fields, seed):
        count = min(steps, self.POOL)
        self.ids, self.labels = synthetic_clicks(count * batch_size, vocab, fields, seed)
        self.batch_size, self.count = batch_size, count

    def batch(self, i):
        lo = (i % self.count) * self.batch_size
        return self.ids[lo:lo + self.batch_size], self.labels[lo:lo + self.batch_size]


def build_model(ids, labels, vocab, dim, fields):
    """The click model: embeddings of every field, concatenated, through an MLP."""
    table = mf.get_variable("embedding", [vocab, dim],
                            initializer=mf.random_normal_initializer(0.0, 0.05))
    rows = mf.nn.embedding_lookup(table, mf.reshape(ids, [-1]), partition_strategy="div")
    features = mf.reshape(rows, [-1, fields * dim])
    w1 = mf.get_variable("w1", [fields * dim, 64])
    b1 = mf.get_variable("b1", [64], initializer=mf.zeros_initializer())
    w2 = mf.get_variable("w2", [64, 1])
    hidden = mf.nn.relu(mf.matmul(features, w1) + b1)
    logits = mf.reshape(mf.matmul(hidden, w2), [-1])
    return mf.reduce_mean(mf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                  logits=logits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=[*mf.train.modes.MODES, "auto"], default="hybrid")
    parser.add_argument("--ps", type=int, default=None,
                        help="ps tasks (default: MPIFLOW_PS, else 0 in allreduce mode and 1 "
                             "in the others)")
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--fields", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--json", action="store_true", help="print one JSON line (chief)")
    args = parser.parse_args(argv)

    ps = args.ps
    if ps is None and args.mode == "allreduce" and not config.default().is_set("MPIFLOW_PS"):
        ps = 0                      # allreduce mode has no use for a ps
    cluster = cluster_of_launch(ps=ps)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return None
    task, workers = server.task_index, cluster.num_tasks("worker")

    # ids_per_step: what "auto" prices a step's table traffic by (the placeholders' batch
    # dimension is None: evaluation feeds a larger batch than training).
    mode = mf.train.TrainingMode(args.mode, cluster, task, shard_rows=args.vocab,
                                 ids_per_step=args.batch_size * args.fields)
    mf.set_random_seed(0)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None, args.fields], name="ids")
        labels = mf.placeholder(mf.float32, [None], name="labels")
        loss = build_model(ids, labels, args.vocab, args.dim, args.fields)
        step = mf.train.get_or_create_global_step()
        train_op = mode.optimizer(mf.train.AdagradOptimizer(args.learning_rate)).minimize(
            loss, global_step=step)

    train = ClickBatches(args.steps, args.batch_size, args.vocab, args.fields, seed=1 + task)
    x_test, y_test = synthetic_clicks(4096, args.vocab, args.fields, seed=999)
    with mf.Session(server.target) as sess:
        mode.initialize(sess, server.is_chief)
        run = sess.make_callable([train_op, loss], [ids, labels])
        first_loss = sess.run(loss, {ids: x_test, labels: y_test})
        progress = mf.train.progress_report(0, args.steps, desc="train",
                                            mode=None if server.is_chief else "off")
        start = time.perf_counter()
        for i in range(args.steps):
            _, loss_value = run(*train.batch(i))
            progress.update(i + 1, loss_value)
        elapsed = time.perf_counter() - start
        progress.close(args.steps)
        test_loss = sess.run(loss, {ids: x_test, labels: y_test})
    server.join()        # every worker done before the numbers are reported
    result = {"mode": mode.mode, "requested": args.mode, "workers": workers, "vocab": args.vocab, "dim": args.dim,
              "steps_per_s": args.steps * workers / elapsed, "first_loss": float(first_loss),
              "test_loss": float(test_loss)}
    if server.is_chief:
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{mode.mode}: {result['steps_per_s']:.1f} steps/s over {workers} workers "
                  f"(table {args.vocab} x {args.dim}); test loss {first_loss:.4f} -> "
                  f"{test_loss:.4f}", flush=True)
    return result


if __name__ == "__main__":
    main()
