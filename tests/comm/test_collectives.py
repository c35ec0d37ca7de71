"""Collectives (mpi, ring, auto, nccl) on real mpiexec launches (tests/comm/progs)."""

from pathlib import Path

import pytest

from mpiflow import backend
from mpiflow.comm.collectives.check import format_ranks
from tests.comm.test_cluster_mpi import records

PROGS = Path(__file__).parent / "progs"
CASES = PROGS / "collectives_cases.py"
ERRORS = PROGS / "collectives_errors.py"
TIMEOUT = 180
# Empty means unset: keeps the knobs of the shell running pytest out of these launches.
CLEAN_ENV = {name: "" for name in ("MPIFLOW_TIMEOUT", "MPIFLOW_RING_CHUNK_BYTES",
                                   "MPIFLOW_RING_WINDOW", "MPIFLOW_RING_MIN_BYTES",
                                   "MPIFLOW_FUSION_THRESHOLD_BYTES")}

pytestmark = pytest.mark.mpi


def assert_all_cases_pass(result, ranks, minimum=400):
    found = {rec["rank"]: rec for rec in records(result.stdout, "CASES")}
    assert sorted(found) == list(range(ranks)), result.stdout + result.stderr
    for rank, rec in found.items():
        assert rec["failures"] == [], f"rank {rank}: {rec['failures']}"
        assert rec["cases"] >= minimum, rec


def raised(result, case):
    return {rec["rank"]: rec for rec in records(result.stdout, "RAISED") if rec["case"] == case}


@pytest.mark.parametrize("algorithm,ranks", [
    ("mpi", 1), ("mpi", 2), ("mpi", 3), ("mpi", 4),
    ("ring", 1), ("ring", 2), ("ring", 3), ("ring", 4),
    ("auto", 2), ("auto", 4),
])
def test_allreduce_broadcast_allgather_fusion_match_numpy(run_mpi, algorithm, ranks):
    # Every dtype of the table; sizes 0, 1, 1009 and 1 Mi float32; sum and average; new,
    # given and in-place outputs; broadcast from every root; allgather with uneven rows
    # (rank 0 gives none); handles driven by test() alone and waited in reverse order;
    # fused buckets; all of it on two fresh communicators (lazy set-up runs twice).
    result = run_mpi(ranks, CASES, algorithm, timeout=TIMEOUT, env=CLEAN_ENV)
    assert_all_cases_pass(result, ranks)


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_nccl_runs_the_same_cases_on_gpu_arrays(run_mpi, ranks):
    nccl, reason = backend.nccl_module()
    if nccl is None:
        pytest.skip(reason)
    result = run_mpi(ranks, CASES, "nccl", timeout=TIMEOUT, env=CLEAN_ENV)
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIP ")]
    if skipped:
        pytest.skip(skipped[0][5:])
    assert_all_cases_pass(result, ranks, minimum=300)


@pytest.mark.parametrize("ranks", [3, 4])
def test_ring_in_many_small_chunks_with_few_in_flight(run_mpi, ranks):
    env = {**CLEAN_ENV, "MPIFLOW_RING_CHUNK_BYTES": "200", "MPIFLOW_RING_WINDOW": "2"}
    result = run_mpi(ranks, CASES, "ring", "--no-large", timeout=TIMEOUT, env=env)
    assert_all_cases_pass(result, ranks)


def test_ring_pipelines_large_buffers_in_chunks(run_mpi):
    env = {**CLEAN_ENV, "MPIFLOW_RING_CHUNK_BYTES": "65536", "MPIFLOW_RING_WINDOW": "3"}
    result = run_mpi(3, CASES, "ring", timeout=TIMEOUT, env=env)
    assert_all_cases_pass(result, 3)


