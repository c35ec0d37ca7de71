"""A worker that never joins its group's next collective (it sleeps in the script's own
code): the others' wait times out naming the group's ranks, and shows where each is.

Usage: MPIFLOW_PS=P mpiexec -n K python collective_absentee.py MODE (allreduce | hybrid)
"""

import sys
import time

import numpy as np

import mpiflow as mf


def absent_in_user_code():
    time.sleep(1000)


def main(mode_name):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    mode = mf.train.TrainingMode(mode_name, cluster, task)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("emb", [50, 4])
        w = mf.get_variable("w", [4, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(mf.nn.embedding_lookup(table, ids), w) - 1))
        step = mf.train.get_or_create_global_step()
        train = mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(
            loss, global_step=step)
    with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                           progress_bar=False) as sess:
        for i in range(3):
            sess.run(train, {ids: np.arange(8) + i})
        if task == 0:
            print("worker 0 absent", flush=True)
            absent_in_user_code()
        sess.run(train, {ids: np.arange(8)})


if __name__ == "__main__":
    main(sys.argv[1])
