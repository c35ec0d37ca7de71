"""Allreduce mode under mpiexec: replicated variables, fused dense gradients and
all-gathered sparse ones train exactly as one process at the combined batch."""

import re
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks,optimizer,algorithm", [
    (2, "sgd", "auto"), (2, "adam", "ring"), (3, "adam", "mpi"), (4, "sgd", "ring")])
def test_allreduce_training_equals_one_process_at_the_combined_batch(run_mpi, ranks, optimizer,
                                                                     algorithm):
    out = run_mpi(ranks, PROGS / "allreduce_parity.py", optimizer, 4, algorithm, timeout=120,
                  env={"MPIFLOW_TIMEOUT": "60"}).stdout
    found = re.findall(rf"OK allreduce {optimizer} {algorithm}: worker (\d) of {ranks}", out)
    assert sorted(found) == [str(i) for i in range(ranks)], out


def test_gradients_accumulated_and_clipped_between_compute_and_apply_are_the_average(
        run_mpi):
    """compute_gradients returns the averaged gradients: summed over two sess.run calls,
    clipped by their global norm and applied by a third, they train as one process at
    the combined batch; a moving average that no gradient reaches (batch normalization's
    statistics) follows each worker's own batches (see progs/allreduce_parity.py)."""
    out = run_mpi(2, PROGS / "allreduce_parity.py", "adam", 3, "auto", "transformed",
                  timeout=120, env={"MPIFLOW_TIMEOUT": "60"}).stdout
    assert len(re.findall(r"OK allreduce adam auto: worker \d of 2", out)) == 2, out


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("mode,ps", [("ps", "1"), ("allreduce", "0"), ("hybrid", "1")])
def test_embedding_example_trains_in_every_mode_with_the_same_model_code(run_mpi, mode, ps):
    out = run_mpi(3, EXAMPLES / "embedding_hybrid.py", "--mode", mode, "--vocab", 20000,
                  "--steps", 40, timeout=180, env={"MPIFLOW_PS": ps}).stdout
    found = re.search(rf"{mode}: [\d.]+ steps/s over (\d) workers .*test loss "
                      r"(\d+\.\d+) -> (\d+\.\d+)", out)
    assert found, out
    workers, before, after = int(found[1]), float(found[2]), float(found[3])
    assert workers == (3 if mode == "allreduce" else 2)
    assert after < before - 0.02, out


def test_a_mode_that_needs_ps_says_so_when_there_is_none(run_mpi):
    proc = run_mpi(2, EXAMPLES / "embedding_hybrid.py", "--mode", "hybrid", timeout=60,
                   env={"MPIFLOW_PS": "0"}, check=False)
    assert proc.returncode != 0
    assert "Training mode 'hybrid' needs ps tasks" in proc.stderr


def test_the_embedding_example_trains_in_the_mode_auto_chooses_and_says_why(run_mpi):
    proc = run_mpi(3, EXAMPLES / "embedding_hybrid.py", "--mode", "auto", "--vocab", 20000,
                   "--steps", 40, timeout=180, env={"MPIFLOW_PS": "1"})
    said = re.findall(r"TrainingMode\('auto'\) chose '(\w+)': \1 adds the least to a step: "
                      r".*\(measured in [\d.]+ s: allreduce .* through a ps .*\)", proc.stderr)
    assert len(said) == 1, proc.stderr            # worker 0 says it, once
    found = re.search(rf"{said[0]}: [\d.]+ steps/s over 2 workers .*test loss "
                      r"(\d+\.\d+) -> (\d+\.\d+)", proc.stdout)
    assert found, proc.stdout
    assert float(found[2]) < float(found[1]) - 0.02, proc.stdout


@pytest.mark.parametrize("session", ["session", "monitored", "supervisor"])
@pytest.mark.parametrize("mode,ps", [("allreduce", 0), ("hybrid", 1)])
def test_variables_made_after_minimize_take_worker_0s_values_on_every_worker(
        run_mpi, mode, ps, session):
    """An ExponentialMovingAverage's shadows and a plain variable made after minimize,
    each worker drawing its own initial values, are bit-identical on both workers once the
    session is made and after a step, the shadows as one process's average (see
    progs/late_replicas.py)."""
    out = run_mpi(2 + ps, PROGS / "late_replicas.py", mode, session, timeout=120,
                  env={"MPIFLOW_PS": str(ps), "MPIFLOW_TIMEOUT": "30"}).stdout
    assert out.count(f"OK {mode} {session}") == 2, out


@pytest.mark.parametrize("session", ["session", "monitored"])
def test_a_variable_made_after_minimize_on_one_worker_only_is_refused_naming_it(run_mpi,
                                                                                session):
    out = run_mpi(2, PROGS / "late_replicas.py", "allreduce", session, "mismatch",
                  timeout=120, env={"MPIFLOW_PS": "0", "MPIFLOW_TIMEOUT": "30"}).stdout
    refused = re.findall(r"^REFUSED InvalidArgumentError: broadcast '(\S+)'.*cross-rank "
                         r"check failed", out, re.MULTILINE)
    assert sorted(refused) == ["broadcast/only_on_worker_1",
                               "broadcast/w/ExponentialMovingAverage"], out
