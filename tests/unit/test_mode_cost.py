"""The cost model of the training modes: bytes, state and updates per worker step, by
hand on a small model, and the trends that say which mode a model wants."""

import pytest

from mpiflow import errors
from mpiflow.train.mode_cost import ModelShape, predict

# 1000 bytes dense, a 80000-byte table of 40-byte rows, 10 ids a step, one slot (Adagrad)
SHAPE = ModelShape(dense_bytes=1000, table_bytes=80000, row_bytes=40, ids_per_step=10,
                   slots=1)


def test_ps_mode_pulls_and_pushes_everything_a_step_uses_through_the_ps():
    cost = predict("ps", SHAPE, workers=4, ps=2)
    assert cost.worker_sent == 1000 + 10 * 8 + 10 * (40 + 8)     # grads, ids, row grads
    assert cost.worker_received == 1000 + 10 * 40                 # variables, rows
    assert (cost.ps_received, cost.ps_sent) == (cost.worker_sent // 2,
                                                cost.worker_received // 2)
    assert cost.ps_load == 4 * (cost.ps_sent + cost.ps_received)
    assert (cost.worker_state, cost.ps_state) == (0, (1000 + 80000) * 2 // 2)
    assert (cost.worker_applied, cost.ps_applied) == (0, (1000 + 400) // 4 // 2)


def test_allreduce_mode_moves_twice_the_dense_share_and_gathers_every_workers_rows():
    cost = predict("allreduce", SHAPE, workers=4, ps=0)
    gathered = 3 * 10 * (40 + 8)
    assert cost.worker_sent == cost.worker_received == 2 * 3 * 1000 // 4 + gathered
    assert (cost.ps_sent, cost.ps_received, cost.ps_load, cost.ps_state) == (0, 0, 0, 0)
    assert cost.worker_state == (1000 + 80000) * 2
    assert cost.worker_applied == (1000 + 4 * 10 * 40) // 4


def test_hybrid_mode_allreduces_the_dense_part_and_moves_only_rows_through_the_ps():
    cost = predict("hybrid", SHAPE, workers=4, ps=1)
    dense = 2 * 3 * 1000 // 4
    assert cost.worker_sent == dense + 10 * 8 + 10 * (40 + 8)
    assert cost.worker_received == dense + 10 * 40
    assert (cost.ps_received, cost.ps_sent) == (10 * 8 + 10 * 48, 10 * 40)
    assert (cost.worker_state, cost.ps_state) == (2000, 160000)
    assert (cost.worker_applied, cost.ps_applied) == (250, 100)


def test_at_scale_hybrid_holds_least_per_worker_and_loads_the_ps_least():
    big = ModelShape(dense_bytes=16 << 20, table_bytes=512 << 20, row_bytes=128,
                     ids_per_step=8192, slots=1)
    for workers in (4, 64):
        ps, ar, hy = (predict(m, big, workers, 0 if m == "allreduce" else 2)
                      for m in ("ps", "allreduce", "hybrid"))
        assert hy.worker_state < ar.worker_state
        assert hy.ps_load < ps.ps_load
        assert hy.worker_sent + hy.worker_received < ar.worker_sent + ar.worker_received
    # allreduce's gathered rows grow with the workers; hybrid's traffic per worker does not
    grow = [predict("allreduce", big, w, 0).worker_received for w in (4, 64)]
    flat = [predict("hybrid", big, w, 2).worker_received for w in (4, 64)]
    assert grow[1] > 3 * grow[0] and flat[1] < 1.5 * flat[0]


@pytest.mark.parametrize("mode,workers,ps", [("ps", 2, 0), ("hybrid", 0, 1),
                                             ("sharded", 2, 1)])
def test_impossible_setups_are_refused_by_name(mode, workers, ps):
    with pytest.raises(errors.InvalidArgumentError, match=mode):
        predict(mode, SHAPE, workers, ps)
