"""mf.losses behaves as TF1's tf.losses: each reduction against numpy, the loss functions
against their formulas, weights' broadcasting rule, the LOSSES and REGULARIZATION_LOSSES
collections, and errors that name the loss."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors
from tests.ops.gradcheck import GradCase, check_gradient

R = mf.losses.Reduction


def _run(fetches, feed=None):
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        return sess.run(fetches, feed)


# -- reductions ---------------------------------------------------------------------------------

LOSSES = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
WEIGHTS = np.array([[2.0, 0.0, 1.0], [0.5, 0.0, 1.0]], np.float32)
WEIGHTED_SUM = (LOSSES * WEIGHTS).sum()      # 13


@pytest.mark.parametrize("reduction,expected", [
    (R.NONE, LOSSES * WEIGHTS),
    (R.SUM, WEIGHTED_SUM),
    (R.MEAN, WEIGHTED_SUM / WEIGHTS.sum()),
    (R.SUM_OVER_BATCH_SIZE, WEIGHTED_SUM / LOSSES.size),
    (R.SUM_BY_NONZERO_WEIGHTS, WEIGHTED_SUM / 4),
])
def test_each_reduction_matches_its_numpy_formula(reduction, expected):
    loss = mf.losses.compute_weighted_loss(LOSSES, WEIGHTS, reduction=reduction)
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-6)


def test_the_default_reduction_divides_by_the_nonzero_weights_as_tf1():
    assert R.SUM_OVER_NONZERO_WEIGHTS == R.SUM_BY_NONZERO_WEIGHTS
    loss = mf.losses.compute_weighted_loss(LOSSES, WEIGHTS)
    np.testing.assert_allclose(_run(loss), WEIGHTED_SUM / 4, rtol=1e-6)
    assert set(R.all()) == {"none", "weighted_sum", "weighted_mean",
                            "weighted_sum_over_batch_size", "weighted_sum_by_nonzero_weights"}


def test_all_zero_weights_give_a_zero_loss_and_zero_gradients_not_nan():
    x = mf.Variable(LOSSES)
    for reduction in (R.MEAN, R.SUM_BY_NONZERO_WEIGHTS):
        loss = mf.losses.compute_weighted_loss(x * 1.0, np.zeros_like(WEIGHTS),
                                               reduction=reduction)
        value, grad = _run([loss, mf.gradients(loss, [x])[0]])
        assert value == 0 and np.all(grad == 0)


def test_per_example_weights_broadcast_over_the_rest_of_the_loss():
    loss = mf.losses.compute_weighted_loss(LOSSES, [[1.0], [0.0]], reduction=R.MEAN)
    np.testing.assert_allclose(_run(loss), LOSSES[0].mean(), rtol=1e-6)


def test_the_loss_goes_to_the_losses_collection_unless_told_otherwise():
    kept = mf.losses.compute_weighted_loss(LOSSES)
    mf.losses.compute_weighted_loss(LOSSES, loss_collection=None)
    assert mf.losses.get_losses() == [kept]
    assert mf.get_collection(mf.GraphKeys.LOSSES) == [kept]


def test_unknown_reductions_and_unbroadcastable_weights_are_refused_by_name():
    with pytest.raises(errors.InvalidArgumentError, match=r"Invalid Reduction Key 'mean'.*"
                       "'weighted_mean'"):
        mf.losses.mean_squared_error(LOSSES, LOSSES, reduction="mean")
    with pytest.raises(errors.InvalidArgumentError, match=r"weights can not be broadcast to "
                       r"values in 'mean_squared_error'.*got weights of shape \(2,\)"):
        mf.losses.mean_squared_error(LOSSES, LOSSES, weights=[1.0, 2.0])
    with pytest.raises(errors.InvalidArgumentError, match="predictions and labels must have "
                       "the same shape in 'absolute_difference'"):
        mf.losses.absolute_difference(LOSSES, LOSSES[:, :2])
    with pytest.raises(errors.InvalidArgumentError, match="softmax_cross_entropy: "
                       "onehot_labels must not be None"):
        mf.losses.softmax_cross_entropy(None, LOSSES)


def test_float64_losses_stay_float64_and_float32_stay_float32():
    assert mf.losses.mean_squared_error(LOSSES.astype(np.float64), 0 * LOSSES.astype(
        np.float64)).dtype == mf.float64
    assert mf.losses.compute_weighted_loss(LOSSES).dtype == mf.float32


# -- the loss functions -----------------------------------------------------------------------

def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


LOGITS = np.array([[1.0, -2.0, 0.5], [0.1, 0.2, 3.0], [-1.0, 0.0, 1.0]], np.float32)
ONEHOT = np.eye(3, dtype=np.float32)[[0, 2, 1]]


def test_softmax_cross_entropy_averages_the_per_example_cross_entropy():
    loss = mf.losses.softmax_cross_entropy(ONEHOT, LOGITS)
    assert loss.op.name.startswith("softmax_cross_entropy_loss/")
    expected = -(ONEHOT * _log_softmax(LOGITS)).sum(-1).mean()
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-6)


def test_label_smoothing_moves_the_labels_towards_uniform():
    loss = mf.losses.softmax_cross_entropy(ONEHOT, LOGITS, label_smoothing=0.3)
    smoothed = ONEHOT * 0.7 + 0.3 / 3
    expected = -(smoothed * _log_softmax(LOGITS)).sum(-1).mean()
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-6)


def test_softmax_cross_entropy_sends_no_gradient_to_the_labels():
    labels = mf.constant(ONEHOT)
    loss = mf.losses.softmax_cross_entropy(labels, mf.constant(LOGITS))
    assert mf.gradients(loss, [labels]) == [None]


def test_sparse_softmax_cross_entropy_squeezes_column_labels_and_weights():
    labels = np.array([[0], [2], [1]], np.int64)
    weights = np.array([[1.0], [0.0], [3.0]], np.float32)
    loss = mf.losses.sparse_softmax_cross_entropy(labels, LOGITS, weights=weights)
    picked = -_log_softmax(LOGITS)[np.arange(3), labels[:, 0]]
    np.testing.assert_allclose(_run(loss), (picked * weights[:, 0]).sum() / 2, rtol=1e-6)


def _sigmoid_xent(z, y):
    return np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))


P = np.array([[0.2, 0.9], [0.6, 0.4]], np.float32)
Y = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)


@pytest.mark.parametrize("loss_fn,expected", [
    (lambda: mf.losses.mean_squared_error(Y, P), ((P - Y) ** 2).mean()),
    (lambda: mf.losses.absolute_difference(Y, P), np.abs(P - Y).mean()),
    (lambda: mf.losses.huber_loss(Y, 3 * P, delta=1.0),
     np.where(np.abs(3 * P - Y) <= 1, 0.5 * (3 * P - Y) ** 2, np.abs(3 * P - Y) - 0.5).mean()),
    (lambda: mf.losses.log_loss(Y, P),
     (-Y * np.log(P + 1e-7) - (1 - Y) * np.log(1 - P + 1e-7)).mean()),
    (lambda: mf.losses.hinge_loss(Y, P - 0.5), np.maximum(0, 1 - (2 * Y - 1) * (P - 0.5)).mean()),
    (lambda: mf.losses.sigmoid_cross_entropy(Y, 4 * P - 2), _sigmoid_xent(4 * P - 2, Y).mean()),
    (lambda: mf.losses.sigmoid_cross_entropy(Y, P, label_smoothing=0.2),
     _sigmoid_xent(P, Y * 0.8 + 0.1).mean()),
    (lambda: mf.losses.cosine_distance(Y, P, axis=1), (1 - (Y * P).sum(1)).mean()),
], ids=["mse", "absolute", "huber", "log", "hinge", "sigmoid", "sigmoid_smoothed", "cosine"])
def test_each_loss_function_matches_its_formula(loss_fn, expected):
    np.testing.assert_allclose(_run(loss_fn()), expected, rtol=1e-5)


def test_a_weighted_loss_has_the_gradient_of_its_formula(rng):
    def weighted_mse(labels, predictions, weights):
        return mf.losses.mean_squared_error(labels, predictions, weights=weights)
    check_gradient(GradCase("mean_squared_error", weighted_mse,
                            [rng.standard_normal((3, 2)), rng.standard_normal((3, 2)),
                             np.array([[1.0], [0.5], [2.0]])], wrt=[0, 1, 2]))



def _pairwise(labels, predictions, example_weights):
    """The mean pairwise squared error by its definition, for weights per example: the
    weighted sum over examples of the mean over pairs (i != j) of (d_i - d_j) ** 2."""
    total = 0.0
    for d, w in zip(predictions - labels, np.broadcast_to(np.ravel(example_weights),
                                                          (len(labels),))):
        n = d.size
        total += w * sum((d[i] - d[j]) ** 2 for i in range(n) for j in range(n)
                         if i != j) / (n * (n - 1))
    return total


PAIR_LABELS = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -2.0, 3.0], [0.0, 0.2, 0.4, 0.6]])
PAIR_PREDICTIONS = np.array([[0.1, -0.4, 2.5, 1.0], [0.0, 2.0, -1.0, 2.0],
                             [1.0, 1.2, 1.4, 1.6]])


@pytest.mark.parametrize("weights", [1.0, 2.5, np.array([[1.0], [0.0], [3.0]])],
                         ids=["one", "scalar", "per_example"])
def test_mean_pairwise_squared_error_averages_each_examples_pairs(weights):
    loss = mf.losses.mean_pairwise_squared_error(PAIR_LABELS, PAIR_PREDICTIONS,
                                                 weights=weights)
    np.testing.assert_allclose(_run(loss), _pairwise(PAIR_LABELS, PAIR_PREDICTIONS, weights),
                               rtol=1e-12)
    # The third example's predictions are its labels shifted by 1: no loss.
    assert _pairwise(PAIR_LABELS[2:], PAIR_PREDICTIONS[2:], 1.0) < 1e-12
    assert loss.name == "mean_pairwise_squared_error/value_2:0"
    assert mf.get_collection(mf.GraphKeys.LOSSES) == [loss]


def test_mean_pairwise_squared_error_matches_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1.losses.mean_pairwise_squared_error (float32).
    r = np.random.RandomState(4)
    labels, predictions = r.randn(3, 4).astype(np.float32), r.randn(3, 4).astype(np.float32)
    labels3, predictions3 = (r.randn(2, 2, 3).astype(np.float32),
                             r.randn(2, 2, 3).astype(np.float32))
    full = (r.rand(3, 4) > 0.4).astype(np.float32) * 1.5
    losses = [mf.losses.mean_pairwise_squared_error(labels, predictions, weights=w)
              for w in (2.0, 0.0, np.array([[1.0], [0.0], [3.0]], np.float32), full)]
    losses.append(mf.losses.mean_pairwise_squared_error(
        labels3, predictions3, weights=np.array([[[1.0]], [[2.0]]], np.float32)))
    losses.append(mf.losses.mean_pairwise_squared_error(labels[0], predictions[0]))
    np.testing.assert_allclose(_run(losses), [16.939064, 0.0, 8.042805, 50.75534, 15.738024,
                                              0.0], rtol=1e-6)
    assert all(loss.dtype == mf.float32 for loss in losses)


def test_mean_pairwise_squared_error_gradient_and_errors(rng):
    check_gradient(GradCase("mean_pairwise_squared_error",
                            lambda y, p: mf.losses.mean_pairwise_squared_error(
                                y, p, weights=[[1.0], [0.5], [2.0]]),
                            [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]))
    with pytest.raises(errors.InvalidArgumentError, match="weights can not be broadcast"):
        mf.losses.mean_pairwise_squared_error(PAIR_LABELS, PAIR_PREDICTIONS,
                                              weights=np.ones(3))
    with pytest.raises(errors.InvalidArgumentError, match="rank of the predictions"):
        mf.losses.mean_pairwise_squared_error(mf.placeholder(mf.float32),
                                              mf.placeholder(mf.float32))


def test_weights_of_unknown_rank_are_checked_when_the_step_runs_as_tf1():
    # [batch] weights against [batch, d] losses broadcast along the wrong axis in numpy.
    weights = mf.placeholder(mf.float32)
    loss = mf.losses.mean_squared_error(LOSSES, 0 * LOSSES, weights=weights)
    with pytest.raises(errors.InvalidArgumentError, match=r"weights can not be broadcast to "
                       r"values in 'mean_squared_error'.*AlignRank.*got weights of shape "
                       r"\(3,\)"):
        _run(loss, {weights: np.ones(3, np.float32)})
    np.testing.assert_allclose(_run(loss, {weights: [[1.0], [0.0]]}), (LOSSES[0] ** 2).mean(),
                               rtol=1e-6)


def test_sparse_softmax_cross_entropy_squeezes_column_weights_of_unknown_rank():
    labels, weights = mf.placeholder(mf.int64), mf.placeholder(mf.float32)
    loss = mf.losses.sparse_softmax_cross_entropy(labels, LOGITS, weights=weights)
    got = _run(loss, {labels: [[0], [2], [1]], weights: [[1.0], [0.0], [3.0]]})
    picked = -_log_softmax(LOGITS)[np.arange(3), [0, 2, 1]]
    np.testing.assert_allclose(got, (picked * [1.0, 0.0, 3.0]).sum() / 2, rtol=1e-6)

def test_div_no_nan_divides_and_gives_zero_for_a_zero_divisor():
    np.testing.assert_array_equal(_run(mf.div_no_nan([1.0, 2.0], [0.0, 4.0])), [0.0, 0.5])


# -- the collections ----------------------------------------------------------------------------

def test_total_loss_sums_the_losses_and_the_regularization_losses():
    x = mf.constant(np.ones((2, 3), np.float32))
    logits = mf.layers.dense(x, 3, kernel_initializer=mf.ones_initializer(),
                             kernel_regularizer=mf.layers.l2_regularizer(0.5))
    xent = mf.losses.softmax_cross_entropy(ONEHOT[:2], logits)
    extra = mf.constant(1.5)
    mf.losses.add_loss(extra)
    total = mf.losses.get_total_loss()
    only_losses = mf.losses.get_total_loss(add_regularization_losses=False)
    assert total.op.name == "total_loss"
    got_total, got_losses, got_xent = _run([total, only_losses, xent])
    np.testing.assert_allclose(got_losses, got_xent + 1.5, rtol=1e-6)
    np.testing.assert_allclose(got_total, got_xent + 1.5 + 0.5 * 9 / 2, rtol=1e-6)


def test_regularization_loss_is_zero_without_regularizers_and_total_loss_needs_a_loss():
    assert _run(mf.losses.get_regularization_loss()) == 0.0
    with pytest.raises(errors.InvalidArgumentError, match="get_total_loss: no losses in the "
                       "'losses' collection"):
        mf.losses.get_total_loss()


def test_nn_l2_loss_is_half_the_sum_of_squares():
    np.testing.assert_allclose(_run(mf.nn.l2_loss(mf.constant(LOSSES))),
                               (LOSSES ** 2).sum() / 2)
