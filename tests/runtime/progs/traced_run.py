"""Trace two steps of 1 ps + 2 workers and write the job's Chrome trace.

Usage: mpiexec -n 3 python traced_run.py TRACE_PATH
Each worker checks its own RunMetadata (kernels and receives of its part of the step),
then every rank (the ps after join) writes the trace together.
"""

import sys

import numpy as np

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "worker":
    task = server.task_index
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        mf.set_random_seed(0)
        x = mf.placeholder(mf.float32, [None, 8])
        w = mf.get_variable("w", [8, 4])
        loss = mf.reduce_mean(mf.square(mf.matmul(x, w)))
        train = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
        ready = mf.is_variable_initialized(w)
    with mf.Session(server.target) as sess:
        if server.is_chief:
            sess.run(mf.global_variables_initializer())
        while not sess.run(ready):
            pass
        feed = {x: np.ones((2, 8), np.float32)}
        sess.run(train, feed)                                    # untraced
        options = mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE)
        for _ in range(2):
            metadata = mf.RunMetadata()
            sess.run(train, feed, options=options, run_metadata=metadata)
        cats = {e["cat"] for e in metadata.step_stats}
        assert {"op", "recv", "send"} <= cats, cats
        single = mf.timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
        assert '"ph": "X"' in single
        print(f"worker {task}: {len(metadata.step_stats)} events in its part of a step",
              flush=True)
server.join()
written = mf.timeline.write_chrome_trace(sys.argv[1])
if written:
    print(f"wrote {written}", flush=True)
