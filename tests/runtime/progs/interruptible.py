"""Asynchronous ps training that runs until interrupted, holding a temporary directory.
Usage: mpiexec -n 3 python interruptible.py [--plain-session] [--worker-1-ends]
(1 ps + 2 workers)

Every rank prints "READY <rank> <pid>" once it serves or has stepped, so a test knows
when to interrupt; the workers train until they are stopped. They train in a
MonitoredTrainingSession (which SIGTERM stops gracefully), or with --plain-session in a
plain Session loop (which SIGTERM interrupts, as Ctrl-C does). With --worker-1-ends,
worker 1 ends its script after its first step (and waits at exit for the others to leave).

With INTERRUPTIBLE_LATE_RANK=r in the environment, rank r leaves 0.3 s after the moment
the ranks agree to leave, as a rank on a crowded node may be late, and prints
"LEAVING LATE <rank>" just before it does.
"""

import os
import sys
import tempfile
import time

import numpy as np

import mpiflow as mf
from mpiflow.runtime import interrupts

LATE_BY_S = 0.3


def main():
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    rank = cluster.rank_of(server.job_name, server.task_index)
    if os.environ.get("INTERRUPTIBLE_LATE_RANK") == str(rank):
        def leave_late(moment):
            time.sleep(max(0.0, moment - time.time()) + LATE_BY_S)
            print(f"LEAVING LATE {rank}", flush=True)

        interrupts.LEAVING_LISTENERS.append(leave_late)
    if server.job_name == "ps":
        print(f"READY {rank} {os.getpid()}", flush=True)
        server.join()
        return
    with tempfile.TemporaryDirectory(prefix="interruptible-"), \
            mf.device(mf.train.replica_device_setter(cluster=cluster)):
        x = mf.placeholder(mf.float32, [None, 16])
        w = mf.get_variable("w", [16, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(x, w)))
        step = mf.train.get_or_create_global_step()
        train = mf.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        batch = np.ones((32, 16), np.float32)
        if "--plain-session" in sys.argv:
            with mf.Session(server.target) as sess:
                if server.is_chief:
                    sess.run(mf.global_variables_initializer())
                while not sess.run(mf.is_variable_initialized(w)):
                    pass
                sess.run(train, {x: batch})
                print(f"READY {rank} {os.getpid()}", flush=True)
                while True:
                    sess.run(train, {x: batch})
        with mf.train.MonitoredTrainingSession(master=server.target,
                                               is_chief=server.is_chief) as sess:
            sess.run(train, {x: batch})
            print(f"READY {rank} {os.getpid()}", flush=True)
            if "--worker-1-ends" in sys.argv and server.task_index == 1:
                return
            while not sess.should_stop():
                sess.run(train, {x: batch})


if __name__ == "__main__":
    main()
