"""MonitoredTrainingSession: a session that initializes, restores, checkpoints and runs hooks.

As in TensorFlow: hooks' ``begin``, then ``Scaffold.finalize`` (default init, ready and
saver pieces; the graph is finalized), then the session (the chief restores the latest
checkpoint or initializes; other workers wait until the chief has), then the hooks'
``after_create_session``. Each ``run`` merges the hooks' fetches and feeds into one
``Session.run``. ``close`` calls the hooks' ``end`` and closes the session; used as a
context manager, an ``OutOfRangeError`` (end of input) ends training cleanly.

Unlike TensorFlow's MonitoredSession, no session is re-created after an ``AbortedError``
or ``UnavailableError``: in an MPI job a lost rank ends the job.
"""

from __future__ import annotations

from mpiflow import config, errors, summary
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.ops import collective_ops
from mpiflow.ops.variables import (
    global_variables,
    global_variables_initializer,
    local_variables_initializer,
)
from mpiflow.runtime import interrupts, process, whereabouts
from mpiflow.runtime.feeds import feed_tensor
from mpiflow.runtime.session_options import RunMetadata, RunOptions
from mpiflow.train import basic_hooks, reporting_hooks, succession
from mpiflow.train.coordinator import Coordinator
from mpiflow.train.global_step import get_global_step
from mpiflow.train.session_manager import (
    SessionManager,
    get_saver_or_default,
    register_replicas,
    report_uninitialized_variables,
)
from mpiflow.train.session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues

USE_DEFAULT = object()
# TensorFlow's collection names for the pieces GraphKeys does not list.
READY_FOR_LOCAL_INIT_OP = "ready_for_local_init_op"
SUMMARY_OP = "summary_op"


def _first_given(value, default):
    # Not ``value or default``: a Tensor has no truth value.
    return value if value is not None else default


def _get_or_default(arg_name, collection_key, make):
    graph = get_default_graph()
    found = graph.get_collection(collection_key)
    if len(found) > 1:
        raise errors.InvalidArgumentError(
            f"The collection '{collection_key}' holds {len(found)} items: pass the one to "
            f"use as Scaffold({arg_name}=...)")
    if found:
        return found[0]
    value = make()
    if value is not None:
        graph.add_to_collection(collection_key, value)
    return value


