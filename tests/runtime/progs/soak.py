"""Soak: 1 ps + 3 workers train asynchronously for a while. Checks that resident memory
stays flat after warm-up on every rank, that no MPI request is left outstanding, and that
every push was applied exactly once. Usage: mpiexec -n 4 python soak.py SECONDS"""

import sys
import threading
import time

import numpy as np
from mpi4py import MPI

import mpiflow as mf


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main(seconds):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    warmup = seconds * 0.3
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.wait(0.25):
            samples.append((time.monotonic(), rss_mib()))

    sampler = threading.Thread(target=sample, daemon=True)
    start = time.monotonic()
    sampler.start()
    pushes = 0
    if server.job_name == "worker":
        with mf.device(mf.train.replica_device_setter(cluster=cluster)):
            x = mf.placeholder(mf.float32, [None, 64])
            y = mf.placeholder(mf.int64, [None])
            h = mf.nn.relu(mf.matmul(x, mf.get_variable("w1", [64, 64])))
            loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=mf.matmul(h, mf.get_variable("w2", [64, 10]))))
            counter = mf.Variable(0.0, name="pushes")
            train = mf.group(mf.train.GradientDescentOptimizer(0.01).minimize(loss),
                             mf.assign_add(counter, 1.0))
        rng = np.random.default_rng(server.task_index)
        xb = rng.standard_normal((32, 64)).astype(np.float32)
        yb = rng.integers(0, 10, 32)
        with mf.train.MonitoredTrainingSession(master=server.target,
                                               is_chief=server.is_chief,
                                               log_step_count_steps=None,
                                               progress_bar=False) as sess:
            while time.monotonic() - start < seconds:
                sess.run(train, {x: xb, y: yb})
                pushes += 1
    server.join()              # every worker done; the ps stops serving
    stop.set()
    sampler.join()
    after_warmup = [m for t, m in samples if t - start >= warmup]
    growth = (after_warmup[-1] - after_warmup[0]) / after_warmup[0] if after_warmup else 0.0
    service = server._service
    service.transport.complete_sends()
    outstanding = sum(len(reqs) for reqs, _ in service.transport._pending)
    mine = np.array([pushes, growth, outstanding, after_warmup[0], after_warmup[-1]])
    every = np.empty((MPI.COMM_WORLD.Get_size(), 5))
    MPI.COMM_WORLD.Allgather(mine, every)
    if server.job_name == "worker" and server.is_chief:
        with mf.Session(server.target) as sess:
            applied = sess.run(counter)
        total = int(every[:, 0].sum())
        for r, (p, g, o, first, last) in enumerate(every):
            print(f"rank {r}: rss {first:.1f} -> {last:.1f} MiB ({100 * g:+.2f}%), "
                  f"outstanding requests {int(o)}", flush=True)
        print(f"SOAK pushes {total} applied {int(applied)} max_growth "
              f"{100 * every[:, 1].max():.2f}% outstanding {int(every[:, 2].sum())}",
              flush=True)
    server.join()


if __name__ == "__main__":
    main(float(sys.argv[1]))
