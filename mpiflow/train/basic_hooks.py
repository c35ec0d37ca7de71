"""The standard SessionRunHooks, with TensorFlow's semantics (``basic_session_run_hooks``).

Stop at a step, save checkpoints on a schedule, log tensors, stop on a NaN loss, run final
ops, feed inputs; the hooks that report progress (steps per second, summaries, a progress
bar) are in ``reporting_hooks``. Schedules ("every N steps or every N seconds") share one
``SecondOrStepTimer``. Hooks that need the global step find it in the graph in ``begin``
and fetch it with the caller's step, so they cost one scalar fetch.
"""

from __future__ import annotations

import os
import time

import numpy as np

from mpiflow import errors, summary
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.logger import get_logger
from mpiflow.train.checkpoint_management import get_checkpoint_state
from mpiflow.train.global_step import get_global_step
from mpiflow.train.session_manager import get_saver_or_default
from mpiflow.train.session_run_hook import SessionRunArgs, SessionRunHook

_LOG = get_logger("mpiflow.train")


class NanLossDuringTrainingError(errors.MpiflowError, RuntimeError):
    """The loss became NaN (raised by ``NanTensorHook``)."""

    def __str__(self):
        return super().__str__() or "NaN loss during training."


def _positive(owner: str, name: str, value, integer: bool):
    if value is None:
        return None
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(
        value, (int, float, np.integer, np.floating))
    if not ok or isinstance(value, bool) or value <= 0:
        kind = "a positive int" if integer else "a positive number"
        raise errors.InvalidArgumentError(f"{owner}: {name} must be {kind}, got {value!r}")
    return value


def schedule_timer(owner: str, secs_name: str, secs, steps_name: str,
                   steps) -> SecondOrStepTimer:
    """Return the timer for ``owner``'s schedule, checking exactly one interval is given."""
    if (secs is None) == (steps is None):
        raise errors.InvalidArgumentError(
            f"{owner}: exactly one of {secs_name} and {steps_name} must be given, got "
            f"{secs_name}={secs!r} and {steps_name}={steps!r}")
    return SecondOrStepTimer(every_secs=_positive(owner, secs_name, secs, False),
                             every_steps=_positive(owner, steps_name, steps, True))


def require_global_step(owner: str):
    """Return the default graph's global step; ``owner`` names the hook that needs it."""
    step = get_global_step()
    if step is None:
        raise errors.FailedPreconditionError(
            f"Global step should be created to use {owner}: call "
            "mf.train.get_or_create_global_step() and pass it to minimize(global_step=...)")
    return step


class SecondOrStepTimer:
    """Say when something is due: ``every_secs`` seconds or ``every_steps`` steps apart."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise errors.InvalidArgumentError(
                f"SecondOrStepTimer: exactly one of every_secs and every_steps must be given, "
                f"got every_secs={every_secs!r} and every_steps={every_steps!r}")
        self._every_secs = every_secs
        self._every_steps = every_steps
        self.reset()

    def reset(self) -> None:
        self._last_triggered_step = None
        self._last_triggered_time = None

    def should_trigger_for_step(self, step: int) -> bool:
        """Return whether ``step`` is due: the first step is, the last one triggered isn't."""
        if self._last_triggered_step is None:
            return True
        if self._last_triggered_step == step:
            return False
        if self._every_secs is not None:
            return time.monotonic() >= self._last_triggered_time + self._every_secs
        return step >= self._last_triggered_step + self._every_steps

    def update_last_triggered_step(self, step: int):
        """Mark ``step`` as triggered now; return (seconds, steps) since the last trigger.

        Both are None at the first trigger.
        """
        now = time.monotonic()
        elapsed = (None, None) if self._last_triggered_time is None else (
            now - self._last_triggered_time, step - self._last_triggered_step)
        self._last_triggered_time = now
        self._last_triggered_step = step
        return elapsed

    def last_triggered_step(self):
        return self._last_triggered_step

    def due_step(self, session, global_step, fetched_step):
        """Return the global step if it is due after a run that saw ``fetched_step``, else
        None. The step is read again first: other workers may have moved it."""
        if not self.should_trigger_for_step(int(fetched_step) + 1):
            return None
        step = int(session.run(global_step))
        return step if self.should_trigger_for_step(step) else None


