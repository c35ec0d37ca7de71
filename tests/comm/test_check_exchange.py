"""The cross-rank check's recursive-doubling exchange (``collectives/exchange.py``) and the
small allreduces its messages carry."""

from pathlib import Path

import pytest

from mpiflow.comm.collectives.exchange import doubling_steps
from tests.comm.test_cluster_mpi import records
from tests.comm.test_collectives import CLEAN_ENV

PROG = Path(__file__).parent / "progs" / "check_exchange.py"
TIMEOUT = 180


def simulate(size):
    """Run every rank's steps in lock step on sets of rank numbers (the "sum"); return
    what each rank holds at the end. Fails on a send without its receive, or back."""
    held = {rank: {rank} for rank in range(size)}
    steps = {rank: list(doubling_steps(rank, size)) for rank in range(size)}
    while any(steps.values()):
        # A step runs once its partner is at the matching step: a send to the partner
        # meets a receive from this rank.
        progressed = False
        for rank in range(size):
            if not steps[rank]:
                continue
            step = steps[rank][0]
            other = steps[step.partner][0] if steps[step.partner] else None
            if other is None or other.partner != rank:
                continue
            if step.send != (other.receive is not None) or \
                    other.send != (step.receive is not None):
                continue
            mine, theirs = set(held[rank]), set(held[step.partner])
            for who, got, step_of in ((rank, theirs, step), (step.partner, mine, other)):
                if step_of.fold:
                    held[who] = held[who] | got
                elif step_of.receive == "stage":
                    held[who] = set(got)
            steps[rank].pop(0)
            steps[step.partner].pop(0)
            progressed = True
        assert progressed, f"{size} ranks: the steps deadlock at {steps}"
    return held


@pytest.mark.parametrize("size", range(1, 14))
def test_after_the_exchange_every_rank_holds_every_rank_once(size):
    held = simulate(size)
    assert all(value == set(range(size)) for value in held.values()), held


def test_a_power_of_two_takes_log2_steps_and_the_ranks_beyond_it_two():
    assert [s.partner for s in doubling_steps(5, 8)] == [4, 7, 1]
    assert [(s.partner, s.receive, s.send) for s in doubling_steps(5, 6)] == [
        (1, None, True), (1, "stage", False)]
    assert [s.partner for s in doubling_steps(1, 6)] == [5, 0, 3, 5]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 5, 6])
def test_carried_and_uncarried_sums_agree_bit_for_bit_on_every_rank(run_mpi, ranks):
    result = run_mpi(ranks, PROG, "sums", timeout=TIMEOUT, env=CLEAN_ENV)
    found = {rec["rank"]: rec for rec in records(result.stdout, "SUMS")}
    assert sorted(found) == list(range(ranks)), result.stdout + result.stderr
    for rank, rec in found.items():
        assert rec["failures"] == [], f"rank {rank}: {rec['failures']}"
        assert rec["cases"] >= 100, rec


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 6])
def test_a_signature_called_every_step_keeps_exact_sums_on_persistent_requests(run_mpi, ranks):
    result = run_mpi(ranks, PROG, "steady", timeout=TIMEOUT, env=CLEAN_ENV)
    found = {rec["rank"]: rec for rec in records(result.stdout, "STEADY")}
    assert sorted(found) == list(range(ranks)), result.stdout + result.stderr
    for rec in found.values():
        assert rec["calls"] == 300 and rec["wrong"] == 0, rec
        assert rec["persistent"], rec      # the path under test is the reused one


@pytest.mark.mpi
def test_a_message_of_another_size_marks_the_mismatch_and_arrives_whole(run_mpi):
    from mpiflow.comm.collectives.exchange import HEADER_BYTES
    from mpiflow.config import CHECK_CARRY_MAX_BYTES

    result = run_mpi(2, PROG, "longer", timeout=TIMEOUT, env=CLEAN_ENV)
    found = {rec["rank"]: rec for rec in records(result.stdout, "LONGER")}
    assert sorted(found) == [0, 1], result.stdout + result.stderr
    assert all(rec["mismatch"] for rec in found.values()), found
    # the longest message any rank sends, received whole by a bare check's exchange
    assert found[0]["received"] == HEADER_BYTES + CHECK_CARRY_MAX_BYTES, found
    assert found[1]["received"] == HEADER_BYTES, found


