"""A collective that one worker never joins (its script is stuck in its own code): the
others' wait ends at MPIFLOW_TIMEOUT naming every other rank of the group, numbered as in
the job (MPI does not say which of them the collective waits for), followed by where each
of those is: the absent one's stack shows the line it is stuck on."""

import re
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "uneven_collectives.py"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode, ps, absent", [("allreduce", 0, "rank 0 (worker:0)"),
                                              ("hybrid", 1, "rank 1 (worker:0)")])
def test_the_rank_absent_from_a_collective_is_shown_where_it_is(run_mpi, mode, ps, absent):
    result = run_mpi(3 + ps, PROG, mode, "absent", check=False, timeout=90,
                     env={"MPIFLOW_TIMEOUT": "6", "MPIFLOW_PS": str(ps)})
    assert result.returncode != 0
    err = result.stderr
    waited = re.search(r"DeadlineExceededError: .*(?:every rank of the group must run it, "
                       r"and MPI does not say which have not yet|the ranks not heard from "
                       r"are unknown \(inside MPI; every rank of the communicator must make "
                       r"this call): (.*)", err)
    assert waited, err
    assert absent.split(" (")[0] in waited.group(1), err
    assert "where the ranks it waited for are:" in err, err
    # The absent rank's part of the report ends in the script's own code.
    part = err.split(f"=== {absent}", 1)[1].split("===", 1)[0]
    assert "absent_in_user_code()" in part and "time.sleep(1000)" in part, part
    # Each error is printed with a traceback of one raise, not one per time it was tested.
    assert err.count("raise self._error") <= 2, err
