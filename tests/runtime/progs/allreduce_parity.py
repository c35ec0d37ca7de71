"""Allreduce mode equals one process at the combined batch (and sync-ps, by the same
reference). Every rank is a worker with its own copy of the variables; an embedding table
gives a sparse gradient that is all-gathered. Usage: mpiexec -n K python allreduce_parity.py
OPTIMIZER STEPS ALGORITHM [gpu] [transformed]
With ``gpu`` every worker computes on its GPU; ring and mpi then reduce in host memory
(copies added by the executor), nccl on the GPU.
With ``transformed`` the script trains as TF1 scripts that accumulate and clip do:
compute_gradients' gradients summed into accumulators over two sess.run calls, then
clipped by their global norm (binding) and applied by a third; and a moving average of
the input (batch normalization's moving statistics: an UPDATE_OPS-style update no
gradient reaches) follows each worker's own batches. The variables still equal one
process at the combined batch, the clipping seeing the averaged gradients; the moving
average equals one process's over this worker's shards alone.
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


def transformed_train(opt, loss, x, step):
    """[accumulate, accumulate, apply] ops, a moving average of ``x``'s mean and its
    update (run with each accumulation)."""
    pairs = opt.compute_gradients(loss)
    sums = [mf.Variable(mf.zeros(v.shape.as_list()), trainable=False,
                        collections=[mf.GraphKeys.LOCAL_VARIABLES]) for _, v in pairs]
    adds = [mf.scatter_add(s, g.indices, g.values) if isinstance(g, mf.IndexedSlices)
            else mf.assign_add(s, g) for s, (g, _) in zip(sums, pairs)]
    clipped, _ = mf.clip_by_global_norm([s / 2.0 for s in sums], 0.05)   # binds: 0.18
    apply = opt.apply_gradients(zip(clipped, [v for _, v in pairs]), global_step=step)
    with mf.control_dependencies([apply]):
        reset = mf.group(*[s.assign(mf.zeros_like(s)) for s in sums])
    moving = mf.Variable(mf.zeros([5]), trainable=False, name="moving_mean")
    update = mf.assign(moving, 0.5 * moving + 0.5 * mf.reduce_mean(x, 0))
    return [mf.group(update, *adds), mf.group(update, *adds), reset], moving, update


def batches(steps, workers):
    rng = np.random.default_rng(5)
    for _ in range(steps):
        yield (rng.integers(0, 20, workers * B),
               rng.standard_normal((workers * B, 5)).astype(np.float32),
               rng.integers(0, 3, workers * B))


def main(optimizer_name, steps, algorithm, gpu=False, transformed=False):
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    workers, task = cluster.num_tasks("worker"), server.task_index
    with mf.device("/device:GPU:0" if gpu else None):
        ids, x, y, loss, params = build(optimizer_name)
        step = mf.train.get_or_create_global_step()
        opt = mf.train.AllreduceOptimizer(OPTIMIZERS[optimizer_name](), algorithm=algorithm,
                                          fusion_threshold_bytes=256)
        if transformed:
            runs, moving, _ = transformed_train(opt, loss, x, step)
        else:
            runs = [opt.minimize(loss, global_step=step)]
    hook = opt.make_session_run_hook()
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.local_variables_initializer())
        hook.after_create_session(sess, None)
        for ib, xb, yb in batches(steps * len(runs), workers):
            sess.run(runs[0], {ids: ib[task::workers], x: xb[task::workers],
                               y: yb[task::workers]})
            runs = runs[1:] + runs[:1]
        dist = sess.run(params)
        if transformed:
            mine = sess.run(moving)
    local = mf.Graph()
    with local.as_default():
        ids, x, y, loss, params = build(optimizer_name)
        step = mf.train.get_or_create_global_step()
        if transformed:
            runs, moving, update = transformed_train(OPTIMIZERS[optimizer_name](), loss, x,
                                                     step)
        else:
            runs = [OPTIMIZERS[optimizer_name]().minimize(loss)]
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            sess.run(mf.local_variables_initializer())
            for ib, xb, yb in batches(steps * len(runs), workers):
                sess.run(runs[0], {ids: ib, x: xb, y: yb})
                runs = runs[1:] + runs[:1]
            ref = sess.run(params)
            if transformed:         # over this worker's shards alone
                sess.run(moving.initializer)
                for i, (_, xb, _) in enumerate(batches(steps * 3, workers)):
                    if i % 3 != 2:
                        sess.run(update, {x: xb[task::workers]})
                np.testing.assert_allclose(mine, sess.run(moving), rtol=1e-6)
    tol = {"rtol": 2e-4, "atol": 1e-5} if gpu else {"rtol": 1e-5, "atol": 1e-6}
    for a, b in zip(dist, ref):
        np.testing.assert_allclose(a, b, **tol)
    print(f"OK allreduce {optimizer_name} {algorithm}: worker {task} of {workers}, {steps} "
          "steps equal one process at the combined batch", flush=True)
    server.join()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], "gpu" in sys.argv[4:],
         "transformed" in sys.argv[4:])
