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
        assert r["allgather_received"] == (gathered_rows - (rank + 1)) * 10 * 8
        assert r["broadcast"] == ([2000, 0] if rank == 0 else [0, 2000])
    payload = 1000 * 4 + 10 * 8
    sent, received = seen[0]["p2p"][0], seen[1]["p2p"][1]
    assert sent == received and payload < sent < payload + 200     # the header too
    assert seen[0]["p2p"][1] == seen[1]["p2p"][0] == 0
