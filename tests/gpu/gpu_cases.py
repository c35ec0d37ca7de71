"""What the GPU tests run: every op test module's gradient cases, plus forward cases for
the ops that have no gradient, built on a device of choice.

Building needs no GPU, so the coverage check (every op type runs on a GPU in some case,
or is named here as host-only) runs on every machine.
"""

from __future__ import annotations

import numpy as np

import mpiflow as mf
from mpiflow.ops.sparse_ops import indexed_slices_to_dense
from tests.ops.test_gradient_coverage import _all_cases as grad_cases  # noqa: F401

R = np.random.default_rng(11)


def _floats(*shape):
    return R.uniform(-2, 2, size=shape)


def _labels():
    return np.array([1, 0, 3, 3], dtype=np.int64)


def _unknown_shape(a):
    """``a`` without its static shape (so Size and Rank run instead of folding)."""
    return mf.placeholder_with_default(a, [None] * a.shape.ndims)


def _variables(a, b):
    v = mf.Variable(np.arange(12.0).reshape(4, 3), name="v")
    ops = [mf.assign(v, a), mf.assign_add(v, a), mf.assign_sub(v, a * 0.5),
           mf.scatter_add(v, [0, 2, 0], b), mf.scatter_sub(v, [1], b[:1]),
           mf.scatter_update(v, [3], b[1:2])]
    with mf.control_dependencies(ops):
        return mf.identity(v) + mf.cast(mf.is_variable_initialized(v), mf.float64) + \
            v.initialized_value()


def _gather_gradient_of_unknown_shape(a):
    """gather's sparse gradient densified where the graph knows no shape: the row shape
    and the row count come from the step (GatherRowShape, GatherFirst)."""
    u = _unknown_shape(a)
    grad, = mf.gradients(mf.reduce_sum(mf.gather(u, [2, 0, 2]) * 1.5), u)
    return indexed_slices_to_dense(grad)


