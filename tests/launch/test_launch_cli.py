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
        env=launch_env({}))
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
