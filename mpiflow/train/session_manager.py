"""SessionManager: a session whose model is ready (TF1's ``session_manager``).

The chief restores the latest checkpoint or runs the init op; other workers poll the ready
op, backing off, until the chief has done so, and give up after a deadline with an error
naming what is still uninitialized. Variables every worker holds its own copy of
(``GraphKeys.REPLICATED_VARIABLES``: allreduce mode, hybrid's dense part) are the one
thing a non-chief initializes itself, since nobody else can reach them; once the model is
ready, every worker's copies take worker 0's values (``broadcast_replicas``), so a
restore on the chief reaches every replica. The replicated variables are those on the
workers' tasks when the session is made, not only when ``minimize`` ran
(``register_replicas``): an ExponentialMovingAverage's shadows, or any variable made
after it, start at each worker's own draw. mpiflow has no string tensors, so the ready op is not
TensorFlow's list of names: ``report_uninitialized_variables`` returns a bool mask (True =
uninitialized) and the graph keeps the matching variable names on the Python side.
"""

from __future__ import annotations

import time

import numpy as np

from mpiflow import config as config_module
from mpiflow import errors
from mpiflow.framework.device_spec import job_and_task
from mpiflow.framework.graph import Graph, GraphKeys, get_default_graph
from mpiflow.framework.per_graph import PerGraph
from mpiflow.framework.scopes import device
from mpiflow.logger import get_logger
from mpiflow.ops import constant_ops, math_ops, state_ops
from mpiflow.ops.array_ops import stack
from mpiflow.ops.variables import global_variables, local_variables
from mpiflow.runtime.session import Session
from mpiflow.train.checkpoint_management import checked_candidates
from mpiflow.train.saver import Saver

_LOG = get_logger("mpiflow.train")
# The variable names behind each report_uninitialized_variables mask, per graph.
_REPORT_NAMES = PerGraph(dict)
# Graph collection: the optimizers that own replicated variables (AllreduceOptimizer and
# the modes built on it); each records and broadcasts those of its process group.
REPLICA_OWNERS = "replica_owners"
# Polls of the ready op start fast (the chief is usually a moment behind) and back off.
_FIRST_POLL_S = 0.01
_MAX_POLL_S = 0.25
_LOG_EVERY_S = 10.0
_DIAGNOSE_AFTER_S = 2.0         # a chief that is merely late is not suspected before
_DIAGNOSE_EVERY_S = 5.0


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    """Return a bool vector, True for each variable of ``var_list`` not yet initialized.

    ``var_list`` defaults to the global and local variables. The names of the variables
    (in order) are kept by the graph; ``uninitialized_names`` maps a fetched mask to them.
    """
    graph = get_default_graph()
    if var_list is None:
        var_list = global_variables() + local_variables()
    var_list = list(var_list)
    with graph.name_scope(name):
        if var_list:
            initialized = stack([state_ops.is_variable_initialized(v) for v in var_list])
            mask = math_ops.logical_not(initialized)
        else:
            mask = constant_ops.constant(np.zeros([0], np.bool_))
    _REPORT_NAMES.of(graph)[mask] = [v.op.name for v in var_list]
    return mask


def uninitialized_names(report, mask) -> list:
    """Return the names of the variables ``mask`` (a fetched ``report``) marks uninitialized.

    A ready op not made by ``report_uninitialized_variables`` yields ``"#i"`` positions.
    """
    mask = np.asarray(mask, dtype=bool).reshape(-1)
    names = _REPORT_NAMES.get(report.graph, {}).get(report)
    if names is None or len(names) != mask.size:
        names = [f"#{i}" for i in range(mask.size)]
    return [n for n, m in zip(names, mask) if m]


def register_replicas(graph) -> None:
    """Record as replicated (with an op broadcasting them from worker 0) every variable of
    ``graph`` on the workers' tasks made since its replica owners last looked: those made
    after ``minimize`` (an ExponentialMovingAverage's shadows, a user's variable) start
    at each worker's own random draw, and would otherwise stay different on each worker.

    Sessions call it as they are made: ``Scaffold.finalize`` (MonitoredTrainingSession,
    Supervisor) before it finalizes the graph, ``TrainingMode.initialize`` and the
    broadcast hook before they initialize and broadcast. Every worker building the same
    graph registers the same variables at the same points, so the broadcasts are issued
    in one order on all of them; a variable made by some workers only makes their
    broadcasts differ, which the collectives' cross-rank check refuses, naming it.

    Raises:
        FailedPreconditionError: new replicated variables, but the graph is finalized
            (no broadcast op can be added): they are named.
    """
    for owner in graph.get_collection(REPLICA_OWNERS):
        owner.register_replicas(graph)


