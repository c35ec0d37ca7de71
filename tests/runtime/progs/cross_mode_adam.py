"""An Adam model with a table, saved in one training mode and resumed in another, for the
checkpoint tests of Adam's beta powers across modes (docs/checkpoints.md).

Usage: mpiexec -n K python cross_mode_adam.py MODE PS CHECKPOINT_DIR STEPS

Trains STEPS steps in MODE ("allreduce" or "hybrid", with PS ps tasks) under a
MonitoredTrainingSession that resumes from and saves to CHECKPOINT_DIR; the chief prints
``result {json}`` with the global step and every beta power it holds.
"""

import json
import sys

import numpy as np

import mpiflow as mf


def main(mode_name, ps, checkpoint_dir, steps):
    cluster = mf.train.ClusterSpec.from_mpi(ps=int(ps))
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    mode = mf.train.TrainingMode(mode_name, cluster, task, shard_rows=8)
    with mode.scope():
        mf.set_random_seed(7)
        ids = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("table", [16, 4])
        w = mf.get_variable("w", [4, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(mf.nn.embedding_lookup(table, ids), w)))
        step = mf.train.get_or_create_global_step()
        train = mode.optimizer(mf.train.AdamOptimizer(0.01)).minimize(loss, global_step=step)
    powers = {v.op.name: v for v in mf.global_variables() if "power" in v.op.name}
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=100, log_step_count_steps=0,
            progress_bar=False) as sess:
        for _ in range(int(steps)):
            sess.run(train, {ids: np.array([task, 3, 3, 9])})
        values = {name: float(v) for name, v in sess.run(powers).items()}
        if server.is_chief:
            print("result " + json.dumps({"step": int(sess.run(step)), "powers": values}),
                  flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
