"""Compressed pushes to a ps: one worker trains w [100, 50] on the mean of (x w)**2 with
SGD under COMPRESSION, for 2 steps; prints, per step, the payload bytes it sent, the
raw gradient it computed, the residual it kept (top-k) and w after the step, as JSON.
Usage: mpiexec -n 2 python compressed_push.py none|fp16|bf16|topk:0.01"""

import json
import sys

import numpy as np

import mpiflow as mf
from mpiflow.comm import traffic

spec = sys.argv[1]
cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
    sys.exit(0)
with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                              worker_device="/job:worker/task:0")):
    w = mf.get_variable("w", [100, 50], initializer=mf.random_normal_initializer(seed=1))
    x = mf.placeholder(mf.float32, [None, 100], name="x")
    loss = mf.reduce_mean(mf.square(mf.matmul(x, w)))
    opt = mf.train.GradientCompressionOptimizer(mf.train.GradientDescentOptimizer(0.1), spec)
    train = opt.apply_gradients(opt.compute_gradients(loss))
    (raw_grad,) = mf.gradients(loss, [w])
rng = np.random.default_rng(0)
steps = []
with mf.Session(server.target) as sess:
    sess.run([mf.global_variables_initializer(), mf.local_variables_initializer()])
    w0 = sess.run(w)
    for _ in range(2):
        xb = rng.standard_normal((8, 100)).astype(np.float32)
        grad = sess.run(raw_grad, {x: xb})
        before = traffic.TRAFFIC.totals()
        sess.run(train, {x: xb})
        sent = traffic.between(before, traffic.TRAFFIC.totals())["sent"]["p2p"]
        steps.append({"sent": sent, "grad": grad.ravel().tolist(),
                      "residual": sess.run(opt.residuals[0]).tolist() if opt.residuals
                      else None, "w": sess.run(w).ravel().tolist()})
print(json.dumps({"w0": w0.ravel().tolist(), "steps": steps}), flush=True)
server.join()