def initialize_replicas(session) -> None:
    """Initialize this worker's own copies of the replicated variables: no other task can
    (they live on this one), and ``broadcast_replicas`` then gives them worker 0's values."""
    replicated = session.graph.get_collection(GraphKeys.REPLICATED_VARIABLES)
    if replicated:
        session.run([v.initializer for v in replicated])


def broadcast_replicas(session) -> None:
    """Make every worker's replicated variables equal to worker 0's, once per session.

    Runs the graph's ``REPLICA_BROADCAST_OPS`` (collectives: every worker of the group does
    this for its session, after worker 0 initialized or restored its copies). A session on
    which it already ran is left alone.
    """
    ops = session.graph.get_collection(GraphKeys.REPLICA_BROADCAST_OPS)
    if ops and not session.replicas_broadcast:
        for op in ops:      # one at a time: their collectives issued in one order everywhere
            session.run(op)
        session.replicas_broadcast = True


def _built_otherwise(sess, ready_op, master, config) -> str | None:
    """Why the variables ``ready_op`` reports uninitialized will never be initialized where
    this worker looks, if the tasks that hold variables say so: one the chief initialized
    on another task than this worker places it on, or whole where this worker splits it
    into parts (or the reverse). None when nothing says so: the chief may just be late."""
    try:
        missing = uninitialized_names(ready_op, sess.run(ready_op))
        graph = ready_op.graph
        placed = {v.op.name: job_and_task(v.device) for v in
                  graph.get_collection(GraphKeys.GLOBAL_VARIABLES) +
                  graph.get_collection(GraphKeys.LOCAL_VARIABLES)}
        if master and missing:
            own = _on_own_task(graph, missing, placed)
            if own:
                return own
        tasks = sorted({t for t in placed.values() if None not in t})
        if not missing or not tasks:
            return None
        probe = Graph()
        with probe.as_default():
            held_ops = {}
            for job, task in tasks:
                with device(f"/job:{job}/task:{task}"):
                    held_ops[(job, task)] = state_ops.variables_held()
        with Session(master, graph=probe, config=config) as probing:
            held = {t: set(np.asarray(v).tolist()) for t, v in probing.run(held_ops).items()}
    except errors.OpError:
        return None             # the diagnosis never stands in the wait's way
    anywhere = set().union(*held.values())
    problems = []
    for name in missing:
        mine = placed.get(name, (None, None))
        found = [t for t, hashes in held.items() if state_ops.name_hash(name) in hashes]
        base = name.rsplit("/part_", 1)[0]
        if found and mine not in found:
            here = "itself" if None in mine else f"/job:{mine[0]}/task:{mine[1]}"
            problems.append(f"'{name}' is initialized on /job:{found[0][0]}/task:"
                            f"{found[0][1]}, but this worker places it on {here}")
        elif not found and base != name and state_ops.name_hash(base) in anywhere:
            problems.append(f"'{base}' is initialized whole, but this worker splits it "
                            f"into parts ('{name}')")
        elif not found and state_ops.name_hash(f"{name}/part_0") in anywhere:
            problems.append(f"'{name}' is initialized in parts ('{name}/part_0', ...), but "
                            "this worker builds it whole")
    if not problems:
        return None
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return ("This worker built its variables otherwise than the chief: " +
            "; ".join(problems[:5]) + more + ". Every worker must make the same variables, "
            "in the same order (replica_device_setter spreads them over the ps in the order "
            "they are made) and with the same partitioner")


def _on_own_task(graph, missing, placed) -> str | None:
    """Why global variables made with no task in their device (outside
    ``replica_device_setter``) will never be initialized for this worker, or None.

    Such a variable lives on the task of each session that runs it: the chief initializes
    its own copy, on its own task, and nobody initializes this worker's, so waiting for
    the chief is waiting for ever (a global step made before the device scope is the
    usual case). Replicated variables (this worker initializes them itself) and local
    variables (its local_init_op does) are not among them. ``placed``: each variable's
    (job, task), as ``_built_otherwise`` found them."""
    own = {name for name, (job, _) in placed.items() if job is None}
    own -= {v.op.name for v in graph.get_collection(GraphKeys.LOCAL_VARIABLES) +
            graph.get_collection(GraphKeys.REPLICATED_VARIABLES)}
    names = [n for n in missing if n in own]
    if not names:
        return None
    listed = errors.first_of((f"'{n}'" for n in names), 5)
    return (f"{listed}: made outside replica_device_setter (no task in the device), so "
            "this worker's copy lives on its own task, where nobody initializes it (the "
            "chief initializes its own copy, on its task): make it inside the "
            "replica_device_setter scope (or TrainingMode.scope()), as the other variables, "
            "and every worker shares the one on the ps")


