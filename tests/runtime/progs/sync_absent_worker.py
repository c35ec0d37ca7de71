"""Synchronous training (1 ps + 2 workers) where worker 1 stops in its own code after two
steps and never sends its next gradient: the chief's step times out waiting for the ps.
Usage: MPIFLOW_TIMEOUT=3 mpiexec -n 3 python sync_absent_worker.py

The chief's error must show, in where the ps is, what its step waited for there: the
accumulator holds the chief's gradient only (the ps serves; the missing one is worker 1's).
"""

import sys
import time

import numpy as np

import mpiflow as mf


def absent_in_user_code():
    time.sleep(1000)


def main():
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x = mf.placeholder(mf.float32, [None, 3])
        w = mf.Variable(np.zeros(3, np.float32), name="w")
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                             replicas_to_aggregate=2, total_num_replicas=2)
        train = opt.minimize(mf.reduce_sum(x * w), global_step=step)
    with mf.train.MonitoredTrainingSession(
            server.target, is_chief=server.is_chief, progress_bar=False,
            hooks=[opt.make_session_run_hook(server.is_chief)]) as sess:
        for i in range(5):
            if i == 2 and task == 1:
                print("worker 1 absent", flush=True)
                absent_in_user_code()
            sess.run(train, {x: np.ones((2, 3), np.float32)})
    sys.exit(0)


if __name__ == "__main__":
    main()
