"""Progress of training: ProgressBarHook and progress_report, as a bar or as log lines.

In "lines" mode a line "train: step 3/10 (30%), 12.3 steps/s, loss 0.5, ETA 0:00:01"
is written once ``interval_s`` has passed, and "train: done at step N/M (100%) in
H:MM:SS (x steps/s)" at the end. The loss shown is the one given, or the loss of the
train op (made by ``Optimizer.minimize``) the step runs; it is fetched only with the
steps that write a line. ``stderr_reaches_terminal`` decides what "auto" draws.
"""

import fcntl
import io
import logging
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from types import SimpleNamespace

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors
from mpiflow.train import reporting_hooks
from tests.conftest import REPO_ROOT
from tests.unit.monitored_helpers import counter_model, regression_model, train_until_stop

RATE = r"[0-9.]+(?:e[+-]\d+)?"
NUMBER = r"-?[0-9.]+(?:e[+-]\d+)?"
ETA = r"\d+:\d\d:\d\d"
# A line of a run towards last step 10 that shows the loss; the ETA goes at the last step.
STEP_LINE_WITH_LOSS = re.compile(
    rf"train: step (\d+)/10 \((\d+)%\), {RATE} steps/s, loss ({NUMBER})(, ETA {ETA})?")
DONE_LINE = re.compile(rf"train: done at step 10/10 \(100%\) in {ETA} \({RATE} steps/s\)")


class FakeClock:
    """Stands in for time.monotonic in reporting_hooks, so the numbers are exact."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(reporting_hooks, "time", SimpleNamespace(monotonic=fake))
    return fake


@pytest.fixture(autouse=True)
def _no_progress_settings(monkeypatch):
    """The tests set the mode themselves, whatever the environment running them says."""
    monkeypatch.delenv("MPIFLOW_PROGRESS", raising=False)
    monkeypatch.delenv("MPIFLOW_PROGRESS_INTERVAL_S", raising=False)


def _lines(out):
    return out.getvalue().splitlines()


class SleepAfterRun(mf.train.SessionRunHook):
    """Makes every step last ``seconds`` (for the hooks after it)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def after_run(self, run_context, run_values):
        time.sleep(self.seconds)


class RecordingProgressHook(reporting_hooks.ProgressBarHook):
    """A ProgressBarHook that records what it adds to each step's fetches."""

    def begin(self):
        super().begin()
        self.requests = []

    def before_run(self, run_context):
        args = super().before_run(run_context)
        self.requests.append(None if args is None else dict(args.fetches))
        return args


def _train(model, hook, steps=10, pause=0.0, fetches=None, before=()):
    """Run ``fetches`` (the train op) until ``StopAtStepHook(last_step=steps)`` stops it,
    pausing ``pause`` seconds between steps (outside the step)."""
    hooks = [mf.train.StopAtStepHook(last_step=steps), *before, hook]
    runs = 0
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        while not sess.should_stop():
            time.sleep(pause)
            sess.run(model.train_op if fetches is None else fetches,
                     feed_dict=getattr(model, "feed", None))
            runs += 1
    return runs


# -- the lines -------------------------------------------------------------------------------

def test_a_line_shows_step_of_last_step_percent_rate_loss_and_eta(clock):
    out = io.StringIO()
    report = mf.train.progress_report(0, 10, "train", "lines", out, interval_s=2.0)
    clock.now += 1
    assert not report.due()
    report.update(1)
    assert out.getvalue() == ""                     # the interval has not passed
    clock.now += 1
    assert report.due()
    report.update(2, 0.5)
    clock.now += 4
    report.update(6)            # due (never asked): a line, with no loss to show
    clock.now += 4
    report.close(10)
    assert _lines(out) == [
        "train: step 2/10 (20%), 1 steps/s, loss 0.5, ETA 0:00:08",
        "train: step 6/10 (60%), 1 steps/s, ETA 0:00:04",
        "train: done at step 10/10 (100%) in 0:00:10 (1 steps/s)",
    ]


