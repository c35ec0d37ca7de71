"""A rank that leaves before the job is done is named at once by the ranks that need it,
with how it left, and the job fails; nobody waits out MPIFLOW_TIMEOUT to blame a ps."""

import re
import time
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "early_exit.py"
LIVENESS = {"MPIFLOW_PEER_TIMEOUT": "3", "MPIFLOW_HEARTBEAT_S": "0.5", "MPIFLOW_TIMEOUT": "60"}

pytestmark = pytest.mark.mpi


def _run(run_mpi, *args, **kwargs):
    started = time.monotonic()
    proc = run_mpi(3, PROG, *args, timeout=90, check=False, env=LIVENESS, **kwargs)
    assert "NOT NOTICED" not in proc.stdout, proc.stdout
    return proc, time.monotonic() - started


def test_a_worker_that_calls_sys_exit_1_fails_the_job_named_as_such(run_mpi):
    proc, took = _run(run_mpi, "sys_exit")
    assert proc.returncode != 0
    assert "[rank 2 (worker:1) on" in proc.stderr and \
        "it called sys.exit(1); the job ends" in proc.stderr, proc.stderr
    assert "aborted because rank 2 (worker:1)" in proc.stderr, proc.stderr
    assert took < 30, took


def test_a_worker_whose_script_ends_during_sync_training_is_named_by_the_step(run_mpi):
    proc, took = _run(run_mpi, "return")
    assert proc.returncode != 0
    assert "A synchronous step needs 2 worker(s), but only 1 of 2 are left: rank 2 " \
           "(worker:1) (its script ended" in proc.stderr, proc.stderr
    assert took < 30, took


def test_a_worker_whose_script_ends_during_allreduce_is_named_by_the_collective(run_mpi):
    proc, took = _run(run_mpi, "return", "allreduce")
    assert proc.returncode != 0
    assert "A collective of group 'worker' cannot finish: rank 1 (worker:1) (its script " \
           "ended" in proc.stderr, proc.stderr
    # and says what lets a worker whose data ends first leave without stopping the others
    assert "left it (where a worker runs fewer steps than the others, as when its data " \
           "ends first: build the optimizer with AllreduceOptimizer(opt, joinable=True)" \
           in proc.stderr, proc.stderr
    assert took < 30, took


@pytest.mark.mpich_only        # its -disable-auto-cleanup
def test_a_worker_that_vanishes_is_named_when_the_launcher_keeps_the_others(run_mpi):
    # MPICH's launcher would end the whole job at once (with exit code 0) when a rank
    # calls os._exit(0); with -disable-auto-cleanup the others live on and say who went.
    proc, _ = _run(run_mpi, "os_exit", launcher_args=["-disable-auto-cleanup"])
    assert "rank 2 (worker:1) on" in proc.stderr and "is gone" in proc.stderr, proc.stderr
    # one line: where the rank that found it out waited says nothing
    assert "Traceback" not in proc.stderr, proc.stderr


def test_with_backup_workers_the_others_train_on_when_one_leaves(run_mpi):
    proc = run_mpi(4, PROG, "return", "backup", timeout=90, env=LIVENESS)
    assert "LEAVING return" in proc.stdout
    # The step a worker prints is the one its own last run fetched, read beside the
    # update: it may lag the stop at step 20 by one (the hook reads the step again).
    assert sorted(re.findall(r"DONE worker (\d) at step (?:19|2\d)", proc.stdout)) == \
        ["0", "2"], proc.stdout + proc.stderr
