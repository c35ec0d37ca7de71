"""Every start-up wait obeys MPIFLOW_TIMEOUT and names the ranks that did not arrive; a
wait that times out shows where the ranks it waited for are (their stacks, asked from
their own threads), under plain mpiexec and under mpiflow launch. Rank 0 decides a
start-up wait and reports it; the other ranks say their line and leave the job's end to
rank 0, so no abort of theirs cuts rank 0's report short."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import launch_env

PROG = Path(__file__).parent / "progs" / "late_rank.py"
TIMEOUT = {"MPIFLOW_TIMEOUT": "3"}
# MPIFLOW_TIMEOUT, plus start-up and the abort, on a loaded 2-core machine.
ENDS_WITHIN_S = 25

pytestmark = pytest.mark.mpi

POINTS = {
    "layout": "the cluster layout (ClusterSpec.from_mpi, Server)",
    "service": "the start of the rank service (Server, or a Session on a cluster)",
    "groups": "Server (the job groups, MPI_Comm_split)",
}


def timed(run):
    start = time.monotonic()
    result = run()
    return result, time.monotonic() - start


@pytest.mark.parametrize("where", list(POINTS))
def test_a_rank_that_never_arrives_is_named_and_the_job_ends(run_mpi, where):
    result, took = timed(lambda: run_mpi(3, PROG, where, env=TIMEOUT, check=False,
                                         timeout=60))
    assert result.returncode != 0
    assert took < ENDS_WITHIN_S, took
    # Rank 0 says it (the others raise the same error, but rank 0's abort may end them
    # before their line is out).
    assert re.search(rf"rank 0\b.* waited 3 s at {re.escape(POINTS[where])} for "
                     r"rank 2\b.*\(of 3 ranks\), which never arrived there",
                     result.stderr), result.stderr
    if where == "groups":
        # Under the rank service, rank 0 gives the others a moment before its abort: the
        # rank that follows its report says its own line, once.
        assert len(re.findall(r"rank 1\b.* waited 3 s at .*\(rank 0 reports it and ends "
                              r"the job\)", result.stderr)) == 1, result.stderr


def test_ranks_that_run_different_programs_are_told_so(run_mpi):
    result = run_mpi(3, PROG, "elsewhere", env=TIMEOUT, check=False, timeout=60)
    assert result.returncode != 0
    told = "rank 2 arrived at another program's start while rank 0 arrived at the cluster " \
           "layout (ClusterSpec.from_mpi, Server)"
    # Every rank says it, rank 2 too (its own point is not rank 0's), and only rank 0
    # reports it without leaving the end to another rank.
    for rank in range(3):
        line = next((line for line in result.stderr.splitlines()
                     if line.startswith(f"[r{rank}]")), "")
        assert told in line, result.stderr
        assert line.endswith("(rank 0 reports it and ends the job)") == (rank != 0), \
            result.stderr


def test_under_mpiflow_launch_the_report_shows_where_the_missing_rank_is(tmp_path):
    cmd = [sys.executable, "-m", "mpiflow", "launch", "-n", "3", str(PROG), "layout"]
    result, took = timed(lambda: subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=launch_env(TIMEOUT),
        cwd=tmp_path))
    assert result.returncode != 0 and took < ENDS_WITHIN_S
    report = result.stderr.split("where the ranks it waited for are:")[1]
    assert re.search(r"=== rank 2\n.*in stalled_before_the_meeting\n", report, re.S), \
        result.stderr
    # Rank 1 raised the same error; it leaves the report, and the blame, to rank 0.
    assert "[r1] DeadlineExceededError: Start-up: rank 1 waited 3 s" in result.stderr
    assert "(rank 0 reports it and ends the job)" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.match(r"mpiflow\.launch: the job failed .*: rank 0 on \S+: "
                    r"DeadlineExceededError", last), result.stderr


def test_a_wait_that_times_out_shows_the_stack_of_the_rank_it_waited_for(run_mpi):
    # The ps's main thread deadlocks after start-up; its heartbeat thread still answers.
    result = run_mpi(3, PROG, "stuck_ps", env=TIMEOUT, check=False, timeout=60)
    assert result.returncode != 0
    worker = [line.split("] ", 1)[1] for line in result.stderr.splitlines()
              if line.startswith("[rank 1 (worker:0)")]
    text = "\n".join(worker)
    assert "waited 3 s for registration of a partition on rank 0 (ps:0)" in text, \
        result.stderr
    report = text.split("where the ranks it waited for are:")[1]
    assert report.lstrip("\n").startswith("=== rank 0 (ps:0)"), result.stderr
    assert "in deadlocked_in_user_code" in report and "lock.acquire()" in report


STALLED_BEFORE_MPI = """import os, time
import mpiflow as mf
if (os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")) == "2":
    time.sleep(120)     # stuck before it ever starts MPI
mf.train.ClusterSpec.from_mpi(ps=1)
"""


def test_a_rank_stuck_before_it_starts_mpi_is_reported_and_the_job_ends(run_mpi, tmp_path):
    # MPI_Init waits for every rank to start MPI: the others waited in it, silent and
    # without end, and no wait of mpiflow's could fire.
    script = tmp_path / "stalled.py"
    script.write_text(STALLED_BEFORE_MPI)
    result, took = timed(lambda: run_mpi(3, script, env=TIMEOUT, check=False, timeout=40))
    assert result.returncode != 0
    assert took < ENDS_WITHIN_S, (took, result.stderr)
    assert "[r0] DeadlineExceededError: Start-up: rank 0 waited 3 s in MPI_Init (starting " \
           "MPI), which waits for every rank of the job to start MPI" in result.stderr, \
        result.stderr
