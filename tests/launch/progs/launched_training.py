"""Asynchronous ps training with checkpoints, for mpiflow launch's tests.

Usage: mpiflow launch -n 3 launched_training.py CHECKPOINT_DIR LAST_STEP [FAULT]

1 ps + 2 workers; MonitoredTrainingSession saves every 10 global steps. Each worker prints
``start <global step>`` once its session is ready and ``done <global step>`` at the end.
FAULT (on the first start only, MPIFLOW_RESTART=0) strikes worker 1 once the global step
passes 25 and a checkpoint exists: ``raise`` raises, ``kill`` kills the rank with
SIGKILL, ``hang`` stops it in a deadlock; ``print`` has every rank print an untagged line;
``term_at_start`` has worker 1 send itself SIGTERM while its session is being created.
A FAULT ending ``_after_helper`` has every rank first run a helper process that imports
mpiflow (with the rank's environment), then strikes as the FAULT before it.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import mpiflow as mf


def deadlocked_in_user_code():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def strike(fault):
    if fault == "raise":
        raise RuntimeError("worker 1 failed on purpose")
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        print("HANGING", flush=True)
        deadlocked_in_user_code()


class SigtermInCreation(mf.train.SessionRunHook):
    """Worker 1 gets SIGTERM as its session is being created (Slurm's time limit reaching
    a job that is still starting), and gives the signal's thread time to begin the stop."""

    def begin(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)


def main(checkpoint_dir, last_step, fault):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if fault.endswith("_after_helper"):
        subprocess.run([sys.executable, "-c", "import mpiflow"], check=True)
        fault = fault[:-len("_after_helper")]
    if fault == "print":
        print(f"plain line from {server.job_name}:{server.task_index}", flush=True)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        x = mf.placeholder(mf.float32, [None, 4])
        w = mf.get_variable("w", [4, 1])
        loss = mf.reduce_mean(mf.square(mf.matmul(x, w) - 1.0))
        step = mf.train.get_or_create_global_step()
        train = mf.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)
    first_start = os.environ.get("MPIFLOW_RESTART", "0") == "0"
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=10, progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=last_step)] +
            ([SigtermInCreation()] if fault == "term_at_start" and task == 1 else [])) as sess:
        # Read through the raw session: a worker that starts after the others reached
        # the last step finds should_stop() already True, and a run would be refused.
        print(f"start {sess.run_step_fn(lambda ctx: ctx.session.run(step))}", flush=True)
        global_step = 0
        while not sess.should_stop():
            # Reading the next batch, between the check and the run, as real loops do: a
            # graceful stop (SIGTERM) mostly begins in here.
            time.sleep(0.01)
            _, read = sess.run([train, step], {x: np.ones((8, 4), np.float32)})
            global_step = read + 1      # the step read it before its own increment
            if fault and first_start and task == 1 and global_step > 25 and \
                    os.path.exists(os.path.join(checkpoint_dir, "checkpoint")):
                strike(fault)
    print(f"done {global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