class StopAtStepHook(SessionRunHook):
    """Request a stop once the global step reaches ``last_step`` (or start + ``num_steps``)."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise errors.InvalidArgumentError(
                f"StopAtStepHook: exactly one of num_steps and last_step must be given, got "
                f"num_steps={num_steps!r} and last_step={last_step!r}")
        for name, value in (("num_steps", num_steps), ("last_step", last_step)):
            if value is not None:
                errors.integer_at_least(value, 0, f"StopAtStepHook: {name}")
        self._num_steps = num_steps
        self._last_step = last_step

    @property
    def last_step(self):
        return self._last_step

    def begin(self):
        self._global_step = require_global_step("StopAtStepHook")

    def after_create_session(self, session, coord):
        step = int(session.run(self._global_step))
        if self._last_step is None:
            self._last_step = step + self._num_steps
        elif step >= self._last_step:
            # A restored checkpoint already at (or past) the last step: no step to run.
            # TensorFlow runs one anyway and stops after it, past last_step.
            _LOG.info("The global step is %d, at or past last_step %d: nothing to train.",
                      step, self._last_step)
            coord.request_stop()

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        # The value read may precede this step's increment: confirm with a fresh read.
        if int(run_values.results) + 1 >= self._last_step and \
                int(run_context.session.run(self._global_step)) >= self._last_step:
            run_context.request_stop()


class CheckpointSaverListener:
    """Called by ``CheckpointSaverHook`` around each save; ``after_save`` may stop training."""

    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        """Return True to request a stop."""

    def end(self, session, global_step_value):
        pass


class CheckpointSaverHook(SessionRunHook):
    """Save a checkpoint when the session starts, every ``save_secs`` or ``save_steps``, and
    at the end, to ``checkpoint_dir/checkpoint_basename-<global step>``.

    The saver is ``saver``, else the scaffold's, else the one in the SAVERS collection.
    As TensorFlow's, each save also writes a ``SessionLog(status=CHECKPOINT,
    checkpoint_path=<checkpoint_dir/checkpoint_basename>)`` at its step to the event file
    of ``checkpoint_dir`` (the ``FileWriterCache``'s writer, opened at the first save).
    """

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None, listeners=None):
        if saver is not None and scaffold is not None:
            raise errors.InvalidArgumentError(
                "CheckpointSaverHook: give saver or scaffold, not both")
        if not checkpoint_dir:
            raise errors.InvalidArgumentError(
                f"CheckpointSaverHook: checkpoint_dir must be a directory, got "
                f"{checkpoint_dir!r}")
        self._timer = schedule_timer("CheckpointSaverHook", "save_secs", save_secs, "save_steps",
                             save_steps)
        self._checkpoint_dir = str(checkpoint_dir)
        self._save_path = os.path.join(self._checkpoint_dir, checkpoint_basename)
        self._saver = saver
        self._scaffold = scaffold
        self._listeners = list(listeners or [])
        self._summary_writer = None

    def begin(self):
        os.makedirs(self._checkpoint_dir, exist_ok=True)
        self._global_step = require_global_step("CheckpointSaverHook")
        # A new Saver adds ops, so it must exist before the graph is finalized.
        if self._saver is None and not get_default_graph().finalized:
            if self._scaffold is not None:
                self._scaffold._ensure_saver()
            else:
                get_saver_or_default()
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session, coord):
        # A resumed job keeps counting max_to_keep over the checkpoints already there.
        state = get_checkpoint_state(self._checkpoint_dir)
        if state is not None:
            self._get_saver().recover_last_checkpoints(state.all_model_checkpoint_paths)
        step = int(session.run(self._global_step))
        latest = state.model_checkpoint_path if state is not None else None
        # TensorFlow saves here even when the session was just restored from a checkpoint
        # of this very step; saving it again only rewrites the same values.
        if latest is None or os.path.basename(latest) != \
                f"{os.path.basename(self._save_path)}-{step}":
            self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = self._timer.due_step(run_context.session, self._global_step, run_values.results)
        if step is not None:
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()

    def end(self, session):
        step = int(session.run(self._global_step))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)
        if self._summary_writer is not None:
            self._summary_writer.flush()

    def _save(self, session, step) -> bool:
        """Save at ``step``; return whether a listener asked to stop."""
        _LOG.info("Saving checkpoints for %d into %s.", step, self._save_path)
        for listener in self._listeners:
            listener.before_save(session, step)
        self._get_saver().save(session, self._save_path, global_step=step)
        # Opened here, not in begin: a chief's hook asleep on another worker (elastic
        # training) must not leave an event file there.
        if self._summary_writer is None:
            self._summary_writer = summary.FileWriterCache.get(self._checkpoint_dir)
        session_log = summary.event_proto("SessionLog")
        self._summary_writer.add_session_log(session_log(
            status=session_log.CHECKPOINT, checkpoint_path=self._save_path), step)
        stops = [bool(listener.after_save(session, step)) for listener in self._listeners]
        return any(stops)      # every listener is told, even after one asked to stop

    def _get_saver(self):
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None and self._scaffold.saver is not None:
            return self._scaffold.saver
        savers = get_default_graph().get_collection(GraphKeys.SAVERS)
        if len(savers) != 1:
            raise errors.FailedPreconditionError(
                f"CheckpointSaverHook found {len(savers)} savers in the SAVERS collection, "
                "expected one: pass saver= or scaffold=")
        return savers[0]


class LoggingTensorHook(SessionRunHook):
    """Log the values of ``tensors`` every N runs or seconds, and/or at the end.

    Args:
        tensors: ``{tag: tensor or name}``, or a list of tensors or names, each its own
            tag (as in TensorFlow: the tensor object itself, or the string given). A name
            without ``:N`` names its op's one output.
        every_n_iter, every_n_secs: the schedule (exactly one, unless only ``at_end``).
        at_end: also log the values once when the session ends.
        formatter: ``f({tag: value}) -> str``, keyed by the tags above; default
            ``"tag = value, ..."`` (a tensor's tag shown as its name), a dict's tags in
            sorted order, a list's in its order, as TensorFlow's.
    """

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False,
                 formatter=None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise errors.InvalidArgumentError(
                "LoggingTensorHook: give at_end=True and/or exactly one of every_n_iter and "
                f"every_n_secs, got every_n_iter={every_n_iter!r}, "
                f"every_n_secs={every_n_secs!r}, at_end={at_end!r}")
        self._timer = None if only_at_end else schedule_timer(
            "LoggingTensorHook", "every_n_secs", every_n_secs, "every_n_iter", every_n_iter)
        if isinstance(tensors, dict):
            # TensorFlow logs a dict's tags sorted ("loss = ..., step = ..." for
            # {"step": ..., "loss": ...}); a list's in the order given.
            try:
                order = sorted(tensors)
            except TypeError:       # tags that do not compare (tensors): as given
                order = list(tensors)
            self._tensors = {tag: tensors[tag] for tag in order}
        else:
            # TensorFlow's tags: each item itself, so a formatter reads values[loss].
            self._tensors = {t: t for t in tensors}
        if not self._tensors:
            raise errors.InvalidArgumentError("LoggingTensorHook: no tensors to log")
        self._at_end = at_end
        self._formatter = formatter

    def begin(self):
        graph = get_default_graph()
        self._current = {tag: _as_tensor(graph, t) for tag, t in self._tensors.items()}
        self._iter_count = 0
        if self._timer is not None:
            self._timer.reset()

    def before_run(self, run_context):
        self._should_trigger = self._timer is not None and \
            self._timer.should_trigger_for_step(self._iter_count)
        return SessionRunArgs(self._current) if self._should_trigger else None

    def after_run(self, run_context, run_values):
        if self._should_trigger:
            elapsed_secs, _ = self._timer.update_last_triggered_step(self._iter_count)
            self._log(run_values.results, elapsed_secs)
        self._iter_count += 1

    def end(self, session):
        if self._at_end:
            self._log(session.run(self._current), None)

    def _log(self, values, elapsed_secs):
        if self._formatter is not None:
            _LOG.info("%s", self._formatter(values))
            return
        with np.printoptions(suppress=True):
            text = ", ".join(f"{_label(tag)} = {values[tag]}" for tag in self._current)
        if elapsed_secs is not None:
            text += f" ({elapsed_secs:.3f} sec)"
        _LOG.info("%s", text)


def _as_tensor(graph, item):
    """The tensor ``item`` (a tensor, or its name) names in ``graph``; an op's name stands
    for its one output, as in TensorFlow."""
    if isinstance(item, str) and ":" not in item:
        outputs = graph.get_operation_by_name(item).outputs
        if len(outputs) != 1:
            raise errors.InvalidArgumentError(
                f"LoggingTensorHook: the name '{item}' is ambiguous: its op has "
                f"{len(outputs)} outputs; name one as '{item}:N'")
        return outputs[0]
    return graph.as_graph_element(item, allow_operation=False)


def _label(tag) -> str:
    return tag if isinstance(tag, str) else getattr(tag, "name", str(tag))


class NanTensorHook(SessionRunHook):
    """Raise ``NanLossDuringTrainingError`` (or request a stop) when the loss is NaN."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss_tensor = loss_tensor
        self._fail_on_nan_loss = fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss_tensor)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results).any():
            name = getattr(self._loss_tensor, "name", self._loss_tensor)
            message = f"Model diverged with loss = NaN ('{name}')."
            if self._fail_on_nan_loss:
                _LOG.error(message)
                raise NanLossDuringTrainingError(message)
            _LOG.warning(message)
            run_context.request_stop()


