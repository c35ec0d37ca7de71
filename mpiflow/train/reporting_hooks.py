"""Hooks that report progress: steps per second, summaries for TensorBoard, a progress bar,
traces of steps.

They follow TensorFlow's ``StepCounterHook``, ``SummarySaverHook`` and ``ProfilerHook``;
``ProgressBarHook``
(a tqdm bar, or progress lines for logs, on the chief) is mpiflow's own. Schedules use
``basic_hooks.SecondOrStepTimer``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from mpiflow import config, errors, summary, timeline
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.logger import get_logger, stderr_reaches_terminal
from mpiflow.runtime.session_options import RunOptions
from mpiflow.train.basic_hooks import require_global_step, schedule_timer
from mpiflow.train.optimizer import MINIMIZED_LOSSES, flatten_nested
from mpiflow.train.session_run_hook import SessionRunArgs, SessionRunHook

_LOG = get_logger("mpiflow.train")
_PROGRESS_LOG = get_logger("mpiflow.progress")


class _EventFileHook(SessionRunHook):
    """A hook that writes to an event file: it opens the file in ``begin``, as
    TensorFlow's do, or, as a chief's hook kept asleep on another worker (elastic
    training, ``train.succession``), only when it wakes (``after_create_session``).
    Subclasses set ``_output_dir`` and ``_summary_writer`` and do the rest of their
    ``begin`` in ``begin_asleep``."""

    def begin(self):
        self.begin_asleep()
        self._open_writer()

    def begin_asleep(self):
        raise NotImplementedError

    def after_create_session(self, session, coord):
        self._open_writer()

    def _open_writer(self):
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = summary.FileWriterCache.get(self._output_dir)


class StepCounterHook(_EventFileHook):
    """Log global steps per second and write them as the scalar "global_step/sec"."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None,
                 summary_writer=None):
        self._timer = schedule_timer("StepCounterHook", "every_n_secs", every_n_secs,
                             "every_n_steps", every_n_steps)
        self._output_dir = output_dir
        self._summary_writer = summary_writer

    def begin_asleep(self):
        self._global_step = require_global_step("StepCounterHook")
        self._tag = self._global_step.op.name + "/sec"

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = self._timer.due_step(run_context.session, self._global_step, run_values.results)
        if step is not None:
            elapsed_secs, elapsed_steps = self._timer.update_last_triggered_step(step)
            if elapsed_secs:
                self._record(elapsed_steps / elapsed_secs, step)

    def _record(self, steps_per_sec, step):
        _LOG.info("%s: %g", self._tag, steps_per_sec)
        if self._summary_writer is not None:
            self._summary_writer.add_scalar(self._tag, steps_per_sec, step)

    def end(self, session):
        if self._summary_writer is not None:
            self._summary_writer.flush()


