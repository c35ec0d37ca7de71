"""On a GPU, elementwise chains run as one ``cupy.fuse`` kernel: every fusable op's
formula fuses (no group falls back to one kernel per op) and the fused plan computes
what the CPU computes."""

from __future__ import annotations

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.runtime import kernel_fusion

GPU = "/device:GPU:0"

# Chains of each fusable op family, each applied to the output of a bias_add and fed
# into a sum: the forward chain and its gradient form groups on the GPU.
CHAINS = {
    "relu": mf.nn.relu,
    "relu6": mf.nn.relu6,
    "leaky_relu": lambda h: mf.nn.leaky_relu(h, 0.1),
    "elu": mf.nn.elu,
    "sigmoid": mf.sigmoid,
    "tanh": mf.tanh,
    "softplus": mf.nn.softplus,
    "arithmetic": lambda h: mf.square(h) * 0.5 - mf.abs(h) / 3.0 + mf.maximum(h, 0.25),
    "unary": lambda h: mf.exp(-mf.square(h)) + mf.log1p(mf.abs(h)) + mf.sqrt(mf.abs(h)),
    "squared_difference": lambda h: mf.squared_difference(h, 0.5) + mf.reciprocal(
        mf.abs(h) + 1.0),
    "add_n": lambda h: mf.add_n([h * 2.0, mf.sigmoid(h), mf.tanh(h)]),
}


def _run(chain, device, dtype):
    graph = mf.Graph()
    rng = np.random.default_rng(3)
    x_value = rng.standard_normal((64, 33)).astype(dtype)
    with graph.as_default(), mf.device(device):
        x = mf.placeholder(mf.as_dtype(dtype), [64, 33])
        b = mf.Variable(rng.standard_normal(33).astype(dtype))
        out = chain(mf.nn.bias_add(x, b))
        loss = mf.reduce_sum(out * out)
        grads = mf.gradients(loss, [x, b])
        init = mf.global_variables_initializer()
    with mf.Session(graph=graph) as sess:
        sess.run(init)
        return sess.run([out] + grads, {x: x_value})


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_chain_runs_fused_on_the_gpu_and_matches_the_cpu(name, dtype, monkeypatch):
    groups = []
    real_init = kernel_fusion.FusedGroup.__init__

    def record(self, *args):
        real_init(self, *args)
        groups.append(self)
    monkeypatch.setattr(kernel_fusion.FusedGroup, "__init__", record)
    got = _run(CHAINS[name], GPU, dtype)
    assert groups, f"{name}: no fused group was formed on the GPU"
    fell_back = [g.name for g in groups if g._broken]
    assert not fell_back, f"{name}: groups ran unfused: {fell_back}"
    monkeypatch.setattr(kernel_fusion.FusedGroup, "__init__", real_init)
    want = _run(CHAINS[name], "/device:CPU:0", dtype)
    tolerance = 2e-5 if dtype == np.float32 else 1e-10
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance,
                                   err_msg=f"{name}: value {k}")


@pytest.mark.gpu
def test_fusion_off_runs_one_kernel_per_op(monkeypatch):
    monkeypatch.setenv("MPIFLOW_FUSE_ELEMENTWISE", "0")
    built = []
    monkeypatch.setattr(kernel_fusion.FusedGroup, "__init__",
                        lambda self, *args: built.append(args))
    values = _run(CHAINS["tanh"], GPU, np.float32)
    assert not built
    assert np.isfinite(values[0]).all()
