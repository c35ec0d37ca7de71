"""bias_add, losses, dropout, in_top_k and moments: forward against numpy, stability,
gradients against finite differences, dropout statistics and build/run-time errors."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import apply_op
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(5)


def arr(*shape, low=-1.0, high=1.0):
    return R.uniform(low, high, size=shape)


def distributions(*shape):
    p = R.uniform(0.1, 1.0, size=shape)
    return p / p.sum(axis=-1, keepdims=True)


def np_log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def hessian_vector(loss_fn):
    """Return build(logits, labels): d loss/d logits weighted, so the fused op's backprop
    output gets a gradient and second-order terms are checked."""
    def build(logits, labels):
        loss = loss_fn(labels, logits)
        g = mf.gradients(mf.reduce_sum(loss * mf.constant(np.linspace(0.5, 1.5, 3))),
                         logits)[0]
        return g * mf.constant(np.arange(12.0).reshape(3, 4) / 10)
    return build


SPARSE_LABELS = np.array([0, 3, 1], dtype=np.int64)

GRAD_CASES = [
    GradCase("xw_plus_b", lambda x, w, b: mf.nn.xw_plus_b(x, w, b),
             [arr(3, 4), arr(4, 2), arr(2)]),
    GradCase("bias_add", mf.nn.bias_add, [arr(2, 3, 4), arr(4)]),
    GradCase("bias_add_nchw", lambda v, b: mf.nn.bias_add(v, b, data_format="NCHW"),
             [arr(2, 3, 2, 2), arr(3)]),
    GradCase("bias_add_grad", lambda g: apply_op("BiasAddGrad", [g]).outputs[0], [arr(2, 3, 4)]),
    GradCase("bias_add_grad_nchw",
             lambda g: apply_op("BiasAddGrad", [g], {"data_format": "NCHW"}).outputs[0],
             [arr(2, 3, 4)]),
    GradCase("l2_loss", mf.nn.l2_loss, [arr(3, 4)]),
    GradCase("softmax_xent_v2", lambda z, y: mf.nn.softmax_cross_entropy_with_logits_v2(y, z),
             [arr(3, 4, low=-3, high=3), distributions(3, 4)]),
    GradCase("softmax_xent_v2_unnormalized_labels",
             lambda z, y: mf.nn.softmax_cross_entropy_with_logits_v2(y, z),
             [arr(3, 4), arr(3, 4, low=0.0, high=2.0)]),
    GradCase("softmax_xent_axis0",
             lambda z, y: mf.nn.softmax_cross_entropy_with_logits_v2(y, z, axis=0),
             [arr(4, 2, 3), distributions(4, 2, 3)]),
    GradCase("softmax_xent_v1_logits_only",
             lambda z, y: mf.nn.softmax_cross_entropy_with_logits(labels=y, logits=z),
             [arr(3, 4), distributions(3, 4)], wrt=[0]),
    GradCase("softmax_xent_second_order",
             hessian_vector(mf.nn.softmax_cross_entropy_with_logits_v2),
             [arr(3, 4, low=-2, high=2), arr(3, 4, low=0.0, high=1.0)]),
    GradCase("sparse_softmax_xent",
             lambda z: mf.nn.sparse_softmax_cross_entropy_with_logits(SPARSE_LABELS, z),
             [arr(3, 5, low=-3, high=3)]),
    GradCase("sparse_softmax_xent_rank3",
             lambda z: mf.nn.sparse_softmax_cross_entropy_with_logits(
                 np.array([[0, 2], [1, 1]], dtype=np.int32), z), [arr(2, 2, 3)]),
    GradCase("sparse_softmax_xent_second_order",
             lambda z: hessian_vector(mf.nn.sparse_softmax_cross_entropy_with_logits)(
                 z, np.array([3, 0, 2], dtype=np.int32)), [arr(3, 4, low=-2, high=2)]),
    GradCase("sigmoid_xent", lambda z, y: mf.nn.sigmoid_cross_entropy_with_logits(y, z),
             [arr(3, 4, low=-4, high=4) + 0.05, arr(3, 4, low=0.0, high=1.0)]),
    GradCase("weighted_xent",
             lambda z, y, q: mf.nn.weighted_cross_entropy_with_logits(y, z, pos_weight=q),
             [arr(3, 4, low=-4, high=4) + 0.05, arr(3, 4, low=0.0, high=1.0),
              arr(4, low=0.5, high=3.0)]),
    GradCase("moments", lambda x: mf.add_n(list(mf.nn.moments(x, axes=[0, 2]))),
             [arr(3, 2, 4)]),
    GradCase("moments_keepdims",
             lambda x: mf.multiply(*mf.nn.moments(x, axes=[1], keepdims=True)), [arr(3, 4)]),
    GradCase("l2_normalize", lambda x: mf.nn.l2_normalize(x, axis=1), [arr(3, 4)]),
    GradCase("l2_normalize_all_axes", lambda x: mf.nn.l2_normalize(x), [arr(2, 3)]),
    GradCase("batch_normalization",
             lambda x, m, v, o, s: mf.nn.batch_normalization(x, m, v, o, s, 1e-3),
             [arr(3, 4), arr(4), arr(4, low=0.5, high=2.0), arr(4), arr(4)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# -- forward --------------------------------------------------------------------------------

def test_bias_add_matches_numpy_in_both_layouts():
    v, b = arr(2, 3, 4, 5), arr(5)
    check_forward(mf.nn.bias_add, [v, b], v + b)
    b3 = arr(3)
    check_forward(lambda x, y: mf.nn.bias_add(x, y, data_format="NCHW"), [v, b3],
                  v + b3[:, None, None])


def test_l2_loss_is_half_the_sum_of_squares():
    x = arr(3, 4).astype(np.float32)
    check_forward(mf.nn.l2_loss, [x], np.float32((x.astype(np.float64) ** 2).sum() / 2),
                  rtol=1e-6)


def test_softmax_xent_matches_numpy():
    z, y = arr(3, 4) * 5, distributions(3, 4)
    check_forward(lambda a, b: mf.nn.softmax_cross_entropy_with_logits_v2(b, a), [z, y],
                  -(y * np_log_softmax(z)).sum(-1))
    check_forward(lambda a, b: mf.nn.softmax_cross_entropy_with_logits(labels=b, logits=a,
                                                                       axis=0), [z, y],
                  -(y * np_log_softmax(z, axis=0)).sum(0))


def test_softmax_xent_over_no_classes_is_zero_as_tensorflow():
    logits = mf.placeholder(mf.float32, [2, None])
    loss = mf.nn.softmax_cross_entropy_with_logits_v2(labels=logits * 1.0, logits=logits)
    grad = mf.gradients(mf.reduce_sum(loss), logits)[0]
    with mf.Session() as sess:
        got_loss, got_grad = sess.run([loss, grad], {logits: np.zeros((2, 0), np.float32)})
    np.testing.assert_array_equal(got_loss, np.zeros(2, np.float32))
    assert got_loss.dtype == np.float32 and got_grad.shape == (2, 0)


def test_sparse_softmax_xent_matches_numpy():
    z = arr(4, 5) * 5
    labels = np.array([4, 0, 2, 2], dtype=np.int32)
    check_forward(lambda a, b: mf.nn.sparse_softmax_cross_entropy_with_logits(b, a),
                  [z, labels], -np_log_softmax(z)[np.arange(4), labels])


def test_sigmoid_xent_matches_numpy():
    z, y = arr(3, 4) * 5, arr(3, 4, low=0, high=1)
    p = 1 / (1 + np.exp(-z))
    check_forward(lambda a, b: mf.nn.sigmoid_cross_entropy_with_logits(b, a), [z, y],
                  -(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_weighted_xent_matches_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1.nn.weighted_cross_entropy_with_logits (float32).
    z = np.array([[-800.0, -3.0, -0.5, 0.25], [2.0, 30.0, 800.0, 0.1]], np.float32)
    y = np.array([[1.0, 0.0, 0.3, 1.0], [0.0, 1.0, 1.0, 0.5]], np.float32)
    logits = mf.Variable(z)
    loss = mf.nn.weighted_cross_entropy_with_logits(labels=y, logits=logits, pos_weight=3.0)
    by_column = mf.nn.weighted_cross_entropy_with_logits(
        targets=y, logits=logits, pos_weight=np.array([0.5, 1.0, 2.0, 4.0], np.float32))
    grad = mf.gradients(mf.reduce_sum(loss) + mf.reduce_sum(by_column), logits)[0]
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        got, got_by_column, got_grad = sess.run([loss, by_column, grad])
    np.testing.assert_allclose(got, [[2400.0, 0.048587322, 1.2085232, 1.7278185],
                                     [2.126928, 2.8072867e-13, 0.0, 1.3387933]], rtol=1e-6)
    np.testing.assert_allclose(got_by_column, [[400.0, 0.048587322, 0.91630006, 2.3037579],
                                               [2.126928, 9.357623e-14, 0.0, 1.6609917]],
                               rtol=1e-6)
    np.testing.assert_allclose(got_grad, [[-3.5, 0.094851851, -0.40513206, -3.0647647],
                                          [1.7615943, -3.7430489e-13, 0.0, -1.1375934]],
                               rtol=2e-6)
    assert loss.name == "logistic_loss:0" and loss.dtype == mf.float32


def test_weighted_xent_with_pos_weight_one_is_the_sigmoid_xent_gradient_included():
    # Also at a logit of exactly 0 (a zero-initialized output layer), where TensorFlow's
    # abs/relu form drops the -1/2 of log(1 + exp(-x)) from the gradient.
    z = np.array([[0.0, -2.0, 3.0], [0.0, 40.0, -40.0]])
    y = np.array([[1.0, 0.0, 0.4], [0.0, 1.0, 1.0]])
    logits = mf.constant(z)
    weighted = mf.nn.weighted_cross_entropy_with_logits(y, logits, pos_weight=1.0)
    plain = mf.nn.sigmoid_cross_entropy_with_logits(y, logits)
    grads = [mf.gradients(mf.reduce_sum(t), logits)[0] for t in (weighted, plain)]
    with mf.Session() as sess:
        w, p, gw, gp = sess.run([weighted, plain] + grads)
    np.testing.assert_allclose(w, p, rtol=1e-12)
    np.testing.assert_allclose(gw, gp, rtol=1e-12)
    np.testing.assert_allclose(gw[:, 0], 0.5 - y[:, 0])


def test_weighted_xent_argument_errors():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"logistic_loss.*\(3, 4\)"):
        mf.nn.weighted_cross_entropy_with_logits(mf.zeros([4, 3]), mf.zeros([3, 4]), 2.0)
    with pytest.raises(mf.errors.InvalidArgumentError, match="pos_weight must be given"):
        mf.nn.weighted_cross_entropy_with_logits(mf.zeros([3]), mf.zeros([3]))
    with pytest.raises(mf.errors.InvalidArgumentError, match="not both"):
        mf.nn.weighted_cross_entropy_with_logits(mf.zeros([3]), mf.zeros([3]), 2.0,
                                                 targets=mf.zeros([3]))


def test_cross_entropies_are_stable_at_logits_1000():
    z = np.array([[1000.0, 0.0, -1000.0], [-1000.0, 0.0, 1000.0]], dtype=np.float32)
    one_hot = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    logits = mf.placeholder(mf.float32, [2, 3])
    dense = mf.nn.softmax_cross_entropy_with_logits_v2(one_hot, logits)
    sparse = mf.nn.sparse_softmax_cross_entropy_with_logits([0, 0], logits)
    sig = mf.nn.sigmoid_cross_entropy_with_logits(np.zeros((2, 3), np.float32), logits)
    grads = mf.gradients([dense, sparse, sig], logits)[0]
    with mf.Session() as sess:
        d, s, g, gs = sess.run([dense, sparse, sig, grads], {logits: z})
    np.testing.assert_allclose(d, [0.0, 2000.0], rtol=1e-6)
    np.testing.assert_allclose(s, [0.0, 2000.0], rtol=1e-6)
    np.testing.assert_allclose(g, [[1000.0, np.log(2.0), 0.0], [0.0, np.log(2.0), 1000.0]],
                               rtol=1e-6)
    # dense and sparse each give softmax - one_hot; sigmoid xent with labels 0 gives sigmoid.
    expected = 2 * (np.array([[1.0, 0, 0], [0, 0, 1.0]]) - one_hot) + \
        np.array([[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]])
    assert np.isfinite(gs).all()
    np.testing.assert_allclose(gs, expected, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_softmax_and_cross_entropies_of_half_floats_compute_in_float32(dtype):
    # float16 logits 65504 and -65504: their difference overflows float16 (a NaN loss
    # where TensorFlow gives log 2); bfloat16 rounded each exp and sum on the way.
    dt = mf.as_dtype(dtype)
    top = 65504.0 if dtype == "float16" else 1e38
    z = np.array([[top, top, -top], [1.0, 2.0, 3.0]], np.float32)
    one_hot = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    logits, labels = mf.placeholder(dt, [2, 3]), mf.placeholder(dt, [2, 3])
    dense = mf.nn.softmax_cross_entropy_with_logits_v2(labels, logits)
    sparse = mf.nn.sparse_softmax_cross_entropy_with_logits([0, 2], logits)
    out = [mf.nn.softmax(logits), mf.nn.log_softmax(logits), dense, sparse,
           mf.gradients(dense, logits)[0]]
    with mf.Session() as sess:
        got = sess.run(out, {logits: z.astype(dt.np_dtype), labels: one_hot.astype(dt.np_dtype)})
    shifted = z.astype(np.float64) - z.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[[0, 1], [0, 2]]
    for value, exact in zip(got, [np.exp(log_p), log_p, loss, loss, np.exp(log_p) - one_hot]):
        assert value.dtype == dt.np_dtype
        # Rounded once from the exact value: the nearest half float to it (log_softmax's
        # -131008 is -inf in float16).
        with np.errstate(over="ignore"):
            nearest = exact.astype(np.float32).astype(dt.np_dtype)
        np.testing.assert_array_equal(value, nearest)


def test_moments_of_float16_compute_in_float32_as_tensorflow():
    # Squared deviations of +-300 are 90000, past float16's 65504: TensorFlow's moments
    # casts float16 to float32 and back, so the variance is 18000, not inf.
    values = np.zeros((2, 10), np.float16)
    values[:, :2] = [-300, 300]
    x = mf.placeholder(mf.float16, [2, 10])
    mean, variance = mf.nn.moments(x, axes=[1])
    grad = mf.gradients(mf.reduce_sum(variance), x)[0]
    with mf.Session() as sess:
        m, v, g = sess.run([mean, variance, grad], {x: values})
    assert m.dtype == v.dtype == g.dtype == np.float16
    np.testing.assert_array_equal(m, [0, 0])
    np.testing.assert_array_equal(v, [18000, 18000])
    np.testing.assert_array_equal(g[:, :3], [[-60, 60, 0]] * 2)     # 2 (x - mean) / 10


def test_l2_loss_and_moments_forward():
    x = arr(3, 4, 5)
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    check_forward(lambda a: mf.nn.moments(a, axes=[0, 2])[0], [x], mean)
    check_forward(lambda a: mf.nn.moments(a, axes=[0, 2])[1], [x], var)
    check_forward(lambda a: mf.nn.moments(a, axes=[0, 2], keepdims=True)[1], [x],
                  x.var(axis=(0, 2), keepdims=True))


def test_in_top_k_counts_ties_in_the_targets_favour():
    p = np.array([[0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.2, 0.3], [0.2, 0.2, 0.2]],
                 dtype=np.float32)
    t = np.array([1, 0, 1, 2], dtype=np.int32)
    check_forward(lambda a, b: mf.nn.in_top_k(a, b, 1), [p, t], [True, False, False, True])
    check_forward(lambda a, b: mf.nn.in_top_k(a, b, 2), [p, t], [True, True, False, True])


def test_in_top_k_is_false_for_out_of_range_targets_and_non_finite_rows():
    p = np.array([[0.1, 0.9], [np.nan, 0.5], [0.4, 0.6]], dtype=np.float32)
    t = np.array([1, 1, 2], dtype=np.int64)
    check_forward(lambda a, b: mf.nn.in_top_k(a, b, 2), [p, t], [True, False, False])


# -- dropout --------------------------------------------------------------------------------

def _run_dropout(seed=None, graph_seed=None, shape=(200, 500), **kwargs):
    graph = mf.Graph()
    with graph.as_default():
        if graph_seed is not None:
            mf.set_random_seed(graph_seed)
        x = mf.ones(shape, dtype=mf.float32)
        y = mf.nn.dropout(x, seed=seed, **kwargs)
        with mf.Session() as sess:
            return sess.run(y), sess.run(y)


def test_dropout_keeps_the_expected_fraction_scaled_by_one_over_keep_prob():
    y, _ = _run_dropout(graph_seed=1, keep_prob=0.7)
    assert y.dtype == np.float32
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.02


def test_dropout_rate_is_one_minus_keep_prob():
    by_rate, _ = _run_dropout(graph_seed=3, rate=0.25)
    by_keep, _ = _run_dropout(graph_seed=3, keep_prob=0.75)
    np.testing.assert_array_equal(by_rate, by_keep)


def test_dropout_is_reproducible_with_set_random_seed_and_fresh_each_run():
    first, second = _run_dropout(graph_seed=42, keep_prob=0.5, shape=(50,))
    again, _ = _run_dropout(graph_seed=42, keep_prob=0.5, shape=(50,))
    other, _ = _run_dropout(graph_seed=43, keep_prob=0.5, shape=(50,))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)
    assert not np.array_equal(first, other)
    op_seeded, _ = _run_dropout(seed=7, keep_prob=0.5, shape=(50,))
    np.testing.assert_array_equal(op_seeded, _run_dropout(seed=7, keep_prob=0.5, shape=(50,))[0])


def test_dropout_gradient_uses_the_forward_mask():
    mf.set_random_seed(0)
    x = mf.placeholder(mf.float64, [20, 30])
    y = mf.nn.dropout(x, keep_prob=0.6)
    dx = mf.gradients(y, x)[0]
    value = arr(20, 30) + 2.0
    with mf.Session() as sess:
        out, grad = sess.run([y, dx], {x: value})
    np.testing.assert_allclose(grad, (out != 0) / 0.6)
    np.testing.assert_allclose(out, value * grad)


def test_dropout_noise_shape_drops_whole_rows():
    y, _ = _run_dropout(graph_seed=5, keep_prob=0.5, noise_shape=[40, 1], shape=(40, 6))
    rows = y != 0
    assert (rows.all(axis=1) | ~rows.any(axis=1)).all()
    assert 0 < rows[:, 0].sum() < 40


def test_dropout_with_keep_prob_fed_at_run_time():
    x = mf.ones([1000])
    keep = mf.placeholder(mf.float32, [])
    y = mf.nn.dropout(x, keep)
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {keep: 1.0}), np.ones(1000))
        assert 400 < (sess.run(y, {keep: 0.5}) != 0).sum() < 600
    x = mf.placeholder(mf.float32, [3])
    assert mf.nn.dropout(x, keep_prob=1.0) is x


@pytest.mark.parametrize("kwargs", [{"keep_prob": 0.0}, {"keep_prob": 1.5}, {"rate": 1.0},
                                    {"keep_prob": 0.5, "rate": 0.5}, {}])
def test_dropout_rejects_bad_probabilities(kwargs):
    with pytest.raises(mf.errors.InvalidArgumentError, match="dropout"):
        mf.nn.dropout(mf.ones([3]), **kwargs)


# -- errors ---------------------------------------------------------------------------------

def test_bias_add_with_wrong_bias_length_is_a_build_error_naming_the_op():
    v = mf.placeholder(mf.float32, [2, 3, 4])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"op 'BiasAdd' \(BiasAdd\).*length 4.*got length 3"):
        mf.nn.bias_add(v, mf.zeros([3]))
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"rank >= 2 in op 'BiasAdd'"):
        mf.nn.bias_add(mf.zeros([4]), mf.zeros([4]))


def test_xent_shape_mismatch_is_a_build_error_naming_the_op():
    logits = mf.placeholder(mf.float32, [3, 4])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"op 'xent' \(SoftmaxCrossEntropyWithLogits\).*\(3, 5\)"):
        mf.nn.softmax_cross_entropy_with_logits_v2(mf.zeros([3, 5]), logits, name="xent")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"'SparseSoftmaxCrossEntropyWithLogits'.*\(3,\).*got \(2,\)"):
        mf.nn.sparse_softmax_cross_entropy_with_logits([0, 1], logits)
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"logistic_loss.*\(3, 4\)"):
        mf.nn.sigmoid_cross_entropy_with_logits(mf.zeros([4, 3]), logits)


def test_sparse_xent_needs_integer_labels():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"labels.*int32.*float32"):
        mf.nn.sparse_softmax_cross_entropy_with_logits(mf.zeros([3]), mf.zeros([3, 4]))


@pytest.mark.parametrize("bad", [4, -1])
def test_sparse_xent_label_out_of_range_fails_at_run_time_naming_op_and_label(bad):
    logits = mf.placeholder(mf.float32, [None, 4])
    labels = mf.placeholder(mf.int64, [None])
    loss = mf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=rf"label value of {bad} .*\[0, 4\) in op 'loss'"):
            sess.run(loss, {logits: np.zeros((2, 4)), labels: [1, bad]})


def test_in_top_k_batch_mismatch_names_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'InTopK'.*3 targets"):
        mf.nn.in_top_k(mf.zeros([3, 4]), mf.constant([1, 2]), 1)


# Recorded from TensorFlow 2.21's tf.compat.v1 (float32).
NORM_X = np.array([[1.0, -2.0, 2.0], [0.0, 0.0, 0.0], [3e-7, 4e-7, 0.0]], np.float32)


def test_l2_normalize_clips_the_square_sum_at_epsilon_as_tensorflow():
    def run(**kwargs):
        with mf.Graph().as_default():
            x = mf.constant(NORM_X)
            out = mf.nn.l2_normalize(x, **kwargs)
            grad = mf.gradients(mf.reduce_sum(out * mf.constant([[1.0, 2.0, 3.0]] * 3)), x)[0]
            with mf.Session() as sess:
                return sess.run([out, grad])
    rows, grad = run(axis=1)
    np.testing.assert_allclose(rows, [[1 / 3, -2 / 3, 2 / 3], [0, 0, 0], [0.3, 0.4, 0]],
                               rtol=1e-6)
    # A slice below epsilon is scaled by epsilon's rsqrt, with a finite gradient.
    np.testing.assert_allclose(grad, [[0.22222222, 0.88888896, 0.77777779],
                                      [1e6, 2e6, 3e6], [1e6, 2e6, 3e6]], rtol=1e-5)
    np.testing.assert_allclose(run(axis=0, epsilon=1e-3)[0],
                               [[1, -1, 1], [0, 0, 0], [3e-7, 2e-7, 0]], rtol=1e-6)
    np.testing.assert_allclose(run(dim=[0, 1])[0][2], [1.0000001e-07, 1.3333334e-07, 0],
                               rtol=1e-6)


def test_batch_normalization_matches_tensorflow_with_and_without_offset_and_scale():
    mean = np.array([0.5, -1.0, 1.0], np.float32)
    variance = np.array([2.0, 0.25, 1e-4], np.float32)
    offset = np.array([0.1, 0.2, 0.3], np.float32)
    scale = np.array([2.0, -1.0, 0.5], np.float32)
    with mf.Graph().as_default():
        x = mf.constant(NORM_X)
        full = mf.nn.batch_normalization(x, mean, variance, offset, scale, 1e-3)
        bare = mf.nn.batch_normalization(x, mean, variance, None, None, 1e-3)
        grad = mf.gradients(mf.reduce_sum(full * full), x)[0]
        with mf.Session() as sess:
            got_full, got_bare, got_grad = sess.run([full, bare, grad])
    np.testing.assert_allclose(got_full, [[0.8069301, 2.196012, 15.375567],
                                          [-0.6069301, -1.796012, -14.775567],
                                          [-0.60692966, -1.7960129, -14.775567]], rtol=1e-6)
    np.testing.assert_allclose(got_bare, [[0.35346505, -1.9960121, 30.151134],
                                          [-0.35346505, 1.9960121, -30.151134],
                                          [-0.35346484, 1.9960129, -30.151134]], rtol=1e-6)
    np.testing.assert_allclose(got_grad, [[2.2817729, -8.766533, 463.5908],
                                          [-1.7162286, 7.1697235, -445.50012],
                                          [-1.7162274, 7.169727, -445.50012]], rtol=1e-5)
