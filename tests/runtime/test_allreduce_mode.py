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
