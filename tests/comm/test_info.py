"""``python -m mpiflow.info`` shows every rank's host, node, local rank, role and threads."""

import os
import re
from pathlib import Path

import pytest

INFO = Path(__file__).resolve().parents[2] / "mpiflow" / "info.py"


@pytest.mark.mpi
def test_info_prints_the_layout_of_the_launch(run_mpi):
    out = run_mpi(3, INFO, timeout=60, env={"MPIFLOW_PS": "1"}).stdout
    rows = re.findall(r"^\s*(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\w+:\d+)\s+(\d+)\s+(\S+)$", out,
                      re.M)
    assert [r[0] for r in rows] == ["0", "1", "2"], out
    assert [r[4] for r in rows] == ["ps:0", "worker:0", "worker:1"], out
    assert [r[3] for r in rows] == ["0", "1", "2"], out       # one host: local = rank
    assert "MPI: " in out and "CUDA-aware MPI: " in out and "NCCL: " in out


@pytest.mark.mpi
def test_info_takes_the_ps_count_on_its_command_line(run_mpi):
    out = run_mpi(4, INFO, "--ps", 1, timeout=60).stdout
    roles = re.findall(r"^\s*\d+\s+\S+\s+\d+\s+\d+\s+(\w+:\d+)", out, re.M)
    assert roles == ["ps:0", "worker:0", "worker:1", "worker:2"], out
    assert "ps policy block" in out


@pytest.mark.mpi
@pytest.mark.mpich_only         # hydra's -bind-to
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 processors")
def test_info_shows_a_rank_bound_to_one_core_running_one_thread(run_mpi):
    """hydra's -bind-to core gives the rank one core of the machine's: its BLAS threads
    are that core, not the machine's count."""
    out = run_mpi(1, INFO, timeout=60, launcher_args=["-bind-to", "core"]).stdout
    threads = re.findall(r"^\s*0\s+\S+\s+\d+\s+\d+\s+\w+:\d+\s+(\d+)", out, re.M)
    assert threads == ["1"], out
