"""Hooks that report progress: steps per second, summaries for TensorBoard, a progress bar.

They follow TensorFlow's ``StepCounterHook`` and ``SummarySaverHook``; ``ProgressBarHook``
(a tqdm bar on the chief) is mpiflow's own. Schedules use ``basic_hooks.SecondOrStepTimer``.
"""

from __future__ import annotations

import sys

import numpy as np

from mpiflow import errors, summary
from mpiflow.logger import get_logger
from mpiflow.train.basic_hooks import require_global_step, schedule_timer
from mpiflow.train.session_run_hook import SessionRunArgs, SessionRunHook

_LOG = get_logger("mpiflow.train")


class StepCounterHook(SessionRunHook):
    """Log global steps per second and write them as the scalar "global_step/sec"."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None,
                 summary_writer=None):
        self._timer = schedule_timer("StepCounterHook", "every_n_secs", every_n_secs,
                             "every_n_steps", every_n_steps)
        self._output_dir = output_dir
        self._summary_writer = summary_writer

    def begin(self):
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = summary.FileWriterCache.get(self._output_dir)
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


class SummarySaverHook(SessionRunHook):
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

    def begin(self):
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = summary.FileWriterCache.get(self._output_dir)
        self._next_step = None
        self._global_step = require_global_step("SummarySaverHook")

    def _summaries(self):
        op = self._summary_op if self._summary_op is not None else self._scaffold.summary_op
        if op is None:
            return None
        return list(op) if isinstance(op, list) else [op]

    def before_run(self, run_context):
        self._request_summary = self._next_step is None or \
            self._timer.should_trigger_for_step(self._next_step)
        requests = {"global_step": self._global_step}
        if self._request_summary and self._summary_writer is not None and \
                self._summaries() is not None:
            requests["summary"] = self._summaries()
        return SessionRunArgs(requests)

    def after_run(self, run_context, run_values):
        if self._summary_writer is None:
            return
        results = run_values.results
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


class ProgressBarHook(SessionRunHook):
    """Show a tqdm bar of the global step (towards ``last_step``) and, if given, the loss.

    Give it to the chief only (``chief_only_hooks``), so one bar is drawn per job.
    ``disable=None`` hides the bar when ``file`` (default stderr) is not a terminal.
    """

    def __init__(self, last_step=None, loss=None, file=None, disable=None, desc="train"):
        self._last_step = last_step
        self._loss = loss
        self._file = file
        self._disable = disable
        self._desc = desc
        self._bar = None

    def begin(self):
        self._global_step = require_global_step("ProgressBarHook")
        self._fetches = {"step": self._global_step}
        if self._loss is not None:
            self._fetches["loss"] = self._loss

    def after_create_session(self, session, coord):
        from tqdm.auto import tqdm
        self._bar = tqdm(total=self._last_step, initial=int(session.run(self._global_step)),
                         unit="step", desc=self._desc, file=self._file or sys.stderr,
                         disable=self._disable, dynamic_ncols=True)

    def before_run(self, run_context):
        return SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        results = run_values.results
        if "loss" in results:
            self._bar.set_postfix(loss=f"{float(np.asarray(results['loss'])):.4g}",
                                  refresh=False)
        self._advance(int(results["step"]) + 1)

    def _advance(self, step):
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)

    def end(self, session):
        if self._bar is not None:
            self._advance(int(session.run(self._global_step)))
            self._bar.close()
