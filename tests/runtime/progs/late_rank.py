"""A rank that never reaches a start-up meeting point: the others must name it and end.

Usage: mpiexec -n 3 python late_rank.py WHERE
WHERE: "layout" (rank 2 stalls before ClusterSpec.from_mpi), "service" (before Server),
"groups" (inside Server, before the job groups are split), "elsewhere" (rank 2 runs
another program: it meets at another point), "stuck_ps" (every rank starts; the ps then
deadlocks, and the workers' first step waits for it).
"""

import sys
import threading
import time

from mpi4py import MPI

import mpiflow as mf
import mpiflow.train.server as server_module
from mpiflow.comm import arrival


def stalled_before_the_meeting():
    time.sleep(60)


def deadlocked_in_user_code():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def main(where):
    late = MPI.COMM_WORLD.Get_rank() == 2
    if late and where == "layout":
        stalled_before_the_meeting()
    if late and where == "elsewhere":
        arrival.meet(MPI.COMM_WORLD, "another program's start")
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    if late and where == "service":
        stalled_before_the_meeting()
    if late and where == "groups":
        name_roles = server_module.name_roles

        def slow_name_roles(service, cluster):
            name_roles(service, cluster)
            stalled_before_the_meeting()

        server_module.name_roles = slow_name_roles
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        if where == "stuck_ps":
            deadlocked_in_user_code()
        server.join()
        return
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        w = mf.get_variable("w", [4, 1])
    with mf.Session(server.target) as sess:
        sess.run(w.initializer)


if __name__ == "__main__":
    main(sys.argv[1])
