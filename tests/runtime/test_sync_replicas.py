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