@pytest.mark.parametrize("algorithm", ["mpi", "ring"])
def test_mismatched_calls_raise_on_every_rank_naming_the_ranks(run_mpi, algorithm):
    # The program leaves with os._exit (see below), so its exit code is not under test.
    result = run_mpi(4, ERRORS, "mismatch", algorithm, timeout=TIMEOUT, env=CLEAN_ENV,
                     check=False)
    assert len(records(result.stdout, "DONE")) == 4, result.stdout + result.stderr
    expected = {
        "shape": "ranks disagree on the shape: (1009,) on ranks 0-2; (1010,) on rank 3",
        "dtype": "ranks disagree on the dtype: float64 on rank 0; float32 on ranks 1-3",
        "allgather": "ranks disagree on the shape after the first dimension: (4,) on "
                     "ranks 0-2; (3,) on rank 3",
        "root": "ranks disagree on the root: 0 on ranks 0-2; 1 on rank 3",
    }
    for case, text in expected.items():
        recs = raised(result, case)
        assert sorted(recs) == [0, 1, 2, 3], (case, result.stdout)
        for rec in recs.values():
            assert rec["error"] == "InvalidArgumentError", rec
            assert text in rec["message"], rec
    assert "'grad/w'" in raised(result, "shape")[0]["message"]
    after = records(result.stdout, "AFTER")
    assert len(after) == 4 and all(rec["correct"] for rec in after), result.stdout


@pytest.mark.parametrize("algorithm,absent,warm", [
    ("mpi", 3, False),     # first collective on the communicator: nothing set up yet
    ("ring", 2, True),
    ("ring", 0, True),     # the rank that gathers the check is the one missing
])
def test_rank_that_never_joins_is_named_within_the_timeout(run_mpi, algorithm, absent, warm):
    args = ["absent", algorithm, "--absent", absent] + (["--warm"] if warm else [])
    # MPICH cannot finalize with a collective left pending, so the program leaves with
    # os._exit and the launcher may report that exit as abnormal: the messages are what
    # is under test here, not the exit code.
    result = run_mpi(4, ERRORS, *args, timeout=TIMEOUT, env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"},
                     check=False)
    recs = raised(result, "absent")
    assert sorted(recs) == sorted(set(range(4)) - {absent}), result.stdout + result.stderr
    assert len(records(result.stdout, "DONE")) == 4, result.stdout + result.stderr
    for rec in recs.values():
        assert rec["error"] == "DeadlineExceededError", rec
        assert f"not heard from rank {absent}" in rec["message"], rec
        assert "'grad/b'" in rec["message"] and algorithm in rec["message"], rec
        # The deadline, plus the grace others give rank 0 to report who is missing.
        assert 0.9 < rec["seconds"] < 6, rec
    if absent != 0:
        assert "MPIFLOW_TIMEOUT=1 s" in recs[0]["message"]
        assert f"reports that rank {absent} never joined" in recs[1 if absent != 1 else 2][
            "message"]


