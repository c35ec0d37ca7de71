"""Bounded staleness (stale synchronous parallel) in ps mode: no worker starts a step
having applied more than k steps more than the slowest live worker, recorded by the ps;
k=0 is lock-step and trains as synchronous replicas do (the ps counting the
second gradient of each round one step stale); a worker that stops training
(resting in server.join()) stops counting, so the others finish."""

import json
from pathlib import Path

import numpy as np
import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi


def _run(run_mpi, ranks, case, bound, steps):
    out = run_mpi(ranks, PROGS / "bounded_staleness.py", case, bound, steps, timeout=150).stdout
    return {r["task"]: r for r in (json.loads(line) for line in out.splitlines()
                                   if line.startswith("{"))}


@pytest.mark.parametrize("bound", [1, 2])
def test_fast_workers_wait_for_a_slow_one_within_the_bound(run_mpi, bound):
    results = _run(run_mpi, 4, "slow", bound, 20)       # worker 0 sleeps 20 ms a step
    for r in results.values():
        assert r["max_lead"] == bound and r["done"] == [20, 20, 20] and r["step"] == 60
        assert all(0 <= lead <= bound for lead in r["leads"])
    assert results[1]["waits"] > 0                          # the fast ones were held


def test_lock_step_trains_as_synchronous_replicas_do(run_mpi):
    # Each of the 2 workers applies its gradient at half the rate; every read of a round
    # comes before any update of it: the same sum as SyncReplicasOptimizer's average.
    ssp = _run(run_mpi, 3, "ssp", 0, 8)
    sync = _run(run_mpi, 3, "sync", 0, 8)
    assert ssp[0]["max_lead"] == 0 and ssp[0]["done"] == [8, 8]
    # Both read a round's variables at the same global step, so of a round's two
    # gradients the first is applied fresh and the second one step stale.
    assert ssp[0]["staleness"] == {"0": 8, "1": 8}
    np.testing.assert_allclose(ssp[0]["w"], sync[0]["w"], rtol=1e-5)


def test_a_worker_that_stops_training_stops_counting(run_mpi):
    results = _run(run_mpi, 4, "rest", 0, 10)           # worker 2 rests after 3 steps
    assert results[0]["done"] == [10, 10, 3] and results[0]["step"] == 23
    assert results[0]["max_lead"] == 0
