"""A rank that freezes (SIGSTOP: alive, but silent) is named by the heartbeats.

Usage: mpiexec -n 3 python frozen_rank.py worker|ps
With ``worker``, worker 1 stops itself mid-training and rank 0 (ps:0, which watches every
rank's heartbeat) notices; with ``ps``, the ps stops itself and the workers, which watch
its heartbeat, notice. A frozen process keeps its sockets and its /proc entry, so only
the heartbeats can tell. Run with a short MPIFLOW_PEER_TIMEOUT.
"""

import os
import signal
import sys
import time

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
who = sys.argv[1]


def freeze():
    print(f"freezing {server.job_name}:{server.task_index}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


if server.job_name == "ps":
    if who == "ps":
        time.sleep(1.0)
        freeze()
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
        start = time.monotonic()
        while True:
            sess.run(bump)
            time.sleep(0.005)
            if who == "worker" and server.task_index == 1 and time.monotonic() - start > 1:
                freeze()