def _restore_newest(sess, saver, checkpoint_dir) -> bool:
    """Restore the newest checkpoint of ``checkpoint_dir`` that is whole; return False
    when the directory has none at all.

    A checkpoint that is gone, of mixed saves or damaged is passed over (logged) for the
    next older one, so training never restarts from scratch while a good checkpoint
    exists, and the rotation that follows never deletes the checkpoints it resumes from.

    Raises:
        DataLossError: checkpoints are there but none can be restored; the message says
            why for each and how to start fresh on purpose.
    """
    problems = []
    for path, problem in checked_candidates(checkpoint_dir):
        if problem is None:
            try:
                SessionManager._restore(sess, saver, path)
                return True
            except (errors.DataLossError, errors.NotFoundError) as exc:
                problem = exc.message
        _LOG.warning("Passing over checkpoint %s: %s", path, problem)
        problems.append(f"{path}: {problem}")
    if problems:
        raise errors.DataLossError(
            f"No checkpoint in '{checkpoint_dir}' can be restored, so training would start "
            "over: " + "; ".join(problems) + ". To start afresh on purpose, move these files "
            "away or give another checkpoint_dir")
    return False


def get_saver_or_default():
    """Return the saver in the SAVERS collection, making a sharded ``Saver`` if there is none.

    Call it before the graph is finalized: a new Saver adds ops.
    """
    graph = get_default_graph()
    savers = graph.get_collection(GraphKeys.SAVERS)
    if len(savers) > 1:
        raise errors.InvalidArgumentError(
            f"The SAVERS collection holds {len(savers)} savers, expected at most one: pass "
            "the one to use as saver= (or in a Scaffold)")
    if savers:
        return savers[0]
    saver = Saver(sharded=True, allow_empty=True)
    graph.add_to_collection(GraphKeys.SAVERS, saver)
    return saver


