"""How much does running a training step through mpiflow cost over plain numpy?

Part 1: one SGD step of an MLP 784-512-512-10 at batch 128 (ReLU, sparse softmax
cross-entropy), run by ``Session.run`` and hand-written in numpy in this same process;
prints the time ratio (target <= 1.10). The numpy side allocates its buffers once and
updates in place, as a careful numpy user writes it.
Part 2: a chain of many tiny ops, run by ``Session.run`` and as the same numpy calls;
prints the executor's overhead per op in microseconds.

Usage: python benchmarks/step_overhead.py [--steps 50] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import mpiflow as mf

SIZES = (784, 512, 512, 10)


def init_params(seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params.append(rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32))
        params.append(np.zeros(fan_out, np.float32))
    return params


def sgd_apply(variables, grads, lr) -> None:
    """``variable -= lr * grad`` in place, each gradient scaled where it lies, as
    mpiflow's apply of a gradient does (the numpy step's update, and the raw ps
    baselines' of ``ps_throughput.py``)."""
    for variable, grad in zip(variables, grads):
        grad *= lr
        variable -= grad


class NumpyStep:
    """One SGD step written directly in numpy, as a careful numpy user would (the
    baseline): every intermediate in a buffer allocated once, the updates in place."""

    def __init__(self, params, batch):
        self.params = params
        w1, b1, w2, b2, w3, b3 = params
        shapes = {"z1": (batch, SIZES[1]), "z2": (batch, SIZES[2]), "lg": (batch, SIZES[3]),
                  "d3": (batch, SIZES[3]), "d2": (batch, SIZES[2]), "d1": (batch, SIZES[1]),
                  "m2": (batch, SIZES[2]), "m1": (batch, SIZES[1]), "max": (batch, 1),
                  "sum": (batch, 1), "gw1": w1.shape, "gb1": b1.shape, "gw2": w2.shape,
                  "gb2": b2.shape, "gw3": w3.shape, "gb3": b3.shape}
        self.buf = {name: np.empty(shape, np.float32) for name, shape in shapes.items()}
        self.rows = np.arange(batch)

    GRADIENT_NAMES = ("gw1", "gb1", "gw2", "gb2", "gw3", "gb3")    # in params' order

    def __call__(self, x, y, lr):
        loss = self.gradients(x, y)
        sgd_apply(self.params, [self.buf[name] for name in self.GRADIENT_NAMES], lr)
        return loss

    def gradients(self, x, y, layer_done=None):
        """Forward and backward pass: the loss, each parameter's gradient in
        ``self.buf`` under ``GRADIENT_NAMES``; ``layer_done(i)`` is called as soon as
        the gradients of parameters ``2 i`` and ``2 i + 1`` (a layer's weights and
        bias) are made, last layer first, as a backward pass makes them."""
        w1, b1, w2, b2, w3, b3 = self.params
        buf, rows, n = self.buf, self.rows, x.shape[0]
        z1, z2, logits, d = buf["z1"], buf["z2"], buf["lg"], buf["d3"]
        np.matmul(x, w1, out=z1)
        z1 += b1
        h1 = np.maximum(z1, 0)
        np.matmul(h1, w2, out=z2)
        z2 += b2
        h2 = np.maximum(z2, 0)
        np.matmul(h2, w3, out=logits)
        logits += b3
        np.max(logits, axis=1, keepdims=True, out=buf["max"])
        logits -= buf["max"]
        np.exp(logits, out=d)
        np.sum(d, axis=1, keepdims=True, out=buf["sum"])
        loss = np.mean(np.log(buf["sum"][:, 0]) - logits[rows, y])
        d /= buf["sum"]
        d[rows, y] -= 1
        d /= n
        np.matmul(h2.T, d, out=buf["gw3"])
        np.sum(d, axis=0, out=buf["gb3"])
        if layer_done is not None:
            layer_done(2)
        d2 = np.matmul(d, w3.T, out=buf["d2"])
        d2 *= np.greater(z2, 0, out=buf["m2"])
        np.matmul(h1.T, d2, out=buf["gw2"])
        np.sum(d2, axis=0, out=buf["gb2"])
        if layer_done is not None:
            layer_done(1)
        d1 = np.matmul(d2, w2.T, out=buf["d1"])
        d1 *= np.greater(z1, 0, out=buf["m1"])
        np.matmul(x.T, d1, out=buf["gw1"])
        np.sum(d1, axis=0, out=buf["gb1"])
        if layer_done is not None:
            layer_done(0)
        return loss


