"""An uncaught exception on one rank ends the whole job fast, naming that rank.
Usage: mpiexec -n 3 python fail_fast.py worker|ps|workers   (workers: both raise at once)"""

import sys
import time

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
role = sys.argv[1]
if server.job_name == "ps":
    if role == "ps":
        time.sleep(0.5)
        raise RuntimeError("disk full on the parameter server")
    server.join()
else:
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        v = mf.Variable(1.0, name="v")
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(v.initializer)
        time.sleep(0.3)
        if role == "worker" and server.task_index == 1 or role == "workers":
            raise ValueError(f"bad batch in worker {server.task_index}")
        while True:
            sess.run(v)
            time.sleep(0.001)