def test_the_rate_is_that_of_the_last_interval_and_the_eta_counts_hours(clock):
    out = io.StringIO()
    report = mf.train.progress_report(0, 100_000, "fit", "lines", out, interval_s=1.0)
    clock.now += 10
    report.update(10)                               # 1 step/s over the first interval
    clock.now += 1
    report.update(20, 1.25)                         # 10 steps/s over the second
    assert _lines(out) == [
        "fit: step 10/100000 (0%), 1 steps/s, ETA 27:46:30",
        "fit: step 20/100000 (0%), 10 steps/s, loss 1.25, ETA 2:46:38",
    ]


def test_without_a_last_step_a_line_has_no_percent_and_no_eta(clock):
    out = io.StringIO()
    report = mf.train.progress_report(5, None, "eval", "lines", out, interval_s=1.0)
    clock.now += 2
    report.update(9, 0.25)
    clock.now += 2
    report.close(11)
    # The final rate counts the steps of this run only (a resumed run starts at 5).
    assert _lines(out) == ["eval: step 9, 2 steps/s, loss 0.25",
                           "eval: done at step 11 in 0:00:04 (1.5 steps/s)"]


def test_a_caller_told_no_line_is_due_gets_its_line_with_the_next_step(clock):
    # The caller fetches the loss only when due() says so; a line that falls due while
    # such a step runs waits for the next step, which fetches the loss, instead of being
    # written without it.
    out = io.StringIO()
    report = mf.train.progress_report(0, 10, "train", "lines", out, interval_s=1.0)
    clock.now += 0.5
    assert not report.due()         # so this step fetches no loss
    clock.now += 1.0                # ... and lasts past the interval
    report.update(1, None)
    assert out.getvalue() == ""
    assert report.due()
    clock.now += 0.5
    report.update(2, 0.75)
    assert _lines(out) == ["train: step 2/10 (20%), 1 steps/s, loss 0.75, ETA 0:00:08"]


def test_the_hook_shows_the_loss_of_the_minimized_train_op_and_a_done_line():
    m = regression_model()
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=10, file=out, mode="lines", interval_s=0.01)
    assert _train(m, hook, pause=0.02) == 10
    lines = _lines(out)
    assert len(lines) == 11, lines
    matches = [STEP_LINE_WITH_LOSS.fullmatch(line) for line in lines[:-1]]
    assert all(matches), lines
    assert [int(x.group(1)) for x in matches] == list(range(1, 11))
    assert [int(x.group(2)) for x in matches] == list(range(10, 101, 10))
    assert all(x.group(4) for x in matches[:-1]) and not matches[-1].group(4), \
        "an ETA until the last step, none at it"
    losses = [float(x.group(3)) for x in matches]
    assert losses == sorted(losses, reverse=True) and losses[0] > losses[-1], \
        "the loss of each step (gradient descent lowers it)"
    assert DONE_LINE.fullmatch(lines[-1]), lines[-1]


def test_the_loss_is_found_in_nested_fetches_of_the_train_op():
    m = regression_model()
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=3, file=out, mode="lines", interval_s=0.01)
    _train(m, hook, steps=3, pause=0.02, fetches={"ops": [m.step, (m.train_op,)]})
    assert all(", loss " in line for line in _lines(out)[:-1]), out.getvalue()
    assert len(_lines(out)) == 4


def test_steps_that_do_not_run_a_minimized_train_op_show_no_loss():
    m = regression_model()
    bump = mf.assign_add(m.step, 1)         # advances the step, minimizes nothing
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=3, file=out, mode="lines", interval_s=0.01)
    _train(m, hook, steps=3, pause=0.02, fetches=bump)
    lines = _lines(out)
    assert len(lines) == 4 and all("loss" not in line for line in lines), lines


def test_a_loss_given_to_the_hook_is_shown_for_any_train_op():
    m = counter_model()                 # its train op minimizes nothing
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=3, loss=mf.constant(0.25), file=out,
                                    mode="lines", interval_s=0.01)
    _train(m, hook, steps=3, pause=0.02)
    assert len(_lines(out)) == 4
    assert all(", loss 0.25" in line for line in _lines(out)[:3]), out.getvalue()


