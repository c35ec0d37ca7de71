"""The same TF1 ps/worker training script, timed under TensorFlow (gRPC) and mpiflow (MPI).

    python benchmarks/peers/ps_mlp.py --framework tensorflow --workers 2 [--sync] [--json]
    python benchmarks/peers/ps_mlp.py --framework mpiflow --workers 2 [--sync] [--json]

One code path (``import tensorflow.compat.v1 as tf``), variables on one ps; --model picks
the model of examples/mnist_ps.py (``example``: 64-128-10 at batch 32 with Adam, the
default) or of benchmarks/ps_throughput.py (``mlp512``: 784-512-512-10 at batch 128 with
SGD). TensorFlow runs it the TF1
way, a process per task on 127.0.0.1 with gRPC; mpiflow runs it unmodified with
``mpiexec -n W+1 python -m mpiflow.run --ps 1 --as-tensorflow``. Every process gets the
same share of the cores (TF's intra-op threads, mpiflow's MPIFLOW_CPU_THREADS). Each worker
meets the others on the ps, warms up, and times --steps steps: asynchronous, the job's
steps/s from the first worker's start to the last one's end; synchronous, the global
step rate the chief sees.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
# name -> (input features, hidden widths, batch, optimizer)
MODELS = {
    # examples/mnist_ps.py: digits 8x8, one hidden layer of 128, batch 32, Adam
    "example": (64, (128,), 32, lambda tf: tf.train.AdamOptimizer(0.002)),
    # benchmarks/ps_throughput.py: MNIST-sized MLP, batch 128, SGD
    "mlp512": (784, (512, 512), 128, lambda tf: tf.train.GradientDescentOptimizer(0.01)),
}


def _threads(processes: int) -> int:
    return max(1, (os.cpu_count() or 1) // processes)


def train(tf, args) -> None:
    """One task of the job (flags as TF1's: --ps_hosts, --worker_hosts, --job_name, ...)."""
    import numpy as np
    tf.disable_v2_behavior()
    workers = args.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","), "worker": workers})
    threads = _threads(len(workers) + 1)
    config = tf.ConfigProto(intra_op_parallelism_threads=threads,
                            inter_op_parallelism_threads=threads)
    server = tf.train.Server(cluster, job_name=args.job_name, task_index=args.task_index,
                             config=config)
    if args.job_name == "ps":
        server.join()
        return
    task = args.task_index
    with tf.device(tf.train.replica_device_setter(
            cluster=cluster, worker_device="/job:worker/task:%d" % task)):
        tf.set_random_seed(0)
        features, hidden, _, optimizer = MODELS[args.model]
        x = tf.placeholder(tf.float32, [None, features])
        y = tf.placeholder(tf.int64, [None])
        h = x
        for i, width in enumerate(hidden):
            w = tf.get_variable("w%d" % i, [h.shape[1], width])
            b = tf.get_variable("b%d" % i, [width], initializer=tf.zeros_initializer())
            h = tf.nn.relu(tf.matmul(h, w) + b)
        logits = tf.matmul(h, tf.get_variable("out", [hidden[-1], 10]))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                              logits=logits))
        step = tf.train.get_or_create_global_step()
        # A start line on the ps: every worker times from the moment all have arrived (a
        # TF1 worker may first wait 30 s for the chief's init, then would train alone).
        arrived = tf.Variable(0, name="arrived", trainable=False)
        arrive = arrived.assign_add(1)
        opt = optimizer(tf)
        if args.sync:
            opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=len(workers),
                                                 total_num_replicas=len(workers))
        train_op = opt.minimize(loss, global_step=step)
    hooks = [opt.make_session_run_hook(task == 0)] if args.sync else []
    rng = np.random.default_rng(task)
    features, _, batch, _ = MODELS[args.model]
    xb = rng.standard_normal((batch, features)).astype(np.float32)
    yb = rng.integers(0, 10, batch)
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=(task == 0),
                                           hooks=hooks, config=config) as sess:
        # Meet before the warm-up: a TF1 synchronous step takes any N gradients, so a
        # worker waiting at a line after it could starve one still warming up.
        sess.run(arrive)
        while sess.run(arrived) < len(workers):
            time.sleep(0.001)
        for _ in range(args.warmup):
            sess.run(train_op, {x: xb, y: yb})
        start = time.time()        # wall clock: the workers' spans are compared
        if args.sync:
            # Global steps: TF1 takes any N gradients per step, so workers' local counts
            # differ, and a worker stopping after a fixed count could strand the others.
            first = current = sess.run(step)
            while current < first + args.steps:
                _, current = sess.run([train_op, step], {x: xb, y: yb})
            steps = int(current - first)
        else:
            for _ in range(args.steps):
                sess.run(train_op, {x: xb, y: yb})
            steps = args.steps
        end = time.time()
        # Said before the session closes: TF1's sync replicas can hang in the close.
        print("RESULT " + json.dumps({"worker": task, "steps": steps, "start": start,
                                      "end": end}), flush=True)


