"""SessionRunHook: the extension points of a MonitoredSession (TF1's ``session_run_hook``).

A hook is told when the graph is about to be finalized (``begin``), when the session
exists (``after_create_session``), around every ``run`` (``before_run`` may add fetches
and feeds; ``after_run`` sees their values and may request a stop) and at the end
(``end``). Owns the hook base class and the three small records passed to it; imports
nothing of mpiflow.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class SessionRunHook:
    """Base class of hooks; every method is a no-op, override the ones you need."""

    def begin(self) -> None:
        """Build the ops the hook needs; called before the graph is finalized."""

    def after_create_session(self, session, coord) -> None:
        """Act on the new session (initialized or restored) before the first ``run``.

        Args:
            session: the raw ``mf.Session``; running it does not call the hooks.
            coord: the session's ``mf.train.Coordinator``.
        """

    def before_run(self, run_context: SessionRunContext):
        """Return a ``SessionRunArgs`` to add to the coming ``run`` call, or None."""

    def after_run(self, run_context: SessionRunContext,
                  run_values: SessionRunValues) -> None:
        """See the values of the fetches requested in ``before_run``; may request a stop."""

    def end(self, session) -> None:
        """Act at the end of the session (not called when it ends with an exception)."""

    def _graceful_stop_ends(self, session) -> None:
        """mpiflow's own: the chief's session is ending for a graceful stop (SIGTERM) and
        is about to wait for the other workers' last steps before ``end``; let go what
        would keep them from ending (a synchronous step they wait for)."""


class SessionRunArgs(NamedTuple):
    """What a hook adds to a ``run`` call: a fetch structure, feeds and run options.

    ``fetches`` may be any structure ``Session.run`` accepts (a Tensor, a list, a dict);
    its values come back, in the same structure, as ``SessionRunValues.results``.
    """

    fetches: Any
    feed_dict: dict | None = None
    options: Any = None


class SessionRunValues(NamedTuple):
    """What a hook gets back: the values of its fetches, and the call's options/metadata."""

    results: Any
    options: Any
    run_metadata: Any


class SessionRunContext:
    """The ``run`` call being made: its original arguments, the session, a stop switch."""

    def __init__(self, original_args: SessionRunArgs, session):
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self) -> SessionRunArgs:
        """The fetches, feeds and options the caller passed to ``run``."""
        return self._original_args

    @property
    def session(self):
        """The raw session; running it does not call the hooks."""
        return self._session

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def request_stop(self) -> None:
        """Make ``should_stop()`` of the monitored session return True after this run."""
        self._stop_requested = True
