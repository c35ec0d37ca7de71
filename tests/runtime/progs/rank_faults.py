"""One ps and two workers counting on it, until a rank fails in the way asked for.

Usage: mpiexec -n 3 python rank_faults.py MODE      (run with a short MPIFLOW_PEER_TIMEOUT)
  freeze-worker  worker 1 stops itself (SIGSTOP: alive, sockets open, /proc entry there);
                 rank 0 (ps:0), which watches every rank's heartbeat, must notice
  freeze-ps      the ps stops itself; the workers, which watch its heartbeat, must notice
  kill-worker    worker 1 is killed by SIGKILL (run under python -m mpiflow.run)
  leave-early    worker 1 leaves at once while worker 0 trains 3 s more: a rank that has
                 left is never taken for a lost one
"""

import os
import signal
import sys
import time

import mpiflow as mf

MODE = sys.argv[1]
cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)


def fail(sig):
    print(f"{MODE}: {server.job_name}:{server.task_index}", flush=True)
    os.kill(os.getpid(), sig)


if server.job_name == "ps":
    if MODE == "freeze-ps":
        time.sleep(1.0)
        fail(signal.SIGSTOP)
    server.join()
    sys.exit(0)

with mf.device(mf.train.replica_device_setter(cluster=cluster)):
    v = mf.Variable(0.0, name="v")
    bump = v.assign_add(1.0)
with mf.Session(server.target) as sess:
    if server.is_chief:
        sess.run(v.initializer)
    while not sess.run(mf.is_variable_initialized(v)):
        time.sleep(0.01)
    if MODE == "leave-early" and not server.is_chief:
        sys.exit(0)
    start = time.monotonic()
    while MODE != "leave-early" or time.monotonic() - start < 3:
        sess.run(bump)
        time.sleep(0.005)
        if MODE.endswith("-worker") and server.task_index == 1 and \
                time.monotonic() - start > 1:
            fail(signal.SIGKILL if MODE == "kill-worker" else signal.SIGSTOP)
    print("worker 0 done after 3 s", flush=True)
