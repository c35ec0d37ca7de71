"""A malformed MPIFLOW_* variable under mpiexec: each rank stops at ``import mpiflow`` with
one line tagged with its rank, no traceback, and the job fails; a misspelt one is
reported by rank 0 alone."""

import re

import pytest

pytestmark = pytest.mark.mpi

BAD_TIMEOUT_LINE = re.compile(
    r"\[r([0-2])\] mpiflow: Bad value for environment variable MPIFLOW_TIMEOUT: expected a "
    r"float > 0 \(.*\), got 'abc'")


@pytest.fixture
def import_script(tmp_path):
    script = tmp_path / "import_mpiflow.py"
    script.write_text("import mpiflow\nprint('IMPORTED', flush=True)\n")
    return script


def test_a_malformed_value_stops_every_rank_with_one_tagged_line(run_mpi, import_script):
    proc = run_mpi(3, import_script, env={"MPIFLOW_TIMEOUT": "abc"}, check=False, timeout=60)
    output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert proc.returncode != 0, output
    assert "IMPORTED" not in proc.stdout and "Traceback" not in proc.stderr, output
    ranks = [m.group(1) for m in map(BAD_TIMEOUT_LINE.fullmatch, proc.stderr.splitlines())
             if m]
    # A rank the launcher ends first (its neighbour failed) may say nothing; none twice.
    assert ranks and len(ranks) == len(set(ranks)), output
    assert all(BAD_TIMEOUT_LINE.fullmatch(line) for line in proc.stderr.splitlines()
               if "mpiflow" in line or line.startswith("[r")), output


def test_a_misspelt_variable_is_reported_once_per_job(run_mpi, import_script):
    proc = run_mpi(3, import_script, env={"MPIFLOW_TIMOUT": "3"}, timeout=60)
    assert proc.stdout.count("IMPORTED") == 3
    warnings = [line for line in proc.stderr.splitlines() if "did you mean" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        "[r0] WARNING mpiflow.config: unknown MPIFLOW_* variable(s) ignored: MPIFLOW_TIMOUT "
        "(did you mean MPIFLOW_TIMEOUT?)"), proc.stderr
