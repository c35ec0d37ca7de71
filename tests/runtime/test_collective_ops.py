"""Collective ops in graphs under mpiexec: what they read and what they give back."""

import json
import re
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("checked", ["1", "0"])
def test_broadcast_leaves_its_input_alone_on_every_rank(run_mpi, checked):
    # With the write check off too: the values, not only the check, must show it.
    out = run_mpi(3, PROGS / "broadcast_inputs.py", timeout=60,
                  env={"MPIFLOW_CHECK_KERNEL_WRITES": checked}).stdout
    assert sorted(re.findall(r"OK broadcast worker (\d)", out)) == ["0", "1", "2"], out


@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_variables_gives_every_rank_the_roots_values_in_place(run_mpi, root):
    # The write check on: the broadcast writes only the variables it names, in place.
    out = run_mpi(3, PROGS / "broadcast_variables.py", root, timeout=90,
                  env={"MPIFLOW_CHECK_KERNEL_WRITES": "1"}).stdout
    found = {r["task"]: r for r in map(json.loads, re.findall(r"BROADCAST (\{.*\})", out))}
    assert sorted(found) == [0, 1, 2], out
    assert len({str(r["before"]) for r in found.values()}) == 3, out    # each its own
    assert all(r["after"] == found[root]["before"] for r in found.values()), out
    # A second copy of the table (a buffer the broadcast lands in) would add 64 MiB.
    assert all(r["grew_mib"] < r["table_mib"] / 4 for r in found.values()), out
