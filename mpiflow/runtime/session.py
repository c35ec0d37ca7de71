"""Session: runs fetches of a graph with feeds, caching one compiled plan per signature.

``run`` accepts TensorFlow's nested fetch structures (lists, tuples, namedtuples, dicts)
of Tensors, Operations, Variables, IndexedSlices or their names, and returns the same
structure with numpy values (None for Operations).
"""

from __future__ import annotations

import contextlib
import sys
import threading

from mpiflow import backend, errors
from mpiflow.framework import graph as graph_module
from mpiflow.framework.graph import Operation, Tensor, get_default_graph
from mpiflow.runtime import tracing, whereabouts
from mpiflow.runtime.distributed import DistributedPlan, make_placer, resolve_target
from mpiflow.runtime.executor import Plan
from mpiflow.runtime.feeds import check_feed, fed_twice, feed_tensor, sorted_feeds
from mpiflow.runtime.fetches import ElementPlan, FetchMapper
from mpiflow.runtime.kernel_env import LocalEnv
from mpiflow.runtime.placement import LocalPlacement
from mpiflow.runtime.resources import ResourceStore
from mpiflow.runtime.session_options import ConfigProto, RunMetadata, RunOptions

__all__ = ["BaseSession", "ConfigProto", "InteractiveSession", "RunMetadata", "RunOptions",
           "Session"]

class BaseSession:
    """The local runtime: plans, variable store, default-session handling."""

    def __init__(self, target="", graph=None, config=None):
        if config is not None and not isinstance(config, ConfigProto):
            raise errors.InvalidArgumentError(
                f"config must be an mf.ConfigProto, got {type(config).__name__}")
        backend.keep_host_memory()
        self._graph = graph if graph is not None else get_default_graph()
        self._target = target
        self._cluster = resolve_target(target)
        # A session on a server takes the server's ConfigProto unless given its own.
        self._config = config or getattr(self._cluster, "config", None) or ConfigProto()
        self._config.apply()
        self._placer = None if self._cluster is None else \
            make_placer(self._graph, self._cluster, self._config)
        self._local_placement = LocalPlacement(self._config) if self._cluster is None \
            else None
        self._store = ResourceStore()
        self._env = LocalEnv(self._store)
        self._plans = {}
        self._plans_lock = threading.Lock()
        self._closed = False
        self._runs_lock = threading.Lock()
        self._active = {}               # thread ident -> steps it is running
        self._default_ctx = []
        # Set once the graph's replicated variables were made equal to worker 0's in this
        # session (mf.train's SessionManager does it), so no hook repeats the broadcast.
        self.replicas_broadcast = False

    @property
    def graph(self):
        return self._graph

    @property
    def sess_str(self) -> str:
        return self._target

    # -- running ---------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run the ops needed for ``fetches`` and return their values in the same structure.

        Raises:
            InvalidArgumentError: bad fetch or feed (the message names the tensor).
            FailedPreconditionError: the session is closed, or a variable is uninitialized.
        """
        self._check_open()
        mapper = FetchMapper(self._graph, fetches)
        feed_tensors, feed_values = sorted_feeds(self._graph, feed_dict)
        with self._running():
            plan = self._plan(mapper.elements, feed_tensors)
            values = self._run_plan(plan, feed_values, options, run_metadata)
        per_element = values[:len(mapper.elements)]
        return mapper.build(per_element)

    def _run_plan(self, plan, feed_values, options, run_metadata):
        """One step of ``plan``, traced and timed out as ``options`` say, recorded in
        ``run_metadata``."""
        trace = [] if options is not None and getattr(options, "trace_level", 0) else None
        values = plan.run(feed_values, self._timeout(options), trace)
        whereabouts.NOW.steps += 1
        if trace is not None:
            tracing.TRACER.extend(trace)
        if run_metadata is not None:
            # This run's, as TensorFlow fills it (a RunMetadata made once and passed to
            # every run holds the last run's step, not every step so far).
            run_metadata.step_stats = list(trace or ())
            run_metadata.partition_graphs = list(plan.partition_graphs()) \
                if getattr(options, "output_partition_graphs", False) else []
        return values

    def _timeout(self, options):
        """Seconds this run may wait for other ranks: the call's option, else the
        session's ConfigProto, else None (MPIFLOW_TIMEOUT)."""
        if options is not None and not isinstance(options, RunOptions):
            raise errors.InvalidArgumentError(
                f"options must be an mf.RunOptions, got {type(options).__name__}")
        ms = (options.timeout_in_ms if options is not None else 0) or \
            self._config.operation_timeout_in_ms
        return ms / 1000.0 if ms and ms > 0 else None

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """Return ``f(*feed_values)`` that runs ``fetches``: the same plan, less lookup.

        With ``accept_options=True`` it also takes the keyword arguments ``options`` (a
        RunOptions) and ``run_metadata`` (a RunMetadata), as ``run`` does.
        """
        self._check_open()
        mapper = FetchMapper(self._graph, fetches)
        feed_tensors = [feed_tensor(self._graph, k) for k in (feed_list or [])]
        twice = fed_twice(feed_tensors)
        if twice is not None:
            raise errors.InvalidArgumentError(
                f"make_callable's feed_list names Tensor '{twice.name}' twice; each "
                f"tensor takes one value")
        plan = self._plan(mapper.elements, feed_tensors)

        def call(*values, **kwargs):
            if len(values) != len(feed_tensors):
                raise errors.InvalidArgumentError(
                    f"Callable expects {len(feed_tensors)} feed values, got {len(values)}")
            unknown = sorted(set(kwargs) - ({"options", "run_metadata"} if accept_options
                                            else set()))
            if unknown:
                raise errors.InvalidArgumentError(
                    f"Callable got unexpected keyword argument '{unknown[0]}': it takes "
                    + ("options and run_metadata" if accept_options else
                       "none (make_callable(..., accept_options=True) takes options and "
                       "run_metadata)"))
            converted = [check_feed(t, v) for t, v in zip(feed_tensors, values)]
            with self._running():
                return mapper.build(self._run_plan(plan, converted, kwargs.get("options"),
                                                   kwargs.get("run_metadata")))
        return call

    def _plan(self, elements, feed_tensors):
        key = (tuple(elements), tuple(feed_tensors))
        plan = self._plans.get(key)
        if plan is None:
            with self._plans_lock:      # never a plan made after close() released them
                self._check_open()
                plan = self._plans.get(key) or self._new_plan(key, elements, feed_tensors)
        return plan

    def _new_plan(self, key, elements, feed_tensors):
        fetch_tensors = [e for e in elements if isinstance(e, Tensor)]
        targets = [e for e in elements if isinstance(e, Operation)]
        if self._cluster is not None:
            plan = DistributedPlan(self._graph, fetch_tensors, targets, feed_tensors,
                                   self._cluster, self._placer)
        else:
            log = self._log_placement if self._config.log_device_placement else None
            plan = Plan(self._graph, fetch_tensors, targets, feed_tensors, self._env,
                        device_of=self._local_placement.device_of, log_placement=log)
        plan = ElementPlan(plan, elements)
        self._plans[key] = plan
        return plan

    def _cancel_other_thread(self, thread_ident: int, reason: str) -> None:
        """End with CancelledError the step another thread runs on this session (a sync
        loop stopping at shutdown); in-process steps end at their next wait."""
        if self._cluster is not None:
            self._cluster.service.cancel_steps_of_thread(thread_ident, reason)
        else:
            self._env.cancel_waits(reason)

    @staticmethod
    def _log_placement(op, device):
        print(f"{op.name}: ({op.type}): {device or '/device:CPU:0'}", file=sys.stderr)

    # -- lifetime ----------------------------------------------------------------------------
    def _check_open(self):
        if self._closed:
            raise errors.FailedPreconditionError("Attempted to use a closed Session.")

    @contextlib.contextmanager
    def _running(self):
        """Count a step as running while it runs; what ``close`` frees waits for it."""
        me = threading.get_ident()
        with self._runs_lock:
            self._check_open()
            self._active[me] = self._active.get(me, 0) + 1
        try:
            yield
        except errors.OpError as exc:
            if self._closed and not isinstance(exc, errors.CancelledError):
                raise errors.CancelledError(
                    f"The session was closed (from another thread) while this step ran: "
                    f"{exc.message}", exc.op) from exc
            raise
        finally:
            with self._runs_lock:
                count = self._active.pop(me) - 1
                if count:
                    self._active[me] = count
                last = self._closed and not self._active
            if last:
                self._release()

    def close(self):
        """Release the plans (and, in-process, the variables); later ``run`` calls raise.

        Steps other threads are running are cancelled where they wait (CancelledError)
        and what they use is freed once they end, never under them. Variables of a
        distributed session live on their tasks and outlive the session, as in
        TensorFlow; its pieces registered on other ranks are dropped.
        """
        me = threading.get_ident()
        with self._runs_lock:
            if self._closed:
                return
            self._closed = True
            others = [t for t in self._active if t != me]
            idle = not self._active
        for thread in others:
            self._cancel_other_thread(thread, "the session was closed")
        if idle:
            self._release()

    def _release(self):
        with self._plans_lock:
            for plan in self._plans.values():
                plan.close()
            self._plans.clear()
        self._store.clear()

    def as_default(self):
        """A context manager making this session the default one (``get_default_session``)
        inside its block; unlike ``with sess:``, it does not close the session."""
        return graph_module.DefaultSessionScope(self)

    def __enter__(self):
        graph_ctx = self._graph.as_default()
        graph_ctx.__enter__()
        session_ctx = self.as_default()
        session_ctx.__enter__()
        self._default_ctx.append((graph_ctx, session_ctx))
        return self

    def __exit__(self, exc_type, exc, tb):
        graph_ctx, session_ctx = self._default_ctx.pop()
        session_ctx.__exit__(exc_type, exc, tb)
        graph_ctx.__exit__(exc_type, exc, tb)
        self.close()
        return False


