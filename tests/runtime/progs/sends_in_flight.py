"""1 ps + 1 worker move 8 MiB tensors both ways (pulls and pushes) while every main-thread
sleep of a rank's waits is counted against whether that rank had a send still in flight.

Launched with MPICH's single-copy transfers off (MPIR_CVAR_CH4_CMA_ENABLE=0), a large
message crosses shared memory in pieces, each copied in by its sender from inside MPI: a
rank that slept while its send was in flight would pace the copy by its sleeps. Prints
"OK sends_in_flight" with the counts, and checks that every push arrived intact.
Usage: mpiexec -n 2 python sends_in_flight.py STEPS
"""

import sys
import threading
import time
import types

import numpy as np

import mpiflow as mf
from mpiflow.comm import backoff

ELEMENTS = 2 << 20          # 8 MiB of float32


def count_sleeps(transport):
    """Swap the back-off's sleep for one that counts the main thread's sleeps, and those
    it took while ``transport`` had a send still in flight."""
    counts = {"sleeps": 0, "with_sends_in_flight": 0}

    def sleep(seconds):
        if threading.current_thread() is threading.main_thread():
            counts["sleeps"] += 1
            transport.complete_sends()
            counts["with_sends_in_flight"] += transport.has_pending_sends()
        time.sleep(seconds)
    backoff.time = types.SimpleNamespace(sleep=sleep, perf_counter=time.perf_counter,
                                         monotonic=time.monotonic)
    return counts


def main(steps):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    counts = count_sleeps(server._service.transport)
    if server.job_name == "worker":
        with mf.device(mf.train.replica_device_setter(cluster=cluster)):
            table = mf.Variable(mf.zeros([ELEMENTS]), name="table")
            push = mf.placeholder(mf.float32, [ELEMENTS])
            add = mf.assign_add(table, push).op
        rng = np.random.default_rng(0)
        expected = np.zeros(ELEMENTS, np.float32)
        with mf.Session(server.target) as sess:
            sess.run(mf.global_variables_initializer())
            for _ in range(steps):
                value = rng.integers(0, 4, ELEMENTS).astype(np.float32)
                sess.run(add, {push: value})
                expected += value
                pulled = sess.run(table)
            assert np.array_equal(pulled, expected), "a pushed tensor arrived changed"
    server.join()
    print(f"OK sends_in_flight {server.job_name}: {counts['with_sends_in_flight']} of "
          f"{counts['sleeps']} sleeps with a send in flight", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