# name -> (build(*placeholders) -> tensor or list of tensors, inputs)
FORWARD_CASES = {
    "argmax_argmin": (lambda a: [mf.argmax(a, axis=1), mf.argmin(a, axis=0)], [_floats(4, 5)]),
    "comparisons": (lambda a, b: [mf.equal(a, b), mf.not_equal(a, b), mf.less_equal(a, b)],
                    [np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 0.0, 3.5, 4.0])]),
    "logic": (lambda a, b: [mf.logical_and(a, b), mf.logical_or(a, b), mf.logical_not(a)],
              [np.array([True, False, True, False]), np.array([True, True, False, False])]),
    "floor_finite_nan": (lambda a: [mf.floor(a), mf.is_finite(a), mf.is_nan(a)],
                         [np.array([1.5, -0.5, np.inf, np.nan, -np.inf, 2.0])]),
    "round_ceil": (lambda a, k: [mf.round(a), mf.ceil(a), mf.round(k)],
                   [np.array([0.5, 1.5, 2.5, -0.5, -2.5, -1.2, np.inf]),
                    np.array([3, -4, 7], dtype=np.int32)]),
    "reduce_all_any": (lambda a: [mf.reduce_all(a > 0.0, axis=1), mf.reduce_any(a > 1.0),
                                  mf.reduce_any(a > 0.5, axis=[0], keepdims=True)],
                       [_floats(4, 5)]),
    "in_top_k": (lambda a, k: mf.nn.in_top_k(a, k, 2), [_floats(4, 5), _labels()]),
    "one_hot": (lambda k: mf.one_hot(k, 5, on_value=2.0, off_value=-1.0), [_labels()]),
    "where_coordinates": (lambda a: [mf.where(a > 0.0), mf.where(mf.greater(a, 0.5))],
                          [_floats(3, 4)]),
    "gather_gradient_of_unknown_shape": (_gather_gradient_of_unknown_shape, [_floats(3, 4)]),
    # max and min combine rows in order on a GPU too: a NaN stays until a later row
    "segment_reductions_nan_and_integers": (
        lambda a, k: [mf.unsorted_segment_max(a, [0, 0, 1, 1, 1, 2, 2], 4),
                      mf.unsorted_segment_min(a, [0, 0, 1, 1, 1, 2, 2], 4),
                      mf.unsorted_segment_prod(k, [1, -1, 1, 0], 3),
                      mf.unsorted_segment_max(k, [1, -1, 1, 0], 3)],
        [np.array([np.nan, 1.0, 3.0, np.nan, 2.0, 4.0, np.nan]), _labels()]),
    "unique": (lambda k: list(mf.unique(mf.reshape(k, [-1]), out_idx=mf.int64)),
               [_labels()]),
    "random_seeded": (lambda a: [mf.random_normal([3, 4], dtype=mf.float64, seed=3) + a,
                                 mf.random_uniform([3, 4], dtype=mf.float64, seed=4) + a,
                                 mf.truncated_normal([3, 4], dtype=mf.float64, seed=5) + a,
                                 mf.random_uniform([3, 4], -5, 9, dtype=mf.int64, seed=6)],
                      [_floats(3, 4)]),
    # Host-only kernels (gpu_kernel = False) placed on a GPU: seeded, so both draw alike.
    "candidate_samplers": (
        lambda k: list(mf.nn.log_uniform_candidate_sampler(mf.reshape(k, [4, 1]), 1, 3, True,
                                                           6, seed=3)) +
        list(mf.nn.uniform_candidate_sampler(mf.reshape(k, [2, 2]), 2, 5, False, 4, seed=4)),
        [_labels()]),
    "shape_size_rank": (lambda a: [mf.shape(a), mf.size(_unknown_shape(a)),
                                   mf.rank(mf.placeholder_with_default(a, None)),
                                   mf.reshape(a, mf.shape(a)[::-1]),
                                   mf.cast(mf.shape(a), mf.float64) * 2.0],
                        [_floats(3, 4)]),
    "no_op": (lambda a: [mf.no_op(), a * 2.0][1], [_floats(2)]),
    "variables_and_scatter": (_variables, [_floats(4, 3), _floats(3, 3)]),
    "float16_elementwise": (lambda a: [mf.nn.relu(a) * a, mf.nn.sigmoid(a), mf.tanh(a)],
                            [_floats(5, 7).astype(np.float16)]),
    "bfloat16_elementwise_matmul": (
        lambda a, b: [mf.nn.relu(a) * a, mf.nn.sigmoid(a), mf.tanh(a), mf.matmul(a, b),
                      mf.nn.softmax(mf.matmul(a, b)), mf.cast(a, mf.float32)],
        [_floats(5, 7).astype(mf.bfloat16.np_dtype), _floats(7, 3).astype(mf.bfloat16.np_dtype)]),
    "float32_matmul_softmax": (
        lambda a, b: mf.nn.softmax(mf.matmul(a, b)),
        [_floats(8, 16).astype(np.float32), _floats(16, 4).astype(np.float32)]),
}

# Ops no single-process GPU case runs, and why.
NOT_RUN_ON_GPU = {
    "_Send": "transfer between ranks (tests/gpu/progs/ps_and_allreduce_on_gpu.py)",
    "_Recv": "transfer between ranks (tests/gpu/progs/ps_and_allreduce_on_gpu.py)",
    "Placeholder": "fed, never run",
    "SaveShard": "host only (gpu_kernel = False)",
    "RestoreSlice": "host only (gpu_kernel = False)",
    "AccumulatorApplyGradient": "host only (gpu_kernel = False)",
    "AccumulatorApplyIndexedSlices": "host only (gpu_kernel = False)",
    "AccumulatorTakeGradient": "host only (gpu_kernel = False)",
    "AccumulatorTakeIndexedSlices": "host only (gpu_kernel = False)",
    "SyncTokenRelease": "host only (gpu_kernel = False)",
    "SyncTokenWait": "host only (gpu_kernel = False)",
    "IteratorAnchor": "host only (gpu_kernel = False)",
    "IteratorInit": "host only (gpu_kernel = False)",
    "IteratorGetNext": "host only (gpu_kernel = False)",
    "Print": "host only (gpu_kernel = False)",
    "PrintV2": "host only (gpu_kernel = False)",
    "Assert": "host only (gpu_kernel = False)",
    **{op: "needs ranks: allreduce mode on GPU workers runs in tests/gpu/test_gpu_mpi.py"
       for op in ("CollectiveAllReduce", "CollectiveFusedAllReduce", "CollectiveFusedAdd",
                  "CollectiveFusedWait")},
    "CollectiveBroadcastVariable": "needs ranks: tests/gpu/test_gpu_mpi.py broadcasts GPU "
                                   "variables (and its allreduce mode its workers')",
    **{op: "needs ranks: tests/gpu/test_gpu_mpi.py runs mf.broadcast and mf.all_gather on "
           "GPU ranks" for op in ("CollectiveBroadcast", "CollectiveAllGather")},
    **{op: "host only (gpu_kernel = False): a record of the global step's ps" for op in (
        "GradientStaleness", "StalenessHistogram", "RecentStaleness", "WorkerRoundRead",
        "WorkerRoundAllRead", "WorkerRoundDone", "WorkerRoundBound", "WorkerClocksRecord")},
    "TopKByMagnitude": "host only (gpu_kernel = False): picks a pushed gradient's entries",
    "VariablesHeld": "host only (gpu_kernel = False): names what a task's store holds",
}

