"""Gradient buckets start their allreduce while the backward pass still runs: the
scheduler runs an op that starts communication as soon as its input exists."""

import mpiflow as mf
from mpiflow.runtime.executor import schedule


def test_each_bucket_starts_before_the_backward_pass_ends():
    x = mf.placeholder(mf.float32, [None, 8])
    h = x
    for i in range(3):
        h = mf.nn.relu(mf.matmul(h, mf.get_variable(f"w{i}", [8, 8])))
    loss = mf.reduce_mean(h)
    # A tiny threshold: every gradient is a bucket of its own.
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                      fusion_threshold_bytes=1)
    train = opt.minimize(loss)
    order = schedule(mf.get_default_graph(), [], [train], {x})
    position = {op: i for i, op in enumerate(order)}
    adds = [op for op in order if op.type == "CollectiveFusedAdd"]
    grad_matmuls = [op for op in order if op.type == "MatMul" and "gradients" in op.name]
    assert len(adds) == 3
    # The last layer's gradient is ready first: its allreduce starts before the first
    # layer's gradient is computed.
    assert position[adds[0]] < position[grad_matmuls[-1]]
    waits = [op for op in order if op.type == "CollectiveFusedWait"]
    assert len(waits) == 1 and position[waits[0]] > max(position[m] for m in grad_matmuls)


def test_without_overlap_one_fused_op_runs_after_every_gradient():
    x = mf.placeholder(mf.float32, [None, 4])
    loss = mf.reduce_mean(mf.matmul(x, mf.get_variable("w", [4, 2])))
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.1), overlap=False)
    order = schedule(mf.get_default_graph(), [], [opt.minimize(loss)], {x})
    assert [op.type for op in order].count("CollectiveFusedAllReduce") == 1
