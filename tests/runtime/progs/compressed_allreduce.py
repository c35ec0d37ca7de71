"""Compressed allreduce: W workers (no ps) train w [100, 50] on the mean of (x w)**2 with
SGD through AllreduceOptimizer(algorithm=ALGORITHM, compression=COMPRESSION), 2 steps;
each worker writes OUT_DIR/task<N>.json: per step the bytes it sent by road, its own raw
gradient, its residual (top-k) and w after the step. Usage:
mpiexec -n W python compressed_allreduce.py mpi|ring none|fp16|bf16|topk:0.01 OUT_DIR"""

import json
import sys
from pathlib import Path

import numpy as np

import mpiflow as mf
from mpiflow.comm import traffic

algorithm, spec, out_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
cluster = mf.train.ClusterSpec.from_mpi(ps=0)
server = mf.train.Server(cluster)
task = server.task_index
with mf.device(f"/job:worker/task:{task}"):
    w = mf.get_variable("w", [100, 50], initializer=mf.random_normal_initializer(seed=1))
    x = mf.placeholder(mf.float32, [None, 100], name="x")
    loss = mf.reduce_mean(mf.square(mf.matmul(x, w)))
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                      algorithm=algorithm,
                                      compression=None if spec == "none" else spec)
    train = opt.minimize(loss)
    (raw_grad,) = mf.gradients(loss, [w])
rng = np.random.default_rng(10 + task)
steps = []
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       save_checkpoint_secs=None, progress_bar=False) as sess:
    w0 = sess.run(w)
    for _ in range(2):
        xb = rng.standard_normal((8, 100)).astype(np.float32)
        grad = sess.run(raw_grad, {x: xb})
        before = traffic.TRAFFIC.totals()
        sess.run(train, {x: xb})
        moved = traffic.between(before, traffic.TRAFFIC.totals())["sent"]
        steps.append({"sent": moved, "grad": grad.ravel().tolist(),
                      "residual": sess.run(opt.residuals[0]).tolist() if opt.residuals
                      else None, "w": sess.run(w).ravel().tolist()})
(out_dir / f"task{task}.json").write_text(
    json.dumps({"task": task, "w0": w0.ravel().tolist(), "steps": steps}))
