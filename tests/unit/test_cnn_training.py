"""A small CNN (conv2d + max_pool, NHWC) trains on the 8x8 digits in one process."""

import numpy as np

import mpiflow as mf
from mpiflow.data import batches, load_digits


def test_small_cnn_learns_digits():
    x_train, y_train, x_test, y_test = load_digits(seed=1)
    mf.set_random_seed(1)
    x = mf.placeholder(mf.float32, [None, 64])
    y = mf.placeholder(mf.int64, [None])
    images = mf.reshape(x, [-1, 8, 8, 1])
    kernel = mf.get_variable("conv/w", [3, 3, 1, 16])
    bias = mf.get_variable("conv/b", [16], initializer=mf.zeros_initializer())
    conv = mf.nn.relu(mf.nn.bias_add(
        mf.nn.conv2d(images, kernel, strides=[1, 1, 1, 1], padding="SAME"), bias))
    pooled = mf.nn.max_pool(conv, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    flat = mf.reshape(pooled, [-1, 4 * 4 * 16])
    logits = mf.matmul(flat, mf.get_variable("dense/w", [256, 10]))
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    accuracy = mf.reduce_mean(mf.cast(mf.equal(mf.argmax(logits, 1), y), mf.float32))
    train = mf.train.AdamOptimizer(0.01).minimize(loss)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        first = sess.run(loss, {x: x_test, y: y_test})
        for epoch in range(4):
            for xb, yb in batches(x_train, y_train, 64, seed=epoch):
                sess.run(train, {x: xb, y: yb})
        last, acc = sess.run([loss, accuracy], {x: x_test, y: y_test})
    assert last < first / 4
    assert acc >= 0.9, f"test accuracy {acc:.3f}"
    assert np.isfinite(last)
