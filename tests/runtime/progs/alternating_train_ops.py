"""Two train ops run in turn in allreduce mode (as a GAN's two optimizers), each with its
own fusion; at step 5 worker 1 runs the other one than worker 0 (a data-dependent branch).
Prints each worker's replicas of both variables at the end.
Usage: mpiexec -n 2 python alternating_train_ops.py"""

import numpy as np

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=0)
server = mf.train.Server(cluster)
task = server.task_index
mode = mf.train.TrainingMode("allreduce", cluster, task)
with mode.scope():
    x = mf.placeholder(mf.float32, [None, 4], name="x")
    w1 = mf.get_variable("w1", [4, 1])
    w2 = mf.get_variable("w2", [4, 9])
    train_1 = mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(
        mf.reduce_mean(mf.matmul(x, w1)), var_list=[w1])
    train_2 = mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(
        mf.reduce_mean(mf.matmul(x, w2)), var_list=[w2])
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       log_step_count_steps=None,
                                       save_checkpoint_secs=None) as sess:
    for i in range(8):
        op = train_1 if i % 2 == 0 else train_2
        if task == 1 and i == 5:
            op = train_1
        sess.run(op, {x: np.full((2, 4), task + 1.0, np.float32)})
    print(f"worker {task} w1 {sess.run(w1).ravel().tolist()} w2 {sess.run(w2)[0].tolist()}",
          flush=True)
