"""GradientCompressionOptimizer in one process: nothing crosses to another task, so
nothing is compressed; a compression it does not know is refused naming what it knows;
top-k picks the largest magnitudes, the first position winning a tie."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import apply_op


def test_in_one_process_nothing_crosses_so_the_step_is_the_plain_one():
    results = []
    for spec in (None, "fp16", "topk:0.01"):
        mf.reset_default_graph()
        w = mf.Variable(np.linspace(-1, 1, 200, dtype=np.float32).reshape(20, 10), name="w")
        loss = mf.reduce_sum(mf.square(w))
        opt = mf.train.GradientCompressionOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                                    spec) if spec else \
            mf.train.GradientDescentOptimizer(0.1)
        train = opt.minimize(loss)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            sess.run(train)
            results.append(sess.run(w))
        assert not getattr(opt, "residuals", [])
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


@pytest.mark.parametrize("spec", ["fp8", "topk:0", "topk:1.5", "topk:x", 3])
def test_an_unknown_compression_is_refused_naming_the_known_ones(spec):
    with pytest.raises(mf.errors.InvalidArgumentError, match="'fp16', 'bf16' or 'topk:R'"):
        mf.train.GradientCompressionOptimizer(mf.train.GradientDescentOptimizer(0.1), spec)


def test_top_k_picks_the_largest_magnitudes_and_the_first_of_equals():
    x = mf.constant(np.array([[0.5, -3.0, 2.0], [-2.0, 0.1, 2.0]], np.float32))
    picked = apply_op("TopKByMagnitude", [x], {"k": 3}).outputs[0]
    with mf.Session() as sess:
        assert sess.run(picked).tolist() == [1, 2, 3]    # |-3|, then the first two of |2|
    with pytest.raises(mf.errors.InvalidArgumentError, match="k is larger"):
        apply_op("TopKByMagnitude", [x], {"k": 7})


def test_every_training_mode_takes_a_compression_to_its_own_optimizer():
    cluster = mf.train.ClusterSpec({"ps": ["a"], "worker": ["b"]})
    mode = mf.train.TrainingMode("ps", cluster, 0, compression="bf16")
    assert isinstance(mode.optimizer(mf.train.GradientDescentOptimizer(0.1)),
                      mf.train.GradientCompressionOptimizer)
    for name in ("allreduce", "hybrid"):
        opt = mf.train.TrainingMode(name, cluster, 0, compression="fp16").optimizer(
            mf.train.GradientDescentOptimizer(0.1))
        assert isinstance(opt, mf.train.AllreduceOptimizer) and opt.compression == "fp16"
    with pytest.raises(mf.errors.InvalidArgumentError, match="Unknown gradient compression"):
        mf.train.TrainingMode("ps", cluster, 0, compression="zip")
