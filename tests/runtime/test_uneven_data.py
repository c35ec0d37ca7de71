"""Uneven data (mf.train.join, as Horovod's hvd.join): a worker whose batches run out
joins and the others go on stepping, each step averaging the gradients of the workers
still training (allreduce: the joined one contributes zeros; synchronous ps: the ps
counts it out); every worker ends with the same variables, equal to a reference that
drops the joined worker's missing batches."""

import json
from pathlib import Path

import numpy as np
import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi


def _gradient(w, xb, yb):
    xb, yb = np.asarray(xb, np.float64), np.asarray(yb, np.float64)
    return 2.0 / len(yb) * xb.T @ (xb @ w - yb)


def _reference(workers, steps):
    """Momentum(0.05, 0.9) on the average of the gradients of the workers with a batch
    left, step after step."""
    w, accum = np.full(5, 0.5), np.zeros(5)
    for i in range(max(steps)):
        grads = [_gradient(w, *r["batches"][i]) for r in workers if i < len(r["batches"])]
        accum = 0.9 * accum + np.mean(grads, axis=0)
        w = w - 0.05 * accum
    return w


# hooks: the session's progress lines, summaries and StopAtStepHook, none of which join
# may run (their fetches read the input that ran out); mode: TrainingMode(joinable=True).
HOOKS = {"MPIFLOW_PROGRESS": "lines", "MPIFLOW_PROGRESS_INTERVAL_S": "0.001",
         "UNEVEN_HOOKS": "1"}


@pytest.mark.parametrize("steps, env", [
    ((10, 3), {}), ((4, 4), {}), ((10, 3), HOOKS), ((3, 10), HOOKS),
    ((10, 3), {"UNEVEN_BUILD": "mode"})], ids=["10-3", "4-4", "10-3-hooks", "3-10-hooks",
                                                "10-3-training-mode"])
def test_a_worker_out_of_data_joins_and_the_others_train_on(run_mpi, tmp_path, steps, env):
    run_mpi(2, PROGS / "uneven_data.py", tmp_path, *steps, timeout=120, env=env)
    workers = [json.loads((tmp_path / f"task{t}.json").read_text()) for t in range(2)]
    longest = max(steps)
    for t, r in enumerate(workers):
        # the steps it trained, its join steps matching the others', and the last one
        # every worker makes together with nothing to apply
        assert len(r["batches"]) == steps[t] and r["join_steps"] == longest - steps[t] + 1
        assert r["step"] == longest
    np.testing.assert_array_equal(workers[0]["w"], workers[1]["w"])
    np.testing.assert_allclose(workers[0]["w"], _reference(workers, steps), rtol=1e-5)


@pytest.mark.parametrize("steps", [(10, 3), (3, 10)])
def test_in_synchronous_ps_training_a_worker_out_of_data_leaves_the_others_training(
        run_mpi, tmp_path, steps):
    # The chief (worker 0) finishing first keeps its sync loop going for the other.
    run_mpi(3, PROGS / "uneven_sync.py", tmp_path, *steps, timeout=120)
    workers = [json.loads((tmp_path / f"task{t}.json").read_text()) for t in range(2)]
    for r in workers:
        assert r["step"] == max(steps)
    np.testing.assert_array_equal(workers[0]["w"], workers[1]["w"])
    np.testing.assert_allclose(workers[0]["w"], _reference(workers, steps), rtol=1e-5)