class Scaffold:
    """The pieces a monitored session needs, taken from the graph or made by default.

    Defaults (made by ``finalize``, or taken from their graph collection): ``init_op`` =
    ``global_variables_initializer()``; ``ready_op`` = ``report_uninitialized_variables()``
    (a bool mask, True = uninitialized); ``ready_for_local_init_op`` = the same for the
    global variables; ``local_init_op`` = ``local_variables_initializer()``; ``summary_op``
    = ``mf.summary.merge_all()``; ``saver`` = the one in the SAVERS collection, else a new
    ``Saver(sharded=True, allow_empty=True)`` added to it (more than one there is an error).
    """

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None,
                 saver=None, copy_from_scaffold=None):
        if copy_from_scaffold is not None:
            if not isinstance(copy_from_scaffold, Scaffold):
                raise errors.InvalidArgumentError(
                    f"copy_from_scaffold must be a Scaffold, got "
                    f"{type(copy_from_scaffold).__name__}")
            base = copy_from_scaffold
            init_op = _first_given(init_op, base.init_op)
            init_feed_dict = _first_given(init_feed_dict, base.init_feed_dict)
            init_fn = _first_given(init_fn, base._user_init_fn)
            ready_op = _first_given(ready_op, base.ready_op)
            ready_for_local_init_op = _first_given(ready_for_local_init_op,
                                                   base.ready_for_local_init_op)
            local_init_op = _first_given(local_init_op, base.local_init_op)
            summary_op = _first_given(summary_op, base.summary_op)
            saver = _first_given(saver, base.saver)
        self._user_init_fn = init_fn
        self._init_fn = (lambda sess: init_fn(self, sess)) if init_fn else None
        self.init_op = init_op
        self.init_feed_dict = init_feed_dict
        self.ready_op = ready_op
        self.ready_for_local_init_op = ready_for_local_init_op
        self.local_init_op = local_init_op
        self.summary_op = summary_op
        self.saver = saver

    @property
    def init_fn(self):
        return self._init_fn

    @staticmethod
    def get_or_default(arg_name, collection_key, default_constructor):
        """The one item of the default graph's ``collection_key``, else
        ``default_constructor()`` added to it (as TensorFlow's; more than one item is an
        error naming ``arg_name``)."""
        return _get_or_default(arg_name, collection_key, default_constructor)

    @staticmethod
    def default_local_init_op():
        """The ``local_init_op`` a Scaffold makes when given none, for a script that
        groups its own ops with it (``Scaffold(local_init_op=group(
        Scaffold.default_local_init_op(), my_op))``); mpiflow has no lookup tables or
        local resources, so it initializes the local variables."""
        return local_variables_initializer()

    def finalize(self) -> Scaffold:
        """Make the missing pieces, then finalize the default graph.

        Raises:
            FailedPreconditionError: a piece must be made but the graph is finalized.
        """
        graph = get_default_graph()
        if self.init_op is None:
            self.init_op = _get_or_default("init_op", GraphKeys.INIT_OP,
                                           global_variables_initializer)
        if self.ready_op is None:
            self.ready_op = _get_or_default("ready_op", GraphKeys.READY_OP,
                                            report_uninitialized_variables)
        if self.ready_for_local_init_op is None:
            self.ready_for_local_init_op = _get_or_default(
                "ready_for_local_init_op", READY_FOR_LOCAL_INIT_OP,
                lambda: report_uninitialized_variables(global_variables(),
                                                       name="report_uninitialized_globals"))
        if self.local_init_op is None:
            self.local_init_op = _get_or_default("local_init_op", GraphKeys.LOCAL_INIT_OP,
                                                 local_variables_initializer)
        if self.summary_op is None:
            self.summary_op = _get_or_default("summary_op", SUMMARY_OP, summary.merge_all)
        if self.saver is None and (graph.get_collection(GraphKeys.SAVERS) or
                                   not graph.finalized):
            # As TensorFlow's: the SAVERS collection's one, else a new sharded Saver that
            # may be empty, so ``scaffold.saver.save(...)`` works in every session (a
            # graph the script finalized itself, with no saver, keeps None).
            self.saver = get_saver_or_default()
        if hasattr(self.saver, "build"):
            self.saver.build()          # a Saver made with defer_build adds its ops now
        # Variables replicated on the workers made after minimize (an EMA's shadows) get
        # their broadcast from worker 0 while ops can still be added.
        register_replicas(graph)
        graph.finalize()
        return self

    def _ensure_saver(self) -> None:
        """Give the scaffold a saver (a new default one if needed) before finalization."""
        if self.saver is None and not get_default_graph().finalized:
            self.saver = get_saver_or_default()


class SessionCreator:
    """A factory of sessions."""

    def create_session(self):
        raise NotImplementedError(f"create_session is not implemented for {self}")


