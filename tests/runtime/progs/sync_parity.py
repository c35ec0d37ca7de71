"""Synchronous replicas equal one process at the combined batch (the N x 1/N == N check).

Every worker trains with SyncReplicasOptimizer(replicas_to_aggregate=workers) on its part
of each batch of workers*B examples; afterwards each worker trains the same model in a
local Session on the whole batches and checks it reached the same variables.
Usage: mpiexec -n K python sync_parity.py OPTIMIZER STEPS   (MPIFLOW_PS sets the ps count)
"""

import sys

import numpy as np

import mpiflow as mf

OPTIMIZERS = {"sgd": lambda: mf.train.GradientDescentOptimizer(0.1),
              "adam": lambda: mf.train.AdamOptimizer(0.01)}
B = 8


def build(optimizer, num_ps):
    mf.set_random_seed(11)
    x = mf.placeholder(mf.float32, [None, 5], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    with mf.variable_scope("dense", partitioner=mf.fixed_size_partitioner(max(num_ps, 1))):
        w1 = mf.get_variable("w", [5, 6])
    w2 = mf.get_variable("w2", [6, 3])
    logits = mf.matmul(mf.nn.tanh(mf.matmul(x, w1)), w2)
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    return x, y, loss, [mf.convert_to_tensor(w1), w2]


def batches(steps, workers):
    rng = np.random.default_rng(5)
    for _ in range(steps):
        yield (rng.standard_normal((workers * B, 5)).astype(np.float32),
               rng.integers(0, 3, workers * B))


def main(optimizer_name, steps):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    workers, task = cluster.num_tasks("worker"), server.task_index
    num_ps = cluster.num_tasks("ps")
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x, y, loss, params = build(optimizer_name, num_ps)
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(OPTIMIZERS[optimizer_name](),
                                             replicas_to_aggregate=workers)
        train = opt.minimize(loss, global_step=step)
        hook = opt.make_session_run_hook(server.is_chief)
        init = mf.global_variables_initializer()
        ready = mf.stack([mf.is_variable_initialized(v) for v in mf.global_variables()])
        local_init = mf.local_variables_initializer()
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(init)
        while not sess.run(ready).all():
            pass
        sess.run(local_init)
        hook.after_create_session(sess, None)
        for xb, yb in batches(steps, workers):
            sess.run(train, {x: xb[task::workers], y: yb[task::workers]})
        dist_params, dist_step = sess.run([params, step])
        hook.end(sess)
    local = mf.Graph()
    with local.as_default():
        x, y, loss, params = build(optimizer_name, num_ps)
        step = mf.train.get_or_create_global_step()
        train = OPTIMIZERS[optimizer_name]().minimize(loss, global_step=step)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for xb, yb in batches(steps, workers):
                sess.run(train, {x: xb, y: yb})
            local_params, local_step = sess.run([params, step])
    for a, b in zip(dist_params, local_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert dist_step == local_step == steps, (dist_step, local_step)
    print(f"OK sync {optimizer_name}: worker {task} of {workers}, {num_ps} ps, {steps} steps "
          "equal one process at the combined batch", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