def _adam_reference(batches, lr=0.05, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """uneven_hybrid.py's model trained in one process on ``batches`` with Adam (TF1's:
    a sparse gradient as its densified one)."""
    params = {"w": np.full(5, 0.5), "table": np.arange(30.0).reshape(10, 3) / 20.0}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for t, (xb, idb, yb) in enumerate(batches, start=1):
        xb, idb, yb = np.asarray(xb, np.float64), np.asarray(idb), np.asarray(yb, np.float64)
        residual = xb @ params["w"] + params["table"][idb].sum(axis=1) - yb
        grads = {"w": 2.0 / len(yb) * xb.T @ residual, "table": np.zeros((10, 3))}
        np.add.at(grads["table"], idb, (2.0 / len(yb) * residual)[:, None])
        rate = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        for k, g in grads.items():
            m[k] = beta1 * m[k] + (1 - beta1) * g
            v[k] = beta2 * v[k] + (1 - beta2) * g * g
            params[k] = params[k] - rate * m[k] / (np.sqrt(v[k]) + epsilon)
    return params


@pytest.mark.parametrize("steps", [(4, 0), (0, 4)], ids=["chief-trains", "chief-joins"])
def test_in_hybrid_mode_a_joined_worker_leaves_the_tables_on_the_ps_alone(run_mpi, tmp_path,
                                                                         steps):
    # One worker trains while the other has joined from the start: the model is the one
    # process's on the batches of the worker that trained, the table included (an empty
    # push applied would move every row of it: Adam decays all of its moments).
    run_mpi(3, PROGS / "uneven_hybrid.py", tmp_path, *steps, timeout=120,
            env={"MPIFLOW_PS": "1"})
    workers = [json.loads((tmp_path / f"task{t}.json").read_text()) for t in range(2)]
    for t, r in enumerate(workers):
        assert r["join_steps"] == max(steps) - steps[t] + 1 and r["step"] == max(steps)
    np.testing.assert_array_equal(workers[0]["w"], workers[1]["w"])
    np.testing.assert_array_equal(workers[0]["table"], workers[1]["table"])
    trained = workers[steps.index(max(steps))]["batches"]
    expected = _adam_reference(trained)
    np.testing.assert_allclose(workers[0]["w"], expected["w"], rtol=1e-5)
    np.testing.assert_allclose(workers[0]["table"], expected["table"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compression", ["fp16", "topk:0.4"])
def test_a_joined_worker_keeps_step_with_compressed_gradients_too(run_mpi, tmp_path,
                                                                  compression):
    # Its fed zeros take other roads through the graph than the others' gradients: the
    # collectives still pair up (they are chained), and the replicas still agree.
    run_mpi(2, PROGS / "uneven_data.py", tmp_path, 6, 2, compression, timeout=120)
    workers = [json.loads((tmp_path / f"task{t}.json").read_text()) for t in range(2)]
    assert [r["join_steps"] for r in workers] == [1, 5] and workers[0]["step"] == 6
    np.testing.assert_array_equal(workers[0]["w"], workers[1]["w"])


@pytest.mark.parametrize("mode, ps", [("allreduce", 0), ("hybrid", 1)])
def test_where_steps_run_collectives_a_join_without_a_joinable_optimizer_is_refused(
        run_mpi, mode, ps):
    # ps training's join (serving) would leave the others waiting in their allreduce.
    out = run_mpi(2 + ps, PROGS / "uneven_collectives.py", mode, "join", check=False,
                  timeout=60, env={"MPIFLOW_PS": str(ps), "MPIFLOW_TIMEOUT": "100"})
    assert out.returncode != 0
    assert "mf.train.join: this graph's steps run collectives among the workers" in \
        out.stderr, out.stderr
    assert "waited" not in out.stderr, out.stderr


@pytest.mark.parametrize("mode, ps", [("allreduce", 0), ("hybrid", 1)])
def test_a_worker_serving_in_server_join_fails_the_others_collective_at_once(run_mpi,
                                                                            mode, ps):
    out = run_mpi(2 + ps, PROGS / "uneven_collectives.py", mode, "serve", check=False,
                  timeout=60, env={"MPIFLOW_PS": str(ps), "MPIFLOW_TIMEOUT": "100"})
    assert out.returncode != 0
    assert "cannot finish: worker task(s) 0 wait in server.join()" in out.stderr, out.stderr
    assert "joinable=True" in out.stderr and "waited" not in out.stderr, out.stderr