class SessionManager:
    """Make sessions that are ready to train: initialized, restored, or waited for.

    Args:
        local_init_op: run in each new session once ``ready_for_local_init_op`` is ready.
        ready_op: bool mask, True where something is uninitialized (None: always ready).
        ready_for_local_init_op: as ``ready_op``, checked before ``local_init_op``.
        graph: the graph (default graph).
    """

    def __init__(self, local_init_op=None, ready_op=None, ready_for_local_init_op=None,
                 graph=None, recovery_wait_secs=30, local_init_run_options=None):
        self._local_init_op = local_init_op
        self._ready_op = ready_op
        self._ready_for_local_init_op = ready_for_local_init_op
        self._graph = graph if graph is not None else get_default_graph()

    def prepare_session(self, master, init_op=None, saver=None, checkpoint_dir=None,
                        checkpoint_filename_with_path=None, wait_for_checkpoint=False,
                        max_wait_secs=7200, config=None, init_feed_dict=None, init_fn=None):
        """Return a session with the model restored from a checkpoint or initialized.

        Raises:
            FailedPreconditionError: nothing to initialize with, or the init ops left
                variables uninitialized (the message names them).
        """
        sess, restored = self._restore_checkpoint(
            master, saver, checkpoint_dir, checkpoint_filename_with_path,
            wait_for_checkpoint, max_wait_secs, config)
        try:
            if not restored:
                if init_op is None and not init_fn and self._local_init_op is None:
                    raise errors.FailedPreconditionError(
                        "Model is not initialized and no init_op, init_fn or local_init_op "
                        "was given")
                if init_op is not None:
                    sess.run(init_op, feed_dict=init_feed_dict)
                if init_fn:
                    init_fn(sess)
            ok, message = self._try_run_local_init_op(sess)
            if not ok:
                raise errors.FailedPreconditionError(
                    f"Init operations did not make the model ready for local_init: {message}")
            ready, message = self._model_ready(sess, self._ready_op)
            if not ready:
                raise errors.FailedPreconditionError(
                    f"Init operations did not make the model ready: {message}")
            broadcast_replicas(sess)
        except BaseException:
            sess.close()
            raise
        return sess

    def recover_session(self, master, saver=None, checkpoint_dir=None,
                        checkpoint_filename_with_path=None, wait_for_checkpoint=False,
                        max_wait_secs=7200, config=None):
        """Return ``(session, is_ready)``: restored from a checkpoint and ready, or not."""
        sess, restored = self._restore_checkpoint(
            master, saver, checkpoint_dir, checkpoint_filename_with_path,
            wait_for_checkpoint, max_wait_secs, config)
        if not restored:
            return sess, False
        ok, _ = self._try_run_local_init_op(sess)
        if not ok:
            return sess, False
        return sess, self._model_ready(sess, self._ready_op)[0]

    def wait_for_session(self, master, config=None, max_wait_secs=None):
        """Return a session once another task (the chief) has made the model ready.

        Args:
            max_wait_secs: how long to wait; None: MPIFLOW_TIMEOUT.

        Raises:
            DeadlineExceededError: the model is not ready after ``max_wait_secs``; the
                message names the variables still uninitialized.
        """
        timeout = config_module.get("MPIFLOW_TIMEOUT") if max_wait_secs is None \
            else float(max_wait_secs)
        source = "MPIFLOW_TIMEOUT" if max_wait_secs is None else "max_wait_secs"
        sess = Session(master, graph=self._graph, config=config)
        start = last_log = time.monotonic()
        next_diagnosis = start + _DIAGNOSE_AFTER_S
        pause = _FIRST_POLL_S
        try:
            initialize_replicas(sess)
            while True:
                ok, message = self._try_run_local_init_op(sess)
                if ok:
                    ok, message = self._model_ready(sess, self._ready_op)
                    if ok:
                        broadcast_replicas(sess)
                        return sess
                now = time.monotonic()
                if self._ready_op is not None and now >= next_diagnosis:
                    next_diagnosis = now + _DIAGNOSE_EVERY_S
                    problem = _built_otherwise(sess, self._ready_op, master, config)
                    if problem is not None:
                        raise errors.FailedPreconditionError(f"{message}. {problem}")
                if now - start >= timeout:
                    raise errors.DeadlineExceededError(
                        f"Waited {now - start:.1f} s ({source}={timeout:g}) on session "
                        f"{master or 'in-process'} for the model to be initialized: "
                        f"{message}. The chief has not initialized them: is it running, and "
                        "did it create its MonitoredTrainingSession (is_chief=True)? If it "
                        f"needs longer to start, raise {source}. If the chief trains, this "
                        "worker may place them on other ps tasks than the chief does: "
                        "replica_device_setter spreads variables over the ps in the order "
                        "they are made, so a variable made on some workers only moves the "
                        "ones after it; every worker must make the same variables in the "
                        "same order.")
                if now - last_log >= _LOG_EVERY_S:
                    _LOG.info("Waiting for the chief to initialize the model: %s", message)
                    last_log = now
                time.sleep(min(pause, max(0.0, start + timeout - now)))
                pause = min(2 * pause, _MAX_POLL_S)
        except BaseException:
            sess.close()
            raise

    def _restore_checkpoint(self, master, saver, checkpoint_dir, checkpoint_filename_with_path,
                            wait_for_checkpoint, max_wait_secs, config):
        sess = Session(master, graph=self._graph, config=config)
        try:
            if checkpoint_filename_with_path is not None:
                self._restore(sess, saver, checkpoint_filename_with_path)
                return sess, True
            if saver is None or not checkpoint_dir:
                return sess, False
            deadline = time.monotonic() + max_wait_secs
            while True:
                if _restore_newest(sess, saver, checkpoint_dir):
                    return sess, True
                if not wait_for_checkpoint or time.monotonic() >= deadline:
                    return sess, False
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        except BaseException:
            sess.close()
            raise

    @staticmethod
    def _restore(sess, saver, path):
        if saver is None:
            raise errors.InvalidArgumentError(
                f"Cannot restore {path}: no saver (give one in the Scaffold)")
        _LOG.info("Restoring parameters from %s", path)
        saver.restore(sess, path)

    def _try_run_local_init_op(self, sess):
        """Run the local init op if the model is ready for it; return (ok, why not)."""
        if self._local_init_op is None:
            return True, None
        ready, message = self._model_ready(sess, self._ready_for_local_init_op)
        if not ready:
            return False, message
        sess.run(self._local_init_op)
        return True, None

    @staticmethod
    def _model_ready(sess, ready_op):
        """Return (ready, message naming the uninitialized variables)."""
        if ready_op is None:
            return True, None
        mask = np.asarray(sess.run(ready_op))
        if not mask.any():
            return True, None
        names = uninitialized_names(ready_op, mask)
        shown = ", ".join(f"'{n}'" for n in names[:20])
        more = f" and {len(names) - 20} more" if len(names) > 20 else ""
        return False, (f"{len(names)} of {mask.size} variables are not initialized: "
                       f"{shown}{more}")
