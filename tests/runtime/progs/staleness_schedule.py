"""A deterministic schedule of stale gradients on a ps: worker 1 reads the variables at
global step 0 and is held in its step until worker 0 has applied 3 steps, so its gradient
is applied 3 steps stale; worker 0 reads the record once worker 1 says its step is done.
Usage: mpiexec -n 3 python staleness_schedule.py RULE MAX (RULE: none|inverse; MAX: -1
for no bound). Prints the ps's record and the final values."""

import json
import sys
import time

import mpiflow as mf
from mpiflow.ops.registry import apply_op

rule = None if sys.argv[1] == "none" else sys.argv[1]
bound = None if int(sys.argv[2]) < 0 else int(sys.argv[2])
cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "ps":
    server.join()
    sys.exit(0)

task = server.task_index
with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                              worker_device=f"/job:worker/task:{task}")):
    w = mf.get_variable("w", initializer=mf.constant(1.0))
    started = mf.get_variable("started", initializer=mf.constant(0.0), trainable=False)
    step = mf.train.get_or_create_global_step()
    with mf.device("/job:ps/task:0"):
        # Worker 1's step says it has read its variables, then waits for worker 0's word.
        mark = mf.assign(started, 1.0)
        with mf.control_dependencies([mark]):
            go = apply_op("SyncTokenWait", [mf.constant(0, mf.int64)],
                          {"shared_name": "schedule"}).outputs[0]
        release = apply_op("SyncTokenRelease", [mf.constant(1, mf.int64)],
                           {"shared_name": "schedule"})
        # Worker 1 says its step is applied; worker 0 reads the record only after that.
        applied = apply_op("SyncTokenRelease", [mf.constant(1, mf.int64)],
                           {"shared_name": "applied"})
        after_it = apply_op("SyncTokenWait", [mf.constant(0, mf.int64)],
                            {"shared_name": "applied"}).outputs[0]
    held = mf.square(w) + 0.0 * mf.cast(go, mf.float32)
    opt = mf.train.StalenessAwareOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                           staleness_lr=rule, max_staleness=bound)
    train = opt.minimize(held if task == 1 else mf.square(w), global_step=step)
    histogram = opt.staleness_histogram()

with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief,
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       save_checkpoint_secs=None) as sess:
    if task == 0:
        while sess.run(started) != 1.0:         # worker 1 has read at global step 0
            time.sleep(0.01)
        seen = [int(sess.run([train, opt.staleness])[1]) for _ in range(3)]
        sess.run(release)
        sess.run(after_it)
    else:
        seen = [int(sess.run([train, opt.staleness])[1])]
        sess.run(applied)
    values, counts, dropped = sess.run(histogram)
    print(json.dumps({"task": task, "seen": seen, "w": float(sess.run(w)),
                      "step": int(sess.run(step)),
                      "histogram": dict(zip(map(int, values), map(int, counts))),
                      "dropped": int(dropped)}), flush=True)
server.join()
