"""Supervisor: TF1's older session wrapper, which many ps/worker scripts still use.

It makes the chief's session (restored from ``logdir`` or initialized) and has the other
workers wait for it, and on the chief runs the "standard services" in threads beside
training: a checkpoint every ``save_model_secs``, summaries every ``save_summaries_secs``
and a global-step rate. ``managed_session`` wraps it all in a context manager; queue
runners (here: a sync-replicas chief's loop) start under its coordinator. It is built on
the same SessionManager and Scaffold defaults as MonitoredTrainingSession.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from mpiflow import errors
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.logger import get_logger
from mpiflow.summary.event_file import FileWriter, event_proto
from mpiflow.train.coordinator import Coordinator
from mpiflow.train.global_step import get_global_step
from mpiflow.train.monitored_session import Scaffold
from mpiflow.train.session_manager import SessionManager

_LOG = get_logger("mpiflow.train")


class _UseDefault:
    def __repr__(self):
        return "Supervisor.USE_DEFAULT"


class Supervisor:
    """A training helper that makes sessions ready and runs the chief's services.

    Args (as TensorFlow's): ``graph``, ``ready_op``, ``ready_for_local_init_op``,
    ``is_chief``, ``init_op``, ``init_feed_dict``, ``local_init_op``, ``logdir`` (where
    checkpoints and summaries go; None: none), ``summary_op``, ``saver``, ``global_step``,
    ``save_summaries_secs``, ``save_model_secs`` (0 or None turns a service off),
    ``recovery_wait_secs``, ``stop_grace_secs``, ``checkpoint_basename``,
    ``session_manager``, ``summary_writer``, ``init_fn``. ``USE_DEFAULT`` makes the
    usual one (a saver, a merged summary op, the global variables initializer...); None
    means none.

    Raises:
        ValueError: on a non-chief, a variable without a device (TensorFlow's text, as
            users search for it, followed by how to fix it).
    """

    USE_DEFAULT = _UseDefault()

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT,
                 is_chief=True, init_op=USE_DEFAULT, init_feed_dict=None,
                 local_init_op=USE_DEFAULT, logdir=None, summary_op=USE_DEFAULT,
                 saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs=120,
                 save_model_secs=600, recovery_wait_secs=30, stop_grace_secs=120,
                 checkpoint_basename="model.ckpt", session_manager=None,
                 summary_writer=USE_DEFAULT, init_fn=None, local_init_run_options=None):
        self._graph = graph if graph is not None else get_default_graph()
        self._is_chief = bool(is_chief)
        self._logdir = logdir
        self._save_summaries_secs = save_summaries_secs
        self._save_model_secs = save_model_secs
        self._recovery_wait_secs = recovery_wait_secs
        self._stop_grace_secs = stop_grace_secs
        self._save_path = os.path.join(logdir, checkpoint_basename) if logdir else None
        self._coord = Coordinator()
        self._started_threads = []
        self._init_feed_dict = init_feed_dict
        self._init_fn = init_fn
        with self._graph.as_default():
            if global_step is Supervisor.USE_DEFAULT:
                global_step = get_global_step(self._graph)
            self._global_step = global_step
            if saver is Supervisor.USE_DEFAULT:
                savers = self._graph.get_collection(GraphKeys.SAVERS)
                if savers:
                    saver = savers[0]
                else:
                    from mpiflow.train.saver import Saver
                    saver = Saver()
            given = {name: None if value is Supervisor.USE_DEFAULT else value
                     for name, value in (("init_op", init_op), ("ready_op", ready_op),
                                         ("ready_for_local_init_op", ready_for_local_init_op),
                                         ("local_init_op", local_init_op),
                                         ("summary_op", summary_op))}
            scaffold = Scaffold(saver=saver, init_feed_dict=init_feed_dict, **given)
            self._verify_setup()
            scaffold.finalize()          # makes the defaults, then finalizes the graph
        # An explicit None turns a piece off (the Scaffold would have made a default).
        self._scaffold = scaffold
        self._init_op = None if init_op is None else scaffold.init_op
        self._ready_op = None if ready_op is None else scaffold.ready_op
        self._ready_for_local_init_op = None if ready_for_local_init_op is None \
            else scaffold.ready_for_local_init_op
        self._local_init_op = None if local_init_op is None else scaffold.local_init_op
        self._summary_op = None if summary_op is None else scaffold.summary_op
        self._saver = saver
        if summary_writer is Supervisor.USE_DEFAULT:
            summary_writer = FileWriter(logdir) if (logdir and self._is_chief) else None
        self._summary_writer = summary_writer
        self._writer_closed = False          # by ``stop``
        self._graph_written = False          # to the writer, since it was opened
        self._session_manager = session_manager or SessionManager(
            local_init_op=self._local_init_op, ready_op=self._ready_op,
            ready_for_local_init_op=self._ready_for_local_init_op, graph=self._graph,
            recovery_wait_secs=recovery_wait_secs)

    def _verify_setup(self):
        # A worker that is not the chief is a replica: its variables must live somewhere
        # shared, or each replica trains its own copy.
        if self._is_chief:
            return
        for op in self._graph.get_operations():
            if op.type in ("Variable", "VariableV2") and not op.device:
                raise ValueError(
                    f"When using replicas, all Variables must have their device set: {op}. "
                    "mpiflow: create the variables inside "
                    "`with mf.device(mf.train.replica_device_setter(cluster=...)):` (put "
                    "them on the ps), or give each a device, and make the Supervisor "
                    "outside that block")

    # -- sessions ----------------------------------------------------------------------------
    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False,
                                    max_wait_secs=7200, start_standard_services=True):
        """Return a session: on the chief restored or initialized (and its services
        started), on the others once the chief has made the model ready."""
        self._coord.clear_stop()
        if self._summary_writer is not None and self._writer_closed:
            # A session after one that ``stop`` ended writes to a new event file.
            self._summary_writer.reopen()
            self._writer_closed = False
        if self._is_chief:
            sess = self._session_manager.prepare_session(
                master, init_op=self._init_op, saver=self._saver,
                checkpoint_dir=self._logdir, wait_for_checkpoint=wait_for_checkpoint,
                max_wait_secs=max_wait_secs, config=config,
                init_feed_dict=self._init_feed_dict, init_fn=self._init_fn)
            self._write_graph()
            if start_standard_services:
                self.start_standard_services(sess)
        else:
            sess = self._session_manager.wait_for_session(
                master, config=config,
                max_wait_secs=None if max_wait_secs == 7200 else max_wait_secs)
        if start_standard_services:
            self.start_queue_runners(sess)
        return sess

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True,
                        close_summary_writer=True):
        """A context manager around a prepared session: on leaving (or on an error inside)
        it stops the services and closes the session; an OutOfRangeError ends it cleanly."""
        sess = None
        try:
            sess = self.prepare_or_wait_for_session(
                master=master, config=config,
                start_standard_services=start_standard_services)
            yield sess
        except Exception as exc:
            self.request_stop(exc)
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                if sess is not None:
                    sess.close()

    def _write_graph(self):
        """Write the graph to the event file once per writer opening, as TensorFlow's
        chief does, so that TensorBoard shows it."""
        if self._summary_writer is not None and not self._graph_written:
            self._summary_writer.add_graph(self._graph)
            self._graph_written = True

    # -- services ----------------------------------------------------------------------------
    def start_standard_services(self, sess):
        """Start the chief's checkpoint, summary and step-rate threads (those with a
        logdir and a period); return them."""
        if not self._is_chief:
            raise errors.FailedPreconditionError(
                "Only the chief starts the standard services (is_chief=False here)")
        threads = []
        if self._logdir and self._summary_writer is not None:
            self._summary_writer.add_session_log("start", self._current_step(sess))
        if self._logdir and self._save_model_secs and self._saver is not None:
            threads.append(self._loop_thread("mpiflow-sv-checkpoint", self._save_model_secs,
                                             lambda: self._save(sess)))
        if self._summary_writer is not None and self._save_summaries_secs:
            if self._summary_op is not None:
                threads.append(self._loop_thread("mpiflow-sv-summaries",
                                                 self._save_summaries_secs,
                                                 lambda: self._write_summaries(sess)))
            if self._global_step is not None:
                rate = _StepRate(self, sess)
                threads.append(self._loop_thread("mpiflow-sv-step-rate",
                                                 self._save_summaries_secs, rate.record))
        return threads

    def start_queue_runners(self, sess, queue_runners=None):
        """Start ``queue_runners`` (default: the graph's QUEUE_RUNNERS) under the
        supervisor's coordinator; return their threads."""
        if queue_runners is None:
            queue_runners = self._graph.get_collection(GraphKeys.QUEUE_RUNNERS)
        threads = []
        for runner in queue_runners:
            threads.extend(runner.create_threads(sess, coord=self._coord, daemon=True,
                                                 start=True))
        self._started_threads.extend(threads)
        return threads

    def loop(self, timer_interval_secs, target, args=None, kwargs=None):
        """Call ``target(*args, **kwargs)`` at once, then every ``timer_interval_secs``
        (None: back to back) in a thread until a stop is requested; return the thread."""
        return self._loop_thread("mpiflow-sv-loop", timer_interval_secs,
                                 lambda: target(*(args or ()), **(kwargs or {})))

    def _loop_thread(self, name, period, call):
        """A thread calling ``call`` at once, then every ``period`` s from its start (a
        call that takes long does not push the next ones back), as TensorFlow's: a job
        shorter than ``save_model_secs`` still leaves its first checkpoint."""
        def run():
            with self._coord.stop_on_exception():
                if period is None:
                    while not self._coord.should_stop():
                        call()
                    return
                due = time.monotonic()
                while not self._coord.wait_for_stop(max(due - time.monotonic(), 0.0)):
                    due += period
                    call()
        thread = threading.Thread(target=run, name=name, daemon=True)
        self._coord.register_thread(thread)
        thread.start()
        self._started_threads.append(thread)
        return thread

    def _current_step(self, sess):
        return None if self._global_step is None else int(sess.run(self._global_step))

    def _save(self, sess):
        path = self._saver.save(sess, self._save_path, global_step=self._global_step)
        _LOG.info("Saved checkpoint %s", path)
        if self._summary_writer is not None and self._global_step is not None:
            # As TensorFlow's checkpoint thread: TensorBoard marks the save at its step.
            session_log = event_proto("SessionLog")
            self._summary_writer.add_session_log(session_log(
                status=session_log.CHECKPOINT, checkpoint_path=self._save_path),
                self._current_step(sess))

    def _write_summaries(self, sess):
        fetches = [self._summary_op] + ([self._global_step] if self._global_step is not None
                                        else [])
        values = sess.run(fetches)
        step = int(values[1]) if len(values) > 1 else None
        self._summary_writer.add_summary(values[0], step)

    def summary_computed(self, sess, summary, global_step=None):
        """Write a summary the caller computed (on the chief, with a logdir)."""
        if self._summary_writer is None:
            raise errors.FailedPreconditionError(
                "summary_computed needs a summary writer: give the chief a logdir")
        if global_step is None and self._global_step is not None:
            global_step = self._current_step(sess)
        self._summary_writer.add_summary(summary, global_step)

    # -- stopping ----------------------------------------------------------------------------
    def should_stop(self) -> bool:
        return self._coord.should_stop()

    def request_stop(self, ex=None) -> None:
        self._coord.request_stop(ex)

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False):
        """Stop the services and queue runners and wait for them (up to
        ``stop_grace_secs``); re-raise an exception a stop was requested with.

        Stopping again does not write to the summary writer a stop closed: TF1 scripts
        call ``sv.stop()`` inside ``managed_session``, whose exit stops once more."""
        self._coord.request_stop()
        try:
            self._coord.join(list(threads or ()) + self._started_threads,
                             stop_grace_period_secs=self._stop_grace_secs,
                             ignore_live_threads=ignore_live_threads)
        finally:
            self._started_threads = []
            if close_summary_writer and self._summary_writer is not None and \
                    not self._writer_closed:
                self._writer_closed = True
                self._graph_written = False
                self._summary_writer.add_session_log("stop")
                self._summary_writer.close()

    def stop_on_exception(self):
        return self._coord.stop_on_exception()

    def wait_for_stop(self):
        self._coord.wait_for_stop()

    # -- what it was given or made -----------------------------------------------------------
    is_chief = property(lambda self: self._is_chief)
    coord = property(lambda self: self._coord)
    session_manager = property(lambda self: self._session_manager)
    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    ready_op = property(lambda self: self._ready_op)
    ready_for_local_init_op = property(lambda self: self._ready_for_local_init_op)
    local_init_op = property(lambda self: self._local_init_op)
    summary_op = property(lambda self: self._summary_op)
    summary_writer = property(lambda self: self._summary_writer)
    saver = property(lambda self: self._saver)
    global_step = property(lambda self: self._global_step)
    save_summaries_secs = property(lambda self: self._save_summaries_secs)
    save_model_secs = property(lambda self: self._save_model_secs)
    save_path = property(lambda self: self._save_path)
    logdir = property(lambda self: self._logdir)
    recovery_wait_secs = property(lambda self: self._recovery_wait_secs)


class _StepRate:
    """Writes ``<global step>/sec`` between calls (the Supervisor's step counter)."""

    def __init__(self, supervisor, sess):
        self._sv, self._sess = supervisor, sess
        self._last = None
        # As TensorFlow's: the global step's op name, "global_step/sec" by default.
        self._tag = f"{supervisor.global_step.op.name}/sec"

    def record(self):
        step, now = self._sv._current_step(self._sess), time.monotonic()
        if self._last is not None and now > self._last[1]:
            rate = (step - self._last[0]) / (now - self._last[1])
            self._sv.summary_writer.add_scalar(self._tag, rate, step)
        self._last = (step, now)
