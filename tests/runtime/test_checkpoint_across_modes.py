"""Adam's beta powers across training modes (docs/checkpoints.md): hybrid mode keeps a ps
copy for the tables and a worker copy for the dense variables; a hybrid checkpoint resumed
in allreduce mode gives every variable the ps copy, and a checkpoint of allreduce mode,
which lacks the worker copy, is refused by hybrid mode naming the missing key."""

import json
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "cross_mode_adam.py"
pytestmark = pytest.mark.mpi


def result(done):
    lines = [line for line in done.stdout.splitlines() if line.startswith("result ")]
    assert len(lines) == 1, done.stdout + done.stderr
    return json.loads(lines[0].split(" ", 1)[1])


def test_a_hybrid_checkpoint_resumes_in_allreduce_mode_with_the_ps_copy(run_mpi, tmp_path):
    saved = result(run_mpi(3, PROG, "hybrid", 1, tmp_path, 2))["powers"]
    # The ps copy moved with each of the 2 workers' 2 pushes, the worker copy once a step.
    assert saved["beta1_power"] == pytest.approx(0.9 ** 5)
    assert saved["beta1_power_worker"] == pytest.approx(0.9 ** 3)
    resumed = result(run_mpi(2, PROG, "allreduce", 0, tmp_path, 0))
    assert resumed["step"] == 2
    assert resumed["powers"] == {"beta1_power": saved["beta1_power"],
                                 "beta2_power": saved["beta2_power"]}


def test_hybrid_mode_refuses_a_checkpoint_without_the_worker_copy(run_mpi, tmp_path):
    run_mpi(2, PROG, "allreduce", 0, tmp_path, 2)
    done = run_mpi(3, PROG, "hybrid", 1, tmp_path, 0, check=False)
    assert done.returncode != 0
    assert "Key 'beta1_power_worker' not found in checkpoint" in done.stderr, done.stderr
