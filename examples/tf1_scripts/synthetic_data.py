"""A small classification problem the TF1 scripts share, made by numpy alone.

Ten classes of 64-feature points around fixed random centres, with noise that makes the
classes overlap (no model gets far past 90 %). Depends on nothing but
numpy, so the scripts run the same under TensorFlow and under mpiflow. Also where
scripts keep their files when given no directory (``scratch_dir``).
"""

import contextlib
import tempfile

import numpy as np

FEATURES, CLASSES = 64, 10


def make(num_train=6000, num_test=2000, seed=7):
    """Return ((x_train, y_train), (x_test, y_test)); y are one-hot float32 rows."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, (CLASSES, FEATURES)).astype(np.float32)

    def draw(n):
        labels = rng.integers(0, CLASSES, n)
        x = centres[labels] + rng.normal(0.0, 2.6, (n, FEATURES)).astype(np.float32)
        return x.astype(np.float32), np.eye(CLASSES, dtype=np.float32)[labels]

    return draw(num_train), draw(num_test)


class Batches:
    """Endless shuffled minibatches of one worker's shard (every num_shards-th example)."""

    def __init__(self, x, y, batch_size, shard=0, num_shards=1, seed=0):
        self.x, self.y = x[shard::num_shards], y[shard::num_shards]
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed + shard)
        self.order, self.pos = self.rng.permutation(len(self.x)), 0

    def next_batch(self):
        if self.pos + self.batch_size > len(self.order):
            self.order, self.pos = self.rng.permutation(len(self.x)), 0
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return self.x[idx], self.y[idx]


def scratch_dir(path=None):
    """``path`` if given, else a temporary directory removed when the block ends (also on
    Ctrl-C): where a script keeps checkpoints and summaries when told no place for them."""
    return contextlib.nullcontext(path) if path else tempfile.TemporaryDirectory()
