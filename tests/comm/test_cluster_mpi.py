"""ClusterSpec.from_mpi and Layout.from_comm on a real mpiexec launch (tests/comm/progs)."""

import json
import os
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "cluster_layout.py"
TIMEOUT = 60
# Empty means unset: keeps MPIFLOW_* of the shell running pytest out of these launches.
CLEAN_ENV = {"MPIFLOW_PS": "", "MPIFLOW_PS_POLICY": ""}

pytestmark = pytest.mark.mpi


def records(stdout, marker):
    """Return the JSON objects printed after ``marker``, wherever mpiexec broke the lines."""
    decoder, found = json.JSONDecoder(), []
    pos = stdout.find(marker + " ")
    while pos != -1:
        obj, end = decoder.raw_decode(stdout, pos + len(marker) + 1)
        found.append(obj)
        pos = stdout.find(marker + " ", end)
    return found


def by_policy(result, size):
    """Return {policy: [record of rank 0, 1, ...]}, checking every rank reported once."""
    table = {}
    for rec in records(result.stdout, "CLUSTER"):
        table.setdefault(rec["policy"], {})[rec["rank"]] = rec
    for policy, ranks in table.items():
        assert sorted(ranks) == list(range(size)), (policy, sorted(ranks), result.stdout)
    return {policy: [ranks[r] for r in range(size)] for policy, ranks in table.items()}


def roles(recs):
    return [f"{rec['job']}{rec['task']}" for rec in recs]


@pytest.mark.parametrize("ps,expected", [
    (None, ["ps0", "worker0", "worker1", "worker2"]),
    (2, ["ps0", "ps1", "worker0", "worker1"]),
])
def test_one_host_layout_and_spread_equals_block(run_mpi, ps, expected):
    args = [] if ps is None else ["--ps", ps]
    result = run_mpi(4, PROG, *args, timeout=TIMEOUT, env=CLEAN_ENV)
    table = by_policy(result, 4)
    assert set(table) == {"block", "spread"}
    block = table["block"]
    assert len({rec["host"] for rec in block}) == 1
    assert [(r["node"], r["local_rank"], r["local_size"], r["size"]) for r in block] == [
        (0, rank, 4, 4) for rank in range(4)]
    assert roles(block) == expected
    assert roles(table["spread"]) == expected


def test_simulated_hosts_are_told_apart_and_spread_takes_one_ps_per_node(run_mpi):
    result = run_mpi(4, PROG, "--ps", 2, "--fake-hosts", 2, timeout=TIMEOUT, env=CLEAN_ENV)
    table = by_policy(result, 4)
    block, spread = table["block"], table["spread"]
    assert [r["host"] for r in block] == ["fake0", "fake0", "fake1", "fake1"]
    assert [r["node"] for r in block] == [0, 0, 1, 1]
    assert [(r["local_rank"], r["local_size"]) for r in block] == [(0, 2), (1, 2)] * 2
    assert roles(block) == ["ps0", "ps1", "worker0", "worker1"]
    assert roles(spread) == ["ps0", "worker0", "ps1", "worker1"]
    specs = {rec["policy"]: rec["spec"] for rec in records(result.stdout, "SPEC")}
    assert specs["spread"] == {"ps": ["mpi://fake0/0", "mpi://fake1/2"],
                               "worker": ["mpi://fake0/1", "mpi://fake1/3"]}


def test_number_of_ps_comes_from_the_environment(run_mpi):
    result = run_mpi(4, PROG, "--env-only", timeout=TIMEOUT, env={"MPIFLOW_PS": "2"})
    assert roles(by_policy(result, 4)["env"]) == ["ps0", "ps1", "worker0", "worker1"]
    spec = records(result.stdout, "SPEC")[0]["spec"]
    assert [address.rsplit("/", 1)[1] for address in spec["ps"]] == ["0", "1"]


