"""mpiflow launch's own command line (no MPI)."""

import subprocess
import sys

import pytest

from tests.conftest import launch_env


@pytest.mark.parametrize("given,said", [
    (["-n", "0"], "-n must be >= 1, got 0"), (["-n", "-2"], "-n must be >= 1, got -2"),
    (["--ps", "-1"], "--ps must be >= 0, got -1")])
def test_a_count_out_of_range_is_a_usage_error_before_anything_starts(given, said, tmp_path):
    # MPICH's mpiexec starts one rank for -n 0 (or -n -2), and the job exited 0.
    marker = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "mpiflow", "launch", *given, sys.executable, "-c",
         f"open({str(marker)!r}, 'w')"], capture_output=True, text=True, timeout=60,
        env=launch_env({}), check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == f"mpiflow launch: error: {said}", done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("policy,exported", [
    ("NONE", "--export=MPIFLOW_LAUNCH_ADDRESS,MPIFLOW_PS,MPIFLOW_RESTART"),
    ("PATH,HOME", "--export=PATH,HOME,MPIFLOW_LAUNCH_ADDRESS,MPIFLOW_PS,MPIFLOW_RESTART"),
    ("ALL", None), ("ALL,FOO=1", None), ("", None)])
def test_srun_gives_the_ranks_the_launchs_variables_whatever_it_exports(
        policy, exported, monkeypatch):
    # sbatch --export=NONE sets SLURM_EXPORT_ENV=NONE for the srun steps of its script:
    # the ranks got no MPIFLOW_LAUNCH_ADDRESS (no line to the launch) and no MPIFLOW_PS.
    from mpiflow.launch.launchers import LAUNCHERS

    monkeypatch.setenv("SLURM_EXPORT_ENV", policy)
    argv = LAUNCHERS["srun"].argv("srun", 3, None, [], ["python", "train.py"],
                                  ["MPIFLOW_LAUNCH_ADDRESS", "MPIFLOW_PS", "MPIFLOW_RESTART"])
    given = [word for word in argv if word.startswith("--export")]
    assert given == ([exported] if exported else []), argv
    assert argv[-2:] == ["python", "train.py"]


@pytest.mark.parametrize("started_by", [
    {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1",
     "SLURM_STEP_NUM_TASKS": "8"},
    {"PMI_RANK": "1", "PMI_SIZE": "4"}])
def test_a_launch_started_as_one_of_several_tasks_refuses_to_start_the_job(started_by,
                                                                            tmp_path):
    # srun -n 8 mpiflow launch (or mpiexec -n 4): every task would start the whole job,
    # and under Slurm the nested steps wait for what the outer one holds, without end.
    marker = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "mpiflow", "launch", "-n", "1", "--launcher", "mpiexec",
         sys.executable, "-c", f"open({str(marker)!r}, 'w')"], capture_output=True,
        text=True, timeout=60, env=launch_env(started_by), check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mpiflow.launch: this is one of "), done.stderr
    assert "run mpiflow launch once, in the batch script" in done.stderr
    assert not marker.exists()
