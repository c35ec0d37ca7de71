"""A worker whose variables are not the chief's: it must be told so within seconds, not
after MPIFLOW_TIMEOUT of waiting for variables the chief initialized elsewhere.

Usage: mpiexec -n K python built_otherwise.py CASE

- ``extra_variable`` (2 ps): worker 1 alone makes a variable first, which moves every
  later one to the other ps in replica_device_setter's round robin.
- ``partitioned`` (1 ps): worker 1 splits the table in 2 parts; the chief keeps it whole.
- ``step_outside`` (1 ps): every worker makes the global step before the device scope, so
  each has its own, on its own task.
"""

import sys

import mpiflow as mf


def main(case):
    cluster = mf.train.ClusterSpec.from_mpi(ps=2 if case == "extra_variable" else 1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    odd = server.task_index == 1
    if case == "step_outside":
        step = mf.train.get_or_create_global_step()
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        if odd and case == "extra_variable":
            mf.Variable(0.0, name="extra")
        partitioner = mf.fixed_size_partitioner(2) if odd and case == "partitioned" else None
        table = mf.get_variable("table", [8, 2], partitioner=partitioner)
        w = mf.get_variable("w", [2, 1])
        loss = mf.reduce_sum(mf.matmul(mf.nn.embedding_lookup(table, [1, 5]), w))
        if case != "step_outside":
            step = mf.train.get_or_create_global_step()
        train = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    with mf.train.MonitoredTrainingSession(master=server.target, is_chief=server.is_chief,
                                           progress_bar=False,
                                           hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        while not sess.should_stop():
            sess.run(train)
    print(f"worker {server.task_index} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
