"""MonitoredTrainingSession across ranks: 1 ps + workers.
Usage: mpiexec -n K python monitored_training.py MODE LAST_STEP CHECKPOINT_DIR

MODE "train": the chief starts its session 1 s late, so the other workers wait for it
(while it restores CHECKPOINT_DIR's latest checkpoint, if any, or initializes); every
worker trains with StopAtStepHook(last_step=LAST_STEP) and reports how long it waited and
the global step at its start and end. MODE "chief_never_initializes": the chief creates no
session, and each other worker reports the error its wait ends with.
"""

import sys
import time

import numpy as np

import mpiflow as mf


class StartStep(mf.train.SessionRunHook):
    """Remember the global step when the session is ready."""

    def begin(self):
        self._step = mf.train.get_global_step()

    def after_create_session(self, session, coord):
        self.value = int(session.run(self._step))


def main(mode, last_step, checkpoint_dir):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    rng = np.random.default_rng(task)
    xs = rng.normal(size=(16, 3)).astype(np.float32)
    ys = xs @ np.array([1.0, -2.0, 0.5], np.float32)
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x = mf.placeholder(mf.float32, [None, 3], name="x")
        y = mf.placeholder(mf.float32, [None], name="y")
        w = mf.Variable(np.zeros(3, np.float32), name="w")
        loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y), name="loss")
        step = mf.train.get_or_create_global_step()
        train_op = mf.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)
    mf.summary.scalar("loss", loss)

    if mode == "chief_never_initializes":
        if server.is_chief:
            return
        try:
            mf.train.MonitoredTrainingSession(server.target, is_chief=False)
        except mf.errors.DeadlineExceededError as exc:
            print(f"TIMEOUT worker {task}: {exc}", flush=True)
        return

    if server.is_chief:
        time.sleep(1.0)
    final = mf.train.FinalOpsHook(step)
    started = StartStep()
    start = time.monotonic()
    with mf.train.MonitoredTrainingSession(
            server.target, is_chief=server.is_chief,
            checkpoint_dir=checkpoint_dir if server.is_chief else None,
            save_summaries_steps=5, log_step_count_steps=10,
            hooks=[mf.train.StopAtStepHook(last_step=last_step), final, started]) as sess:
        waited = time.monotonic() - start
        runs = 0
        while not sess.should_stop():
            sess.run(train_op, {x: xs, y: ys})
            runs += 1
    print(f"OK worker {task}: waited {waited:.2f} s, {runs} runs, steps {started.value} to "
          f"{final.final_ops_values}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
