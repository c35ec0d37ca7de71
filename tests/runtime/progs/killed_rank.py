"""Worker 1 is killed by SIGKILL mid-training (as by kill -9 or the OOM killer).
Usage: mpiexec -n 3 python -m mpiflow.run --ps 1 killed_rank.py"""

import os
import signal
import time

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
else:
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        v = mf.Variable(0.0, name="v")
        bump = v.assign_add(1.0)
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(v.initializer)
        while not sess.run(mf.is_variable_initialized(v)):
            time.sleep(0.01)
        for step in range(10**6):
            sess.run(bump)
            if server.task_index == 1 and step == 50:
                os.kill(os.getpid(), signal.SIGKILL)
