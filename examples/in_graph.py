"""In-graph replication: one client builds a tower per worker task and drives them all.

    mpiexec -n 3 python examples/in_graph.py            # 1 ps + 2 worker towers
    mpiexec -n 4 python examples/in_graph.py --ps 2

Worker 0 is the client: it builds every tower in its own graph, each tower placed on
``/job:worker/task:i`` and fed its slice of the batch; the gradients of all towers are
averaged and applied once to the variables on the ps. The other workers and the ps only
``join()`` and run what the client sends them; everyone exits 0 when the client is done.
"""

from __future__ import annotations

import argparse

import mpiflow as mf
from launched import cluster_of_launch
from mlp_model import build_mlp, load_data, loss_and_accuracy
from mpiflow.data import batches


def average_gradients(tower_grads):
    """Average each variable's gradient over the towers (the list of (grad, var) lists)."""
    averaged = []
    for pairs in zip(*tower_grads):
        grads = [g for g, _ in pairs if g is not None]
        averaged.append((mf.add_n(grads) / float(len(grads)), pairs[0][1]))
    return averaged


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=None)
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="per tower")
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    cluster = cluster_of_launch(ps=args.ps)
    server = mf.train.Server(cluster)
    if not server.is_chief:
        server.join()
        return None

    x_train, y_train, x_test, y_test, source = load_data(args.data_dir, args.seed)
    n_classes = int(y_test.max()) + 1
    num_towers = cluster.num_tasks("worker")
    mf.set_random_seed(args.seed)
    optimizer = mf.train.AdamOptimizer(args.learning_rate)
    towers, tower_grads = [], []
    for i in range(num_towers):
        with mf.device(mf.train.replica_device_setter(
                cluster=cluster, worker_device=f"/job:worker/task:{i}")), \
                mf.name_scope(f"tower_{i}"), mf.variable_scope("model", reuse=i > 0):
            x = mf.placeholder(mf.float32, [None, x_train.shape[1]], name="x")
            y = mf.placeholder(mf.int64, [None], name="y")
            loss, accuracy = loss_and_accuracy(build_mlp(x, n_classes), y)
            towers.append((x, y, loss, accuracy))
            tower_grads.append(optimizer.compute_gradients(loss))
    with mf.device("/job:ps/task:0"):
        global_step = mf.train.get_or_create_global_step()
    train_op = optimizer.apply_gradients(average_gradients(tower_grads),
                                         global_step=global_step)
    init = mf.global_variables_initializer()
    print(f"data: {source}; {num_towers} towers on "
          f"{[t[2].device for t in towers]}, variables on "
          f"{sorted({v.device for v in mf.global_variables()})}", flush=True)

    with mf.Session(server.target) as sess:
        sess.run(init)
        for epoch in range(args.epochs):
            for xb, yb in batches(x_train, y_train, args.batch_size * num_towers,
                                  seed=args.seed * 1000 + epoch):
                feed = {}
                for i, (x, y, _, _) in enumerate(towers):
                    feed[x] = xb[i::num_towers]
                    feed[y] = yb[i::num_towers]
                sess.run(train_op, feed)
        x0, y0, _, accuracy = towers[0]
        test_accuracy, steps = sess.run([accuracy, global_step], {x0: x_test, y0: y_test})
    print(f"client: {steps} steps, test accuracy {test_accuracy:.4f}", flush=True)
    return float(test_accuracy)


if __name__ == "__main__":
    main()
