"""Every mode is right: the differential matrix of modes x optimizers x table layouts x
kinds of session, each against a single-process reference (see progs/mode_matrix.py)."""

import itertools
import re
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "mode_matrix.py"
OPTIMIZERS = ["sgd", "momentum", "nesterov", "adam", "adagrad", "rmsprop", "rmsprop_centered"]
# Checked in every mode in a test of their own, on the split layout and one kind of
# session (the layouts and sessions treat every optimizer's slots alike).
REGULARIZED = ["adadelta", "ftrl", "ftrl_shrinkage", "proximal_adagrad", "proximal_sgd"]
LAYOUTS = ["whole", "split"]
SESSIONS = ["session", "monitored", "supervisor"]

pytestmark = pytest.mark.mpi


def run_cases(run_mpi, num_ps, workers, expected):
    """Run the matrix's ``expected`` cases on ``num_ps`` ps and ``workers`` workers; each
    must pass, in order."""
    proc = run_mpi(num_ps + workers, PROG, *expected, timeout=300, check=False,
                   env={"MPIFLOW_PS": str(num_ps), "MPIFLOW_TIMEOUT": "60"})
    failures = re.findall(r"^FAIL .*$", proc.stdout, re.MULTILINE)
    assert not failures, "\n".join(failures) + "\n" + proc.stderr[-3000:]
    passed = re.findall(r"^OK (\S+)$", proc.stdout, re.MULTILINE)
    assert passed == expected, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]


def cases(modes, optimizers=OPTIMIZERS):
    return [":".join(c) for c in itertools.product(modes, optimizers, LAYOUTS, SESSIONS)]


@pytest.mark.parametrize("num_ps,workers,modes", [
    # One worker: every mode equals the reference (asynchronous ps training too).
    (1, 1, ["ps", "sync", "allreduce", "hybrid"]),
    (2, 1, ["ps", "sync", "allreduce", "hybrid"]),
    (3, 1, ["ps", "sync", "allreduce", "hybrid"]),
    # Two workers: sync and allreduce equal one process at the combined batch; replicas
    # agree bit for bit in allreduce and hybrid mode.
    (1, 2, ["sync", "allreduce", "hybrid"]),
    (2, 2, ["sync", "allreduce", "hybrid"]),
    (3, 2, ["sync", "allreduce", "hybrid"]),
])
def test_every_mode_optimizer_layout_and_session_matches_its_reference(run_mpi, num_ps,
                                                                       workers, modes):
    run_cases(run_mpi, num_ps, workers, cases(modes))


@pytest.mark.parametrize("num_ps,workers,modes", [
    (2, 1, ["ps", "sync", "allreduce", "hybrid"]),
    (1, 2, ["sync", "allreduce", "hybrid"]),
])
def test_ftrl_adadelta_and_proximal_optimizers_match_the_reference_in_every_mode(
        run_mpi, num_ps, workers, modes):
    """Their slots (two for FTRL and Adadelta, none for proximal gradient descent) live
    with each variable: on the ps in parts, on every replica alike; each mode equals one
    process (the table's rows through the sparse update)."""
    run_cases(run_mpi, num_ps, workers, [f"{mode}:{opt}:split:session"
                                         for mode in modes for opt in REGULARIZED])


@pytest.mark.parametrize("num_ps,workers,modes", [
    (2, 1, ["auto-ps", "auto-allreduce", "auto-hybrid"]),
    (1, 2, ["auto-allreduce", "auto-hybrid"]),
])
def test_auto_trains_as_the_mode_it_chose_would(run_mpi, num_ps, workers, modes):
    """TrainingMode("auto") builds the model before it knows the mode and places it at
    minimize(): left one candidate, it must then equal the reference as that mode does
    (two optimizers, every layout and session)."""
    run_cases(run_mpi, num_ps, workers, cases(modes, ["sgd", "adam"]))


@pytest.mark.parametrize("num_ps,workers,modes", [
    (2, 1, ["ps", "sync", "allreduce", "hybrid"]),
    (1, 2, ["sync", "allreduce", "hybrid"]),
])
def test_constraints_project_the_variables_where_they_live_in_every_mode(run_mpi, num_ps,
                                                                          workers, modes):
    """A variable's constraint runs after its update where the variable lives: on its ps
    (ps and sync mode; split in parts over two ps), on every replica alike (allreduce and
    hybrid: the replicas stay bit-identical); each equals one process's constrained run."""
    run_cases(run_mpi, num_ps, workers, [f"{mode}:adam:split:session:constrained"
                                         for mode in modes])
