"""The MLP classifier every example trains: one place, so every mode runs the same model."""

import mpiflow as mf


def build_mlp(x, n_classes, hidden=(128,)):
    """Return the logits of an MLP with ReLU hidden layers of widths ``hidden``."""
    h = x
    for i, width in enumerate(hidden):
        with mf.variable_scope(f"hidden{i}"):
            w = mf.get_variable("w", [h.shape[1], width])
            b = mf.get_variable("b", [width], initializer=mf.zeros_initializer())
            h = mf.nn.relu(mf.matmul(h, w) + b)
    with mf.variable_scope("logits"):
        w = mf.get_variable("w", [h.shape[1], n_classes])
        b = mf.get_variable("b", [n_classes], initializer=mf.zeros_initializer())
        return mf.matmul(h, w) + b


def loss_and_accuracy(logits, labels):
    """Return (mean cross-entropy, accuracy) of ``logits`` against int64 ``labels``."""
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    correct = mf.equal(mf.argmax(logits, axis=1), labels)
    return loss, mf.reduce_mean(mf.cast(correct, mf.float32))


def load_data(data_dir=None, seed=0):
    """Return (x_train, y_train, x_test, y_test, description) of digits or MNIST."""
    from mpiflow.data import load_digits, load_mnist
    if data_dir:
        return (*load_mnist(data_dir), f"MNIST from {data_dir}")
    return (*load_digits(seed=seed), "scikit-learn digits (8x8)")


def worker_data(data_dir, seed, num_workers, task):
    """Return this worker's shard of the training data, the test data, a description of
    the source and the number of classes."""
    from mpiflow.data import shard
    x_train, y_train, x_test, y_test, source = load_data(data_dir, seed)
    x_train, y_train = shard((x_train, y_train), num_workers, task)
    return x_train, y_train, x_test, y_test, source, int(y_test.max()) + 1
