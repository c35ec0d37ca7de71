"""Every op on a GPU (cupy) computes what it computes on the CPU (numpy): forward values
and gradients of every op test module's gradient cases, forward values of the ops with
no gradient, each optimizer's fused update, float16 and bfloat16 matmul accumulation, and a
training run. Inputs are fed from the host, so every case also crosses host -> GPU -> host."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mpiflow as mf
from mpiflow.gradients import densify
from mpiflow.ops.registry import registered_op_types
from tests.gpu import gpu_cases

needs_gpu = pytest.mark.gpu
GPU = "/device:GPU:0"
BF16 = np.dtype(ml_dtypes.bfloat16)


def _evaluate(build, inputs, device, with_gradients):
    """Run ``build`` with its ops on ``device``; return (outputs, gradients, op types)."""
    graph = mf.Graph()
    with graph.as_default():
        phs = [mf.placeholder(mf.as_dtype(np.asarray(v).dtype), np.shape(v), name=f"in{i}")
               for i, v in enumerate(inputs)]
        before = len(graph.get_operations())
        with mf.device(device):
            out = build(*phs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            grads, weights = [], None
            if with_gradients:
                # The loss weighs each output element by a fixed random number; an output
                # whose shape is known only at run time gets its weights fed, once a
                # forward run has told that shape.
                wrt = [p for p, v in zip(phs, inputs) if np.asarray(v).dtype.kind == "f"]
                weights = mf.placeholder(outs[0].dtype, outs[0].shape, name="loss_weights")
                loss = mf.reduce_sum(outs[0] * weights)
                grads = [densify(g) for g in mf.gradients(loss, wrt) if g is not None]
            init = mf.global_variables_initializer()
        ops = graph.get_operations()[before:]
        with mf.Session(graph=graph) as sess:
            sess.run(init)
            feed = dict(zip(phs, inputs))
            if weights is not None:
                shape = weights.shape.as_list() if weights.shape.is_fully_defined() else \
                    np.shape(sess.run(outs[0], feed))
                feed[weights] = np.random.default_rng(1).standard_normal(shape).astype(
                    weights.dtype.np_dtype)
            values = sess.run(list(outs) + grads, feed)
    return values[:len(outs)], values[len(outs):], ops


def _compare(name, build, inputs, with_gradients, rtol=1e-7, atol=1e-9):
    want, want_grads, _ = _evaluate(build, inputs, "/device:CPU:0", with_gradients)
    got, got_grads, ops = _evaluate(build, inputs, GPU, with_gradients)
    # Ops colocated with an input (embedding lookups with their table) stay with it.
    on_gpu = [op.name for op in ops if "GPU" not in op.device and not any(
        g != f"loc:@{op.name}" for g in op.colocation_groups())]
    assert not on_gpu, f"{name}: ops not placed on the GPU: {on_gpu}"
    assert len(got_grads) == len(want_grads)
    for k, (g, w) in enumerate(zip(got + got_grads, want + want_grads)):
        what = f"{name}: {'output' if k < len(got) else 'gradient'} {k}"
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}: {g.dtype}{g.shape} vs " \
            f"{w.dtype}{w.shape}"
        if g.dtype == BF16:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=what)
        elif g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


@needs_gpu
@pytest.mark.parametrize("case", gpu_cases.grad_cases(), ids=repr)
def test_op_and_its_gradient_on_gpu_equal_cpu(case):
    _compare(case.name, case.build, case.inputs, with_gradients=True)


@needs_gpu
@pytest.mark.parametrize("name", sorted(gpu_cases.FORWARD_CASES))
def test_op_without_gradient_on_gpu_equals_cpu(name):
    build, inputs = gpu_cases.FORWARD_CASES[name]
    # bfloat16: one ulp (2**-7 relative) where the GPU rounds a float32 value differently.
    tol = {"rtol": 8e-3, "atol": 8e-3} if "bfloat16" in name else \
        {"rtol": 2e-3, "atol": 2e-3} if "float16" in name else \
        {"rtol": 1e-5, "atol": 1e-6} if "float32" in name else {}
    _compare(name, build, inputs, with_gradients=False, **tol)


def test_every_op_type_runs_on_a_gpu_in_some_case_or_says_why_not():
    covered = set()

    def note(build, inputs):
        graph = mf.Graph()
        with graph.as_default():
            phs = [mf.placeholder(mf.as_dtype(np.asarray(v).dtype), np.shape(v))
                   for v in inputs]
            out = build(*phs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            mf.gradients(mf.reduce_sum(mf.cast(outs[0], mf.float64)),
                         [p for p in phs if p.dtype.is_floating])
        covered.update(op.type for op in graph.get_operations())

    for case in gpu_cases.grad_cases():
        note(case.build, case.inputs)
    for build, inputs in gpu_cases.FORWARD_CASES.values():
        note(build, inputs)
    for optimizer in gpu_cases.OPTIMIZERS.values():
        for sparse in (False, True):
            graph = gpu_cases.build_training("", optimizer, sparse=sparse)[0]
            covered.update(op.type for op in graph.get_operations())
    missing = sorted(set(registered_op_types()) - covered - set(gpu_cases.NOT_RUN_ON_GPU))
    assert not missing, f"op types no GPU case runs: {missing}"


def test_the_comparison_takes_every_case_on_the_cpu():
    """The comparison's own steps (feeds, the weighted loss, its gradients) run every case
    here, so that a machine without a GPU finds a case they cannot take before a GPU run
    does: an output whose shape is known only at run time once failed there alone."""
    for case in gpu_cases.grad_cases():
        _evaluate(case.build, case.inputs, "/device:CPU:0", with_gradients=True)
    for build, inputs in gpu_cases.FORWARD_CASES.values():
        _evaluate(build, inputs, "/device:CPU:0", with_gradients=False)


@needs_gpu
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("optimizer", sorted(gpu_cases.OPTIMIZERS))
def test_fused_optimizer_updates_on_gpu_equal_cpu(optimizer, sparse):
    make = gpu_cases.OPTIMIZERS[optimizer]
    want_loss, want = gpu_cases.train_and_read("/device:CPU:0", make, sparse=sparse)
    got_loss, got = gpu_cases.train_and_read(GPU, make, sparse=sparse)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-9, atol=1e-12)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


@needs_gpu
def test_float32_training_run_on_gpu_matches_cpu():
    make = gpu_cases.OPTIMIZERS["adam"]
    want_loss, want = gpu_cases.train_and_read("/device:CPU:0", make, steps=30,
                                               dtype=np.float32)
    got_loss, got = gpu_cases.train_and_read(GPU, make, steps=30, dtype=np.float32)
    assert got_loss[-1] < got_loss[0]
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-4)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


@needs_gpu
def test_float16_matmul_accumulates_in_float32():
    # K = 8192 products of values in [0, 1): summed in float16 the running sum (about
    # 2000) has a spacing of 2, so the error would be hundreds of ulps of the result;
    # summed in float32 and rounded once, it is within one float16 ulp.
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, (16, 8192)).astype(np.float16)
    b = rng.uniform(0, 1, (8192, 8)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    graph = mf.Graph()
    with graph.as_default(), mf.device(GPU):
        out = mf.matmul(mf.constant(a), mf.constant(b))
        with mf.Session() as sess:
            got = sess.run(out)
    assert got.dtype == np.float16
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.max(np.abs(got.astype(np.float64) - exact) / ulp) <= 1.0


@needs_gpu
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_bfloat16_training_run_on_gpu_matches_cpu(optimizer):
    # Forward, gradients and fused updates in bfloat16 on both devices: the same values to
    # a few bfloat16 roundings (2**-8 relative each), and the GPU keeps the dtype.
    make = gpu_cases.OPTIMIZERS[optimizer]
    want_loss, want = gpu_cases.train_and_read("/device:CPU:0", make, steps=10, dtype=BF16)
    got_loss, got = gpu_cases.train_and_read(GPU, make, steps=10, dtype=BF16)
    assert all(np.asarray(v).dtype == BF16 for v in got + got_loss)
    assert float(got_loss[-1]) < float(got_loss[0])
    np.testing.assert_allclose(np.asarray(got_loss, np.float64),
                               np.asarray(want_loss, np.float64), rtol=3e-2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=5e-2,
                                   atol=5e-2)


@needs_gpu
@pytest.mark.parametrize("shapes", [((16, 4096), (4096, 8)), ((3, 16, 1024), (3, 1024, 8)),
                                    ((3, 16, 1024), (1024, 8))], ids=["2d", "batched", "3d@2d"])
def test_bfloat16_matmul_on_gpu_equals_the_float32_accumulated_cpu_result(shapes):
    # cupy hands 2-D bfloat16 to cuBLAS with float32 compute (batched ones go through
    # float32); on the CPU numpy sums the products in float32 too (accumulating_dtype). Each
    # rounds a float32 sum once, so both are within an ulp of the exact product and of each
    # other (the sums' order differs).
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shapes[0]).astype(BF16)
    b = rng.standard_normal(shapes[1]).astype(BF16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = {}
    for device in ("/device:CPU:0", GPU):
        graph = mf.Graph()
        with graph.as_default(), mf.device(device):
            out = mf.matmul(mf.constant(a), mf.constant(b))
            with mf.Session() as sess:
                got[device] = sess.run(out)
    cpu, gpu = got["/device:CPU:0"], got[GPU]
    assert cpu.dtype == gpu.dtype == BF16
    ulp = 2.0 ** (np.floor(np.log2(np.abs(exact))) - ml_dtypes.finfo(BF16).nmant)
    for name, value in (("cpu", cpu), ("gpu", gpu)):
        error = np.abs(value.astype(np.float64) - exact) / ulp
        assert error.max() <= 1.0, f"{name}: {error.max():.2f} ulp from the exact product"
    assert (np.abs(gpu.astype(np.float64) - cpu.astype(np.float64)) / ulp).max() <= 1.0


@needs_gpu
def test_gpu_tensors_cross_to_host_ops_and_back():
    """An op without a GPU kernel (or a CPU-placed op) between GPU ops gets copies."""
    graph = mf.Graph()
    with graph.as_default():
        x = mf.placeholder(mf.float32, [4])
        with mf.device(GPU):
            a = x * 2.0
        with mf.device("/device:CPU:0"):
            b = a + 1.0
        with mf.device(GPU):
            c = mf.reshape(b * a, mf.shape(b))       # host shape input, GPU data
        with mf.Session() as sess:
            got = sess.run([a, b, c], {x: np.arange(4, dtype=np.float32)})
    np.testing.assert_allclose(got[2], (np.arange(4) * 2 + 1) * np.arange(4) * 2)
    assert all(isinstance(v, np.ndarray) for v in got)


@needs_gpu
def test_sparse_softmax_labels_out_of_range_give_nan_on_gpu_as_tensorflow():
    graph = mf.Graph()
    with graph.as_default(), mf.device(GPU):
        logits = mf.constant(np.zeros((3, 4), np.float32))
        loss = mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=mf.constant(np.array([1, 4, -1])), logits=logits)
        with mf.Session() as sess:
            got = sess.run(loss)
    assert np.isclose(got[0], np.log(4)) and np.isnan(got[1]) and np.isnan(got[2])
