"""bfloat16 on a GPU: each op family of the CPU bfloat16 tests keeps its dtype on cupy and
agrees with the host to bfloat16 precision, gradients included; the sparse updates that
cupy cannot do in bfloat16 (``add.at``) are done in float32 and rounded once."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mpiflow as mf
from mpiflow.gradients import densify
from tests.unit.test_bfloat16 import EPS, OPS

BF16 = np.dtype(ml_dtypes.bfloat16)
GPU = "/device:GPU:0"


def _close(got, want, what):
    assert got.dtype == want.dtype == BF16, f"{what}: {got.dtype} vs {want.dtype}"
    got, want = got.astype(np.float32), want.astype(np.float32)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=4 * EPS, atol=4 * EPS * scale, err_msg=what)


def _op_and_gradient(name, device, x_value, y_value):
    graph = mf.Graph()
    with graph.as_default(), mf.device(device):
        x, y = mf.constant(x_value), mf.constant(y_value)
        out = OPS[name](x, y)
        grads = [densify(g) for g in mf.gradients(mf.reduce_sum(out * out), [x])
                 if g is not None]
    with mf.Session(graph=graph) as sess:
        return sess.run([out] + grads)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(OPS))
def test_each_op_family_in_bfloat16_on_the_gpu_matches_the_host(name):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(BF16)
    y = rng.uniform(0.5, 2.0, (4, 6)).astype(BF16)
    got = _op_and_gradient(name, GPU, x, y)
    want = _op_and_gradient(name, "/device:CPU:0", x, y)
    for k, (g, w) in enumerate(zip(got, want)):
        _close(np.asarray(g), np.asarray(w), f"{name}: {'output' if k == 0 else 'gradient'}")


def _embedding_training(device, steps=3):
    rng = np.random.default_rng(2)
    table = (rng.standard_normal((10, 4)) * 0.5).astype(BF16)
    ids = np.array([1, 3, 1, 7, 3, 3])          # duplicates: summed gradients
    graph = mf.Graph()
    with graph.as_default(), mf.device(device):
        embedding = mf.Variable(table)
        rows = mf.gather(embedding, ids)
        loss = mf.reduce_sum(rows * rows)
        train = mf.train.GradientDescentOptimizer(0.25).minimize(loss)
        bumped = embedding.scatter_add(mf.IndexedSlices(
            mf.constant(np.ones((3, 4), BF16)), mf.constant([2, 2, 9])))
        init = mf.global_variables_initializer()
    with mf.Session(graph=graph) as sess:
        sess.run(init)
        for _ in range(steps):
            sess.run(train)
        return sess.run(bumped)


@pytest.mark.gpu
def test_sparse_updates_of_a_bfloat16_embedding_on_the_gpu_match_the_host():
    _close(_embedding_training(GPU), _embedding_training("/device:CPU:0"),
           "embedding after sparse SGD and scatter_add")