def raised(result, case, ranks):
    recs = {rec["rank"]: rec for rec in records(result.stdout, "RAISED") if rec["case"] == case}
    assert sorted(recs) == list(range(ranks)), result.stdout + result.stderr
    assert all(rec["error"] == "InvalidArgumentError" for rec in recs.values()), recs
    return recs


@pytest.mark.mpi
@pytest.mark.parametrize("case,ranks,expected", [
    # a collective issued on one rank only: the operation numbers
    ("numbers", 3, ("ranks disagree on the collective's number on this communicator: #2 on "
                   "rank 0; #1 on ranks 1-2")),
    # rank 0 expects a 32-byte message and meets a 4 KiB one, the others a short one: both
    # are the check's mismatch, taken off the wire whole (never into a buffer too short)
    ("carry", 4, ("ranks disagree on the bytes carried with the check: none on rank 0; "
                 "4096 on ranks 1-3")),
    # half floats on the wire on some ranks only: the reduction
    ("half_wire", 2, ("ranks disagree on the reduction: 'average' with half floats on the "
                     "wire on rank 0; 'average' on rank 1")),
])
def test_ranks_that_call_otherwise_raise_naming_what_differs(run_mpi, case, ranks, expected):
    result = run_mpi(ranks, PROG, case, timeout=TIMEOUT, env=CLEAN_ENV, check=False)
    for rec in raised(result, case, ranks).values():
        assert expected in rec["message"], rec
        assert "'grad/w'" in rec["message"], rec
    after = records(result.stdout, "AFTER")      # where the communicator goes on
    assert all(rec["correct"] for rec in after), result.stdout
    if case == "carry":
        assert len(after) == 4, result.stdout


@pytest.mark.mpi
def test_a_handle_waited_from_two_threads_finishes_once(run_mpi):
    result = run_mpi(2, PROG, "threads", timeout=TIMEOUT, env=CLEAN_ENV)
    found = records(result.stdout, "THREADS")
    assert len(found) == 2 and all(rec["wrong"] == 0 for rec in found), result.stdout


def test_the_pool_hands_back_an_exchange_of_the_same_signature_within_its_byte_cap():
    import numpy as np

    from mpiflow.comm.collectives.exchange import Exchange, ExchangePool

    one = Exchange(np.float32, (1024,)).footprint()
    pool = ExchangePool(max_bytes=one + one // 2)      # room for one
    first = pool.take(np.dtype(np.float32), (1024,))
    pool.give(first)
    assert pool.take(np.dtype(np.float32), (1024,)) is first
    assert pool.take(np.dtype(np.float32), (1024,)) is not first     # in use: a new one
    pool.give(first)
    other = pool.take(np.dtype(np.float64), (4,))
    pool.give(other)            # past the cap with first kept: dropped
    assert pool.take(np.dtype(np.float64), (4,)) is not other


def test_the_pool_counts_what_a_tiny_exchange_holds_besides_its_buffers():
    import numpy as np

    from mpiflow.comm.collectives.exchange import LANDING_BYTES, ExchangePool

    # A program of ever new tiny shapes: each exchange holds a landing buffer as long as
    # any rank's longest message besides its few bytes of tensor, so 1 MiB of cap keeps
    # about a dozen, not the thousands the tensors' bytes alone would allow.
    pool = ExchangePool(max_bytes=1 << 20)
    for dtype in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_):
        for n in range(1, 65):         # 384 signatures of at most 512 bytes each
            pool.give(pool.take(np.dtype(dtype), (n,)))
    kept = sum(len(free) for free in pool._free.values())
    assert 0 < kept <= (1 << 20) // LANDING_BYTES, kept
