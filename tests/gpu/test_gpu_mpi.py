"""GPU workers in MPI jobs: ps on CPUs with workers computing on their GPU (tensors cross
MPI staged through pinned host memory, or directly where MPI is CUDA-aware), and
allreduce mode with GPU workers; each equals one CPU process on the same seed. The ranks
of a one-GPU machine share it (binding: local rank % GPUs)."""

from pathlib import Path

import pytest

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
