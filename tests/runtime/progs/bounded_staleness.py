"""Bounded staleness on a ps. Usage: mpiexec -n 1+W python bounded_staleness.py CASE K STEPS
CASE: "slow" (worker 0 sleeps 20 ms a step, the others none), "rest" (the last worker
stops after 3 steps and rests in server.join()), "sync" (SyncReplicasOptimizer, K
ignored: the reference for lock-step). K: the bound (-1: none). Every worker trains a
linear model on its own fixed batch with SGD; prints, per worker, JSON with the final
weights, the global step, the ps's clock record and its staleness counts."""

import json
import sys
import time

import numpy as np

import mpiflow as mf

case, bound, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()           # the training
    server.join()           # the workers' reading of the final figures
    sys.exit(0)

task, workers = server.task_index, cluster.num_tasks("worker")
rng = np.random.default_rng(100 + task)
xb = rng.standard_normal((16, 4)).astype(np.float32)
yb = (xb @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                              worker_device=f"/job:worker/task:{task}")):
    w = mf.get_variable("w", [4], initializer=mf.zeros_initializer())
    step = mf.train.get_or_create_global_step()
    x = mf.placeholder(mf.float32, [None, 4], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y))
    if case == "sync":
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.05),
                                             workers, workers)
    else:   # the same rate per round: each of the W workers applies 1/W of it
        opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.05 / workers),
                                               staleness=None if bound < 0 else bound)
    train = opt.minimize(loss, global_step=step)
    record = opt.clocks_record() if case != "sync" and bound >= 0 else None
    histogram = opt.staleness_histogram() if case != "sync" else None
hooks = [opt.make_session_run_hook(server.is_chief)] if case == "sync" else []
my_steps = 3 if case == "rest" and task == workers - 1 else steps
leads = []
with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief, hooks=hooks,
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       save_checkpoint_secs=None) as sess:
    for _ in range(my_steps):
        if case == "slow" and task == 0:
            time.sleep(0.02)
        if record is not None:
            leads.append(int(sess.run([train, opt.lead], {x: xb, y: yb})[1]))
        else:
            sess.run(train, {x: xb, y: yb})
    out = {"task": task, "leads": leads, "w": sess.run(w).tolist()}
server.join()       # every worker done: the figures below are final
with mf.Session(server.target) as sess:
    out["step"] = int(sess.run(step))
    if record is not None:
        done, max_lead, waits = sess.run(record)
        out.update(done=done.tolist(), max_lead=int(max_lead), waits=int(waits))
    if histogram is not None:
        values, counts, _ = sess.run(histogram)
        out["staleness"] = dict(zip(map(int, values), map(int, counts)))
print(json.dumps(out), flush=True)
server.join()
