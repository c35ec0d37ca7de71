"""The batch scripts of slurm/, submitted with sbatch --wait to a real one-node Slurm."""

import re
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPTS = REPO_ROOT / "slurm"
TINY = ("--nodes=1", "--ntasks-per-node=3", "--time=00:05:00")

# MPICH: the Slurm here gives PMI-1/2, which Open MPI's wheel does not speak.
pytestmark = [pytest.mark.mpi, pytest.mark.mpich_only]


def assert_layout_shown(output, roles):
    rows = re.findall(r"^\s*(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\w+:\d+)", output, re.M)
    assert [r[4] for r in rows] == roles, output


def test_ps_script_trains_with_one_ps_per_node(slurm):
    code, output = slurm.sbatch(SCRIPTS / "ps.sbatch", *TINY, EXAMPLE_ARGS="--epochs 2")
    assert code == 0, output
    assert_layout_shown(output, ["ps:0", "worker:0", "worker:1"])
    accuracies = re.findall(r"worker \d: global step \d+, test accuracy (\d\.\d+)", output)
    assert len(accuracies) == 2 and min(map(float, accuracies)) > 0.8, output


@pytest.mark.parametrize("script,mode,roles", [
    ("allreduce.sbatch", "allreduce", ["worker:0", "worker:1", "worker:2"]),
    ("hybrid.sbatch", "hybrid", ["ps:0", "worker:0", "worker:1"]),
])
def test_embedding_scripts_train_in_their_mode(slurm, script, mode, roles):
    code, output = slurm.sbatch(SCRIPTS / script, *TINY,
                                EXAMPLE_ARGS="--vocab 5000 --steps 30")
    assert code == 0, output
    assert_layout_shown(output, roles)
    found = re.search(rf"^{mode}: [\d.]+ steps/s .* test loss ([\d.]+) -> ([\d.]+)$",
                      output, re.M)
    assert found and float(found[2]) < float(found[1]), output


def test_mpiflow_launch_under_sbatch_export_none_gives_the_ranks_its_settings(slurm, tmp_path):
    # sbatch --export=NONE (a common site policy) makes srun give the tasks no variables
    # of the script's: the ranks lost --ps (and their line to the launch).
    script = tmp_path / "launch.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f"export PYTHONPATH={REPO_ROOT}\n"
        f"{sys.executable} -m mpiflow launch --ps 2 --launcher-args=--mpi=pmi2 "
        f"{sys.executable} -m mpiflow info\n")
    code, output = slurm.sbatch(script, *TINY, "--export=NONE")
    assert code == 0, output
    untagged = re.sub(r"^\[rank \d+\] ", "", output, flags=re.MULTILINE)
    assert_layout_shown(untagged, ["ps:0", "ps:1", "worker:0"])
    assert "MPIFLOW_LAUNCH_ADDRESS=" in untagged, output
