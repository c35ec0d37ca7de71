"""ExponentialMovingAverage under replica_device_setter equals one process: the shadows
(of a variable, and of the loss with zero_debias) live on the ps next to their
variables, and under the train op's dependency read the weights and the global step
(num_updates) after the step in both.
Usage: mpiexec -n 2 python ema_on_ps.py STEPS
"""

import sys

import numpy as np

import mpiflow as mf


def build():
    w = mf.get_variable("w", initializer=mf.constant([1.0, 2.0]))
    loss = mf.reduce_sum(mf.square(w))
    step = mf.train.get_or_create_global_step()
    train = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    ema = mf.train.ExponentialMovingAverage(0.5, num_updates=step, zero_debias=True)
    with mf.control_dependencies([train]):
        train_and_average = ema.apply([w, loss])
    return train_and_average, [w, ema.average(w), ema.average(loss)]


def run(target, train_and_average, fetch, steps):
    with mf.Session(target) as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(steps):
            sess.run(train_and_average)
        return sess.run(fetch)


def main(steps):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    with mf.Graph().as_default(), mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{server.task_index}")):
        op, fetch = build()
        devices = sorted({v.device for v in mf.global_variables()})
        dist = run(server.target, op, fetch, steps)
    with mf.Graph().as_default():
        local = run("", *build(), steps)
    assert devices == ["/job:ps/task:0"], devices
    for got, want in zip(dist, local):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    print(f"OK ema on ps: {steps} steps, shadow {[round(float(v), 6) for v in dist[1]]}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
