"""Uneven data in allreduce training: worker t has STEPS[t] batches, trains on them with
AllreduceOptimizer(joinable=True), then calls mf.train.join. Writes OUT_DIR/task<t>.json:
its batches, how many join steps it ran, the final w and global step.
Usage: mpiexec -n 2 python uneven_data.py OUT_DIR STEPS0 STEPS1 [COMPRESSION]
UNEVEN_BUILD=mode builds it with TrainingMode("allreduce", ..., joinable=True) instead;
UNEVEN_HOOKS=1 trains with the hooks a script has (progress lines, summaries of the loss
every step, checkpoints, StopAtStepHook at the last step), which join must not run."""

import json
import os
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
by_mode = os.environ.get("UNEVEN_BUILD") == "mode"
with_hooks = os.environ.get("UNEVEN_HOOKS") == "1"
mode = mf.train.TrainingMode("allreduce", cluster, task, joinable=True,
                             compression=compression) if by_mode else None
with mode.scope() if by_mode else mf.device(f"/job:worker/task:{task}"):
    w = mf.get_variable("w", [5], initializer=mf.constant_initializer(0.5))
    x = mf.placeholder(mf.float32, [None, 5], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y))
    mf.summary.scalar("loss", loss)
    step = mf.train.get_or_create_global_step()
    momentum = mf.train.MomentumOptimizer(0.05, 0.9)
    opt = mode.optimizer(momentum) if by_mode else mf.train.AllreduceOptimizer(
        momentum, joinable=True, compression=compression)
    train = opt.minimize(loss, global_step=step)
hooks = [mf.train.StopAtStepHook(last_step=max(steps))] if with_hooks else []
with mf.train.MonitoredTrainingSession(
        server.target, is_chief=server.is_chief, hooks=hooks,
        checkpoint_dir=str(out_dir / "ckpt") if with_hooks else None,
        save_summaries_steps=1 if with_hooks else None, log_step_count_steps=None,
        save_checkpoint_secs=None, progress_bar=with_hooks) as sess:
    for xb, yb in batches:
        sess.run(train, {x: xb, y: yb})
    joined = mf.train.join(sess)
    # Read through the raw session: StopAtStepHook may have stopped this one.
    final_w, final_step = sess.run_step_fn(lambda context: context.session.run([w, step]))
(out_dir / f"task{task}.json").write_text(json.dumps({
    "batches": [[xb.tolist(), yb.tolist()] for xb, yb in batches], "join_steps": joined,
    "w": final_w.tolist(), "step": int(final_step)}))
