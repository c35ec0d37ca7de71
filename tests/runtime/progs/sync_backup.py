"""Backup workers: with replicas_to_aggregate < workers, a slow worker is not waited for.

The last worker sleeps before every step; the global step must advance at (nearly) the
fast workers' own step rate. Every worker stops once a step releases it at or past the
target global step, so all stop after the same release (as StopAtStepHook does).
Usage: mpiexec -n 4 python sync_backup.py TARGET_STEPS SLEEP_S
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import mpiflow as mf


def main(target, sleep_s):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    workers = MPI.COMM_WORLD.Split(0 if server.job_name == "worker" else MPI.UNDEFINED)
    if server.job_name == "ps":
        server.join()
        return
    n, task = cluster.num_tasks("worker"), server.task_index
    slow = task == n - 1
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        x = mf.placeholder(mf.float32, [None, 4])
        w = mf.get_variable("w", [4, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(x, w)))
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.01),
                                             replicas_to_aggregate=n - 1, total_num_replicas=n)
        train = opt.minimize(loss, global_step=step)
        hook = opt.make_session_run_hook(server.is_chief)
    batch = np.ones((8, 4), np.float32)
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(mf.global_variables_initializer())
        workers.Barrier()
        sess.run(mf.local_variables_initializer())
        hook.after_create_session(sess, None)
        workers.Barrier()
        start_step, start = sess.run(step), time.perf_counter()
        mine, released = 0, start_step
        while released < start_step + target:
            if slow:
                time.sleep(sleep_s)
            released = sess.run(train.outputs[0], {x: batch})
            mine += 1
        elapsed = time.perf_counter() - start
        global_steps = released - start_step
        rates = np.array([mine / elapsed, global_steps / elapsed, float(slow)])
        everyone = np.empty((n, 3))
        workers.Allgather(rates, everyone)
        workers.Barrier()       # nobody leaves while another still needs a release
        hook.end(sess)
    fast = everyone[everyone[:, 2] == 0, 0].mean()
    slow_rate = everyone[everyone[:, 2] == 1, 0].mean()
    global_rate = everyone[:, 1].max()
    print(f"OK worker {task}: fast workers {fast:.1f} steps/s, slow worker {slow_rate:.1f}, "
          f"global step {global_rate:.1f}/s, ratio {global_rate / fast:.2f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
