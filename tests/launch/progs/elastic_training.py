"""ps training that loses a worker, for elastic training's tests.

Usage: elastic_training.py CHECKPOINT_DIR LAST_STEP FAULT [VICTIM_TASK [MODE [BACKUPS]]]

1 ps, the other ranks workers; MODE "async" (default), "ssp" (bounded staleness, k=1) or
"sync" (SyncReplicasOptimizer with BACKUPS backup workers, default 1: replicas_to_aggregate
= workers - BACKUPS). Every step adds exactly 1
to the variable ``v`` and to the global step, in one apply on the ps: at the end
``v == global step`` holds only if no step was ever half applied. FAULT strikes worker
VICTIM_TASK (default 1) once the global step passes 20: ``raise`` (an exception),
``kill`` (SIGKILL to itself between steps), ``kill-in-flight`` (SIGKILL from a thread at a
random moment of the steps that follow, while the model also trains a variable of 8 MB,
checkpointed every step: a pull, a push or a save of it is mostly on the wire). The ps
prints ``final v=<v> step=<global step>`` once every worker has left; every worker
``start``/``done`` lines.
"""

import os
import random
import signal
import sys
import threading
import time

import numpy as np

import mpiflow as mf


def main(checkpoint_dir, last_step, fault, victim, mode, backups):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    in_flight = fault == "kill-in-flight"
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        v = mf.get_variable("v", [], initializer=mf.zeros_initializer())
        step = mf.train.get_or_create_global_step()
        if in_flight:
            big = mf.get_variable("big", [2_000_000], initializer=mf.zeros_initializer())
    if server.job_name == "ps":
        server.join()
        # Every worker has left: the variables, here, are still. Read them (the only
        # moment no apply can come between the two reads).
        with mf.Session(server.target) as plain:
            final_v, final_step = plain.run([v, step])
        print(f"final v={np.float32(final_v):g} step={final_step}", flush=True)
        return
    task = server.task_index
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        opt = mf.train.GradientDescentOptimizer(1.0)
        hooks = [mf.train.StopAtStepHook(last_step=last_step)]
        if mode == "ssp":
            opt = mf.train.StalenessAwareOptimizer(opt, staleness=1)
        if mode == "sync":
            workers = cluster.num_tasks("worker")
            opt = mf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=workers - backups,
                                                 total_num_replicas=workers)
        loss = -v - mf.reduce_sum(big) * 1e-6 if in_flight else -v
        train = opt.minimize(loss, global_step=step)
        if mode == "sync":
            hooks.append(opt.make_session_run_hook(server.is_chief))
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=1 if in_flight else 10, progress_bar=False,
            hooks=hooks) as sess:
        # Read through the raw session: a worker that starts after the others reached
        # the last step finds should_stop() already True, and a run would be refused.
        print(f"start {sess.run_step_fn(lambda ctx: ctx.session.run(step))}", flush=True)
        global_step = 0
        while not sess.should_stop():
            _, read = sess.run([train, step])
            global_step = read + 1      # the step read it before its own increment
            if task == victim and global_step > 20:
                if fault == "raise":
                    raise RuntimeError(f"worker {task} failed on purpose")
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if in_flight:
                    in_flight = False       # one killer
                    threading.Timer(random.uniform(0.0, 0.3),
                                    os.kill, (os.getpid(), signal.SIGKILL)).start()
            time.sleep(0.01)
    print(f"done {global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3],
         int(sys.argv[4]) if len(sys.argv) > 4 else 1,
         sys.argv[5] if len(sys.argv) > 5 else "async",
         int(sys.argv[6]) if len(sys.argv) > 6 else 1)
