"""Training through the ps runtime equals training in one process, on the same seed.

Every worker builds the same model twice: once under replica_device_setter for the
cluster (the first layer's weights partitioned over the ps tasks) and once for a local
Session; one worker's steps are deterministic, so both must agree to float tolerance.
Usage: mpiexec -n K python ps_parity.py OPTIMIZER STEPS [gpu] [bfloat16]
With ``gpu`` the workers compute on their GPU (variables stay on the ps CPUs) and the
reference is the CPU, so the tolerance is float32 arithmetic on two devices. With
``bfloat16`` the inputs and variables are bfloat16 and the two runs must agree bit for bit
(the same numpy kernels on the same values, every result rounded to bfloat16).
"""

import sys

import numpy as np

import mpiflow as mf

OPTIMIZERS = {"sgd": lambda: mf.train.GradientDescentOptimizer(0.1),
              "adam": lambda: mf.train.AdamOptimizer(0.01),
              "momentum": lambda: mf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True)}


def build(optimizer_name, num_ps, dtype=mf.float32):
    mf.set_random_seed(7)
    x = mf.placeholder(dtype, [None, 6], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    partitioner = mf.fixed_size_partitioner(max(num_ps, 1))
    with mf.variable_scope("layer1", partitioner=partitioner):
        w1 = mf.get_variable("w", [6, 8], dtype=dtype)
    b1 = mf.get_variable("b1", [8], dtype=dtype, initializer=mf.constant_initializer(0.1))
    w2 = mf.get_variable("w2", [8, 3], dtype=dtype)
    h = mf.nn.relu(mf.matmul(x, w1) + b1)
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=mf.matmul(h, w2)))
    step = mf.train.get_or_create_global_step()
    train = OPTIMIZERS[optimizer_name]().minimize(loss, global_step=step)
    return x, y, loss, train, [mf.convert_to_tensor(w1), b1, w2], step


def train(sess, x, y, loss, train_op, steps):
    rng = np.random.default_rng(3)
    losses = []
    for _ in range(steps):
        xb = rng.standard_normal((16, 6)).astype(x.dtype.np_dtype)
        yb = rng.integers(0, 3, 16)
        losses.append(sess.run([loss, train_op], {x: xb, y: yb})[0])
    return losses


def main(optimizer_name, steps, gpu=False, dtype=mf.float32):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    num_ps = cluster.num_tasks("ps")
    dist = mf.Graph()
    worker_device = f"/job:worker/task:{server.task_index}" + ("/device:GPU:0" if gpu else "")
    with dist.as_default(), mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=worker_device)):
        x, y, loss, train_op, params, step = build(optimizer_name, num_ps, dtype)
        init = mf.global_variables_initializer()
        devices = sorted({v.device for v in mf.global_variables()})
    with dist.as_default(), mf.Session(server.target) as sess:
        sess.run(init)
        dist_losses = train(sess, x, y, loss, train_op, steps)
        dist_params, dist_step = sess.run([params, step])
    local = mf.Graph()
    with local.as_default():
        x, y, loss, train_op, params, step = build(optimizer_name, num_ps, dtype)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            local_losses = train(sess, x, y, loss, train_op, steps)
            local_params, local_step = sess.run([params, step])
    if dtype is mf.bfloat16:
        # Bit for bit: compare the raw bits (and check that bfloat16 came back as such).
        assert all(a.dtype == dtype.np_dtype for a in dist_params + dist_losses)
        np.testing.assert_array_equal(np.asarray(dist_losses).view(np.uint16),
                                      np.asarray(local_losses).view(np.uint16))
        for a, b in zip(dist_params, local_params):
            np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    else:
        tol = {"rtol": 2e-4, "atol": 1e-5} if gpu else {"rtol": 1e-5, "atol": 1e-6}
        np.testing.assert_allclose(dist_losses, local_losses, **tol)
        for a, b in zip(dist_params, local_params):
            np.testing.assert_allclose(a, b, **tol)
    assert dist_step == local_step == steps, (dist_step, local_step)
    label = optimizer_name if dtype is mf.float32 else f"{optimizer_name} {dtype.name}"
    print(f"OK parity {label}: {steps} steps, variables on {devices}, "
          f"final loss {float(dist_losses[-1]):.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), "gpu" in sys.argv[3:],
         mf.bfloat16 if "bfloat16" in sys.argv[3:] else mf.float32)
