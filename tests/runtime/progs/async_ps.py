"""1 ps + N workers: variables on the ps, async SGD from every worker; checks counts."""

import sys

import numpy as np

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
    print(f"ps done", flush=True)
    sys.exit(0)

with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                              worker_device=f"/job:worker/task:{server.task_index}")):
    counter = mf.Variable(0.0, name="counter")
    w = mf.Variable(np.ones(4, np.float32), name="w")
    bump = mf.assign_add(counter, 1.0)
    loss = mf.reduce_sum(mf.square(w))
    step = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
    ready = mf.is_variable_initialized(w)
    init = mf.global_variables_initializer()

print(f"rank placement w={w.device} bump={bump.device} loss={loss.device}", flush=True)
with mf.Session(server.target) as sess:
    if server.is_chief:
        sess.run(init)
    while not sess.run(ready):
        pass
    n_workers = cluster.num_tasks("worker")
    for i in range(10):
        sess.run(bump)
    print(f"worker {server.task_index} counter={sess.run(counter)}", flush=True)
    sess.run(step)
    print(f"worker {server.task_index} w={sess.run(w)}", flush=True)