@pytest.mark.parametrize("algorithm", ["mpi", "ring"])
def test_the_ranks_named_are_numbered_as_in_the_job_on_a_group_without_rank_0(run_mpi,
                                                                              algorithm):
    # The workers of a job with a ps at rank 0: the group's rank 1 is the job's rank 2,
    # which is what the lines of its output and every other message call it.
    result = run_mpi(4, ERRORS, "absent", algorithm, "--absent", 2, "--warm",
                     "--without-rank-0", timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    recs = raised(result, "absent")
    assert sorted(recs) == [1, 3], result.stdout + result.stderr
    for rec in recs.values():
        assert "not heard from rank 2 " in rec["message"], rec
    assert "rank 1 reports that rank 2 never joined" in recs[3]["message"], recs[3]


@pytest.mark.parametrize("algorithm,ranks,late,cold", [
    ("mpi", 2, 1, False),   # carried in the check: the late rank completes it from the message
    ("ring", 2, 1, False),  # the late rank passes the check, then waits in the ring
    ("mpi", 3, 0, False),   # the rank that answers the roll call is the late one
    ("mpi", 2, 0, True),    # ... at the communicator's first collective: nothing to complete
])
def test_ranks_that_gave_up_refuse_every_later_collective(run_mpi, algorithm, ranks, late,
                                                          cold):
    # The others' deadline passes while rank `late` sleeps; it arrives after their roll
    # call. Nobody may take a stale message of that collective for a later one's, and
    # nobody may wait more than one deadline (plus the roll call) per collective.
    result = run_mpi(ranks, ERRORS, "late", algorithm, "--late", late,
                     *(["--cold"] if cold else []), timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    number = 0 if cold else 1
    assert len(records(result.stdout, "DONE")) == ranks, result.stdout + result.stderr
    outcomes = {}
    for kind in ("RAISED", "RETURNED"):
        for rec in records(result.stdout, kind):
            outcomes[rec["rank"], rec["case"]] = rec
    assert len(outcomes) == 3 * ranks, result.stdout
    timed_out = [r for r in range(ranks) if r != late]
    for rank in timed_out:
        first = outcomes[rank, "first"]
        assert first["error"] == "DeadlineExceededError", first
        assert "'grad/first'" in first["message"], first
        for case in ("second", "third"):
            rec = outcomes[rank, case]
            assert rec["error"] == "AbortedError", rec
            assert rec["seconds"] < 0.5, rec
            assert f"stopped when collective #{number} passed its deadline" in \
                rec["message"], rec
            assert "'grad/first'" in rec["message"], rec
    # The late rank: its first collective either completes correctly from the messages
    # sent before the others gave up, or fails at its deadline; then it is told why.
    first = outcomes[late, "first"]
    failed_at = "first" if "error" in first else "second"
    if failed_at == "second":
        assert first["correct"] is True, first
    rec = outcomes[late, failed_at]
    assert rec["error"] == "DeadlineExceededError", rec
    assert rec["seconds"] < 5, rec
    stopped = format_ranks(timed_out)
    assert (f"{stopped} stopped {'its' if len(timed_out) == 1 else 'their'} collectives on "
            f"this communicator when collective #{number} passed its deadline there") in \
        rec["message"], rec
    assert "every rank waits" not in rec["message"], rec
    assert outcomes[late, "third"]["error"] == "AbortedError", outcomes[late, "third"]


def test_a_rank_that_waited_in_time_is_not_told_it_arrived_late(run_mpi):
    # Rank 1 never joins; rank 0 and rank 2 both wait for it, rank 2 from 0.6 s later
    # (inside rank 0's deadline). Rank 0 gives up first; at its own deadline rank 2 finds
    # rank 0's notice, but it was there before rank 0 gave up: it must not be blamed.
    result = run_mpi(3, ERRORS, "absent", "mpi", "--absent", 1, "--warm", "--no-check",
                     "--stagger", 0.3, timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    recs = raised(result, "absent")
    assert sorted(recs) == [0, 2], result.stdout + result.stderr
    second = recs[2]["message"]
    assert "rank 0 also waited for this collective (#1) and gave up on it first" in second, \
        second
    assert "arrived late" not in second, second


@pytest.mark.parametrize("algorithm", ["mpi", "ring"])
def test_a_collective_complete_before_the_stop_still_returns_its_result(run_mpi, algorithm):
    result = run_mpi(2, ERRORS, "earlier", algorithm, timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    assert len(records(result.stdout, "DONE")) == 2, result.stdout + result.stderr
    returned = {(r["rank"], r["case"]): r for r in records(result.stdout, "RETURNED")}
    assert returned[1, "first"]["correct"] is True, result.stdout
    assert returned[0, "first"]["correct"] is True, result.stdout
    rank0 = raised(result, "second")[0]
    assert rank0["error"] == "DeadlineExceededError", rank0
    after = raised(result, "after")[0]
    assert after["error"] == "AbortedError", after
    assert "every later collective here fails at once" in after["message"], after


def test_ring_without_check_names_the_neighbour_it_waits_for(run_mpi):
    result = run_mpi(4, ERRORS, "absent", "ring", "--absent", 2, "--warm", "--no-check",
                     timeout=TIMEOUT, env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    recs = raised(result, "absent")
    assert sorted(recs) == [0, 1, 3], result.stdout + result.stderr
    assert len(records(result.stdout, "DONE")) == 4, result.stdout + result.stderr
    assert all(rec["error"] == "DeadlineExceededError" for rec in recs.values())
    assert "receives from rank 2" in recs[3]["message"]
    assert "not heard from rank 2" in recs[3]["message"]


def test_a_fused_allreduce_after_a_failed_round_says_so_at_once(run_mpi):
    result = run_mpi(2, ERRORS, "fused", "mpi", timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    assert len(records(result.stdout, "DONE")) == 2, result.stdout + result.stderr
    returned = {(r["rank"], r["case"]): r for r in records(result.stdout, "RETURNED")}
    assert all(returned[rank, case]["correct"] for rank in (0, 1)
               for case in ("round0", "round1")), result.stdout
    for rec in raised(result, "round2").values():
        assert rec["error"] == "DeadlineExceededError", rec
    for rec in raised(result, "round3").values():
        assert "begins a new round, but the last round failed" in rec["message"], rec
        assert rec["seconds"] < 0.5, rec
    assert sorted(raised(result, "round3")) == [0, 1], result.stdout
