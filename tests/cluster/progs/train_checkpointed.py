"""Async ps training that checkpoints as it goes, for host-failure and resume tests.

Usage: mpiexec ... python train_checkpointed.py CHECKPOINT_DIR LAST_STEP [STEP_SLEEP_S]

Two ps spread one per host (ClusterSpec.from_mpi(ps=2, policy="spread")), every other rank
a worker, MonitoredTrainingSession saving every 25 global steps. Each worker prints
``start <global step>`` after its session is ready and ``done <global step>`` at the end;
``STEP_SLEEP_S`` slows the workers so a test can strike mid-training.
"""

import sys
import time

import numpy as np

import mpiflow as mf


def main(checkpoint_dir, last_step, step_sleep):
    cluster = mf.train.ClusterSpec.from_mpi(ps=2, policy="spread")
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        mf.set_random_seed(3)
        x = mf.placeholder(mf.float32, [None, 8])
        y = mf.placeholder(mf.float32, [None, 1])
        hidden = mf.nn.relu(mf.matmul(x, mf.get_variable("w1", [8, 16])))
        loss = mf.reduce_mean(mf.square(mf.matmul(hidden, mf.get_variable("w2", [16, 1])) - y))
        step = mf.train.get_or_create_global_step()
        train = mf.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
    rng = np.random.default_rng(task)
    hooks = [mf.train.StopAtStepHook(last_step=last_step)]
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=25, hooks=hooks, progress_bar=False) as sess:
        # Read through the raw session: a worker that starts after the others reached
        # the last step finds should_stop() already True, and a run would be refused.
        print(f"start {sess.run_step_fn(lambda ctx: ctx.session.run(step))}", flush=True)
        global_step = None
        while not sess.should_stop():
            xb = rng.standard_normal((16, 8)).astype(np.float32)
            _, read = sess.run([train, step], {x: xb, y: xb[:, :1] * 2})
            global_step = read + 1      # the step read it before its own increment
            time.sleep(step_sleep)
    print(f"done {global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
