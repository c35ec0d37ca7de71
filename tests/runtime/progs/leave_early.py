"""Worker 1 finishes at once, worker 0 trains 3 s more: a rank that has left (and said
so) is never taken for a lost one, however long the others go on.
Usage: mpiexec -n 3 python leave_early.py   (run with a short MPIFLOW_PEER_TIMEOUT)"""

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
            start = time.monotonic()
            while time.monotonic() - start < 3:
                sess.run(bump)
                time.sleep(0.01)
            print("worker 0 done after 3 s", flush=True)
