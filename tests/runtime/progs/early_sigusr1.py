"""A job whose ranks spend a while before they build the cluster (loading data, say).
Usage: mpiexec -n 2 python early_sigusr1.py

Each rank prints "READY" once it has imported mpiflow, waits in its own code (where a
SIGUSR1 must find it, not kill it), then builds the cluster and prints "BUILT".
"""

import time

import mpiflow as mf


def loading_data_before_the_cluster():
    time.sleep(3)


print("READY", flush=True)
loading_data_before_the_cluster()
cluster = mf.train.ClusterSpec.from_mpi(ps=0)
server = mf.train.Server(cluster)
print("BUILT", flush=True)
