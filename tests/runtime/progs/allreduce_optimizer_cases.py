"""AllreduceOptimizer cases that went wrong silently or failed with a bare error, one per
launch; each rank prints one ``result {json}`` line.

Usage: mpiexec -n K python allreduce_optimizer_cases.py CASE [ARG]

- ``swap [overlap]``: rank 1 creates its variables in the other order (same names and
  shapes): its gradients must not be summed into the other rank's other variables.
- ``no_gradient``: rank 0's loss leaves out ``b``, the others' leave out ``c``.
- ``reuse``: two graphs one after the other in the same processes, average then sum.
- ``fp16 ALGORITHM``: every rank's gradient is 40000, which float16 holds; the average of
  them too, their sum not.
- ``joinable_sparse``: joinable=True with an embedding lookup (the gradient's rows of
  unknown shape), rank r running r + 2 steps.
- ``topk_empty``: top-k compression with a variable of no elements.
- ``missing``: rank 1 has no variable ``c``; the broadcast of the initial values meets it.
- ``local_uninitialized``: top-k's residuals (local variables) left uninitialized.
"""

import json
import sys

import numpy as np

import mpiflow as mf


def report(**values):
    print("result " + json.dumps(values), flush=True)


def train(session_target, train_op, feeds=None):
    with mf.Session(session_target) as sess:
        sess.run([mf.global_variables_initializer(), mf.local_variables_initializer()])
        sess.run(train_op, feeds)
        return {v.op.name: sess.run(v).tolist() for v in mf.global_variables()}


def swap(server, rank, overlap="1"):
    order = ["a", "b"] if rank == 0 else ["b", "a"]
    variables = {name: mf.Variable(np.zeros(4, np.float32), name=name) for name in order}
    scale = {"a": 1.0, "b": 10.0}
    loss = mf.add_n([mf.reduce_sum(variables[k]) * scale[k] for k in order]) * (rank + 1.0)
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0),
                                      overlap=overlap == "1")
    report(values=train(server.target, opt.minimize(loss)))


def no_gradient(server, rank):
    variables = {k: mf.Variable(np.zeros(4, np.float32), name=k) for k in "abc"}
    used = "ac" if rank == 0 else "ab"
    loss = mf.add_n([mf.reduce_sum(variables[k]) for k in used])
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0))
    report(values=train(server.target, opt.minimize(loss)))


def reuse(server, rank):
    got = []
    for average in (True, False):
        with mf.Graph().as_default():
            w = mf.Variable(np.zeros(3, np.float32), name="w")
            loss = mf.reduce_sum(w) * (rank + 1.0)
            opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0),
                                              average=average)
            got.append(train(server.target, opt.minimize(loss))["w"])
    report(average=got[0], total=got[1])


def fp16(server, rank, algorithm):
    w = mf.Variable(np.zeros(4, np.float32), name="w")
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1e-4),
                                      algorithm=algorithm, compression="fp16")
    report(values=train(server.target, opt.minimize(mf.reduce_sum(w) * 40000.0)))


def joinable_sparse(server, rank):
    table = mf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2), name="table")
    ids = mf.placeholder(mf.int64, [None])
    loss = mf.reduce_sum(mf.nn.embedding_lookup(table, ids))
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0), joinable=True)
    step = opt.minimize(loss)
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(rank + 2):
            sess.run(step, {ids: np.array([rank, 5])})
        opt.join(sess)
        report(table=sess.run(table).tolist())


def missing(server, rank):
    names = "abc" if rank == 0 else "ab"
    variables = [mf.Variable(np.zeros(2, np.float32), name=k) for k in names]
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0))
    opt.minimize(mf.add_n([mf.reduce_sum(v) for v in variables]),
                 global_step=mf.train.get_or_create_global_step())
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(opt.broadcast_variables_op())


def local_uninitialized(server, rank):
    w = mf.Variable(np.zeros(200, np.float32), name="w")
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0),
                                      compression="topk:0.5")
    step = opt.minimize(mf.reduce_sum(w))
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())     # not the residuals: local ones
        sess.run(step)


def topk_empty(server, rank):
    empty = mf.Variable(np.zeros(0, np.float32), name="empty")
    w = mf.Variable(np.zeros(200, np.float32), name="w")
    loss = mf.reduce_sum(w) * (rank + 1.0) + mf.reduce_sum(empty)
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(1.0),
                                      compression="topk:0.5")
    report(values=train(server.target, opt.minimize(loss)))


def main(case, *args):
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    {"swap": swap, "no_gradient": no_gradient, "reuse": reuse, "fp16": fp16,
     "joinable_sparse": joinable_sparse, "topk_empty": topk_empty, "missing": missing,
     "local_uninitialized": local_uninitialized}[case](
        server, server.task_index, *args)


if __name__ == "__main__":
    main(*sys.argv[1:])
