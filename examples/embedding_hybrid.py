"""A click model with a big embedding table, trained in ps, allreduce or hybrid mode.

    MPIFLOW_PS=1 mpiexec -n 3 python examples/embedding_hybrid.py --mode hybrid
    MPIFLOW_PS=1 mpiexec -n 3 python examples/embedding_hybrid.py --mode ps
    MPIFLOW_PS=0 mpiexec -n 3 python examples/embedding_hybrid.py --mode allreduce

The model code is the same in every mode; ``mf.train.TrainingMode`` decides where the
variables live and how gradients travel. Synthetic click-style data: each example has
``--fields`` categorical ids drawn (Zipf-like) from ``--vocab`` ids, and a click label
from a hidden logistic model of them. Prints steps/s and the loss on held-out data.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import mpiflow as mf


def synthetic_clicks(n, vocab, fields, seed):
    """Return (ids [n, fields] int64, labels [n] float32) from a hidden logistic model."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, size=(n, fields)) - 1) % vocab
    weights = np.random.default_rng(1234).standard_normal(vocab).astype(np.float32)
    logits = weights[ids].sum(axis=1) / np.sqrt(fields)
    labels = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    return ids.astype(np.int64), labels


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
    parser.add_argument("--mode", choices=mf.train.modes.MODES, default="hybrid")
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--fields", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--json", action="store_true", help="print one JSON line (chief)")
    args = parser.parse_args(argv)

    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return None
    task, workers = server.task_index, cluster.num_tasks("worker")

    mode = mf.train.TrainingMode(args.mode, cluster, task, shard_rows=args.vocab)
    mf.set_random_seed(0)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None, args.fields], name="ids")
        labels = mf.placeholder(mf.float32, [None], name="labels")
        loss = build_model(ids, labels, args.vocab, args.dim, args.fields)
        step = mf.train.get_or_create_global_step()
        train_op = mode.optimizer(mf.train.AdagradOptimizer(args.learning_rate)).minimize(
            loss, global_step=step)

    x_train, y_train = synthetic_clicks(args.steps * args.batch_size, args.vocab, args.fields,
                                        seed=1 + task)
    x_test, y_test = synthetic_clicks(4096, args.vocab, args.fields, seed=999)
    with mf.Session(server.target) as sess:
        mode.initialize(sess, server.is_chief)
        run = sess.make_callable([train_op, loss], [ids, labels])
        first_loss = sess.run(loss, {ids: x_test, labels: y_test})
        start = time.perf_counter()
        for i in range(args.steps):
            lo, hi = i * args.batch_size, (i + 1) * args.batch_size
            run(x_train[lo:hi], y_train[lo:hi])
        elapsed = time.perf_counter() - start
        test_loss = sess.run(loss, {ids: x_test, labels: y_test})
    server.join()        # every worker done before the numbers are reported
    result = {"mode": args.mode, "workers": workers, "vocab": args.vocab, "dim": args.dim,
              "steps_per_s": args.steps * workers / elapsed, "first_loss": float(first_loss),
              "test_loss": float(test_loss)}
    if server.is_chief:
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{args.mode}: {result['steps_per_s']:.1f} steps/s over {workers} workers "
                  f"(table {args.vocab} x {args.dim}); test loss {first_loss:.4f} -> "
                  f"{test_loss:.4f}", flush=True)
    return result


if __name__ == "__main__":
    main()
