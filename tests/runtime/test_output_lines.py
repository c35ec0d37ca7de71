"""Launched ranks write whole lines: a line a rank prints reaches the launcher's output
in one piece, never spliced with another rank's, be it written by ``print`` (import
mpiflow makes stdout and stderr write whole lines, even under ``python -u``) or by an
``mf.print`` op (tagged with the role of the rank that runs it)."""

import collections
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "output_lines.py"

pytestmark = pytest.mark.mpi


def _expected_print_lines():
    from tests.runtime.progs.output_lines import LINES, line
    return {line(rank, i) for rank in range(3) for i in range(LINES)}


def test_lines_printed_at_full_speed_by_three_ranks_arrive_whole(run_mpi):
    # run_mpi sets PYTHONUNBUFFERED=1: print would write a line and its newline apart.
    proc = run_mpi(3, PROG, "print", timeout=60)
    expected = _expected_print_lines()
    got = proc.stdout.splitlines()
    spliced = [line for line in got if line not in expected]
    assert spliced == [], f"{len(spliced)} spliced lines, e.g. {spliced[:3]}"
    assert collections.Counter(got) == collections.Counter(expected), "every line once"


def test_mf_print_lines_are_tagged_with_the_role_of_the_rank_that_runs_them(run_mpi):
    from tests.runtime.progs.output_lines import MF_PRINT_STEPS, WORDS
    proc = run_mpi(3, PROG, "mf_print", timeout=60)
    counts = collections.Counter(proc.stderr.splitlines())
    expected = {
        f"[worker:0 r1] worker says 0 [0 1 2] {WORDS}": MF_PRINT_STEPS,
        f"[worker:1 r2] worker says 1 [1 1 2] {WORDS}": MF_PRINT_STEPS,
        "[worker:0 r1] first: [0 1 2]": 2,          # first_n=2 of 3 runs
        "[worker:1 r2] first: [1 1 2]": 2,
        "[ps:0 r0] the ps says 7.5": 1,             # placed on the ps: printed there
    }
    assert counts == expected, proc.stderr
    # mf.Print passes its input through, also on the runs that print nothing.
    assert sorted(proc.stdout.splitlines()) == [
        "worker 0 got [[0, 1, 2], [0, 1, 2], [0, 1, 2]]",
        "worker 1 got [[1, 1, 2], [1, 1, 2], [1, 1, 2]]"]