class SummarySaverHook(_EventFileHook):
    """Write the summaries every ``save_steps`` steps or ``save_secs`` seconds.

    Args:
        summary_op: a Summary (or list of them) from ``mf.summary``; or
        scaffold: whose ``summary_op`` (by default ``mf.summary.merge_all()``) is used.
        output_dir / summary_writer: where to write (a cached ``FileWriter`` for the dir).
    """

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None,
                 scaffold=None, summary_op=None):
        if (scaffold is None) == (summary_op is None):
            raise errors.InvalidArgumentError(
                "SummarySaverHook: exactly one of scaffold and summary_op must be given")
        self._timer = schedule_timer("SummarySaverHook", "save_secs", save_secs, "save_steps",
                             save_steps)
        self._summary_op = summary_op
        self._scaffold = scaffold
        self._output_dir = output_dir
        self._summary_writer = summary_writer

    def begin_asleep(self):
        self._next_step = None
        self._global_step = require_global_step("SummarySaverHook")

    def _summaries(self):
        op = self._summary_op if self._summary_op is not None else self._scaffold.summary_op
        if op is None:
            return None
        return list(op) if isinstance(op, list) else [op]

    def before_run(self, run_context):
        if self._next_step is not None and self._summaries() is None:
            return None     # no summaries in the graph: the START log was all there was
        self._request_summary = self._next_step is None or \
            self._timer.should_trigger_for_step(self._next_step)
        requests = {"global_step": self._global_step}
        if self._request_summary and self._summary_writer is not None and \
                self._summaries() is not None:
            requests["summary"] = self._summaries()
        return SessionRunArgs(requests)

    def after_run(self, run_context, run_values):
        results = run_values.results
        if self._summary_writer is None or results is None:
            return
        step = int(results["global_step"]) + 1
        if self._next_step is None or self._request_summary:
            step = int(run_context.session.run(self._global_step))
        if self._next_step is None:
            # TensorBoard hides events of an earlier run past this step (a restart).
            self._summary_writer.add_session_log("start", step)
        if self._request_summary:
            self._timer.update_last_triggered_step(step)
            for value in results.get("summary", ()):
                self._summary_writer.add_summary(value, step)
        self._next_step = step + 1

    def end(self, session=None):
        if self._summary_writer is not None:
            self._summary_writer.flush()


class ProfilerHook(_EventFileHook):
    """Trace a step every ``save_steps`` steps or ``save_secs`` seconds into
    ``output_dir/timeline-<global step>.json`` (Chrome's trace format, as
    ``mf.timeline.Timeline`` writes it) and into the directory's event file as run
    metadata tagged ``step_<global step>`` (TensorBoard's graph tab).

    As TensorFlow's: the first run is not traced (the schedule starts from its step), and
    only the steps due ask for a trace, so the others run untraced.
    """

    def __init__(self, save_steps=None, save_secs=None, output_dir="", show_dataflow=True,
                 show_memory=False):
        self._timer = schedule_timer("ProfilerHook", "save_secs", save_secs, "save_steps",
                                     save_steps)
        self._output_dir = output_dir
        self._show_dataflow = show_dataflow
        self._show_memory = show_memory
        self._summary_writer = None

    def begin_asleep(self):
        self._next_step = None
        self._global_step = require_global_step("ProfilerHook")

    def before_run(self, run_context):
        self._trace = self._next_step is not None and \
            self._timer.should_trigger_for_step(self._next_step)
        options = RunOptions(trace_level=RunOptions.FULL_TRACE) if self._trace else None
        return SessionRunArgs({"global_step": self._global_step}, options=options)

    def after_run(self, run_context, run_values):
        step = int(run_values.results["global_step"])
        if self._next_step is None:
            self._timer.update_last_triggered_step(step)    # due N steps or secs from here
        step += 1
        if self._trace:
            step = int(run_context.session.run(self._global_step))
            self._timer.update_last_triggered_step(step)
            self._write(step, run_values.run_metadata)
        self._next_step = step + 1

    def _write(self, step, run_metadata):
        path = os.path.join(self._output_dir, f"timeline-{step}.json")
        _LOG.info("Saving timeline for %d into '%s'.", step, path)
        if self._output_dir:
            os.makedirs(self._output_dir, exist_ok=True)
        trace = timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format(
            show_dataflow=self._show_dataflow, show_memory=self._show_memory)
        with open(path, "w") as file:
            file.write(trace)
        if self._summary_writer is not None:
            self._summary_writer.add_run_metadata(run_metadata, f"step_{step}")

    def end(self, session):
        if self._summary_writer is not None:
            self._summary_writer.flush()