class ChiefSessionCreator(SessionCreator):
    """Create the chief's session: restore the latest checkpoint, else initialize."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        self._scaffold = scaffold or Scaffold()
        self._master = master
        self._config = config
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_filename_with_path = checkpoint_filename_with_path

    def create_session(self):
        s = self._scaffold.finalize()
        manager = SessionManager(local_init_op=s.local_init_op, ready_op=s.ready_op,
                                 ready_for_local_init_op=s.ready_for_local_init_op)
        return manager.prepare_session(
            self._master, init_op=s.init_op, saver=s.saver,
            checkpoint_dir=self._checkpoint_dir,
            checkpoint_filename_with_path=self._checkpoint_filename_with_path,
            config=self._config, init_feed_dict=s.init_feed_dict, init_fn=s.init_fn)


class WorkerSessionCreator(SessionCreator):
    """Create a non-chief worker's session: wait until the chief has made the model ready.

    Args:
        max_wait_secs: how long to wait; default MPIFLOW_TIMEOUT (TensorFlow: 30 min).
    """

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=USE_DEFAULT):
        self._scaffold = scaffold or Scaffold()
        self._master = master
        self._config = config
        self._max_wait_secs = None if max_wait_secs is USE_DEFAULT else max_wait_secs

    def create_session(self):
        s = self._scaffold.finalize()
        manager = SessionManager(local_init_op=s.local_init_op, ready_op=s.ready_op,
                                 ready_for_local_init_op=s.ready_for_local_init_op)
        return manager.wait_for_session(self._master, config=self._config,
                                        max_wait_secs=self._max_wait_secs)


class StepContext:
    """What ``run_step_fn`` gives its function: the raw session and a hooked ``run``."""

    def __init__(self, session, run_with_hooks_fn):
        self._session = session
        self._run_with_hooks_fn = run_with_hooks_fn

    @property
    def session(self):
        return self._session

    def run_with_hooks(self, *args, **kwargs):
        """Same as ``MonitoredSession.run``."""
        return self._run_with_hooks_fn(*args, **kwargs)

    def request_stop(self):
        """Stop the step function now with ``StopIteration``, which leaves ``run_step_fn``
        and ends the session's ``with`` block cleanly (the hooks' ``end`` is called), as
        in TensorFlow; ``should_stop()`` returns True afterwards."""
        raise StopIteration("step_fn has requested the iterations to stop.")


class _MonitoredSession:
    """A session wrapped with hooks, a coordinator and TensorFlow's lifecycle."""

    def __init__(self, session_creator, hooks, stop_grace_period_secs=120):
        self._graph = get_default_graph()
        self._graph_was_finalized = self._graph.finalized
        self._hooks = list(hooks or [])
        self._stop_grace_period_secs = stop_grace_period_secs
        self._stop_requested = False
        self._sess = None
        self._coord = Coordinator(clean_stop_exception_types=[])
        if whereabouts.NOW.training_steps is None:
            whereabouts.NOW.training_steps = 0      # reports now count training steps
        # SIGTERM (Slurm's time limit) stops training after the current step, with the
        # hooks' ends (the chief's checkpoint), instead of interrupting it; not where
        # workers step in lockstep through collectives: each would stop at its own step,
        # one a collective ahead of another. From before the session is created: a signal
        # to the whole job reaches a worker still waiting for the chief's initialisation
        # as often as one already training, and it stops as soon as its session exists
        # (``should_stop()`` is then True at once).
        if not collective_ops.runs_collectives(self._graph):
            interrupts.STOPPABLE.append(self._coord)
        try:
            for hook in self._hooks:
                hook.begin()
            self._creator = session_creator or ChiefSessionCreator()
            self._sess = self._creator.create_session()
            for hook in self._hooks:
                hook.after_create_session(self._sess, self._coord)
        except BaseException:
            if self._coord in interrupts.STOPPABLE:
                interrupts.STOPPABLE.remove(self._coord)
            if self._sess is not None:
                self._sess.close()
            self._sess = None
            self._restore_graph()
            raise

    @property
    def graph(self):
        return self._graph

    def _tf_sess(self):
        return self._sess

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run ``fetches`` plus the hooks' requests in one step; return ``fetches``' values.

        Raises:
            FailedPreconditionError: the session is closed.
            OutOfRangeError: a graceful stop (SIGTERM) began since the script last asked
                ``should_stop()``: the step is not run, and the session's ``with`` block
                ends cleanly on it, as at the end of input.
            RuntimeError: a hook already requested a stop (check ``should_stop()``).
        """
        if self._sess is None:
            raise errors.FailedPreconditionError("Attempted to use a closed MonitoredSession")
        if self.should_stop():
            if not self._stop_requested and interrupts.stopping():
                # The signal's thread asked between the script's check and this run (a
                # loop that reads its next batch in between nearly always meets it):
                # not the script's mistake. A step run now could wait for peers that
                # stopped already (a synchronous one), so none is.
                raise errors.OutOfRangeError(
                    "The job is stopping gracefully: this run was not made (the session "
                    "ends cleanly at the end of its with block)")
            raise RuntimeError(
                "Run called even after should_stop requested. Check should_stop() before "
                "every run, the first one included: a hook may stop training as the session "
                "is created (StopAtStepHook, when the global step is already at its last step: "
                "a restored final checkpoint, or a worker that started after the others "
                "finished). step_fn's step_context.session runs without hooks.")
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self._sess)
        all_fetches = {"caller": fetches}
        hook_feeds = {}
        for hook in self._hooks:
            request = hook.before_run(context)
            if request is None:
                continue
            if request.fetches is not None:
                all_fetches[hook] = request.fetches
            if request.feed_dict:
                _check_disjoint(hook_feeds, request.feed_dict, "two hooks")
                hook_feeds.update(request.feed_dict)
            if request.options is not None:
                options = _merged_options(options, request.options)
        if hook_feeds and feed_dict:
            _check_disjoint(feed_dict, hook_feeds, "a hook and the caller")
        feeds = _feeds_by_tensor(self._sess.graph, hook_feeds, feed_dict) \
            if hook_feeds else feed_dict
        if run_metadata is None:
            # As TensorFlow's: hooks always get one, so a hook that asked for a trace in
            # before_run reads it in after_run (run_values.run_metadata.step_stats).
            run_metadata = RunMetadata()
        if options is None:
            # Likewise the options, so after_run may read run_values.options.trace_level.
            options = RunOptions()
        outputs = self._sess.run(all_fetches, feed_dict=feeds or None, options=options,
                                 run_metadata=run_metadata)
        whereabouts.NOW.training_steps = (whereabouts.NOW.training_steps or 0) + 1
        for hook in self._hooks:
            hook.after_run(context, SessionRunValues(results=outputs.get(hook),
                                                     options=options,
                                                     run_metadata=run_metadata))
        self._stop_requested = self._stop_requested or context.stop_requested
        return outputs["caller"]

    def run_step_fn(self, step_fn):
        """Call ``step_fn(step_context)`` and return its value.

        ``step_context.run_with_hooks`` runs like ``run``; ``step_context.session`` is the
        raw session; ``step_context.request_stop()`` ends the function and training.

        Raises:
            StopIteration: ``step_fn`` called ``request_stop()``. As in TensorFlow it
                leaves the loop: the session's ``with`` block ends on it cleanly, so
                nothing after ``run_step_fn`` in the loop sees a value that never came.
        """
        try:
            return step_fn(StepContext(self._sess, self.run))
        except StopIteration:
            self._stop_requested = True
            raise

    def should_stop(self) -> bool:
        """Return True once a hook or the step function requested a stop, or after close.

        Raises:
            the exception a hook's thread stopped the coordinator with, if any.
        """
        if self._sess is None:
            return True
        self._coord.raise_requested_exception()
        return self._stop_requested or self._coord.should_stop()

    def close(self) -> None:
        """Call the hooks' ``end``, stop the coordinator's threads, close the session.

        Closing again does nothing.
        """
        self._close_internal(None)

    def _close_internal(self, exception_type) -> None:
        if self._sess is None:
            return
        try:
            if exception_type is None:
                if interrupts.stopping() and isinstance(self._creator, ChiefSessionCreator):
                    # The last checkpoint comes after the other workers' last steps,
                    # which nothing of the chief's may hold up.
                    for hook in self._hooks:
                        ends = getattr(hook, "_graceful_stop_ends", None)   # (duck hooks)
                        if ends is not None:
                            ends(self._sess)
                    process.wait_for_other_workers(config.get("MPIFLOW_STOP_GRACE_S") / 2)
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            try:
                self._coord.request_stop()
                self._coord.join(stop_grace_period_secs=self._stop_grace_period_secs,
                                 ignore_live_threads=True)
            finally:
                if self._coord in interrupts.STOPPABLE:
                    interrupts.STOPPABLE.remove(self._coord)
                sess, self._sess = self._sess, None
                sess.close()
                self._restore_graph()

    def _restore_graph(self):
        if not self._graph_was_finalized:
            self._graph._unsafe_unfinalize()

    def __enter__(self):
        return self

    def __exit__(self, exception_type, exception_value, traceback):
        if exception_type is not None and issubclass(
                exception_type, (errors.OutOfRangeError, StopIteration)):
            exception_type = None
        self._close_internal(exception_type)
        return exception_type is None


def _check_disjoint(feeds, more, who):
    common = set(feeds) & set(more)
    if common:
        names = sorted(getattr(k, "name", str(k)) for k in common)
        raise errors.FeedConflictError(f"The same tensor is fed by {who}: {names}")


def _feeds_by_tensor(graph, hook_feeds, feed_dict):
    """One feed per tensor: the hooks' (in hook order) overridden by the caller's.

    Hooks and the caller may name one tensor by different keys (the Tensor, its name
    'x:0'), which ``_check_disjoint`` does not see as the same key; as in TensorFlow, the
    caller's value is then fed (or the later hook's), where the session alone would refuse
    a feed_dict that feeds one tensor twice.
    """
    merged = {}
    for key, value in [*hook_feeds.items(), *(feed_dict or {}).items()]:
        merged[feed_tensor(graph, key)] = value
    return merged


class MonitoredSession(_MonitoredSession):
    """``MonitoredSession(session_creator=None, hooks=None, stop_grace_period_secs=120)``.

    ``session_creator`` defaults to a ``ChiefSessionCreator()``.
    """

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        super().__init__(session_creator, hooks, stop_grace_period_secs)


class SingularMonitoredSession(_MonitoredSession):
    """A chief's MonitoredSession whose raw session is reachable with ``raw_session()``."""

    def __init__(self, hooks=None, scaffold=None, master="", config=None, checkpoint_dir=None,
                 stop_grace_period_secs=120, checkpoint_filename_with_path=None):
        creator = ChiefSessionCreator(
            scaffold=scaffold, master=master, config=config, checkpoint_dir=checkpoint_dir,
            checkpoint_filename_with_path=checkpoint_filename_with_path)
        super().__init__(creator, hooks, stop_grace_period_secs)

    def raw_session(self):
        return self._tf_sess()


