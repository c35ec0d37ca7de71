"""One ps serving every worker: each worker's assign_add steps are applied exactly once,
and the ps interleaves the workers' steps (it does not serve them one after another).
Usage: mpiexec -n K python ps_counting.py STEPS
"""

import sys

import numpy as np
from mpi4py import MPI

import mpiflow as mf


def main(steps):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    # Workers start their loops together so their steps overlap on the ps.
    workers = MPI.COMM_WORLD.Split(0 if server.job_name == "worker" else MPI.UNDEFINED)
    if server.job_name == "ps":
        server.join()
        return
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        counter = mf.Variable(0.0, name="counter")
        bump = mf.assign_add(counter, 1.0)
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(counter.initializer)
        workers.Barrier()
        seen = np.array([sess.run(bump) for _ in range(steps)], dtype=np.float64)
        # One plan, one piece on the ps: registered once, then run by handle each step.
        registrations = server._service._next_handle - (1 if server.is_chief else 0)
    everyone = np.empty(steps * workers.Get_size())
    workers.Allgather(seen, everyone)
    n = workers.Get_size()
    expect = np.arange(1, n * steps + 1)
    assert sorted(everyone) == list(expect), "an update was lost or doubled"
    mine = set(seen)
    others = set(everyone) - mine
    interleaved = min(others) < max(mine) and min(mine) < max(others)
    print(f"OK worker {server.task_index}: {steps} updates applied once each; "
          f"interleaved={interleaved}; registrations={registrations}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
