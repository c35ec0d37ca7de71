"""Uneven data in hybrid training: 1 ps + 2 workers, a table on the ps (only gathered
from) and a replicated weight, Adam (whose sparse update moves every row of the table,
an empty push included). Worker t has STEPS[t] batches, trains on them with
TrainingMode("hybrid", ..., joinable=True), then calls mf.train.join. Writes
OUT_DIR/task<t>.json: its batches, how many join steps it ran, the final w, table and
global step.
Usage: MPIFLOW_PS=1 mpiexec -n 3 python uneven_hybrid.py OUT_DIR STEPS0 STEPS1"""

import json
import sys
from pathlib import Path

import numpy as np

import mpiflow as mf

VOCAB, DIM, FEATURES = 10, 3, 5
TABLE0 = np.arange(VOCAB * DIM, dtype=np.float32).reshape(VOCAB, DIM) / 20.0

out_dir, steps = Path(sys.argv[1]), [int(a) for a in sys.argv[2:4]]
cluster = mf.train.ClusterSpec.from_mpi()
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
    sys.exit(0)
task = server.task_index
rng = np.random.default_rng(30 + task)
batches = [(rng.standard_normal((8, FEATURES)).astype(np.float32),
            rng.integers(0, VOCAB, 8), rng.standard_normal(8).astype(np.float32))
           for _ in range(steps[task])]
mode = mf.train.TrainingMode("hybrid", cluster, task, joinable=True)
with mode.scope():
    table = mf.get_variable("emb", [VOCAB, DIM], initializer=mf.constant_initializer(TABLE0))
    w = mf.get_variable("w", [FEATURES], initializer=mf.constant_initializer(0.5))
    x = mf.placeholder(mf.float32, [None, FEATURES], name="x")
    ids = mf.placeholder(mf.int64, [None], name="ids")
    y = mf.placeholder(mf.float32, [None], name="y")
    predicted = mf.reduce_sum(x * w, axis=1) + \
        mf.reduce_sum(mf.nn.embedding_lookup(table, ids), axis=1)
    loss = mf.reduce_mean(mf.square(predicted - y))
    step = mf.train.get_or_create_global_step()
    train = mode.optimizer(mf.train.AdamOptimizer(0.05)).minimize(loss, global_step=step)
assert table.device.startswith("/job:ps"), table.device     # a table: kept on the ps
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       progress_bar=False) as sess:
    for xb, idb, yb in batches:
        sess.run(train, {x: xb, ids: idb, y: yb})
    joined = mf.train.join(sess)
    final_w, final_table, final_step = sess.run_step_fn(
        lambda context: context.session.run([w, table, step]))
(out_dir / f"task{task}.json").write_text(json.dumps({
    "batches": [[xb.tolist(), idb.tolist(), yb.tolist()] for xb, idb, yb in batches],
    "join_steps": joined, "w": final_w.tolist(), "table": final_table.tolist(),
    "step": int(final_step)}))
server.join()
