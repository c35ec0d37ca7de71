"""The MLP 784-512-512-10 of the ps benchmarks (ReLU, sparse softmax cross-entropy), built
once for every script that times it."""

from __future__ import annotations


def build_mlp(mf, widths=(512, 512), classes=10, features=784):
    """Placeholders and loss of the MLP, in the current graph and device scope:
    ``(x, y, loss)``."""
    x = mf.placeholder(mf.float32, [None, features], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    h = x
    for i, width in enumerate(widths):
        h = mf.nn.relu(mf.matmul(h, mf.get_variable(f"w{i}", [h.shape[1], width])) +
                       mf.get_variable(f"b{i}", [width], initializer=mf.zeros_initializer()))
    logits = mf.matmul(h, mf.get_variable(f"w{len(widths)}", [widths[-1], classes]))
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    return x, y, loss
