"""SyncReplicasOptimizer: synchronous data parallelism over the ps, as in TensorFlow.

Each worker's ``train_op`` puts its gradients into per-variable accumulators on the ps
(tagged with the worker's local step, so a stale gradient is dropped) and then waits for
the chief to release the next step. The chief runs a sync loop beside training (started
by the hook from ``make_session_run_hook``): it takes the average of
``replicas_to_aggregate`` gradients per variable, applies it once with the wrapped
optimizer's fused ops, increments the global step and releases every waiting worker.
With ``total_num_replicas > replicas_to_aggregate`` the slowest workers are backups:
their gradients arrive late, are dropped, and nobody waits for them.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.ops import control_ops, math_ops, state_ops
from mpiflow.ops.constant_ops import constant
from mpiflow.ops.registry import apply_op
from mpiflow.ops.variables import Variable
from mpiflow.runtime.distributed import resolve_target
from mpiflow.train.optimizer import WrappingOptimizer
from mpiflow.train.session_manager import report_uninitialized_variables
from mpiflow.train.session_run_hook import SessionRunHook


def _release_all_step(dtype):
    """A step no training reaches (the dtype's largest): releases every waiting worker."""
    return int(np.iinfo(dtype.np_dtype).max)


class SyncReplicasOptimizer(WrappingOptimizer):
    """Aggregate gradients from ``replicas_to_aggregate`` workers per global step.

    Args:
        opt: the optimizer that applies the averaged gradients (its slots live on the ps).
        replicas_to_aggregate: gradients averaged per step.
        total_num_replicas: workers training (default ``replicas_to_aggregate``); more
            than ``replicas_to_aggregate`` makes the extra ones backups.
        variable_averages: an ``ExponentialMovingAverage`` whose shadows of
            ``variables_to_average`` (default: the trainable variables) the chief's step
            moves once per global step, after the update (what ``ema.apply`` under the
            train op's control dependency does in one process; built that way in a
            synchronous job it would run once per worker and step).
    """

    def __init__(self, opt, replicas_to_aggregate, total_num_replicas=None,
                 variable_averages=None, variables_to_average=None, use_locking=False,
                 name="sync_replicas"):
        super().__init__(opt, use_locking, name)
        if replicas_to_aggregate < 1:
            raise errors.InvalidArgumentError(
                f"SyncReplicasOptimizer: replicas_to_aggregate must be >= 1, got "
                f"{replicas_to_aggregate}")
        total = replicas_to_aggregate if total_num_replicas is None else total_num_replicas
        if total < replicas_to_aggregate:
            raise errors.InvalidArgumentError(
                f"SyncReplicasOptimizer: total_num_replicas ({total}) must be >= "
                f"replicas_to_aggregate ({replicas_to_aggregate})")
        self._variable_averages = variable_averages
        self._variables_to_average = variables_to_average
        self._replicas_to_aggregate = int(replicas_to_aggregate)
        self._total_num_replicas = int(total)
        self._sync_op = None
        self._local_step = None
        self.local_step_init_op = None
        self.chief_init_op = None
        self.ready_for_local_init_op = None
        self._gradients_applied = False

    def compute_gradients(self, *args, **kwargs):
        """Compute gradients with the wrapped optimizer (nothing is synchronised yet)."""
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Return the worker's train op: accumulate, then wait for the next global step.

        Raises:
            InvalidArgumentError: no global step, or no variable has a gradient.
        """
        if global_step is None:
            raise errors.InvalidArgumentError(
                "SyncReplicasOptimizer.apply_gradients needs global_step: the step is what "
                "the replicas synchronise on")
        if self._gradients_applied:
            raise errors.FailedPreconditionError(
                "SyncReplicasOptimizer.apply_gradients may be called only once")
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise errors.InvalidArgumentError(
                "SyncReplicasOptimizer: no gradients provided for any variable "
                f"{[v.name for _, v in grads_and_vars]}")
        self._gradients_applied = True
        graph = get_default_graph()
        step_ref = global_step._ref() if hasattr(global_step, "_ref") else global_step
        with graph.name_scope(name or self._name):
            # The local step belongs to this worker: colocated with an op the device scope
            # puts on the worker, or a replica_device_setter would send it to a ps, where
            # every worker would share one.
            anchor = control_ops.no_op(name="local_anchor")
            with graph.colocate_with(anchor):
                self._local_step = Variable(constant(0, dtype=step_ref.dtype),
                                            trainable=False,
                                            collections=[GraphKeys.LOCAL_VARIABLES],
                                            name="sync_rep_local_step")
            self.local_step_init_op = state_ops.assign(self._local_step, global_step).op
            # TF1 names for a Supervisor's local_init_op: the chief needs nothing more (no
            # token queue to fill), and local init waits for the global variables.
            self.chief_init_op = self.local_step_init_op
            local_step = self._local_step.value()
            accumulated, averaged = [], []
            for grad, var in pairs:
                with graph.colocate_with(var.op):
                    accumulate, take = _accumulator_ops(var, grad, local_step,
                                                        self._replicas_to_aggregate,
                                                        global_step)
                accumulated.append(accumulate)
                averaged.append((take, var))
            token_name = f"{self._name}:{step_ref.op.name}"
            with graph.control_dependencies(accumulated), graph.colocate_with(step_ref.op):
                released = apply_op("SyncTokenWait", [local_step],
                                    {"shared_name": token_name,
                                     "replicas": self._replicas_to_aggregate}).outputs[0]
            train_op = state_ops.assign(self._local_step, released).op
            # The chief's step, from the averages to the release, runs on the ps: a chief
            # lost in its middle leaves nothing half done there (its successor's loop then
            # takes the same step again).
            with graph.colocate_with(step_ref.op):
                update = self._opt.apply_gradients(averaged)
                with graph.control_dependencies([update]):
                    new_step = state_ops.assign_add(global_step, constant(1, step_ref.dtype))
                stepped = [new_step]
                if self._variable_averages is not None:
                    # Once per global step, after the update and its step count, before
                    # the release: the workers' next step reads the shadows of this one.
                    with graph.control_dependencies(stepped):
                        stepped.append(self._variable_averages.apply(
                            self._variables_to_average))
                with graph.control_dependencies(stepped[1:]):
                    self._sync_op = apply_op("SyncTokenRelease", [new_step],
                                             {"shared_name": token_name})
                # At the end the chief releases every worker still waiting (one that
                # started a step the others did not join), so none is left hanging.
                self._release_all_op = apply_op(
                    "SyncTokenRelease",
                    [constant(_release_all_step(step_ref.dtype), step_ref.dtype)],
                    {"shared_name": token_name}, name="release_all")
            self.ready_for_local_init_op = report_uninitialized_variables(
                graph.get_collection(GraphKeys.GLOBAL_VARIABLES), name="ready_for_local_init")
        return train_op

    @property
    def sync_op(self):
        """The chief's step: average, apply, increment the global step, release workers."""
        return self._sync_op

    def get_chief_queue_runner(self):
        """Return the runner of the chief's sync loop, for ``Supervisor.start_queue_runners``
        (TF1's way; ``make_session_run_hook`` is the MonitoredTrainingSession one)."""
        if self._sync_op is None:
            raise errors.FailedPreconditionError(
                "get_chief_queue_runner: call apply_gradients (or minimize) first")
        return _ChiefSyncRunner(self)

    def get_init_tokens_op(self, num_tokens=-1):
        """Return an op for the chief to run once before training (TF1's token fill).

        Workers here wait for the global step to pass theirs, not for tokens in a queue,
        so there is nothing to fill: the op does nothing, and exists so TF1 scripts run.
        """
        if num_tokens != -1 and num_tokens < 0:
            raise errors.InvalidArgumentError(
                f"get_init_tokens_op: num_tokens must be -1 or >= 0, got {num_tokens}")
        if self._sync_op is None:
            raise errors.FailedPreconditionError(
                "get_init_tokens_op: call apply_gradients (or minimize) first")
        return control_ops.no_op(name="sync_init_tokens")

    def make_session_run_hook(self, is_chief, num_tokens=-1):
        """Return the hook that initialises local steps and, on the chief, runs the sync
        loop in a thread for the life of the session."""
        if self._sync_op is None:
            raise errors.FailedPreconditionError(
                "make_session_run_hook: call apply_gradients (or minimize) first")
        return _SyncReplicasHook(self, is_chief)


def _accumulator_ops(var, grad, local_step, num_required, global_step):
    """Return (accumulate op, averaged gradient) of ``var``'s accumulator on its ps."""
    shape = var.get_shape()
    attrs = {"shared_name": var.op.name, "dtype": var.dtype, "shape": shape}
    num = constant(num_required)
    next_step = math_ops.add(global_step, constant(1, local_step.dtype))
    if isinstance(grad, IndexedSlices):
        accumulate = apply_op("AccumulatorApplyIndexedSlices",
                              [local_step, math_ops.cast(grad.indices, "int64"), grad.values],
                              attrs)
        indices, values = apply_op("AccumulatorTakeIndexedSlices", [num, next_step],
                                   attrs).outputs
        return accumulate, IndexedSlices(values, indices, grad.dense_shape)
    accumulate = apply_op("AccumulatorApplyGradient", [local_step, grad], attrs)
    return accumulate, apply_op("AccumulatorTakeGradient", [num, next_step],
                                attrs).outputs[0]


class _SyncReplicasHook(SessionRunHook):
    """Initialises the local step; on the chief, runs ``sync_op`` in a loop in a thread."""

    def __init__(self, optimizer, is_chief):
        self._opt = optimizer
        self._is_chief = is_chief
        self._thread = None
        self._stop = threading.Event()
        self._error = None
        self._session = None

    def after_create_session(self, session, coord):
        self._check_enough_workers(session)
        session.run(self._opt.local_step_init_op)
        self._session = session
        if self._is_chief:
            self._start_sync_loop()

    def _check_enough_workers(self, session) -> None:
        """Refuse a step no cluster of this launch could fill: more gradients to aggregate
        than it has workers (the first step would wait out MPIFLOW_TIMEOUT and then blame
        a ps)."""
        context = resolve_target(getattr(session, "sess_str", ""))
        if context is None:
            return
        cluster = context.cluster
        workers = sum(cluster.num_tasks(job) for job in ("chief", "worker")
                      if job in cluster.jobs)
        wanted = self._opt._replicas_to_aggregate
        if wanted > workers:
            raise errors.InvalidArgumentError(
                f"SyncReplicasOptimizer: replicas_to_aggregate={wanted} gradients per step, "
                f"but the cluster has {workers} worker(s): no step could ever gather them; "
                f"aggregate at most {workers} (and give total_num_replicas={workers})")

    def take_over_from_chief(self) -> None:
        """This worker succeeds a lost chief (MPIFLOW_ELASTIC): run the sync loop here.
        Called from the thread that found the loss, while this worker's own step may be
        waiting for the release that only the loop gives."""
        if self._thread is None and self._session is not None:
            self._is_chief = True
            self._start_sync_loop()

    def _start_sync_loop(self):
        self._thread = threading.Thread(target=self._sync_loop, name="mpiflow-sync-loop",
                                        daemon=True)
        self._thread.start()

    def _sync_loop(self):
        try:
            _run_sync_loop(self._session, self._opt, self._stop.is_set)
        except Exception as exc:
            self._error = exc

    def before_run(self, run_context):
        if self._error is not None:
            raise errors.AbortedError(
                f"The chief's sync-replicas loop failed: {self._error}") from self._error

    def end(self, session):
        if self._thread is None:
            return
        self._stop.set()
        _stop_sync_loop(session, self._opt, self._thread)

    def _graceful_stop_ends(self, session):
        # A worker that already waits for a step the others (stopping after their own)
        # will never join would wait until the chief's wait for it ran out: released now,
        # it ends as they do. The loop goes on applying what arrives until ``end``.
        if self._thread is not None:
            session.run(self._opt._release_all_op)


def _run_sync_loop(session, optimizer, stopping):
    """Run the chief's ``sync_op`` until ``stopping()``; a cancelled step ends it."""
    run = session.make_callable(optimizer.sync_op)
    while not stopping():
        try:
            run()
        except errors.CancelledError:
            return


def _stop_sync_loop(session, optimizer, thread):
    """End the loop's waiting step (again, should it start another before it sees the
    stop), then release every worker still waiting for a step."""
    deadline = time.monotonic() + 30
    while thread.is_alive() and time.monotonic() < deadline:
        session._cancel_other_thread(thread.ident, "sync-replicas loop stopped")
        thread.join(0.1)
    try:
        session.run(optimizer._release_all_op)
    except errors.UnavailableError:
        # The ps holding the step tokens has left: the job is over (a TF1 script that
        # ends without sv.stop() stops the loop at exit, after the ps's join returned),
        # and no worker can still wait there.
        pass


class _ChiefSyncRunner:
    """The chief's sync loop as a TF1 queue runner (``create_threads``)."""

    def __init__(self, optimizer):
        self._opt = optimizer

    def create_threads(self, sess, coord=None, daemon=False, start=False):
        stopped = coord.should_stop if coord is not None else (lambda: False)

        def loop():
            if coord is None:
                _run_sync_loop(sess, self._opt, stopped)
                return
            with coord.stop_on_exception():
                _run_sync_loop(sess, self._opt, stopped)

        looping = threading.Thread(target=loop, name="mpiflow-sync-loop", daemon=daemon)
        threads = [looping]
        if coord is not None:
            def stop_when_asked():
                coord.wait_for_stop()
                _stop_sync_loop(sess, self._opt, looping)
            threads.append(threading.Thread(target=stop_when_asked, daemon=daemon,
                                            name="mpiflow-sync-loop-stopper"))
            for thread in threads:
                coord.register_thread(thread)
        if start:
            for thread in threads:
                thread.start()
        return threads

