"""Small models and readers shared by the hook and monitored-session tests."""

import glob
from types import SimpleNamespace

import numpy as np

import mpiflow as mf


def counter_model():
    """Return ops of a model whose one step adds 1 to ``v`` and to the global step."""
    step = mf.train.get_or_create_global_step()
    v = mf.Variable(0.0, name="v")
    train_op = mf.group(mf.assign_add(v, 1.0), mf.assign_add(step, 1), name="train")
    return SimpleNamespace(step=step, v=v, train_op=train_op)


def regression_model(seed=0):
    """Return a tiny linear regression (ops, feeds) trained by gradient descent."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(32, 3)).astype(np.float32)
    ys = xs @ np.array([1.0, -2.0, 0.5], np.float32)
    x = mf.placeholder(mf.float32, [None, 3], name="x")
    y = mf.placeholder(mf.float32, [None], name="y")
    w = mf.Variable(np.zeros(3, np.float32), name="w")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y), name="loss")
    step = mf.train.get_or_create_global_step()
    train_op = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return SimpleNamespace(step=step, w=w, loss=loss, train_op=train_op,
                           feed={x: xs, y: ys})


def train_until_stop(sess, train_op, feed=None):
    """Run ``train_op`` until the session should stop; return how many runs there were."""
    runs = 0
    while not sess.should_stop():
        sess.run(train_op, feed_dict=feed)
        runs += 1
    return runs


def event_scalars(logdir):
    """Return {tag: [(step, value)]} of the scalars in every event file of ``logdir``."""
    found = {}
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        for event in mf.summary.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


class RecordingSaver:
    """A saver that records its calls instead of writing files."""

    def __init__(self):
        self.saves = []
        self.restores = []

    def save(self, sess, save_path, global_step=None):
        self.saves.append(global_step)
        return f"{save_path}-{global_step}"

    def restore(self, sess, save_path):
        self.restores.append(save_path)