def test_single_rank_job_is_one_worker(run_mpi):
    result = run_mpi(1, PROG, "--env-only", timeout=TIMEOUT, env=CLEAN_ENV)
    assert roles(by_policy(result, 1)["env"]) == ["worker0"]
    result = run_mpi(1, PROG, "--ps", 0, timeout=TIMEOUT, env=CLEAN_ENV)
    assert roles(by_policy(result, 1)["spread"]) == ["worker0"]


def test_more_ps_than_ranks_fails_with_a_clear_message(run_mpi):
    result = run_mpi(4, PROG, "--ps", 5, timeout=TIMEOUT, env=CLEAN_ENV, check=False)
    assert result.returncode != 0
    assert "InvalidArgumentError" in result.stderr
    assert "no worker left: 4 ranks, 5 ps" in result.stderr
    assert "CLUSTER" not in result.stdout


def test_more_ps_than_ranks_is_reported_once_by_rank_0_without_a_traceback(run_mpi):
    # Every rank of ClusterSpec.from_mpi finds it; rank 0 alone reports it, in one line (a
    # launch setting: the traceback would say nothing), and no other rank's abort cuts
    # that report short (each printed its traceback, or the first abort left none).
    result = run_mpi(4, PROG, "--env-only", timeout=TIMEOUT, check=False,
                     env={"MPIFLOW_PS": "5", "MPIFLOW_PS_POLICY": ""})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    said = [line for line in result.stderr.splitlines() if "no worker left" in line]
    reports = [line for line in said
               if not line.endswith("(rank 0 reports it and ends the job)")]
    assert len(reports) == 1, result.stderr
    assert reports[0].startswith("[r0] InvalidArgumentError: Cannot assign roles, no worker "
                                 "left: 4 ranks, 5 ps"), result.stderr
    assert reports[0].endswith("(from the environment: MPIFLOW_PS=5)"), result.stderr


def test_malformed_environment_fails_naming_the_variable(run_mpi):
    result = run_mpi(2, PROG, "--env-only", timeout=TIMEOUT, env={"MPIFLOW_PS": "abc"},
                     check=False)
    assert result.returncode != 0
    assert "MPIFLOW_PS" in result.stderr and "'abc'" in result.stderr


def test_rank_that_never_joins_makes_the_others_time_out_instead_of_hanging(run_mpi):
    result = run_mpi(3, PROG, "--absent-rank", 0, timeout=TIMEOUT,
                     env={**CLEAN_ENV, "MPIFLOW_TIMEOUT": "1"}, check=False)
    assert result.returncode != 0
    assert "DeadlineExceededError" in result.stderr
    # Rank 0 is the one missing: the others name it.
    assert "for rank 0, which never arrived there (MPIFLOW_TIMEOUT=1)" in result.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 processors")
@pytest.mark.parametrize("bind, threads, node_cpus", [
    (None, [1, 1], 2),          # unbound: the 2 processors divided between the 2 ranks
    ("{0};{1}", [1, 1], 2),     # a processor each
    ("{0};{0}", [1, 1], 1),     # both on one processor: the node is crowded
    ("{0},{1};{0}", [1, 1], 2),     # rank 0 shares processor 0 with rank 1: half of 2
])
def test_the_layout_shares_the_processors_the_ranks_may_run_on(run_mpi, bind, threads,
                                                                node_cpus):
    machine = sorted(os.sched_getaffinity(0))[:2]
    args = [] if bind is None else ["--bind", bind.format(*machine)]
    result = run_mpi(2, PROG, *args, timeout=TIMEOUT, env=CLEAN_ENV)
    block = by_policy(result, 2)["block"]
    assert [r["cpu_threads"] for r in block] == threads, result.stdout
    assert [r["node_cpus"] for r in block] == [node_cpus] * 2, result.stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 processors")
def test_one_rank_bound_to_one_processor_gets_one_thread_not_the_machines_count(run_mpi):
    machine = sorted(os.sched_getaffinity(0))[0]
    result = run_mpi(1, PROG, "--bind", str(machine), timeout=TIMEOUT, env=CLEAN_ENV)
    (rank0,) = by_policy(result, 1)["block"]
    assert (rank0["cpu_threads"], rank0["node_cpus"]) == (1, 1), result.stdout
