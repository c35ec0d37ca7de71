"""GPU workers in MPI jobs: ps on CPUs with workers computing on their GPU (tensors cross
MPI staged through pinned host memory, or directly where MPI is CUDA-aware), and
allreduce mode with GPU workers; each equals one CPU process on the same seed. The ranks
of a one-GPU machine share it (binding: local rank % GPUs)."""

import json
import re
from pathlib import Path

import pytest

from tests.parity.test_mode_matrix import cases as matrix_cases
from tests.parity.test_mode_matrix import run_cases

PROGS = Path(__file__).resolve().parents[1] / "runtime" / "progs"
pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_ps_on_cpu_with_workers_on_gpu_equals_one_process(run_mpi, optimizer):
    out = run_mpi(2, PROGS / "ps_parity.py", optimizer, 6, "gpu", timeout=180).stdout
    assert out.count("OK parity") == 1, out


@pytest.mark.parametrize("algorithm", ["ring", "mpi"])
def test_allreduce_mode_with_gpu_workers_equals_one_process(run_mpi, algorithm):
    out = run_mpi(2, PROGS / "allreduce_parity.py", "adam", 4, algorithm, "gpu",
                  timeout=180).stdout
    assert out.count("OK allreduce") == 2, out


def test_broadcast_and_all_gather_in_a_graph_on_gpu_ranks(run_mpi):
    # Two ranks sharing one GPU: NCCL cannot run, so the kernels run on the host with
    # the tensors copied across; with a GPU each, NCCL runs them where they are.
    out = run_mpi(2, PROGS / "broadcast_inputs.py", "gpu", timeout=120).stdout
    assert sorted(re.findall(r"OK broadcast worker (\d)", out)) == ["0", "1"], out


@pytest.mark.parametrize("root", [0, 1])
def test_broadcast_variables_on_gpu_ranks_gives_every_rank_the_roots_values(run_mpi, root):
    # The variables live on the GPU: where NCCL cannot run (ranks share the GPU) the
    # broadcast stages each one through host memory and writes it back into its buffer.
    out = run_mpi(2, PROGS / "broadcast_variables.py", root, "gpu", timeout=120).stdout
    found = {r["task"]: r for r in map(json.loads, re.findall(r"BROADCAST (\{.*\})", out))}
    assert sorted(found) == [0, 1], out
    assert found[0]["before"] != found[1]["before"], out
    assert all(r["after"] == found[root]["before"] for r in found.values()), out


@pytest.mark.parametrize("num_ps,workers,modes", [
    (1, 1, ["ps", "sync", "allreduce", "hybrid"]),
    (1, 2, ["sync", "allreduce", "hybrid"]),
])
def test_every_mode_with_its_model_on_the_gpu_matches_the_cpu_reference(run_mpi, num_ps,
                                                                        workers, modes):
    """The differential matrix (tests/parity) with the model built under /device:GPU:0:
    each mode, optimizer, layout and kind of session against one CPU process."""
    run_cases(run_mpi, num_ps, workers,
              [f"{case}:gpu" for case in matrix_cases(modes, ["sgd", "adam"])])
