#!/usr/bin/env bash
# The GPU check of mpiflow, in a few minutes on a machine with a GPU: what the rank binds,
# the GPU test suite (every op and gradient on cupy vs numpy, fused optimizer updates,
# training parity, ps with GPU workers and allreduce mode under mpiexec, NCCL, fused
# elementwise chains), then the GPU step benchmark and the per-op-type GPU time profile. Logs go to $GPU_CHECK_OUT (default: ./gpu_check_out).
#
#   bash benchmarks/gpu_check.sh            # PYTHON=... to pick the interpreter
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${GPU_CHECK_OUT:-gpu_check_out}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0

echo "== binding (python -m mpiflow.info under mpiexec -n 2)"
timeout 120 mpiexec -n 2 "$PY" -m mpiflow.info 2>&1 | tee "$OUT_DIR/info.txt" || status=1

echo "== GPU tests"
timeout ${GPU_TEST_TIMEOUT:-420} "$PY" -m pytest -q -p no:cacheprovider -o addopts="" --timeout 200 \
    -rs tests/gpu "tests/comm/test_collectives.py::test_nccl_runs_the_same_cases_on_gpu_arrays" \
    2>&1 | tee "$OUT_DIR/tests.txt" | tail -40
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== GPU step benchmark"
timeout 240 "$PY" benchmarks/gpu_step.py --steps ${GPU_BENCH_STEPS:-30} --repeats 3 2>&1 | tee "$OUT_DIR/bench.txt" \
    || status=1

echo "== GPU time per op type (traced steps), fusion on/off"
timeout 180 "$PY" benchmarks/gpu_profile.py --steps ${GPU_BENCH_STEPS:-30} 2>&1 \
    | tee "$OUT_DIR/profile.txt" || status=1
exit $status
