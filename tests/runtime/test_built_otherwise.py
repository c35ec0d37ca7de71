"""A worker that built its variables otherwise than the chief (placed on other ps tasks,
or partitioned otherwise) is told so within seconds, naming the variable and where each
side has it, instead of waiting MPIFLOW_TIMEOUT for the chief and blaming it."""

from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "built_otherwise.py"
pytestmark = pytest.mark.mpi
# Far beyond the launch's own timeout: only the diagnosis can end the wait in time.
LONG_WAIT = {"MPIFLOW_TIMEOUT": "600"}


def test_variables_placed_on_other_ps_tasks_are_named(run_mpi):
    done = run_mpi(4, PROG, "extra_variable", check=False, timeout=90, env=LONG_WAIT)
    assert done.returncode != 0
    assert "This worker built its variables otherwise than the chief: 'table' is " \
        "initialized on /job:ps/task:0, but this worker places it on /job:ps/task:1" \
        in done.stderr, done.stderr


def test_a_table_partitioned_otherwise_is_named(run_mpi):
    done = run_mpi(3, PROG, "partitioned", check=False, timeout=90, env=LONG_WAIT)
    assert done.returncode != 0
    assert "'table' is initialized whole, but this worker splits it into parts " \
        "('table/part_0')" in done.stderr, done.stderr


def test_a_global_step_made_outside_the_device_scope_is_named(run_mpi):
    done = run_mpi(3, PROG, "step_outside", check=False, timeout=90, env=LONG_WAIT)
    assert done.returncode != 0
    assert "'global_step': made outside replica_device_setter (no task in the device), so " \
        "this worker's copy lives on its own task, where nobody initializes it" \
        in done.stderr, done.stderr
