"""Variables made after minimize() are replicas too: worker 0's values reach every worker.

Usage: mpiexec -n K python late_replicas.py MODE SESSION [mismatch]   (MPIFLOW_PS ps)
  MODE     allreduce or hybrid (TrainingMode)
  SESSION  session (mf.Session + TrainingMode.initialize), monitored
           (MonitoredTrainingSession) or supervisor (Supervisor.prepare_or_wait_for_session)
  mismatch worker 1 makes one more variable after minimize than the others: every worker
           must be refused, naming it, instead of training on unequal replicas

No random seed is set, so each worker draws its own initial values, as a script without
set_random_seed does. After minimize each worker makes the shadows of an
ExponentialMovingAverage over the trainable variables (they start at their variable's
initial value, the worker's own draw) and a plain variable. The check, on every worker:
right after the session is made and after the first step, the shadows and the plain
variable are bit-identical on every worker, and the shadows equal a single-process
ExponentialMovingAverage over worker 0's initial values and its first step's values.
Prints "OK MODE SESSION" per worker, "REFUSED <message>" on a refused mismatch.
"""

import hashlib
import sys

import numpy as np
from mpi4py import MPI

import mpiflow as mf

DECAY = 0.75
B = 4


def digest(values):
    h = hashlib.sha256()
    for v in values:
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


def main(mode_name, session_kind, mismatch):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    workers = MPI.COMM_WORLD.Split(0 if server.job_name == "worker" else MPI.UNDEFINED)
    if server.job_name == "ps":
        server.join()
        return
    task, chief = server.task_index, server.is_chief
    mode = mf.train.TrainingMode(mode_name, cluster, task)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None], name="ids")
        x = mf.placeholder(mf.float32, [None, 3], name="x")
        table = mf.get_variable("table", [10, 2])
        w = mf.get_variable("w", [5, 1])
        h = mf.concat([x, mf.nn.embedding_lookup(table, ids)], 1)
        loss = mf.reduce_mean(mf.square(mf.matmul(h, w)))
        step = mf.train.get_or_create_global_step()
        train = mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(
            loss, global_step=step)
        ema = mf.train.ExponentialMovingAverage(DECAY)
        with mf.control_dependencies([train]):
            train = ema.apply([w])
        late = mf.Variable(mf.random_normal([4]), name="late")
        if mismatch and task == 1:
            mf.Variable(mf.random_normal([2]), name="only_on_worker_1")
    shadow = ema.average(w)
    rng = np.random.default_rng(task)
    feed = {ids: rng.integers(0, 10, B), x: rng.standard_normal((B, 3)).astype(np.float32)}

    try:
        sess, close = open_session(session_kind, mode, server, chief, sess_graph=train.graph)
    except mf.errors.OpError as exc:
        print(f"REFUSED {type(exc).__name__}: {exc.message}", flush=True)
        workers.Barrier()
        server.join()
        return
    try:
        w0, s0, late0 = sess.run([w, shadow, late])
        agreed = workers.allgather(digest([w0, s0, late0]))
        assert len(set(agreed)) == 1, f"after the session was made the replicas differ: {agreed}"
        np.testing.assert_array_equal(s0, w0)       # the shadow starts at w's initial value
        sess.run(train, feed)
        w1, s1, late1 = sess.run([w, shadow, late])
        agreed = workers.allgather(digest([w1, s1, late1]))
        assert len(set(agreed)) == 1, f"after the first step the replicas differ: {agreed}"
        np.testing.assert_array_equal(late1, late0)
        expected = s0 - np.float32(1 - DECAY) * (s0 - w1)   # one process's shadow update
        np.testing.assert_allclose(s1, expected, rtol=1e-6, atol=1e-7)
    finally:
        close(sess)
    print(f"OK {mode_name} {session_kind}", flush=True)
    workers.Barrier()
    server.join()


def open_session(kind, mode, server, chief, sess_graph):
    if kind == "monitored":
        sess = mf.train.MonitoredTrainingSession(server.target, is_chief=chief,
                                                 log_step_count_steps=0, progress_bar=False)
        return sess, lambda s: s.close()
    if kind == "supervisor":
        sv = mf.train.Supervisor(is_chief=chief, logdir=None)
        return sv.prepare_or_wait_for_session(server.target), lambda s: sv.stop()
    sess = mf.Session(server.target)
    try:
        mode.initialize(sess, chief)
    except BaseException:
        sess.close()
        raise
    return sess, lambda s: s.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "mismatch" in sys.argv[3:])