def test_the_loss_is_fetched_only_with_the_steps_that_write_a_line():
    m = regression_model()
    out = io.StringIO()
    hook = RecordingProgressHook(last_step=30, file=out, mode="lines", interval_s=0.2)
    hooks = [mf.train.StopAtStepHook(last_step=30), hook]
    with mf.train.SingularMonitoredSession(hooks=hooks) as sess:
        for i in range(30):
            if i in (10, 20):
                time.sleep(0.25)          # a line falls due before steps 11 and 21
            sess.run(m.train_op, feed_dict=m.feed)
    with_loss = [r for r in hook.requests if "loss" in r]
    step_lines = _lines(out)[:-1]
    assert len(hook.requests) == 30
    assert 2 <= len(with_loss) < 30, "fetched for the lines only"
    assert len(with_loss) == len(step_lines), (hook.requests, step_lines)
    assert all(", loss " in line for line in step_lines), step_lines
    assert all(r["loss"] is m.loss for r in with_loss)


def test_a_line_due_while_a_step_runs_still_shows_the_loss():
    # Each step lasts longer than the interval: a line is due at the end of every step,
    # but the loss was fetched only if due at its start. Without care no line would ever
    # show the loss of a job whose steps take most of its time.
    m = regression_model()
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=6, file=out, mode="lines", interval_s=0.01)
    _train(m, hook, steps=6, before=[SleepAfterRun(0.02)])
    step_lines = _lines(out)[:-1]
    assert step_lines, out.getvalue()
    assert all(", loss " in line for line in step_lines), step_lines


def test_lines_without_a_file_go_to_the_mpiflow_progress_logger(caplog):
    m = regression_model()
    hook = mf.train.ProgressBarHook(last_step=3, mode="lines", interval_s=0.01)
    with caplog.at_level(logging.INFO, logger="mpiflow.progress"):
        _train(m, hook, steps=3, pause=0.02)
    records = [r for r in caplog.records if r.name == "mpiflow.progress"]
    assert [r.levelno for r in records] == [logging.INFO] * 4
    assert records[0].getMessage().startswith("train: step 1/3 (33%), ")
    assert records[-1].getMessage().startswith("train: done at step 3/3 (100%) in ")


def test_monitored_training_session_reports_towards_a_stop_hook_given_num_steps(
        caplog, monkeypatch, tmp_path):
    # StopAtStepHook(num_steps=N), TF1's usual way, knows its last step only when the
    # session starts (from the step restored): the report still shows it, and the ETA.
    monkeypatch.setenv("MPIFLOW_PROGRESS", "lines")
    monkeypatch.setenv("MPIFLOW_PROGRESS_INTERVAL_S", "0.01")
    ckpt = str(tmp_path / "ckpt")
    for finished in (3, 7):             # 3 steps, then a restart from step 3 for 4 more
        mf.reset_default_graph()
        m = regression_model()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mpiflow.progress"), \
                mf.train.MonitoredTrainingSession(
                    checkpoint_dir=ckpt, save_summaries_steps=None,
                    hooks=[mf.train.StopAtStepHook(num_steps=finished - 3 or 3),
                           SleepAfterRun(0.02)]) as sess:
            train_until_stop(sess, m.train_op, m.feed)
        lines = [r.getMessage() for r in caplog.records if r.name == "mpiflow.progress"]
        assert lines[-1].startswith(f"train: done at step {finished}/{finished} (100%) in "), \
            lines
        assert re.fullmatch(rf"train: step \d+/{finished} \(\d+%\), {RATE} steps/s, loss "
                            rf"{NUMBER}, ETA {ETA}", lines[0]), lines


# -- modes -----------------------------------------------------------------------------------

def test_off_and_disable_true_write_nothing():
    for kwargs in ({"mode": "off"}, {"disable": True}, {"disable": True, "mode": "lines"}):
        mf.reset_default_graph()
        m = regression_model()
        out = io.StringIO()
        hook = mf.train.ProgressBarHook(last_step=3, file=out, interval_s=0.01, **kwargs)
        assert _train(m, hook, steps=3, pause=0.02) == 3
        assert out.getvalue() == "", kwargs


def test_off_fetches_nothing():
    m = regression_model()
    hook = RecordingProgressHook(last_step=3, mode="off")
    with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        sess.run(m.train_op, feed_dict=m.feed)
    assert hook.requests == [None]          # it adds nothing to the step


def test_off_needs_no_global_step():
    x = mf.Variable(0.0, name="x")
    add = mf.assign_add(x, 1.0)
    hook = mf.train.ProgressBarHook(mode="off")
    with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        assert sess.run(add) == 1.0