class ProgressBarHook(SessionRunHook):
    """Report the global step (towards ``last_step``), its rate, the loss and the time left.

    Give it to the chief only (``chief_only_hooks``), so one report is made per job.
    ``mode`` (default MPIFLOW_PROGRESS): "bar" draws a live tqdm bar; "lines" logs one line
    every ``interval_s`` seconds (default MPIFLOW_PROGRESS_INTERVAL_S), which reads well
    in a batch job's log; "auto" draws the bar when ``file`` is a terminal (without one,
    when the rank's stderr reaches a terminal, also through an MPI launcher) and logs
    lines otherwise; "off" (or ``disable=True``) reports nothing; ``disable=False`` draws
    the bar. The loss is ``loss``, or
    else, in the steps that run a train op made by ``minimize``, the loss it minimizes;
    it is fetched only when a report is due. It needs the graph's global step unless
    "off" (``MonitoredTrainingSession`` adds none to a graph without one).
    """

    def __init__(self, last_step=None, loss=None, file=None, disable=None, desc="train",
                 mode=None, interval_s=None):
        self._last_step = last_step
        self._loss = loss
        self._file = file
        self._desc = desc
        # disable=False forces the bar, as it forces tqdm's.
        # Parsed: a clear error if bad, and the declared spelling ("Lines" -> "lines").
        self._mode = config.option("MPIFLOW_PROGRESS").parse(
            "off" if disable else mode or (
                "bar" if disable is False else config.get("MPIFLOW_PROGRESS")))
        self._interval_s = interval_s
        self._stop_hook = None      # ``following``: its last step, read at the start
        self._report = None
        self._trains = False        # whether the step running now trains

    @classmethod
    def following(cls, stop_hook, **kwargs) -> ProgressBarHook:
        """A report towards the last step of ``stop_hook`` (a ``StopAtStepHook``), read
        when the session starts: ``StopAtStepHook(num_steps=N)`` knows it only then (the
        global step it starts from, restored or not, plus N). Give ``stop_hook`` to the
        session before this hook, so that it has found its last step first."""
        hook = cls(**kwargs)
        hook._stop_hook = stop_hook
        return hook

    def begin(self):
        if self._mode == "off":
            return
        self._global_step = require_global_step("ProgressBarHook")
        graph = get_default_graph()
        self._train_losses = MINIMIZED_LOSSES.get(graph, {})
        self._train_ops = set(self._train_losses) | set(graph.get_collection(GraphKeys.TRAIN_OP))

    def after_create_session(self, session, coord):
        if self._mode == "off":
            return
        if self._stop_hook is not None:
            self._last_step = self._stop_hook.last_step
        self._report = progress_report(int(session.run(self._global_step)), self._last_step,
                                       self._desc, self._mode, self._file, self._interval_s)

    def before_run(self, run_context):
        if self._report is None:
            return None
        fetches = {"step": self._global_step}
        user_fetches = run_context.original_args.fetches
        # The step fetched is read before the train op adds to it: a step that trains is
        # one more; one that only evaluates (the test accuracy at the end) is not.
        self._trains = any(item in self._train_ops for item in flatten_nested(user_fetches))
        loss = self._loss_of(user_fetches) if self._report.due() else None
        if loss is not None:
            fetches["loss"] = loss
        return SessionRunArgs(fetches)

    def _loss_of(self, user_fetches):
        """The loss to show with this step: the one given, or that of a train op the step
        runs (the loss is computed by the step anyway, so fetching it is free)."""
        if self._loss is not None:
            return self._loss
        return next((self._train_losses[item] for item in flatten_nested(user_fetches)
                     if item in self._train_losses), None)

    def after_run(self, run_context, run_values):
        if self._report is None:
            return
        results = run_values.results
        loss = results.get("loss")
        self._report.update(int(results["step"]) + int(self._trains),
                            None if loss is None else float(np.asarray(loss)))

    def end(self, session):
        if self._report is not None:
            self._report.close(int(session.run(self._global_step)))
            self._report = None


