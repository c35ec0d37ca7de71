"""A step that waits past its RunOptions(timeout_in_ms) ends with DeadlineExceededError
saying what it waited for (here: sync-replicas tokens nobody releases, on the ps)."""

import time

import numpy as np

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
else:
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        w = mf.get_variable("w", [2])
        step = mf.train.get_or_create_global_step()
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1), 1)
        train = opt.minimize(mf.reduce_sum(w * w), global_step=step)
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.local_variables_initializer())
        start = time.monotonic()
        try:      # no chief sync loop runs: the token never comes
            sess.run(train, options=mf.RunOptions(timeout_in_ms=1500))
        except mf.errors.DeadlineExceededError as exc:
            print(f"TIMEOUT after {time.monotonic() - start:.1f} s: {exc}", flush=True)
        print("value still readable:", np.round(sess.run(w), 3).tolist(), flush=True)
