"""Uneven data in synchronous ps training: 1 ps + 2 workers, SyncReplicasOptimizer over
both; worker t has STEPS[t] batches; a worker whose batches run out calls
mf.train.join (the chief's sync loop goes on for the other), and the other goes on, each
step averaging the gradients of the workers still training. Writes OUT_DIR/task<t>.json
(batches, final w and step).
Usage: mpiexec -n 3 python uneven_sync.py OUT_DIR STEPS0 STEPS1"""

import json
import sys
from pathlib import Path

import numpy as np

import mpiflow as mf

out_dir, steps = Path(sys.argv[1]), [int(a) for a in sys.argv[2:4]]
cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()           # training
    server.join()           # the final reads
    sys.exit(0)
task = server.task_index
rng = np.random.default_rng(20 + task)
batches = [(rng.standard_normal((8, 5)).astype(np.float32),
            rng.standard_normal(8).astype(np.float32)) for _ in range(steps[task])]
with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                              worker_device=f"/job:worker/task:{task}")):
    w = mf.get_variable("w", [5], initializer=mf.constant_initializer(0.5))
    x = mf.placeholder(mf.float32, [None, 5], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y))
    step = mf.train.get_or_create_global_step()
    opt = mf.train.SyncReplicasOptimizer(mf.train.MomentumOptimizer(0.05, 0.9), 2, 2)
    train = opt.minimize(loss, global_step=step)
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       hooks=[opt.make_session_run_hook(server.is_chief)],
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       save_checkpoint_secs=None, progress_bar=False) as sess:
    for xb, yb in batches:
        sess.run(train, {x: xb, y: yb})
    mf.train.join(sess)     # done with its data: rests while the other trains on
with mf.Session(server.target) as sess:
    final_w, final_step = sess.run([w, step])
(out_dir / f"task{task}.json").write_text(json.dumps({
    "batches": [[xb.tolist(), yb.tolist()] for xb, yb in batches],
    "w": final_w.tolist(), "step": int(final_step)}))
server.join()
