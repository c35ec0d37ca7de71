"""Processes a launcher started as one job, whose MPI library did not join it: each is a
job of one rank (srun without the PMI the MPI library speaks, another MPI's mpirun)."""

import subprocess
import sys

import pytest

from tests.conftest import launch_env

pytestmark = pytest.mark.mpi

LAYOUT = "import mpiflow as mf; print(mf.train.ClusterSpec.from_mpi().as_dict(), flush=True)"


def test_tasks_that_srun_started_without_pmi_stop_instead_of_training_alone():
    # What srun --mpi=none gives each task with MPICH: Slurm's variables, no PMI's.
    tasks = [subprocess.Popen(
        [sys.executable, "-c", LAYOUT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=launch_env({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
                                   "SLURM_PROCID": str(task), "SLURM_LOCALID": str(task),
                                   "SLURM_NODEID": "0", "SLURM_NTASKS": "2",
                                   "SLURM_STEP_NUM_TASKS": "2"}))
        for task in range(2)]
    for task, proc in enumerate(tasks):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0, out + err
        assert "worker" not in out, out
        assert f"[r{task}] FailedPreconditionError: The launcher started this process as " \
               f"rank {task} of 2 (SLURM_PROCID={task}, SLURM_STEP_NUM_TASKS=2), but MPI " \
               "made a job of 1 rank(s) of it" in err, err
