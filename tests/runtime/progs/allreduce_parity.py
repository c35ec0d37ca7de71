"""Allreduce mode equals one process at the combined batch (and sync-ps, by the same
reference). Every rank is a worker with its own copy of the variables; an embedding table
gives a sparse gradient that is all-gathered. Usage: mpiexec -n K python allreduce_parity.py
OPTIMIZER STEPS ALGORITHM [gpu]
With ``gpu`` every worker computes on its GPU; ring and mpi then reduce in host memory
(copies added by the executor), nccl on the GPU.
"""

import sys

import numpy as np

import mpiflow as mf

OPTIMIZERS = {"sgd": lambda: mf.train.GradientDescentOptimizer(0.1),
              "adam": lambda: mf.train.AdamOptimizer(0.01)}
B = 8


def build(optimizer):
    mf.set_random_seed(13)
    ids = mf.placeholder(mf.int64, [None], name="ids")
    x = mf.placeholder(mf.float32, [None, 5], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    table = mf.get_variable("table", [20, 3])
    w1 = mf.get_variable("w1", [8, 6])
    w2 = mf.get_variable("w2", [6, 3])
    h = mf.concat([x, mf.nn.embedding_lookup(table, ids)], 1)
    logits = mf.matmul(mf.nn.tanh(mf.matmul(h, w1)), w2)
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    return ids, x, y, loss, [table, w1, w2]


def batches(steps, workers):
    rng = np.random.default_rng(5)
    for _ in range(steps):
        yield (rng.integers(0, 20, workers * B),
               rng.standard_normal((workers * B, 5)).astype(np.float32),
               rng.integers(0, 3, workers * B))


def main(optimizer_name, steps, algorithm, gpu=False):
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    workers, task = cluster.num_tasks("worker"), server.task_index
    with mf.device("/device:GPU:0" if gpu else None):
        ids, x, y, loss, params = build(optimizer_name)
        step = mf.train.get_or_create_global_step()
        opt = mf.train.AllreduceOptimizer(OPTIMIZERS[optimizer_name](), algorithm=algorithm,
                                          fusion_threshold_bytes=256)
        train = opt.minimize(loss, global_step=step)
    hook = opt.make_session_run_hook()
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        hook.after_create_session(sess, None)
        for ib, xb, yb in batches(steps, workers):
            sess.run(train, {ids: ib[task::workers], x: xb[task::workers],
                             y: yb[task::workers]})
        dist = sess.run(params)
    local = mf.Graph()
    with local.as_default():
        ids, x, y, loss, params = build(optimizer_name)
        train = OPTIMIZERS[optimizer_name]().minimize(loss)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for ib, xb, yb in batches(steps, workers):
                sess.run(train, {ids: ib, x: xb, y: yb})
            ref = sess.run(params)
    tol = {"rtol": 2e-4, "atol": 1e-5} if gpu else {"rtol": 1e-5, "atol": 1e-6}
    for a, b in zip(dist, ref):
        np.testing.assert_allclose(a, b, **tol)
    print(f"OK allreduce {optimizer_name} {algorithm}: worker {task} of {workers}, {steps} "
          "steps equal one process at the combined batch", flush=True)
    server.join()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], "gpu" in sys.argv[4:])
