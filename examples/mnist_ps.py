"""Between-graph replication: train the MLP with parameter servers, asynchronously.

    mpiexec -n 3 python examples/mnist_ps.py            # 1 ps + 2 workers
    mpiexec -n 4 python examples/mnist_ps.py --ps 2     # 2 ps + 2 workers

Roles come from the launch: the first ``--ps`` ranks serve the variables, the others are
workers, each training on its own shard of the data. MonitoredTrainingSession makes the
chief (worker 0) initialise the variables and the other workers wait for them. Every
rank exits 0 at the end.
"""

from __future__ import annotations

import argparse

import mpiflow as mf
from launched import cluster_of_launch
from mlp_model import build_mlp, loss_and_accuracy, worker_data
from mpiflow.data import batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=None, help="ps tasks (default 1)")
    parser.add_argument("--policy", choices=["block", "spread"], default=None)
    parser.add_argument("--data-dir", help="MNIST IDX files or mnist.npz (default: digits)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.002)
    parser.add_argument("--hidden", type=int, nargs="*", default=[128])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    cluster = cluster_of_launch(ps=args.ps, policy=args.policy)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return None

    task = server.task_index
    num_workers = cluster.num_tasks("worker")
    x_train, y_train, x_test, y_test, source, n_classes = worker_data(
        args.data_dir, args.seed, num_workers, task)

    mf.set_random_seed(args.seed)
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x = mf.placeholder(mf.float32, [None, x_train.shape[1]], name="x")
        y = mf.placeholder(mf.int64, [None], name="y")
        loss, accuracy = loss_and_accuracy(build_mlp(x, n_classes, args.hidden), y)
        global_step = mf.train.get_or_create_global_step()
        train_op = mf.train.AdamOptimizer(args.learning_rate).minimize(
            loss, global_step=global_step)

    if server.is_chief:
        print(f"data: {source}; {num_workers} workers, {cluster.num_tasks('ps')} ps; "
              f"variables on {sorted({v.device for v in mf.global_variables()})}", flush=True)
    # The chief initialises the variables on the ps; the other workers wait for it.
    with mf.train.MonitoredTrainingSession(master=server.target, is_chief=server.is_chief,
                                           log_step_count_steps=None) as sess:
        for epoch in range(args.epochs):
            for xb, yb in batches(x_train, y_train, args.batch_size,
                                  seed=args.seed * 1000 + epoch * num_workers + task):
                sess.run(train_op, {x: xb, y: yb})
        test_accuracy, steps = sess.run([accuracy, global_step], {x: x_test, y: y_test})
    print(f"worker {task}: global step {steps}, test accuracy {test_accuracy:.4f}",
          flush=True)
    return float(test_accuracy)


if __name__ == "__main__":
    main()
