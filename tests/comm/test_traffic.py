"""Bytes on the wire, counted where they move (mpiflow.comm.traffic): what the cost model
of the training modes is checked against."""

import json
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_and_messages_count_the_bytes_each_rank_moves(run_mpi, ranks):
    out = run_mpi(ranks, PROGS / "traffic_counts.py", timeout=90).stdout
    seen = {r["rank"]: r for r in map(json.loads, out.strip().splitlines())}
    share = 2 * (ranks - 1) * 12000 // ranks            # 2 (n-1)/n of the 12000 bytes
    gathered_rows = sum(range(1, ranks + 1))
    for rank, r in seen.items():
        assert r["allreduce_mpi"] == r["allreduce_ring"] == share
        assert r["allreduce_half_mpi"] == r["allreduce_half_ring"] == share  # float32
        assert r["allreduce_wire_mpi"] == r["allreduce_wire_ring"] == share // 2
        assert r["allgather_received"] == (gathered_rows - (rank + 1)) * 10 * 8
        assert r["broadcast"] == ([2000, 0] if rank == 0 else [0, 2000])
    payload = 1000 * 4 + 10 * 8
    sent, received = seen[0]["p2p"][0], seen[1]["p2p"][1]
    assert sent == received and payload < sent < payload + 200     # the header too
    assert seen[0]["p2p"][1] == seen[1]["p2p"][0] == 0


def test_the_ring_adds_half_floats_from_the_wire_in_float32(run_mpi):
    """2048 + 1 + 2 over 3 ranks, averaged, float16 on the wire. Each rank's part is
    divided by 3 first, in float32 (so no partial sum crosses past float16's range where
    the average does not), the ring adds in float32, and a partial sum is rounded to
    float16 only to cross: whatever order a chunk's partial sums take, the result is
    within one float16 step (0.5 here) of 2051 / 3 = 683.67, and every rank gets the same."""
    out = run_mpi(3, PROGS / "traffic_counts.py", timeout=90).stdout
    seen = [r["average_wire_ring"] for r in map(json.loads, out.strip().splitlines())]
    assert all(r == seen[0] for r in seen) and set(seen[0]) <= {683.5, 684.0}, seen