def test_a_graph_without_a_global_step_trains_in_monitored_training_session(monkeypatch):
    # As in TensorFlow, MonitoredTrainingSession needs no global step without a
    # checkpoint_dir: its own progress report steps aside (a hook the script makes
    # itself still asks for one).
    monkeypatch.setenv("MPIFLOW_PROGRESS", "lines")
    x = mf.placeholder(mf.float32, [None], name="x")
    w = mf.Variable(1.0, name="w")
    train_op = mf.train.GradientDescentOptimizer(0.1).minimize(
        mf.reduce_mean(mf.square(w * x)))
    with mf.train.MonitoredTrainingSession() as sess:
        for _ in range(3):
            sess.run(train_op, {x: np.ones(4, np.float32)})
        assert sess.run(w) == pytest.approx(0.8 ** 3)
    with pytest.raises(errors.FailedPreconditionError, match="ProgressBarHook"), \
            mf.train.SingularMonitoredSession(hooks=[mf.train.ProgressBarHook()]):
        pass


def test_auto_writes_lines_to_a_file_that_is_not_a_terminal():
    m = regression_model()
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=3, file=out, mode="auto", interval_s=0.01)
    _train(m, hook, steps=3, pause=0.02)
    assert _lines(out)[-1].startswith("train: done at step 3/3 (100%) in ")
    assert "|" not in out.getvalue() and "\r" not in out.getvalue()


def test_auto_draws_the_bar_on_a_terminal():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    drawn = b""
    with open(slave, "w", closefd=True) as terminal:
        try:
            report = mf.train.progress_report(0, 4, "train", "auto", terminal, 0.01)
            for step in range(1, 5):
                report.update(step, 0.5)
            report.close(4)
            terminal.flush()
            while select.select([master], [], [], 0.5)[0]:
                chunk = os.read(master, 65536)
                if not chunk:
                    break
                drawn += chunk
        finally:
            os.close(master)
    text = drawn.decode(errors="replace")
    assert "\r" in text and "|" in text and "4/4" in text, text       # tqdm's bar
    assert "done at" not in text


def test_mpiflow_progress_sets_the_mode(monkeypatch):
    monkeypatch.setenv("MPIFLOW_PROGRESS", "off")
    m = regression_model()
    out = io.StringIO()
    _train(m, mf.train.ProgressBarHook(last_step=3, file=out, interval_s=0.01), steps=3,
           pause=0.02)
    assert out.getvalue() == ""

    monkeypatch.setenv("MPIFLOW_PROGRESS", "LINES")       # the case does not matter
    monkeypatch.setenv("MPIFLOW_PROGRESS_INTERVAL_S", "0.01")
    mf.reset_default_graph()
    m = regression_model()
    _train(m, mf.train.ProgressBarHook(last_step=3, file=out), steps=3, pause=0.02)
    assert len(_lines(out)) == 4 and all(", loss " in x for x in _lines(out)[:3]), \
        out.getvalue()


def test_mpiflow_progress_interval_s_spaces_the_lines(monkeypatch):
    monkeypatch.setenv("MPIFLOW_PROGRESS_INTERVAL_S", "3600")
    m = regression_model()
    out = io.StringIO()
    _train(m, mf.train.ProgressBarHook(last_step=3, file=out, mode="lines"), steps=3,
           pause=0.02)
    assert len(_lines(out)) == 1 and _lines(out)[0].startswith("train: done at step 3/3")


def test_a_mode_is_read_in_any_case_as_the_variable_is():
    out = io.StringIO()
    report = mf.train.progress_report(0, 2, mode="Lines", file=out, interval_s=0.01)
    report.close(2)
    assert _lines(out)[0].startswith("train: done at step 2/2 (100%) in ")
    m = regression_model()
    quiet = io.StringIO()
    _train(m, mf.train.ProgressBarHook(last_step=2, mode="OFF", file=quiet, interval_s=0.01),
           steps=2, pause=0.02)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("make", [
    lambda: mf.train.ProgressBarHook(mode="fancy"),
    lambda: mf.train.progress_report(0, 10, mode="fancy"),
], ids=["hook", "progress_report"])
def test_a_bad_mode_is_refused_naming_mpiflow_progress(make):
    with pytest.raises(errors.InvalidArgumentError) as info:
        make()
    assert "MPIFLOW_PROGRESS" in str(info.value) and "'fancy'" in str(info.value)
    assert "'lines'" in str(info.value)


