"""A TF1 replica script with a Supervisor (as TensorFlow's mnist_replica.py): the chief
runs get_init_tokens_op and starts get_chief_queue_runner, every worker loops until the
step it fetched reaches the target, and the script just ends (no sv.stop()). The
optimizer keeps ExponentialMovingAverage shadows through variable_averages; 2 ps.
Each worker checks weights and shadows against one process on the combined batches.
Usage: mpiexec -n 4 python sync_supervisor.py STEPS
"""

import sys
import tempfile

import numpy as np

import mpiflow as mf

B = 4


def batch(task, i):
    rng = np.random.default_rng(100 * task + i)
    return rng.standard_normal((B, 3)).astype(np.float32), \
        rng.standard_normal(B).astype(np.float32)


def build():
    x = mf.placeholder(mf.float32, [None, 3], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    w = mf.get_variable("w", [3], initializer=mf.constant_initializer(0.3))
    b = mf.get_variable("b", [], initializer=mf.constant_initializer(0.1))
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, 1) + b - y))
    global_step = mf.Variable(0, name="global_step", trainable=False)
    ema = mf.train.ExponentialMovingAverage(0.9, num_updates=global_step)
    return x, y, [w, b], loss, global_step, ema


def one_process(steps, workers):
    with mf.Graph().as_default():
        x, y, params, loss, global_step, ema = build()
        train = mf.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)
        with mf.control_dependencies([train]):
            train = ema.apply(params)
        shadows = [ema.average(v) for v in params]
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for k in range(steps):
                parts = [batch(t, k) for t in range(workers)]
                sess.run(train, {x: np.concatenate([p[0] for p in parts]),
                                 y: np.concatenate([p[1] for p in parts])})
            return sess.run(params + shadows)


def main(steps):
    cluster = mf.train.ClusterSpec.from_mpi(ps=2)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    workers, task = cluster.num_tasks("worker"), server.task_index
    is_chief = task == 0
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x, y, params, loss, global_step, ema = build()
        opt = mf.train.SyncReplicasOptimizer(
            mf.train.AdamOptimizer(0.05), replicas_to_aggregate=workers,
            total_num_replicas=workers, variable_averages=ema, variables_to_average=params)
        train_step = opt.minimize(loss, global_step=global_step)
        local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
        chief_queue_runner = opt.get_chief_queue_runner()
        sync_init_op = opt.get_init_tokens_op()
        init_op = mf.global_variables_initializer()
        shadows = [ema.average(v) for v in params]
    sv = mf.train.Supervisor(is_chief=is_chief, logdir=tempfile.mkdtemp(), init_op=init_op,
                             local_init_op=local_init_op,
                             ready_for_local_init_op=opt.ready_for_local_init_op,
                             recovery_wait_secs=1, global_step=global_step)
    sess = sv.prepare_or_wait_for_session(server.target)
    if is_chief:
        sess.run(sync_init_op)
        sv.start_queue_runners(sess, [chief_queue_runner])
    i = 0
    while True:
        xb, yb = batch(task, i)
        _, step = sess.run([train_step, global_step], feed_dict={x: xb, y: yb})
        i += 1
        if step >= steps:
            break
    got = sess.run(params + shadows)
    done = sess.run(global_step)
    assert done == i, (done, i)     # one global step per round of the workers' steps
    for name, a, b in zip(["w", "b", "w shadow", "b shadow"], got, one_process(done, workers)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=name)
    print(f"OK worker {task}: {done} steps, weights and shadows equal one process",
          flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
