"""Train an MLP classifier in one process and report test accuracy.

By default it trains on scikit-learn's bundled 8x8 digits (no download); with
``--data-dir DIR`` it reads MNIST from the IDX files or ``mnist.npz`` you already have.

    python examples/mnist_mlp.py [--data-dir DIR] [--epochs 30] [--batch-size 64]
                                 [--hidden 128] [--optimizer adam|sgd|momentum]
"""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

import mpiflow as mf
from mlp_model import build_mlp, load_data, loss_and_accuracy
from mpiflow.data import batches

OPTIMIZERS = {
    "sgd": lambda lr: mf.train.GradientDescentOptimizer(lr),
    "momentum": lambda lr: mf.train.MomentumOptimizer(lr, momentum=0.9),
    "adam": lambda lr: mf.train.AdamOptimizer(lr),
}
DEFAULT_LR = {"sgd": 0.3, "momentum": 0.05, "adam": 0.003}


def build_model(n_features, n_classes, hidden, optimizer, lr):
    """Build the MLP graph; return its placeholders and the ops the loop runs."""
    x = mf.placeholder(mf.float32, [None, n_features], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    loss, accuracy = loss_and_accuracy(build_mlp(x, n_classes, hidden), y)
    global_step = mf.train.get_or_create_global_step()
    train_op = OPTIMIZERS[optimizer](lr).minimize(loss, global_step=global_step)
    return x, y, loss, accuracy, train_op, global_step


def main(argv=None):
    parser = argparse.ArgumentParser(description="Single-process MLP on digits or MNIST.")
    parser.add_argument("--data-dir", help="directory with MNIST IDX files or mnist.npz")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, nargs="*", default=[128])
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test, source = load_data(args.data_dir, args.seed)
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    print(f"data: {source}: {len(x_train)} train, {len(x_test)} test, "
          f"{x_train.shape[1]} features, {n_classes} classes")

    lr = args.learning_rate or DEFAULT_LR[args.optimizer]
    graph = mf.Graph()
    with graph.as_default():
        mf.set_random_seed(args.seed)
        x, y, loss, accuracy, train_op, global_step = build_model(
            x_train.shape[1], n_classes, args.hidden, args.optimizer, lr)
        init = mf.global_variables_initializer()

    with mf.Session(graph=graph) as sess:
        sess.run(init)
        steps_per_epoch = len(x_train) // args.batch_size
        with tqdm(total=args.epochs * steps_per_epoch, unit="step", file=sys.stdout,
                  disable=None) as bar:
            for epoch in range(args.epochs):
                for xb, yb in batches(x_train, y_train, args.batch_size,
                                      seed=args.seed * 1000 + epoch):
                    _, loss_value = sess.run([train_op, loss], {x: xb, y: yb})
                    bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{loss_value:.4f}")
        test_accuracy = sess.run(accuracy, {x: x_test, y: y_test})
        steps = sess.run(global_step)
    print(f"trained {steps} steps; test accuracy {test_accuracy:.4f}")
    return float(test_accuracy)


if __name__ == "__main__":
    main()