def build_mpiflow_step(params, lr):
    graph = mf.Graph()
    with graph.as_default():
        x = mf.placeholder(mf.float32, [None, SIZES[0]], name="x")
        y = mf.placeholder(mf.int64, [None], name="y")
        h = x
        variables = []
        for i, (w0, b0) in enumerate(zip(params[::2], params[1::2])):
            w = mf.Variable(w0, name=f"w{i}")
            b = mf.Variable(b0, name=f"b{i}")
            variables += [w, b]
            h = mf.matmul(h, w) + b
            if i < len(SIZES) - 2:
                h = mf.nn.relu(h)
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=h))
        train = mf.train.GradientDescentOptimizer(lr).minimize(loss)
        sess = mf.Session(graph=graph)
        sess.run(mf.global_variables_initializer())
    step = sess.make_callable([loss, train], [x, y])
    return sess, step, variables, len(graph.get_operations())


def time_steps(fn, steps):
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def mlp_ratio(steps, repeats, batch=128, lr=0.01):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch).astype(np.int64)
    np_params = init_params()
    numpy_step = NumpyStep(np_params, batch)
    sess, mf_step, variables, n_ops = build_mpiflow_step(init_params(), lr)
    # Same math: one step from the same start gives the same loss and weights.
    mf_loss = mf_step(x, y)[0]
    np_loss = numpy_step(x, y, lr)
    w_diff = float(np.abs(sess.run(variables[0]) - np_params[0]).max())
    mf_times, np_times = [], []
    for _ in range(repeats):       # interleaved so drifts in machine load hit both
        np_times.append(time_steps(lambda: numpy_step(x, y, lr), steps))
        mf_times.append(time_steps(lambda: mf_step(x, y), steps))
    sess.close()
    mf_t, np_t = statistics.median(mf_times), statistics.median(np_times)
    return {"mlp_step_ms_mpiflow": mf_t * 1e3, "mlp_step_ms_numpy": np_t * 1e3,
            "mlp_ratio": mf_t / np_t, "mlp_graph_ops": n_ops,
            "first_step_loss_diff": abs(float(mf_loss) - float(np_loss)),
            "first_step_w0_max_diff": w_diff}


def tiny_op_overhead(n_ops=2000, repeats=5, steps=20):
    graph = mf.Graph()
    with graph.as_default():
        x = mf.placeholder(mf.float32, [4], name="x")
        one = mf.constant(1.0)
        y = x
        for _ in range(n_ops):
            y = mf.add(y, one)
        sess = mf.Session(graph=graph)
    run = sess.make_callable(y, [x])
    value = np.zeros(4, np.float32)
    one_np = np.float32(1.0)

    def numpy_chain():
        z = value
        for _ in range(n_ops):
            z = np.add(z, one_np)
        return z

    run(value)
    mf_t = statistics.median(time_steps(lambda: run(value), steps) for _ in range(repeats))
    np_t = statistics.median(time_steps(numpy_chain, steps) for _ in range(repeats))
    sess.close()
    return {"tiny_ops": n_ops, "per_op_us_mpiflow": mf_t / n_ops * 1e6,
            "per_op_us_numpy": np_t / n_ops * 1e6,
            "executor_overhead_us_per_op": (mf_t - np_t) / n_ops * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = mlp_ratio(args.steps, args.repeats)
    result.update(tiny_op_overhead(repeats=args.repeats))
    if args.json:
        print(json.dumps(result))
        return
    print(f"MLP 784-512-512-10, batch 128, SGD ({result['mlp_graph_ops']} graph ops)")
    print(f"  mpiflow Session.run   {result['mlp_step_ms_mpiflow']:8.3f} ms/step")
    print(f"  numpy by hand         {result['mlp_step_ms_numpy']:8.3f} ms/step")
    print(f"  ratio                 {result['mlp_ratio']:8.3f}   (target <= 1.10)")
    print(f"  same math: first-step loss diff {result['first_step_loss_diff']:.2e}, "
          f"w0 max diff {result['first_step_w0_max_diff']:.2e}")
    print(f"Chain of {result['tiny_ops']} tiny ops (Add on 4 floats)")
    print(f"  mpiflow               {result['per_op_us_mpiflow']:8.3f} us/op")
    print(f"  numpy calls           {result['per_op_us_numpy']:8.3f} us/op")
    print(f"  executor overhead     {result['executor_overhead_us_per_op']:8.3f} us/op")


if __name__ == "__main__":
    main()
