"""How fast does a training step run on a GPU through mpiflow, against the same step
hand-written in cupy in this same process?

Models: an MLP 784-2048-2048-10 at batch 1024 (ReLU, sparse softmax cross-entropy) and a
small CNN (conv 3x3 1->32, ReLU, max-pool 2, conv 3x3 32->64, ReLU, dense -> 10) at batch
256, both trained by SGD in float32. Each step takes its batch from host memory, in both
versions. Prints steps/s of each, the time ratio mpiflow / hand-written (target <= 1.2)
and the peak of cupy's memory pool during each run.

Usage: python benchmarks/gpu_step.py [--steps 50] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import mpiflow as mf
from mpiflow import backend

LR = 0.01


def _cupy():
    return backend.array_module("/device:GPU:0")


def _glorot(rng, *shape):
    fan_in, fan_out = int(np.prod(shape[:-1])), shape[-1]
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


# -- MLP --------------------------------------------------------------------------------

MLP_SIZES = (784, 2048, 2048, 10)


def mlp_params(seed=0):
    rng = np.random.default_rng(seed)
    return [p for a, b in zip(MLP_SIZES[:-1], MLP_SIZES[1:])
            for p in (_glorot(rng, a, b), np.zeros(b, np.float32))]


def mlp_batch(batch, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, MLP_SIZES[0])).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def mlp_graph(params, batch):
    graph = mf.Graph()
    with graph.as_default(), mf.device("/device:GPU:0"):
        x = mf.placeholder(mf.float32, [batch, MLP_SIZES[0]])
        y = mf.placeholder(mf.int64, [batch])
        variables = [mf.Variable(p) for p in params]
        h = x
        for i in range(0, len(variables), 2):
            h = mf.matmul(h, variables[i]) + variables[i + 1]
            if i + 2 < len(variables):
                h = mf.nn.relu(h)
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=h))
        train = mf.train.GradientDescentOptimizer(LR).minimize(loss)
        init = mf.global_variables_initializer()
    return graph, init, train, loss, x, y, variables


def _xent_grad(cp, logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = cp.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = -cp.log(probs[cp.arange(len(labels)), labels]).mean()
    probs[cp.arange(len(labels)), labels] -= 1
    return loss, probs / len(labels)


def mlp_cupy_step(cp, params, x_host, y_host):
    """One SGD step of the MLP, written with cupy array calls."""
    x, y = cp.asarray(x_host), cp.asarray(y_host)
    acts, h = [x], x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = cp.maximum(h, 0)
        acts.append(h)
    loss, g = _xent_grad(cp, h, y)
    for i in range(len(params) - 2, -1, -2):
        inp = acts[i // 2]
        gw, gb = inp.T @ g, g.sum(axis=0)
        if i:
            g = (g @ params[i].T) * (inp > 0)
        params[i] -= LR * gw
        params[i + 1] -= LR * gb
    return loss


# -- CNN ----------------------------------------------------------------------------------

def cnn_params(seed=0):
    rng = np.random.default_rng(seed)
    return [_glorot(rng, 3, 3, 1, 32), np.zeros(32, np.float32),
            _glorot(rng, 3, 3, 32, 64), np.zeros(64, np.float32),
            _glorot(rng, 11 * 11 * 64, 10), np.zeros(10, np.float32)]


def cnn_batch(batch, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 28, 28, 1)).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def cnn_graph(params, batch):
    graph = mf.Graph()
    with graph.as_default(), mf.device("/device:GPU:0"):
        x = mf.placeholder(mf.float32, [batch, 28, 28, 1])
        y = mf.placeholder(mf.int64, [batch])
        f1, b1, f2, b2, w, b = variables = [mf.Variable(p) for p in params]
        h = mf.nn.relu(mf.nn.bias_add(mf.nn.conv2d(x, f1, [1, 1, 1, 1], "VALID"), b1))
        h = mf.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
        h = mf.nn.relu(mf.nn.bias_add(mf.nn.conv2d(h, f2, [1, 1, 1, 1], "VALID"), b2))
        logits = mf.matmul(mf.reshape(h, [batch, 11 * 11 * 64]), w) + b
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = mf.train.GradientDescentOptimizer(LR).minimize(loss)
        init = mf.global_variables_initializer()
    return graph, init, train, loss, x, y, variables


def _windows(cp, x, k):
    """[N, OH, OW, k, k, C] view of ``x`` (VALID, stride 1)."""
    n, h, w, c = x.shape
    s = x.strides
    return cp.lib.stride_tricks.as_strided(
        x, (n, h - k + 1, w - k + 1, k, k, c), (s[0], s[1], s[2], s[1], s[2], s[3]))


def _conv(cp, x, f):
    n, h, w, c = x.shape
    k, o = f.shape[0], f.shape[3]
    cols = cp.ascontiguousarray(_windows(cp, x, k)).reshape(-1, k * k * c)
    return (cols @ f.reshape(-1, o)).reshape(n, h - k + 1, w - k + 1, o), cols


def _conv_backward(cp, x_shape, f, cols, g, input_grad=True):
    """Gradients of a VALID stride-1 conv: (input, filter) from the output gradient."""
    k, c, o = f.shape[0], f.shape[2], f.shape[3]
    g2 = g.reshape(-1, o)
    gf = (cols.T @ g2).reshape(f.shape)
    if not input_grad:
        return None, gf
    gcols = (g2 @ f.reshape(-1, o).T).reshape(g.shape[:3] + (k, k, c))
    gx = cp.zeros(x_shape, g.dtype)
    oh, ow = g.shape[1], g.shape[2]
    for i in range(k):
        for j in range(k):
            gx[:, i:i + oh, j:j + ow, :] += gcols[:, :, :, i, j, :]
    return gx, gf


def _bias_grad(cp, g):
    """Channel sums of an NHWC gradient as ones @ [rows, channels]: cupy's
    ``g.sum(axis=(0, 1, 2))`` takes 20x longer on these shapes (1.7 ms against 74 us for
    [256, 26, 26, 32] on an H200), which would flatter mpiflow (it uses the product)."""
    rows = g.reshape(-1, g.shape[-1])
    return cp.ones(rows.shape[0], g.dtype) @ rows


def cnn_cupy_step(cp, params, x_host, y_host):
    """One SGD step of the CNN, written with cupy array calls (im2col convolutions)."""
    f1, b1, f2, b2, w, b = params
    x, y = cp.asarray(x_host), cp.asarray(y_host)
    n = x.shape[0]
    c1, cols1 = _conv(cp, x, f1)
    a1 = cp.maximum(c1 + b1, 0)
    blocks = a1.reshape(n, 13, 2, 13, 2, 32)
    p1 = blocks.max(axis=(2, 4))
    c2, cols2 = _conv(cp, p1, f2)
    a2 = cp.maximum(c2 + b2, 0)
    flat = a2.reshape(n, -1)
    loss, g = _xent_grad(cp, flat @ w + b, y)
    gw, gb = flat.T @ g, g.sum(axis=0)
    ga2 = (g @ w.T).reshape(a2.shape) * (a2 > 0)
    gp1, gf2 = _conv_backward(cp, p1.shape, f2, cols2, ga2)
    mask = blocks == p1[:, :, None, :, None, :]
    ga1 = (mask * gp1[:, :, None, :, None, :]).reshape(a1.shape) * (a1 > 0)
    _, gf1 = _conv_backward(cp, x.shape, f1, cols1, ga1, input_grad=False)
    for p, gp in ((f1, gf1), (b1, _bias_grad(cp, ga1)), (f2, gf2),
                  (b2, _bias_grad(cp, ga2)), (w, gw), (b, gb)):
        p -= LR * gp
    return loss


# -- timing ---------------------------------------------------------------------------------

def _timed(run, steps, repeats):
    """Median seconds per step over ``repeats`` runs of ``steps`` steps (GPU drained)."""
    run(3)
    backend.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(steps)
        backend.synchronize()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def _pool_peak(cp, run):
    """Bytes cupy's pool holds after ``run`` from an empty pool (its high-water mark:
    the pool keeps every block it was asked for)."""
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    run(2)
    backend.synchronize()
    return pool.total_bytes()


def compare(name, make_params, make_batch, make_graph, cupy_step, batch, steps, repeats):
    cp = _cupy()
    params = make_params()
    xb, yb = make_batch(batch)
    graph, init, train, loss, x, y, variables = make_graph(params, batch)
    sess = mf.Session(graph=graph)
    sess.run(init)
    feed = {x: xb, y: yb}

    def run_mpiflow(n):
        for _ in range(n):
            sess.run(train, feed)

    device_params = [cp.asarray(p) for p in params]

    def run_cupy(n):
        for _ in range(n):
            cupy_step(cp, device_params, xb, yb)

    # Both versions first take one step from the same start: the losses must agree.
    first_mf = float(sess.run(loss, feed))
    first_cp = float(cupy_step(cp, [cp.asarray(p) for p in params], xb, yb))
    mf_s = _timed(run_mpiflow, steps, repeats)
    cp_s = _timed(run_cupy, steps, repeats)
    peak_mf = _pool_peak(cp, run_mpiflow)
    peak_cp = _pool_peak(cp, run_cupy)
    sess.close()
    return {"model": name, "batch": batch, "mpiflow_steps_per_s": 1 / mf_s,
            "cupy_steps_per_s": 1 / cp_s, "ratio": mf_s / cp_s,
            "mpiflow_peak_mib": peak_mf / 2**20, "cupy_peak_mib": peak_cp / 2**20,
            "first_loss_mpiflow": first_mf, "first_loss_cupy": first_cp}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not backend.gpu_available():
        raise SystemExit(f"gpu_step: no GPU here ({backend.gpu_reason()})")
    cp = _cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    results = [
        compare("mlp 784-2048-2048-10", mlp_params, mlp_batch, mlp_graph, mlp_cupy_step,
                1024, args.steps, args.repeats),
        compare("cnn conv32-pool-conv64-dense", cnn_params, cnn_batch, cnn_graph,
                cnn_cupy_step, 256, args.steps, args.repeats),
    ]
    if args.json:
        print(json.dumps(results))
        return
    print(f"device: {props['name'].decode()}; float32 SGD; batch from host memory each step")
    print(f"{'model':<30} {'batch':>5} {'mpiflow/s':>10} {'cupy/s':>8} {'ratio':>6} "
          f"{'peak MiB mf':>11} {'cupy':>7} {'loss mf':>9} {'cupy':>9}")
    for r in results:
        print(f"{r['model']:<30} {r['batch']:>5} {r['mpiflow_steps_per_s']:>10.1f} "
              f"{r['cupy_steps_per_s']:>8.1f} {r['ratio']:>6.2f} {r['mpiflow_peak_mib']:>11.0f} "
              f"{r['cupy_peak_mib']:>7.0f} {r['first_loss_mpiflow']:>9.5f} "
              f"{r['first_loss_cupy']:>9.5f}")
    print("target: ratio <= 1.2 (mpiflow time per step over hand-written cupy)")


if __name__ == "__main__":
    main()
