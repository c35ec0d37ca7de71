"""MonitoredTrainingSession under mpiexec: a worker that starts before the chief waits for
it; every rank trains to the last step and exits 0; a chief that never initializes makes
the wait end with an error naming the variables."""

import re
from pathlib import Path

import pytest

import mpiflow as mf

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


def train(run_mpi, checkpoint_dir, last_step):
    """Run the 'train' mode; return {worker: (waited s, runs, start step, final step)}."""
    out = run_mpi(3, PROGS / "monitored_training.py", "train", last_step, checkpoint_dir,
                  timeout=120).stdout
    reports = {int(r[0]): (float(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in
               re.findall(r"OK worker (\d): waited (\d+\.\d+) s, (\d+) runs, "
                          r"steps (\d+) to (\d+)", out)}
    assert sorted(reports) == [0, 1], out
    return reports, out


def test_workers_wait_for_the_chief_then_train_to_the_last_step(run_mpi, tmp_path):
    reports, out = train(run_mpi, tmp_path, 40)
    # Worker 1 started first and waited for the chief, which slept 1 s before initializing.
    assert reports[1][0] >= 0.5, out
    # A worker that comes in after the last step runs none (the chief may be that fast).
    assert all(final >= 40 and (runs >= 1 or first >= 40)
               for _, runs, first, final in reports.values()), out
    # Async workers stop once they see step 40; each may have one step in flight by then.
    assert 40 <= reports[0][1] + reports[1][1] <= 42, out
    # The chief's checkpoint at its final step and its summaries are on disk.
    latest = mf.train.latest_checkpoint(str(tmp_path))
    assert latest is not None and int(latest.rsplit("-", 1)[1]) >= 40, out
    assert list(tmp_path.glob("events.out.tfevents.*")), out


def test_a_restarted_job_resumes_from_the_chiefs_last_checkpoint(run_mpi, tmp_path):
    train(run_mpi, tmp_path, 20)
    saved = int(mf.train.latest_checkpoint(str(tmp_path)).rsplit("-", 1)[1])
    reports, out = train(run_mpi, tmp_path, 50)
    # The chief restored instead of initializing: no worker saw a step before the saved
    # one, and only the remaining steps were run.
    assert all(start >= saved for _, _, start, _ in reports.values()), out
    assert 50 - saved <= reports[0][1] + reports[1][1] <= 50 - saved + 2, out
    assert all(final >= 50 for *_, final in reports.values()), out


def test_a_chief_that_never_initializes_makes_the_wait_time_out(run_mpi, tmp_path):
    out = run_mpi(3, PROGS / "monitored_training.py", "chief_never_initializes", 1, tmp_path,
                  timeout=120, env={"MPIFLOW_TIMEOUT": "3"}).stdout
    match = re.search(r"TIMEOUT worker 1: (.*)", out)
    assert match, out
    message = match.group(1)
    assert "MPIFLOW_TIMEOUT=3" in message, message
    assert re.search(r"\d+ of \d+ variables are not initialized: .*'w'", message), message
    assert "'global_step'" in message, message
    assert "The chief has not initialized them" in message, message
