"""Compressed allreduce (AllreduceOptimizer(compression=...)), through MPI's allreduce and
mpiflow's ring: half floats cross as half the bytes and the step is the uncompressed one
within the format's rounding; top-k sends each worker's 1% entries and positions to the
others, the residual it keeps is exactly what it did not send, and every worker applies
the same sum of everyone's top entries."""

import json
from pathlib import Path

import numpy as np
import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi
LR, SIZE, WORKERS = 0.1, 100 * 50, 2


def _run(run_mpi, tmp_path, algorithm, spec):
    out = tmp_path / spec.replace(":", "_")
    out.mkdir()
    run_mpi(WORKERS, PROGS / "compressed_allreduce.py", algorithm, spec, out, timeout=120)
    return [json.loads((out / f"task{t}.json").read_text()) for t in range(WORKERS)]


@pytest.mark.parametrize("algorithm", ["mpi", "ring"])
@pytest.mark.parametrize("spec,itemsize,precision", [("fp16", 2, 2.0 ** -11),
                                                     ("bf16", 2, 2.0 ** -8)])
def test_half_float_allreduce_carries_half_the_bytes_within_the_formats_rounding(
        run_mpi, tmp_path, algorithm, spec, itemsize, precision):
    workers = _run(run_mpi, tmp_path, algorithm, spec)
    for r in workers:
        # 2 (n-1)/n of the gradient's bytes each way, in the half format
        assert r["steps"][1]["sent"]["allreduce"] == 2 * (WORKERS - 1) * SIZE * itemsize \
            // WORKERS
    average = np.mean([np.array(r["steps"][0]["grad"], np.float32) for r in workers], 0)
    update = np.array(workers[0]["steps"][0]["w"]) - np.array(workers[0]["w0"])
    np.testing.assert_allclose(update, -LR * average, rtol=4 * precision,
                               atol=4 * precision * LR * np.abs(average).max())
    np.testing.assert_array_equal(workers[0]["steps"][1]["w"], workers[1]["steps"][1]["w"])


def test_top_k_allreduce_gathers_one_percent_and_keeps_the_rest_exactly(run_mpi, tmp_path):
    workers = _run(run_mpi, tmp_path, "mpi", "topk:0.01")
    k = 50
    residuals = [np.zeros(SIZE, np.float32) for _ in workers]
    w = np.array(workers[0]["w0"], np.float32)
    for step in range(2):
        summed = np.zeros(SIZE, np.float32)
        for t, r in enumerate(workers):
            assert r["steps"][step]["sent"]["allgather"] == (WORKERS - 1) * k * (4 + 8)
            total = np.array(r["steps"][step]["grad"], np.float32) + residuals[t]
            picked = np.sort(np.lexsort((np.arange(SIZE), -np.abs(total)))[:k])
            residuals[t] = total.copy()
            residuals[t][picked] = 0
            np.testing.assert_array_equal(np.array(r["steps"][step]["residual"]),
                                          residuals[t])
            np.add.at(summed, picked, total[picked])
        w = w - np.float32(LR) * (summed / np.float32(WORKERS))
        for r in workers:
            np.testing.assert_allclose(r["steps"][step]["w"], w, rtol=1e-6, atol=1e-7)