class Session(BaseSession):
    """A TF1 session: ``Session(target='', graph=None, config=None)``.

    ``target`` '' runs in this process; distributed targets come from ``mf.train.Server``.
    """

    @staticmethod
    def reset(target, containers=None, config=None) -> None:
        """Clear every variable and shared resource on every task of ``target``'s cluster
        (TensorFlow's resource containers) and drop what sessions registered there: their
        later steps fail with NotFoundError. Call it when no step is running anywhere,
        e.g. between two experiments in one long-lived job.

        An in-process target ("") has nothing to reset: its sessions' variables are their
        own and go with them. Only the default container exists here.

        Raises:
            UnimplementedError: ``containers`` names containers other than the default.
        """
        if containers is not None and list(containers) not in ([], [""]):
            raise errors.UnimplementedError(
                f"Session.reset: containers {list(containers)!r}: mpiflow has only the "
                "default container (reset it with containers=None)")
        cluster = resolve_target(target)
        if cluster is not None:
            cluster.service.reset()


class InteractiveSession(BaseSession):
    """A session that installs itself as the default session on construction."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        self._interactive_ctx = self.as_default()
        self._interactive_ctx.__enter__()

    def close(self):
        if self._interactive_ctx is not None:
            self._interactive_ctx.__exit__(None, None, None)
            self._interactive_ctx = None
        super().close()