def _collect(procs, timeout) -> list[dict]:
    """The RESULT line of each process, waiting at most ``timeout`` seconds in all (a
    worker may hang after it reported: TF1's sync replicas can, in session close)."""
    import threading
    results = []

    def read(proc):
        for line in proc.stdout:
            if line.startswith("RESULT "):
                results.append(json.loads(line[7:]))
                return

    readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    return list(results)


def _results_in(text) -> list[dict]:
    """Every ``RESULT {...}`` in ``text``, also where mpiexec ran two ranks' lines together."""
    decoder, found, pos = json.JSONDecoder(), [], text.find("RESULT ")
    while pos != -1:
        obj, end = decoder.raw_decode(text, pos + len("RESULT "))
        found.append(obj)
        pos = text.find("RESULT ", end)
    return found


def _free_ports(count):
    import socket
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def launch(args) -> dict:
    """Run the whole job under ``args.framework`` and return its summary."""
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--model",
              args.model] + \
        (["--sync"] if args.sync else [])
    if args.framework == "tensorflow":
        hosts = ["127.0.0.1:%d" % port for port in _free_ports(args.workers + 1)]
        flags = ["--ps_hosts=" + hosts[0], "--worker_hosts=" + ",".join(hosts[1:])]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        tasks = [("ps", 0)] + [("worker", i) for i in range(args.workers)]
        procs = [subprocess.Popen([sys.executable, str(HERE), "--task", *common, *flags,
                                   "--job_name=" + job, "--task_index=%d" % index],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env=env) for job, index in tasks]
        try:
            results = _collect(procs[1:], args.timeout)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    else:
        mpiexec = str(Path(sys.executable).parent / "mpiexec")
        proc = subprocess.Popen([mpiexec, "-n", str(args.workers + 1), sys.executable, "-m",
                                 "mpiflow.run", "--ps", "1", "--as-tensorflow", str(HERE),
                                 "--task", *common], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        results = _results_in(out)
    if args.sync:
        # The chief's view of the global step is the job's rate; a TF1 worker may still
        # wait for a token when the target is reached (TF1's known end-of-sync hang).
        results = [r for r in results if r["worker"] == 0]
    elif len(results) != args.workers:
        results = []
    if not results:
        raise SystemExit(f"{args.framework}: the workers did not report within "
                         f"{args.timeout:g} s")
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    steps_per_s = sum(r["steps"] for r in results) / span
    return {"framework": args.framework, "mode": "sync" if args.sync else "async",
            "model": args.model, "workers": args.workers, "steps_per_s": steps_per_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("tensorflow", "mpiflow"), default="mpiflow")
    parser.add_argument("--model", choices=sorted(MODELS), default="example")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--sync", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
    for flag in ("--ps_hosts", "--worker_hosts", "--job_name"):
        parser.add_argument(flag, default="", help=argparse.SUPPRESS)
    parser.add_argument("--task_index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        import tensorflow.compat.v1 as tf
        train(tf, args)
        return
    if args.framework == "tensorflow":
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            print("SKIPPED tensorflow is not installed (pip install '.[bench]')")
            return
    result = launch(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['framework']:>10} {result['model']} {result['mode']:>5} "
              f"{result['workers']} workers: {result['steps_per_s']:8.1f} steps/s")


if __name__ == "__main__":
    main()