def _merged_options(options, requested) -> RunOptions:
    """The caller's RunOptions with a hook's request merged in, as TensorFlow merges
    them: each field takes the larger value (the deepest trace, the longest timeout), so
    a hook asking for a trace gets it whatever the caller passed. Neither is changed."""
    if options is None:
        return requested
    return RunOptions(**{field: max(getattr(options, field), getattr(requested, field))
                         for field in RunOptions._FIELDS})


def _resolve_pair(secs, steps, default_secs, default_steps):
    """TensorFlow's rule for a (secs, steps) pair of USE_DEFAULTs: defaults only if both are."""
    if secs is USE_DEFAULT and steps is USE_DEFAULT:
        return default_secs, default_steps
    return (None if secs is USE_DEFAULT else secs), (None if steps is USE_DEFAULT else steps)


def MonitoredTrainingSession(
        master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,
        chief_only_hooks=None, save_checkpoint_secs=USE_DEFAULT,
        save_summaries_steps=USE_DEFAULT, save_summaries_secs=USE_DEFAULT, config=None,
        stop_grace_period_secs=120, log_step_count_steps=100, max_wait_secs=USE_DEFAULT,
        save_checkpoint_steps=USE_DEFAULT, summary_dir=None,
        progress_bar=True) -> MonitoredSession:
    """Return a MonitoredSession for training, set up for the chief or another worker.

    The chief restores from ``checkpoint_dir`` (or initializes) and gets the default hooks:
    ``CheckpointSaverHook`` (every 600 s unless ``save_checkpoint_secs``/``_steps`` say
    otherwise; None for both turns it off) when ``checkpoint_dir`` is given; with a
    ``summary_dir`` (default ``checkpoint_dir``), ``StepCounterHook`` every
    ``log_step_count_steps`` and ``SummarySaverHook`` every ``save_summaries_steps``
    (default 100) or ``save_summaries_secs`` (the summaries the graph has once every
    hook's ``begin`` ran; none: only the run's START log); and, with
    ``progress_bar`` (mpiflow's addition), a bar of the global step towards the
    ``StopAtStepHook``'s last step, drawn only when stderr is a terminal. Other workers
    wait up to ``max_wait_secs`` (default MPIFLOW_TIMEOUT) for the chief and run only
    ``hooks``.
    """
    save_summaries_secs, save_summaries_steps = _resolve_pair(
        save_summaries_secs, save_summaries_steps, None, 100)
    save_checkpoint_secs, save_checkpoint_steps = _resolve_pair(
        save_checkpoint_secs, save_checkpoint_steps, 600, None)
    scaffold = scaffold or Scaffold()
    chief_hooks = _chief_hooks(chief_only_hooks, checkpoint_dir, summary_dir, scaffold,
                               log_step_count_steps, save_summaries_steps,
                               save_summaries_secs, save_checkpoint_steps,
                               save_checkpoint_secs)
    if not is_chief:
        creator = WorkerSessionCreator(scaffold=scaffold, master=master, config=config,
                                       max_wait_secs=max_wait_secs)
        worker_hooks = list(hooks or [])
        if succession.may_succeed(master):
            # MPIFLOW_ELASTIC: this worker may take over the chief's duties if the chief
            # is lost; its hooks are made now (their savers must exist before the graph
            # is finalized) and sleep until then.
            worker_hooks.append(succession.SuccessorHook(
                chief_hooks + _progress_hooks(progress_bar, worker_hooks),
                [h for h in worker_hooks if hasattr(h, "take_over_from_chief")]))
        return MonitoredSession(creator, hooks=worker_hooks,
                                stop_grace_period_secs=stop_grace_period_secs)
    all_hooks = chief_hooks + list(hooks or [])
    all_hooks += _progress_hooks(progress_bar, all_hooks)
    creator = ChiefSessionCreator(scaffold=scaffold, master=master, config=config,
                                  checkpoint_dir=checkpoint_dir)
    session = MonitoredSession(creator, hooks=all_hooks,
                               stop_grace_period_secs=stop_grace_period_secs)
    succession.chief_started(master)
    return session


