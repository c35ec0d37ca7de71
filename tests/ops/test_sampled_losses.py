"""nce_loss, sampled_softmax_loss and the candidate samplers: losses against TensorFlow's
for given samples, gradients against finite differences, sparse gradients over sharded
class tables, and the samplers' draws and expected counts."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_gradient

# The classes' weights, biases and the inputs of the cases recorded from TensorFlow.
_R = np.random.RandomState(3)
CLASSES, DIM, BATCH = 9, 4, 3
WEIGHTS = _R.randn(CLASSES, DIM).astype(np.float32) * 0.5
BIASES = _R.randn(CLASSES).astype(np.float32) * 0.1
INPUTS = _R.randn(BATCH, DIM).astype(np.float32)
LABELS = np.array([[2], [7], [0]], np.int64)
LABELS2 = np.array([[2, 5], [7, 7], [0, 1]], np.int64)     # class 5 and 0 are also sampled
SAMPLED = np.array([5, 0, 8, 3], np.int64)
SAMPLED_COUNT = np.array([0.2, 0.9, 0.05, 0.15], np.float32)
TRUE_COUNT = np.array([[0.3], [0.1], [0.9]], np.float32)
TRUE_COUNT2 = np.array([[0.3, 0.2], [0.1, 0.1], [0.9, 0.6]], np.float32)


def _given(true_count):
    return (SAMPLED, true_count, SAMPLED_COUNT)


GRAD_CASES = [
    GradCase("nce_loss_two_labels_accidental_hits",
             lambda w, b, x: mf.nn.nce_loss(w, b, LABELS2, x, 4, CLASSES, num_true=2,
                                            sampled_values=_given(TRUE_COUNT2),
                                            remove_accidental_hits=True),
             [WEIGHTS.astype(np.float64), BIASES.astype(np.float64),
              INPUTS.astype(np.float64)]),
    GradCase("sampled_softmax_loss_two_shards",
             lambda w0, w1, b0, b1, x: mf.nn.sampled_softmax_loss(
                 [w0, w1], [b0, b1], LABELS, x, 4, CLASSES,
                 sampled_values=_given(TRUE_COUNT)),
             [WEIGHTS[0::2].astype(np.float64), WEIGHTS[1::2].astype(np.float64),
              BIASES[0::2].astype(np.float64), BIASES[1::2].astype(np.float64),
              INPUTS.astype(np.float64)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


def _tables(layout):
    """The class weights and biases as one table, or two shards for ``layout``."""
    if layout == "single":
        return mf.Variable(WEIGHTS), mf.Variable(BIASES)
    if layout == "mod":
        return ([mf.Variable(WEIGHTS[i::2]) for i in range(2)],
                [mf.Variable(BIASES[i::2]) for i in range(2)])
    return ([mf.Variable(WEIGHTS[:5]), mf.Variable(WEIGHTS[5:])],
            [mf.Variable(BIASES[:5]), mf.Variable(BIASES[5:])])


# Recorded from TF 2.21's tf.compat.v1.nn (float32), for the samples given above.
RECORDED = {
    ("nce", 1, False): [11.943863, 6.8184304, 7.1503067],
    ("nce", 2, True): [11.27143, 10.374704, 7.126357],
    ("softmax", 1, True): [5.7889137, 0.58132166, 3.1299977],
    ("softmax", 2, True): [5.116481, 1.0254682, 3.5140505],
    ("softmax", 2, False): [5.1281605, 1.0254682, 3.5559716],
}


@pytest.mark.parametrize("layout", ["single", "mod", "div"])
@pytest.mark.parametrize("loss, num_true, remove_hits", sorted(RECORDED))
def test_sampled_losses_match_tensorflow_for_given_samples(loss, num_true, remove_hits,
                                                           layout):
    weights, biases = _tables(layout)
    labels, true_count = (LABELS, TRUE_COUNT) if num_true == 1 else (LABELS2, TRUE_COUNT2)
    fn = mf.nn.nce_loss if loss == "nce" else mf.nn.sampled_softmax_loss
    out = fn(weights, biases, labels, INPUTS, 4, CLASSES, num_true=num_true,
             sampled_values=_given(true_count), remove_accidental_hits=remove_hits,
             partition_strategy="div" if layout == "div" else "mod")
    assert out.shape.as_list() == [BATCH] and out.dtype == mf.float32
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(out), RECORDED[loss, num_true, remove_hits],
                                   rtol=1e-5)


def test_sampled_loss_gradients_match_tensorflow_and_are_sparse_in_the_classes():
    weights, biases = mf.Variable(WEIGHTS), mf.Variable(BIASES)
    inputs = mf.Variable(INPUTS)
    nce = mf.nn.nce_loss(weights, biases, LABELS2, inputs, 4, CLASSES, num_true=2,
                         sampled_values=_given(TRUE_COUNT2), remove_accidental_hits=True)
    softmax = mf.nn.sampled_softmax_loss(weights, biases, LABELS2, inputs, 4, CLASSES,
                                         num_true=2, sampled_values=_given(TRUE_COUNT2))
    grads = mf.gradients(mf.reduce_sum(nce) + 2 * mf.reduce_sum(softmax),
                         [weights, biases, inputs])
    assert [type(g) for g in grads] == [mf.IndexedSlices, mf.IndexedSlices, mf.Tensor]
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        d_inputs, d_biases = sess.run([grads[2], mf.convert_to_tensor(grads[1])])
    # Recorded from TF 2.21's tf.compat.v1.nn.
    np.testing.assert_allclose(d_inputs, [[-0.36432874, 0.21465594, -1.006743, -4.934215],
                                          [-0.5915434, 0.63094455, 0.73167956, -0.96505636],
                                          [-0.3537706, 1.8824614, 0.12972295, -0.5400345]],
                               rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(d_biases, [0.30017793, -1.0157255, -0.8658338, 4.5733066, 0.0,
                                          1.1594346, 0.0, 0.37742412, 4.6958833],
                               rtol=2e-6, atol=1e-6)


def test_sampled_softmax_trains_a_partitioned_class_table_with_its_own_sampler():
    mf.set_random_seed(1)
    table = mf.get_variable("classes", [40, 6], partitioner=mf.fixed_size_partitioner(3),
                            initializer=mf.random_normal_initializer(stddev=0.1))
    biases = mf.get_variable("biases", [40], initializer=mf.zeros_initializer())
    inputs = mf.constant(np.random.default_rng(2).standard_normal((8, 6)), mf.float32)
    labels = np.arange(8, dtype=np.int64).reshape(8, 1) * 5
    loss = mf.reduce_mean(mf.nn.sampled_softmax_loss(table, biases, labels, inputs, 10, 40,
                                                     seed=4))
    opt = mf.train.GradientDescentOptimizer(0.5)
    grads_and_vars = opt.compute_gradients(loss)
    assert all(isinstance(g, mf.IndexedSlices) for g, _ in grads_and_vars)
    train = opt.apply_gradients(grads_and_vars)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(30):
            sess.run(train)
        assert sess.run(loss) < first / 4


def test_a_table_split_by_a_training_mode_is_looked_up_by_its_own_strategy():
    # A TrainingMode splits a large class table by ranges ("div"); the losses' default
    # addresses its rows as embedding_lookup does, so it stays one layout for checkpoints.
    table = mf.get_variable("classes", initializer=WEIGHTS,
                            partitioner=mf.fixed_size_partitioner(2))
    table.lookup_strategy = "div"
    loss = mf.nn.nce_loss(table, BIASES, LABELS, INPUTS, 4, CLASSES,
                          sampled_values=_given(TRUE_COUNT))
    assert {part._save_slice_info.lookup for part in table} == {"div"}
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(loss), RECORDED["nce", 1, False], rtol=1e-5)


# -- the samplers -----------------------------------------------------------------------------

def _log_uniform_p(k, range_max):
    return np.log((k + 2.0) / (k + 1.0)) / np.log(range_max + 1.0)


def test_log_uniform_unique_draws_are_distinct_classes_with_counts_over_the_tries():
    labels = np.array([[0], [3], [49]], np.int64)
    sampled, true_count, sampled_count = mf.nn.log_uniform_candidate_sampler(
        labels, num_true=1, num_sampled=20, unique=True, range_max=50, seed=2)
    assert [t.shape.as_list() for t in (sampled, true_count, sampled_count)] == [
        [20], [3, 1], [20]]
    assert (sampled.dtype, true_count.dtype) == (mf.int64, mf.float32)
    with mf.Session() as sess:
        for _ in range(5):
            got, got_true, got_sampled = sess.run([sampled, true_count, sampled_count])
            assert len(set(got.tolist())) == 20 and got.min() >= 0 and got.max() < 50
            # Each count is 1 - (1 - p)^tries, one number of tries for every class.
            p = _log_uniform_p(got, 50)
            tries = np.round(np.log1p(-got_sampled) / np.log1p(-p))
            assert len(set(tries.tolist())) == 1 and tries[0] >= 20
            np.testing.assert_allclose(
                got_true, -np.expm1(tries[0] * np.log1p(-_log_uniform_p(labels, 50))),
                rtol=1e-5)


def test_log_uniform_draws_follow_their_distribution_and_count_p_times_n():
    sampled, true_count, sampled_count = mf.nn.log_uniform_candidate_sampler(
        [[0], [9]], num_true=1, num_sampled=100000, unique=False, range_max=50, seed=1)
    with mf.Session() as sess:
        got, got_true, got_sampled = sess.run([sampled, true_count, sampled_count])
    frequency = np.bincount(got, minlength=50) / got.size
    np.testing.assert_allclose(frequency, _log_uniform_p(np.arange(50), 50), atol=4e-3)
    np.testing.assert_allclose(got_true, 100000 * _log_uniform_p(np.array([[0], [9]]), 50),
                               rtol=1e-6)
    np.testing.assert_allclose(got_sampled, 100000 * _log_uniform_p(got, 50), rtol=1e-6)


def test_uniform_sampler_counts_and_a_seed_repeats_the_draws():
    draws = []
    for _ in range(2):
        graph = mf.Graph()
        with graph.as_default():
            out = mf.nn.uniform_candidate_sampler([[1, 2]], num_true=2, num_sampled=5,
                                                  unique=False, range_max=20, seed=7)
            with mf.Session() as sess:
                draws.append(sess.run(out))
    np.testing.assert_array_equal(draws[0][0], draws[1][0])
    assert draws[0][0].min() >= 0 and draws[0][0].max() < 20
    np.testing.assert_allclose(draws[0][1], [[0.25, 0.25]])
    np.testing.assert_allclose(draws[0][2], np.full(5, 0.25))


def test_sampler_and_loss_argument_errors():
    with pytest.raises(mf.errors.InvalidArgumentError, match="range is too small"):
        mf.nn.log_uniform_candidate_sampler([[1]], 1, 11, True, 10)
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"shape \[batch, 2\]"):
        mf.nn.uniform_candidate_sampler([[1]], 2, 3, True, 10)
    with pytest.raises(mf.errors.InvalidArgumentError, match="must be Python ints"):
        mf.nn.uniform_candidate_sampler([[1]], 1, 3.0, True, 10)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"labels must be \[batch, num_true\].*reshape"):
        mf.nn.sampled_softmax_loss(WEIGHTS, BIASES, [2, 7, 0], INPUTS, 4, CLASSES)
