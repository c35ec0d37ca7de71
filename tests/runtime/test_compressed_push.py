"""Compressed gradients on the way to the ps (GradientCompressionOptimizer): half-float
pushes carry half the bytes and update within the half format's rounding of the
uncompressed step; top-k pushes carry 1% of the entries and their positions, and the
residual left on the worker is exactly what was not sent, added to the next gradient."""

import json
from pathlib import Path

import numpy as np
import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi
LR, SIZE = 0.1, 100 * 50


def _run(run_mpi, spec):
    out = run_mpi(2, PROGS / "compressed_push.py", spec, timeout=90).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _overhead(run_mpi):
    # What a push sends besides the gradient itself (headers, step messages), in the
    # second step (the first also registers the step's partition with the ps).
    base = _run(run_mpi, "none")
    return base["steps"][1]["sent"] - SIZE * 4, base


@pytest.mark.parametrize("spec,precision", [("fp16", 2.0 ** -11), ("bf16", 2.0 ** -8)])
def test_half_float_pushes_carry_half_the_bytes_within_the_formats_rounding(run_mpi, spec,
                                                                          precision):
    overhead, _ = _overhead(run_mpi)
    got = _run(run_mpi, spec)
    first = got["steps"][0]
    assert abs(got["steps"][1]["sent"] - overhead - SIZE * 2) < 64     # header names

    update = np.array(first["w"]) - np.array(got["w0"])
    exact = -LR * np.array(first["grad"], np.float32)
    np.testing.assert_allclose(update, exact, rtol=2 * precision, atol=1e-7)


def test_top_k_pushes_one_percent_and_keeps_the_rest_exactly(run_mpi):
    overhead, _ = _overhead(run_mpi)
    got = _run(run_mpi, "topk:0.01")
    k = 50                                              # ceil(1% of 5000)
    residual = np.zeros(SIZE, np.float32)
    w = np.array(got["w0"], np.float32)
    assert got["steps"][1]["sent"] - overhead <= k * (4 + 8) + 64     # values, positions
    for step in got["steps"]:
        total = np.array(step["grad"], np.float32) + residual
        order = np.lexsort((np.arange(SIZE), -np.abs(total)))     # |x| down, then position
        picked = np.sort(order[:k])
        residual = total.copy()
        residual[picked] = 0
        np.testing.assert_array_equal(np.array(step["residual"], np.float32), residual)
        update = np.zeros(SIZE, np.float32)
        update[picked] = total[picked]
        w = w - np.float32(LR) * update
        np.testing.assert_allclose(np.array(step["w"]), w, rtol=1e-6)
