"""Where does a GPU training step of mpiflow spend its time? Per op type, from traced steps.

Runs the models of ``gpu_step.py`` (MLP 784-2048-2048-10 at batch 1024, small CNN at
batch 256). A traced step drains the GPU around each kernel (``RunOptions.FULL_TRACE``),
so each op's span is the GPU time it took; their sum is a little over an untraced step.
Prints, per model: untraced steps/s with elementwise fusion on and off and of the
hand-written cupy step, then the op types that take the most GPU time per step; then an
elementwise-heavy block with fusion on and off, and the bias-gradient reductions.

Usage: python benchmarks/gpu_profile.py [--steps 20] [--top 15] [mlp cnn fusion bias]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mpiflow as mf                 # noqa: E402
from mpiflow import backend          # noqa: E402
import gpu_step                      # noqa: E402

MODELS = {
    "mlp": (gpu_step.mlp_params, gpu_step.mlp_batch, gpu_step.mlp_graph,
            gpu_step.mlp_cupy_step, 1024),
    "cnn": (gpu_step.cnn_params, gpu_step.cnn_batch, gpu_step.cnn_graph,
            gpu_step.cnn_cupy_step, 256),
}


def _seconds_per_step(run, steps):
    run(3)
    backend.synchronize()
    start = time.perf_counter()
    run(steps)
    backend.synchronize()
    return (time.perf_counter() - start) / steps


def _session(make_params, make_batch, make_graph, batch):
    params = make_params()
    xb, yb = make_batch(batch)
    graph, init, train, loss, x, y, _ = make_graph(params, batch)
    sess = mf.Session(graph=graph)
    sess.run(init)
    return sess, train, {x: xb, y: yb}


def profile(name, steps, top):
    make_params, make_batch, make_graph, cupy_step, batch = MODELS[name]
    cp = backend.array_module("/device:GPU:0")
    timings = {}
    for fusion in ("1", "0"):
        os.environ["MPIFLOW_FUSE_ELEMENTWISE"] = fusion
        sess, train, feed = _session(make_params, make_batch, make_graph, batch)
        timings[fusion] = _seconds_per_step(
            lambda n: [sess.run(train, feed) for _ in range(n)], steps)
        if fusion == "1":
            per_type = collections.Counter()
            calls = collections.Counter()
            for _ in range(steps):
                metadata = mf.RunMetadata()
                sess.run(train, feed, options=mf.RunOptions(
                    trace_level=mf.RunOptions.FULL_TRACE), run_metadata=metadata)
                for event in metadata.step_stats:
                    kind = event["args"].get("type", event["cat"])
                    per_type[kind] += event["dur"] / 1e6 / steps
                    calls[kind] += 1 / steps
        sess.close()
    os.environ.pop("MPIFLOW_FUSE_ELEMENTWISE")
    params = [cp.asarray(p) for p in make_params()]
    xb, yb = make_batch(batch)
    cupy_s = _seconds_per_step(lambda n: [cupy_step(cp, params, xb, yb) for _ in range(n)],
                               steps)
    print(f"== {name} (batch {batch}): steps/s mpiflow fused {1 / timings['1']:.1f}, "
          f"unfused {1 / timings['0']:.1f}, hand-written cupy {1 / cupy_s:.1f}; ratio "
          f"fused/cupy {timings['1'] / cupy_s:.2f}, unfused/cupy {timings['0'] / cupy_s:.2f}")
    total = sum(per_type.values())
    print(f"   traced GPU ms per step: {total:.3f} (untraced step {timings['1'] * 1e3:.3f} ms;"
          f" hand-written {cupy_s * 1e3:.3f} ms)")
    for kind, ms in per_type.most_common(top):
        print(f"   {ms:8.3f} ms  {calls[kind]:5.1f} calls  {kind}")


def reduction_probe(steps):
    """Bias gradients of the CNN: cupy's sum over the leading axes against the product
    with a ones vector that BiasAddGrad uses on a GPU."""
    cp = backend.array_module("/device:GPU:0")
    for shape in ((256, 26, 26, 32), (256, 11, 11, 64)):
        g = cp.random.standard_normal(shape, dtype=cp.float32)
        rows = g.reshape(-1, shape[-1])
        sums = _seconds_per_step(lambda n: [g.sum(axis=(0, 1, 2)) for _ in range(n)], steps)
        gemv = _seconds_per_step(
            lambda n: [cp.ones(rows.shape[0], g.dtype) @ rows for _ in range(n)], steps)
        print(f"== bias gradient {shape}: sum over axes (0,1,2) {sums * 1e6:.1f} us, "
              f"ones @ g {gemv * 1e6:.1f} us")


def fusion_probe(steps):
    """An elementwise-heavy block (gated activation on [4096, 1024], as in a transformer's
    feed-forward) trained by SGD: steps/s and peak pool memory with fusion on and off."""
    cp = backend.array_module("/device:GPU:0")
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal((4096, 1024)).astype(np.float32)
    results = {}
    for fusion in ("1", "0"):
        os.environ["MPIFLOW_FUSE_ELEMENTWISE"] = fusion
        graph = mf.Graph()
        with graph.as_default(), mf.device("/device:GPU:0"):
            x = mf.placeholder(mf.float32, x_value.shape)
            scale = mf.Variable(np.ones(1024, np.float32))
            shift = mf.Variable(np.zeros(1024, np.float32))
            h = x * scale + shift
            gated = mf.tanh(h) * mf.sigmoid(h * 1.702) + mf.nn.softplus(h) * 0.1
            loss = mf.reduce_mean(mf.square(gated - 0.5))
            train = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = mf.global_variables_initializer()
        with mf.Session(graph=graph) as sess:
            sess.run(init)
            seconds = _seconds_per_step(
                lambda n: [sess.run(train, {x: x_value}) for _ in range(n)], steps)
            pool = cp.get_default_memory_pool()
            pool.free_all_blocks()
            sess.run(train, {x: x_value})
            backend.synchronize()
            results[fusion] = (seconds, pool.total_bytes() / 2**20)
    os.environ.pop("MPIFLOW_FUSE_ELEMENTWISE")
    (on, mem_on), (off, mem_off) = results["1"], results["0"]
    print(f"== elementwise block [4096, 1024] f32: steps/s fused {1 / on:.1f}, unfused "
          f"{1 / off:.1f} (unfused/fused time {off / on:.2f}); pool peak MiB fused "
          f"{mem_on:.0f}, unfused {mem_off:.0f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("models", nargs="*", default=sorted(MODELS) + ["fusion", "bias"],
                        help="mlp, cnn, fusion (an elementwise block fused and unfused), "
                             "bias (bias-gradient reductions)")
    args = parser.parse_args(argv)
    if not backend.gpu_available():
        raise SystemExit(f"gpu_profile: no GPU here ({backend.gpu_reason()})")
    for name in args.models:
        if name == "fusion":
            fusion_probe(args.steps)
        elif name == "bias":
            reduction_probe(args.steps)
        else:
            profile(name, args.steps, args.top)


if __name__ == "__main__":
    main()