def test_a_bad_mpiflow_progress_is_refused_when_the_hook_is_made(monkeypatch):
    monkeypatch.setenv("MPIFLOW_PROGRESS", "sometimes")
    with pytest.raises(errors.InvalidArgumentError, match="MPIFLOW_PROGRESS"):
        mf.train.ProgressBarHook()


def test_progress_report_serves_a_loop_of_ones_own():
    m = regression_model()
    out = io.StringIO()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        report = mf.train.progress_report(0, 5, desc="fit", mode="lines", file=out,
                                          interval_s=0.01)
        for step in range(1, 6):
            time.sleep(0.02)
            values = sess.run([m.train_op] + ([m.loss] if report.due() else []), m.feed)
            report.update(step, values[1] if len(values) > 1 else None)
        report.close(5)
    lines = _lines(out)
    assert len(lines) == 6, lines
    assert [x.split(",")[0] for x in lines[:5]] == [f"fit: step {i}/5 ({20 * i}%)"
                                                    for i in range(1, 6)]
    assert all(", loss " in x for x in lines[:5])
    assert lines[-1].startswith("fit: done at step 5/5 (100%) in 0:00:0")


def test_progress_report_off_reports_nothing_and_asks_for_no_loss():
    out = io.StringIO()
    report = mf.train.progress_report(0, 5, mode="off", file=out, interval_s=0.01)
    time.sleep(0.02)
    assert not report.due()
    report.update(3, 0.5)
    report.close(5)
    assert out.getvalue() == ""


# -- does stderr reach a terminal? -----------------------------------------------------------

_ASK = ("from mpiflow.logger import stderr_reaches_terminal\n"
        "print(stderr_reaches_terminal())\n")


def _forwarding(child_code):
    """Code of a parent that runs ``child_code`` with its stderr on a pipe, and forwards
    what comes through it (as a launcher's proxy or mpiflow.run's parent does)."""
    return ("import subprocess, sys\n"
            f"p = subprocess.run([sys.executable, '-c', {child_code!r}],\n"
            "                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
            "sys.stdout.write(p.stdout.decode()); sys.stderr.write(p.stderr.decode())\n"
            "sys.exit(p.returncode)\n")


def _answer(code, stderr):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", code], check=False, stdout=subprocess.PIPE,
                          stderr=stderr, stdin=subprocess.DEVNULL, env=env, timeout=60,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0
    return proc.stdout.decode().strip()


@pytest.fixture
def terminal():
    """The slave side of a new pseudo-terminal (its master read by nobody)."""
    master, slave = pty.openpty()
    yield slave
    os.close(slave)
    os.close(master)


def test_stderr_on_a_terminal_reaches_it(terminal):
    assert _answer(_ASK, terminal) == "True"


def test_stderr_to_a_file_or_pipe_of_a_parent_off_the_terminal_does_not(tmp_path):
    with open(tmp_path / "err.txt", "wb") as log:
        assert _answer(_ASK, log) == "False"
        assert _answer(_forwarding(_ASK), log) == "False"


def test_stderr_reaches_the_terminal_through_parents_that_forward_it(terminal):
    assert _answer(_forwarding(_ASK), terminal) == "True"
    assert _answer(_forwarding(_forwarding(_ASK)), terminal) == "True"   # as under mpiexec


def test_a_run_that_trains_nothing_does_not_count_a_step():
    # The test accuracy after training: its global step is the one training left.
    m = regression_model()
    out = io.StringIO()
    hook = mf.train.ProgressBarHook(last_step=10, file=out, mode="lines", interval_s=0.01)
    with mf.train.SingularMonitoredSession(hooks=[hook]) as sess:
        for _ in range(3):
            time.sleep(0.02)
            sess.run(m.train_op, feed_dict=getattr(m, "feed", None))
        time.sleep(0.02)
        sess.run(m.step, feed_dict=getattr(m, "feed", None))
    lines = _lines(out)
    assert lines[-2].startswith("train: step 3/10") and \
        lines[-1].startswith("train: done at step 3/10"), lines