OPTIMIZERS = {
    "sgd": lambda: mf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: mf.train.MomentumOptimizer(0.05, 0.9),
    "nesterov": lambda: mf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    "adagrad": lambda: mf.train.AdagradOptimizer(0.1),
    "rmsprop": lambda: mf.train.RMSPropOptimizer(0.01, momentum=0.5),
    "rmsprop_centered": lambda: mf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
    "adam": lambda: mf.train.AdamOptimizer(0.01),
    "adadelta": lambda: mf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-6),
    "ftrl": lambda: mf.train.FtrlOptimizer(0.1, l1_regularization_strength=0.01,
                                           l2_regularization_strength=0.01),
    # ApplyFtrlV2, and the powers' pow() branch of the kernel (lr_power other than -0.5)
    "ftrl_shrinkage": lambda: mf.train.FtrlOptimizer(
        0.1, learning_rate_power=-0.75, l1_regularization_strength=0.01,
        l2_shrinkage_regularization_strength=0.05),
    "proximal_sgd": lambda: mf.train.ProximalGradientDescentOptimizer(
        0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01),
    "proximal_adagrad": lambda: mf.train.ProximalAdagradOptimizer(
        0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01),
}


def build_training(device, optimizer, dtype=np.float64, seed=5, sparse=False):
    """A small model (embedding + 2 dense layers) trained by ``optimizer`` on ``device``.

    Returns (graph, train_op, loss, variables, feeds). The variables start from fixed
    values, so a CPU and a GPU build start alike.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 6)).astype(dtype)
    ids = rng.integers(0, 10, size=16)
    y = rng.integers(0, 3, size=16)
    graph = mf.Graph()
    with graph.as_default(), mf.device(device):
        xs = mf.placeholder(mf.as_dtype(dtype), [16, 6])
        ix = mf.placeholder(mf.int64, [16])
        ys = mf.placeholder(mf.int64, [16])
        table = mf.Variable(rng.standard_normal((10, 4)).astype(dtype), name="table")
        w1 = mf.Variable((rng.standard_normal((10, 8)) * 0.3).astype(dtype), name="w1")
        b1 = mf.Variable(np.zeros(8, dtype), name="b1")
        w2 = mf.Variable((rng.standard_normal((8, 3)) * 0.3).astype(dtype), name="w2")
        emb = mf.gather(table, ix) if sparse else mf.matmul(mf.one_hot(ix, 10, dtype=xs.dtype),
                                                            table)
        h = mf.nn.relu(mf.matmul(mf.concat([xs, emb], axis=1), w1) + b1)
        logits = mf.matmul(mf.nn.sigmoid(h) * mf.tanh(h), w2)
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=ys, logits=logits))
        train = optimizer().minimize(loss)
        init = mf.global_variables_initializer()
    return graph, init, train, loss, [table, w1, b1, w2], {xs: x, ix: ids, ys: y}


def train_and_read(device, optimizer, steps=5, **kwargs):
    graph, init, train, loss, variables, feeds = build_training(device, optimizer, **kwargs)
    with graph.as_default(), mf.Session(graph=graph) as sess:
        sess.run(init)
        losses = [sess.run([train, loss], feeds)[1] for _ in range(steps)]
        return losses, sess.run(variables)
