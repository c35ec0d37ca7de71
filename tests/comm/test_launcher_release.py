"""A rank that leaves on purpose tells MPICH's launcher first, so that its exit does not
make the launcher kill the ranks still leaving: each leaves in its own time, and the
job's exit code is the ranks' own."""

from pathlib import Path

import pytest

from mpiflow.comm.launcher_release import release_from_launcher

PROG = Path(__file__).parent / "progs" / "leave_early.py"


def _leaving(stdout):
    return sorted(line for line in stdout.splitlines() if line.startswith("LEAVING"))

pytestmark = pytest.mark.mpi


@pytest.mark.mpich_only         # hydra's proxy and its PMI connection
def test_ranks_that_released_the_launcher_each_leave_in_their_own_time(run_mpi):
    done = run_mpi(3, PROG, "release", timeout=60, check=False)
    assert _leaving(done.stdout) == [f"LEAVING {r} True" for r in range(3)], done.stderr
    assert done.returncode == 130, done.stderr


@pytest.mark.mpich_only
def test_without_it_the_first_rank_out_gets_the_others_killed(run_mpi):
    # What the release is for: the same ranks leaving the same way are killed before
    # they are done (and the job's exit code is at times 9 instead of 130). The launcher
    # takes its time to kill; the last rank, 2 s after the first, is gone by then.
    done = run_mpi(3, PROG, "stay", timeout=60, check=False)
    assert "LEAVING 0 None" in _leaving(done.stdout), (done.stdout, done.stderr)
    assert "LEAVING 2 None" not in _leaving(done.stdout), (done.stdout, done.stderr)


def test_outside_a_launch_there_is_no_launcher_to_tell():
    assert release_from_launcher() is False
