"""A SyncReplicasOptimizer that wants more gradients a step than the cluster has workers.

Usage: mpiexec -n 3 python sync_too_many.py REPLICAS_TO_AGGREGATE (1 ps + 2 workers)
"""

import sys

import mpiflow as mf


def main(replicas):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        w = mf.get_variable("w", [4, 1])
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.01),
                                             replicas_to_aggregate=replicas)
        train = opt.minimize(mf.reduce_sum(mf.square(w)), global_step=step)
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, progress_bar=False,
            hooks=[opt.make_session_run_hook(server.is_chief),
                   mf.train.StopAtStepHook(last_step=3)]) as sess:
        while not sess.should_stop():
            sess.run(train)
    print(f"worker {server.task_index} done", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