class FinalOpsHook(SessionRunHook):
    """Run ``final_ops`` when the session ends; their values are in ``final_ops_values``."""

    def __init__(self, final_ops, final_ops_feed_dict=None):
        self._final_ops = final_ops
        self._final_ops_feed_dict = final_ops_feed_dict
        self._final_ops_values = None

    @property
    def final_ops_values(self):
        return self._final_ops_values

    def end(self, session):
        if self._final_ops is not None:
            self._final_ops_values = session.run(self._final_ops,
                                                 feed_dict=self._final_ops_feed_dict)


class GlobalStepWaiterHook(SessionRunHook):
    """Hold this worker's first run until the global step reaches ``wait_until_step``.

    As TensorFlow's: it lets the chief (or the first workers) move the model away from its
    initial values before a late worker's gradients count. Before the first run it reads
    the global step every half second (a line in the log every 1000 steps it moves);
    ``wait_until_step <= 0`` waits for nothing.
    """

    _POLL_SECS = 0.5

    def __init__(self, wait_until_step):
        self._wait_until_step = wait_until_step

    def begin(self):
        self._started = False
        self._global_step = require_global_step("GlobalStepWaiterHook")

    def before_run(self, run_context):
        if not self._started and self._wait_until_step > 0:
            self._wait(run_context.session)
        self._started = True

    def _wait(self, session):
        _LOG.info("Waiting for global step %d before starting training.",
                  self._wait_until_step)
        logged = 0
        while (step := int(session.run(self._global_step))) < self._wait_until_step:
            if step - logged > 1000:
                _LOG.info("Waiting for global step %d before starting training; it is %d "
                          "now.", self._wait_until_step, step)
                logged = step
            time.sleep(self._POLL_SECS)


class FeedFnHook(SessionRunHook):
    """Add ``feed_fn()``'s feeds to every run."""

    def __init__(self, feed_fn):
        self._feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self._feed_fn())
