"""Synchronous training with a backup worker, for graceful stops: 1 ps + 3 workers,
2 gradients aggregated a step, the last worker slow (a backup). Every step adds exactly 1
to ``v`` and to the global step; the chief saves a checkpoint every 20 steps and at the
end. Usage: mpiexec -n 4 python sync_graceful.py CHECKPOINT_DIR
"""

import sys
import time

import mpiflow as mf


def main(checkpoint_dir):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    workers, task = cluster.num_tasks("worker"), server.task_index
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        v = mf.get_variable("v", [], initializer=mf.zeros_initializer())
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(1.0),
                                             replicas_to_aggregate=workers - 1,
                                             total_num_replicas=workers)
        train = opt.minimize(-v, global_step=step)
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=20, progress_bar=False,
            hooks=[opt.make_session_run_hook(server.is_chief)]) as sess:
        while not sess.should_stop():
            if task == workers - 1:
                time.sleep(0.05)            # the backup: its gradients come late
            sess.run(train)
    print(f"done {task}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
