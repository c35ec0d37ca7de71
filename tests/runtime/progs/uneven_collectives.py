"""A worker that stops taking part in its group's collectives while the others step on:
worker 0 has 2 batches, the others 8, and then worker 0 does what ps training allows,
``mf.train.join`` without a joinable optimizer (END "join") or ``server.join()`` (END
"serve"), or sleeps in the script's own code (END "absent").
Usage: MPIFLOW_PS=P mpiexec -n K python uneven_collectives.py MODE END
"""

import sys
import time

import numpy as np

import mpiflow as mf


def absent_in_user_code():
    time.sleep(1000)


def main(mode_name, end):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    mode = mf.train.TrainingMode(mode_name, cluster, task)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("emb", [16, 4])
        w = mf.get_variable("w", [4, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(mf.nn.embedding_lookup(table, ids), w)))
        step = mf.train.get_or_create_global_step()
        train = mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(
            loss, global_step=step)
    with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                           progress_bar=False) as sess:
        for i in range(2 if task == 0 else 8):
            sess.run(train, {ids: np.arange(4) + i})
        if end == "join":
            mf.train.join(sess)
        if end == "absent" and task == 0:
            print("worker 0 absent", flush=True)
            absent_in_user_code()
    server.join()


if __name__ == "__main__":
    main(*sys.argv[1:3])