def progress_report(start_step=0, last_step=None, desc="train", mode=None, file=None,
                    interval_s=None):
    """Return a progress report for a training loop of your own (on the chief only).

    Call ``update(step, loss=None)`` after each step and ``close(step)`` at the end;
    ``due()`` says whether a loss would be shown now, so it can be fetched only then.
    ``mode`` and ``interval_s`` as ``ProgressBarHook`` takes them (default
    MPIFLOW_PROGRESS: a bar where stderr reaches a terminal, else a line every
    MPIFLOW_PROGRESS_INTERVAL_S seconds).
    """
    # Parsed: a clear error if bad, and the declared spelling ("Lines" -> "lines").
    mode = config.option("MPIFLOW_PROGRESS").parse(mode or config.get("MPIFLOW_PROGRESS"))
    if mode == "auto":
        on_terminal = file.isatty() if file is not None and hasattr(file, "isatty") \
            else stderr_reaches_terminal()
        mode = "bar" if on_terminal else "lines"
    return _REPORTS[mode](start_step, last_step, desc, file,
                          interval_s or config.get("MPIFLOW_PROGRESS_INTERVAL_S"))


class _NoReport:
    def __init__(self, *args):
        pass

    def due(self) -> bool:
        return False

    def update(self, step, loss=None):
        pass

    def close(self, step):
        pass


class _BarReport:
    """A live tqdm bar; the loss refreshes at most every second."""

    def __init__(self, start, last_step, desc, file, interval_s):
        from tqdm.auto import tqdm  # noqa: PLC0415  (only the bar needs tqdm)
        self._bar = tqdm(total=last_step, initial=start, unit="step", desc=desc,
                         file=file or sys.stderr, disable=False, dynamic_ncols=True)
        self._next_loss = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self._next_loss

    def update(self, step, loss=None):
        if loss is not None:
            self._next_loss = time.monotonic() + 1.0
            self._bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)

    def close(self, step):
        self.update(step, None)
        self._bar.close()


class _LineReport:
    """A log line every ``interval_s``: "step 1200/5000 (24%), 85.3 steps/s, loss 0.41,
    ETA 0:00:44", and one when training ends. The rate is that of the last interval."""

    def __init__(self, start, last_step, desc, file, interval_s):
        self._last_step = last_step
        self._desc = desc
        self._interval_s = interval_s
        self._file = file
        now = time.monotonic()
        self._started = (now, start)
        self._window = (now, start)
        self._step = start
        self._asked = None          # what due() last answered, until the next update

    def due(self) -> bool:
        self._asked = time.monotonic() - self._window[0] >= self._interval_s
        return self._asked

    def update(self, step, loss=None):
        self._step = max(self._step, step)
        asked, self._asked = self._asked, None
        now = time.monotonic()
        since, from_step = self._window
        # A step told "not due" fetched no loss: a line falling due while it ran waits
        # for the next step, which fetches it (steps take most of the time, so without
        # this most lines would come without the loss).
        if asked is False or now - since < self._interval_s:
            return
        rate = (self._step - from_step) / (now - since)
        text = f"{self._desc}: {self._progress()}, {rate:.3g} steps/s"
        if loss is not None:
            text += f", loss {loss:.4g}"
        if self._last_step and rate > 0 and self._step < self._last_step:
            text += f", ETA {_format_seconds((self._last_step - self._step) / rate)}"
        self._emit(text)
        self._window = (now, self._step)

    def close(self, step):
        self._step = max(self._step, step)
        began, from_step = self._started
        took = time.monotonic() - began
        rate = (self._step - from_step) / took if took > 0 else 0.0
        self._emit(f"{self._desc}: done at {self._progress()} in {_format_seconds(took)} "
                   f"({rate:.3g} steps/s)")

    def _progress(self) -> str:
        if not self._last_step:
            return f"step {self._step}"
        return (f"step {self._step}/{self._last_step} "
                f"({100 * min(self._step, self._last_step) / self._last_step:.0f}%)")

    def _emit(self, text):
        if self._file is not None:
            self._file.write(text + "\n")
            self._file.flush()
        else:
            _PROGRESS_LOG.info("%s", text)


_REPORTS = {"bar": _BarReport, "lines": _LineReport, "off": _NoReport}


def _format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
