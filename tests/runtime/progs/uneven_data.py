"""Uneven data in allreduce training: worker t has STEPS[t] batches, trains on them with
AllreduceOptimizer(joinable=True), then calls mf.train.join. Writes OUT_DIR/task<t>.json:
its batches, how many join steps it ran, the final w and global step.
Usage: mpiexec -n 2 python uneven_data.py OUT_DIR STEPS0 STEPS1 [COMPRESSION]"""

import json
import sys
from pathlib import Path

import numpy as np

import mpiflow as mf

out_dir, steps = Path(sys.argv[1]), [int(a) for a in sys.argv[2:4]]
compression = sys.argv[4] if len(sys.argv) > 4 else None
cluster = mf.train.ClusterSpec.from_mpi(ps=0)
server = mf.train.Server(cluster)
task = server.task_index
rng = np.random.default_rng(20 + task)
batches = [(rng.standard_normal((8, 5)).astype(np.float32),
            rng.standard_normal(8).astype(np.float32)) for _ in range(steps[task])]
with mf.device(f"/job:worker/task:{task}"):
    w = mf.get_variable("w", [5], initializer=mf.constant_initializer(0.5))
    x = mf.placeholder(mf.float32, [None, 5], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y))
    step = mf.train.get_or_create_global_step()
    opt = mf.train.AllreduceOptimizer(mf.train.MomentumOptimizer(0.05, 0.9), joinable=True,
                                      compression=compression)
    train = opt.minimize(loss, global_step=step)
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       save_checkpoint_secs=None, progress_bar=False) as sess:
    for xb, yb in batches:
        sess.run(train, {x: xb, y: yb})
    joined = mf.train.join(sess)
    final_w, final_step = sess.run([w, step])
(out_dir / f"task{task}.json").write_text(json.dumps({
    "batches": [[xb.tolist(), yb.tolist()] for xb, yb in batches], "join_steps": joined,
    "w": final_w.tolist(), "step": int(final_step)}))