def _progress_hooks(progress_bar, hooks) -> list:
    """The chief's progress report, towards the last step of the StopAtStepHook given
    (read when the session starts: one given ``num_steps`` knows it only then); none for
    a graph without a global step (TensorFlow's session trains one)."""
    if not progress_bar or get_global_step() is None:
        return []
    stops = [h for h in hooks if isinstance(h, basic_hooks.StopAtStepHook)]
    if stops:
        return [reporting_hooks.ProgressBarHook.following(stops[0])]
    return [reporting_hooks.ProgressBarHook()]


def _chief_hooks(chief_only_hooks, checkpoint_dir, summary_dir, scaffold,
                 log_step_count_steps, save_summaries_steps, save_summaries_secs,
                 save_checkpoint_steps, save_checkpoint_secs) -> list:
    """The chief's own hooks: checkpoints, summaries, the step counter."""
    all_hooks = list(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir
    if summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(reporting_hooks.StepCounterHook(
                output_dir=summary_dir, every_n_steps=log_step_count_steps))
        # Added whatever the graph holds now, as TensorFlow adds it: a hook's begin() may
        # still make summaries (the scaffold merges them after every begin), and the run's
        # START log is written either way. Without summaries it fetches nothing after the
        # first step.
        if (save_summaries_steps and save_summaries_steps > 0) or \
                (save_summaries_secs and save_summaries_secs > 0):
            all_hooks.append(reporting_hooks.SummarySaverHook(
                scaffold=scaffold, save_steps=save_summaries_steps,
                save_secs=save_summaries_secs, output_dir=summary_dir))
    if checkpoint_dir and ((save_checkpoint_secs and save_checkpoint_secs > 0) or
                           (save_checkpoint_steps and save_checkpoint_steps > 0)):
        # Both given is an error, as in TensorFlow (its hook's timer refuses the pair):
        # the script would believe it saves on both schedules.
        all_hooks.append(basic_hooks.CheckpointSaverHook(
            checkpoint_dir, save_steps=save_checkpoint_steps or None,
            save_secs=save_checkpoint_secs or None, scaffold=scaffold))
    return all_hooks

