"""SyncReplicasOptimizer under mpiexec: N workers at batch B equal one process at N*B,
and backup workers keep the global step at the fast workers' pace."""

import re
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("optimizer,ps", [("sgd", 1), ("adam", 1), ("sgd", 2), ("adam", 2)])
def test_two_sync_workers_equal_one_process_at_twice_the_batch(run_mpi, optimizer, ps):
    out = run_mpi(2 + ps, PROGS / "sync_parity.py", optimizer, 6, timeout=120,
                  env={"MPIFLOW_PS": str(ps), "MPIFLOW_TIMEOUT": "60"}).stdout
    found = re.findall(rf"OK sync {optimizer}: worker (\d) of 2, {ps} ps, 6 steps", out)
    assert sorted(found) == ["0", "1"], out


def test_backup_worker_does_not_slow_the_global_step(run_mpi):
    out = run_mpi(4, PROGS / "sync_backup.py", 200, 0.05, timeout=120,
                  env={"MPIFLOW_TIMEOUT": "60"}).stdout
    ratios = [float(r) for r in re.findall(r"ratio (\d+\.\d+)", out)]
    slow = [float(r) for r in re.findall(r"slow worker (\d+\.\d+)", out)]
    fast = [float(r) for r in re.findall(r"fast workers (\d+\.\d+)", out)]
    assert len(ratios) == 3, out
    assert min(ratios) >= 0.8, out
    assert fast[0] > 3 * slow[0], out      # the slow worker really was slow


def test_a_sync_step_timing_out_on_the_ps_shows_the_gradient_missing_there(run_mpi):
    # Worker 1 hangs in its own code; the chief's step waits on the ps, whose main thread
    # only serves. Where the ps is must say what the step waited for there: the
    # accumulator holding the chief's gradient alone, not a ps that looks idle.
    result = run_mpi(3, PROGS / "sync_absent_worker.py", timeout=90, check=False,
                     env={"MPIFLOW_TIMEOUT": "3"})
    err = result.stderr
    assert "worker 1 absent" in result.stdout, result.stdout + err
    assert "DeadlineExceededError: Rank 1 waited 3 s for step" in err, err
    serving = [line for line in err.splitlines()
               if line.startswith("[rank 1 (worker:0) on ") and "    serving step" in line]
    assert any("waited for accumulator 'w' to hold 2 gradient(s)" in line and
               "it holds 1 (from rank 1 (worker:0))" in line for line in serving), err


def test_tf1_supervisor_script_with_variable_averages_equals_one_process_and_ends_quietly(
        run_mpi):
    # TensorFlow's replica scripts end without sv.stop(): the chief's sync loop is stopped
    # at exit, after the ps has gone, and must not print a traceback for that.
    out = run_mpi(4, PROGS / "sync_supervisor.py", 6, timeout=120,
                  env={"MPIFLOW_TIMEOUT": "60"})
    found = re.findall(r"OK worker (\d): \d+ steps, weights and shadows equal one process",
                       out.stdout)
    assert sorted(found) == ["0", "1"], out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "Exception in thread" not in out.stderr, \
        out.stderr


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_more_replicas_to_aggregate_than_workers_is_refused_at_start(run_mpi):
    # No step could ever gather them: said at once, not after MPIFLOW_TIMEOUT as a wait
    # on the ps.
    out = run_mpi(3, PROGS / "sync_too_many.py", 3, timeout=60, check=False,
                  env={"MPIFLOW_TIMEOUT": "100"})
    assert out.returncode != 0
    assert "replicas_to_aggregate=3 gradients per step, but the cluster has 2 worker(s)" \
        in out.stderr, out.stderr
    assert "waited" not in out.stderr, out.stderr
    fits = run_mpi(3, PROGS / "sync_too_many.py", 2, timeout=60)
    assert sorted(fits.stdout.split("\n"))[-2:] == ["worker 0 done", "worker 1 done"]


def test_mnist_sync_example_trains_to_95_percent_on_two_ps(run_mpi):
    out = run_mpi(4, EXAMPLES / "mnist_sync.py", "--ps", 2, "--last-step", 400,
                  timeout=240).stdout
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d\.\d+)", out)]
    assert len(accuracies) == 2 and min(accuracies) >= 0.95, out


def test_mnist_sync_stops_and_resumes_from_its_checkpoint(run_mpi, tmp_path):
    ckpt = tmp_path / "ckpt"
    first = run_mpi(3, EXAMPLES / "mnist_sync.py", "--checkpoint-dir", ckpt,
                    "--last-step", 150, timeout=240).stdout
    assert re.findall(r"steps 1\.\.150", first), first
    second = run_mpi(3, EXAMPLES / "mnist_sync.py", "--checkpoint-dir", ckpt,
                     "--last-step", 300, timeout=240).stdout
    # The second job starts where the first one's last checkpoint left off.
    assert len(re.findall(r"steps 151\.\.300", second)) == 2, second
    assert 'model_checkpoint_path: "model.ckpt-300"' in (ckpt / "checkpoint").read_text()
