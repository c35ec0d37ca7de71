"""A traced step of an allreduce graph op records it as a collective span.
Usage: mpiexec -n 2 python traced_allreduce.py"""

import numpy as np

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=0)
server = mf.train.Server(cluster)
with mf.device(f"/job:worker/task:{server.task_index}"):
    x = mf.placeholder(mf.float32, [4])
    total = mf.all_reduce(x)
with mf.Session(server.target) as sess:
    metadata = mf.RunMetadata()
    sess.run(total, {x: np.ones(4, np.float32)},
             options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE),
             run_metadata=metadata)
spans = sorted({(e["cat"], e["args"]["type"]) for e in metadata.step_stats})
print(f"worker {server.task_index}: {spans}", flush=True)
