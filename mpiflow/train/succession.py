"""Who takes over the chief's duties when the chief is lost (MPIFLOW_ELASTIC, ps training).

The chief alone writes checkpoints and summaries, counts steps and reports progress; in
synchronous training (SyncReplicasOptimizer) it also runs the sync loop that averages
the gradients on the ps and releases the workers. In an elastic ps job (no collectives:
those cannot finish without any rank), losing it need not end the job: the chief says
at start that its duties can move, every other worker builds the chief's hooks up front
(their savers must exist before the graph is finalized) and keeps them asleep, and when
the chief is lost the lowest-numbered surviving worker wakes its own. It starts the sync
loop at once (its own training step may be waiting for that loop's release), and its
first act at its next step is the chief's: a checkpoint.

Nothing of the sync state is the chief's alone: the accumulators, the token queue and
the global step are on the ps, and a sync step of the chief that was waiting there when
it was lost is dropped before it took anything, so its successor's loop picks up the
same global step.
"""

from __future__ import annotations

from mpiflow import config, logger
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import collective_ops
from mpiflow.runtime import process
from mpiflow.train.session_run_hook import SessionRunArgs, SessionRunHook, SessionRunValues


def _duties_can_move(master) -> bool:
    """Whether the chief's duties can move in this process's job: MPIFLOW_ELASTIC, a
    session on a cluster, ps training (no collective ops)."""
    if not config.get("MPIFLOW_ELASTIC") or not master or process.current_service() is None:
        return False
    graph = get_default_graph()
    return not collective_ops.runs_collectives(graph)


def may_succeed(master) -> bool:
    """Whether a worker's session should carry the chief's hooks, asleep."""
    return _duties_can_move(master)


def chief_started(master) -> None:
    """The chief's session exists: say its duties can move, if they can."""
    if _duties_can_move(master):
        process.current_service().announce_chief_can_move()


class SuccessorHook(SessionRunHook):
    """The chief's hooks on another worker: asleep until this worker succeeds the chief,
    then run as the chief runs them.

    ``takers`` are this worker's own hooks with a chief's part that cannot wait for the
    next step (``take_over_from_chief()``: the sync loop, which the worker's step in
    flight waits for); they are told at once, from the thread that found the loss.
    """

    def __init__(self, hooks, takers=()):
        self._hooks = list(hooks)
        self._takers = list(takers)
        self._woken = False
        self._awake = False
        self._session = self._coord = None

    def wake(self) -> None:
        """Called (from any thread) when this worker is the chief's successor."""
        self._woken = True
        for hook in self._takers:
            hook.take_over_from_chief()

    def begin(self) -> None:
        for hook in self._hooks:     # a hook that writes files opens none while asleep
            getattr(hook, "begin_asleep", hook.begin)()
        process.current_service().on_chief_lost.append(self.wake)

    def after_create_session(self, session, coord) -> None:
        self._session, self._coord = session, coord

    def before_run(self, run_context):
        if self._woken and not self._awake:
            self._wake_hooks()
        if not self._awake:
            return None
        self._requests = [hook.before_run(run_context) for hook in self._hooks]
        fetches, feeds, options = {}, {}, None
        for i, request in enumerate(self._requests):
            if request is None:
                continue
            if request.fetches is not None:
                fetches[i] = request.fetches
            feeds.update(request.feed_dict or {})
            options = options or request.options
        return SessionRunArgs(fetches, feeds or None, options)

    def after_run(self, run_context, run_values) -> None:
        if not self._awake:
            return
        results = run_values.results or {}
        for i, hook in enumerate(self._hooks):
            hook.after_run(run_context, SessionRunValues(results.get(i), run_values.options,
                                                         run_values.run_metadata))

    def end(self, session) -> None:
        if not self._woken:
            # Training ended here; the chief may have been lost a moment ago, unseen yet.
            process.current_service().look_for_losses()
        if self._woken and not self._awake:
            self._wake_hooks()
        if self._awake:
            for hook in self._hooks:
                hook.end(session)

    def _wake_hooks(self) -> None:
        self._awake = True
        logger.get_logger("mpiflow.elastic").warning(
            "this worker takes over the chief's duties (checkpoints, summaries, progress): "
            "the chief was lost")
        for hook in self._hooks:
            hook.after_create_session(self._session, self._coord)
