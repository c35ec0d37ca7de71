"""Initializers and the random ops under them, as TF1's: the value each gives (shapes,
dtypes, distributions measured on large seeded draws) and the arguments each takes."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors


def _value(tensor, feed=None):
    with mf.Session() as sess:
        return sess.run(tensor, feed)


# -- constant ----------------------------------------------------------------------------------

def test_constant_initializer_completes_a_short_value_with_its_last_element():
    """TF1's constant_initializer: fewer elements than the shape are completed with the
    last one; more are refused, and verify_shape=True takes only the exact shape."""
    got = _value(mf.constant_initializer([1, 2, 3])([2, 3]))
    np.testing.assert_array_equal(got, [[1, 2, 3], [3, 3, 3]])
    np.testing.assert_array_equal(_value(mf.constant_initializer([[1, 2, 3], [4, 5, 6]])([3, 2])),
                                  [[1, 2], [3, 4], [5, 6]])
    with pytest.raises(errors.InvalidArgumentError, match="expected at most 6 elements"):
        mf.constant_initializer(list(range(7)))([2, 3])
    with pytest.raises(errors.InvalidArgumentError, match="verify_shape.*shape \\[6\\] is not "
                       "the variable shape \\[2, 3\\]"):
        mf.constant_initializer(list(range(6)), verify_shape=True)([2, 3])


# -- variance scaling --------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0.0, -1.0, "2"])
def test_variance_scaling_refuses_a_scale_that_is_not_positive(scale):
    with pytest.raises(errors.InvalidArgumentError, match="scale must be a positive number"):
        mf.variance_scaling_initializer(scale)


# -- distributions -----------------------------------------------------------------------------

_FAN_IN, _FAN_OUT = 3 * 5 * 40, 3 * 5 * 60      # of a [3, 5, 40, 60] conv kernel
_TRUNCATED_STD = 0.87962566103423978            # of a unit normal cut at +-2


def _uniform(limit):
    return {"mean": 0.0, "std": limit / np.sqrt(3), "bound": limit}


def _truncated(std):
    return {"mean": 0.0, "std": std, "bound": 2 * std / _TRUNCATED_STD}


@pytest.mark.parametrize("make,expected", [
    (lambda: mf.glorot_uniform_initializer(),
     _uniform(np.sqrt(6 / (_FAN_IN + _FAN_OUT)))),
    (lambda: mf.glorot_normal_initializer(),
     _truncated(np.sqrt(2 / (_FAN_IN + _FAN_OUT)))),
    (lambda: mf.variance_scaling_initializer(2.0, "fan_in", "truncated_normal"),
     _truncated(np.sqrt(2 / _FAN_IN))),
    (lambda: mf.variance_scaling_initializer(2.0, "fan_out", "normal"),
     _truncated(np.sqrt(2 / _FAN_OUT))),
    (lambda: mf.variance_scaling_initializer(3.0, "fan_avg", "uniform"),
     _uniform(np.sqrt(9 / ((_FAN_IN + _FAN_OUT) / 2)))),
    (lambda: mf.variance_scaling_initializer(1.0, "fan_in", "untruncated_normal"),
     {"mean": 0.0, "std": np.sqrt(1 / _FAN_IN), "bound": None}),
    (lambda: mf.truncated_normal_initializer(1.0, 2.0),
     {"mean": 1.0, "std": 2.0 * _TRUNCATED_STD, "bound": (-3.0, 5.0)}),
    (lambda: mf.random_uniform_initializer(-2.0, 3.0),
     {"mean": 0.5, "std": 5 / np.sqrt(12), "bound": (-2.0, 3.0)}),
    (lambda: mf.random_normal_initializer(1.0, 2.0),
     {"mean": 1.0, "std": 2.0, "bound": None}),
], ids=["glorot_uniform", "glorot_normal", "he_normal", "fan_out_normal", "fan_avg_uniform",
        "untruncated", "truncated_normal", "random_uniform", "random_normal"])
def test_initializers_draw_tf1s_distributions(make, expected):
    """Mean and std of 180,000 seeded draws within a few standard errors of TF1's, and
    every draw inside the distribution's bounds (truncation at two stddevs)."""
    mf.set_random_seed(0)
    value = _value(make()([3, 5, 40, 60]))
    assert value.dtype == np.float32 and value.shape == (3, 5, 40, 60)
    std, n = expected["std"], value.size
    assert abs(value.mean() - expected["mean"]) < 5 * std / np.sqrt(n)
    assert abs(value.std() / std - 1) < 5 / np.sqrt(2 * n)
    bound = expected["bound"]
    if bound is not None:
        low, high = (-bound, bound) if np.isscalar(bound) else bound
        assert low <= value.min() and value.max() <= high
        assert value.min() < low + 0.01 * (high - low), "the draws fill the whole range"


def test_a_graph_seed_makes_initial_values_reproducible_and_op_seeds_distinct():
    def draw():
        graph = mf.Graph()
        with graph.as_default():
            mf.set_random_seed(5)
            first = mf.glorot_uniform_initializer()([3, 4])
            second = mf.glorot_uniform_initializer()([3, 4])
            seeded = mf.random_normal_initializer(seed=3)
            return _value([first, second, seeded([3]), seeded([3])])
    once, again = draw(), draw()
    for a, b in zip(once, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(once[0], once[1])
    np.testing.assert_array_equal(once[2], once[3])


# -- the random ops' arguments -----------------------------------------------------------------

def test_random_ops_take_tensors_for_their_mean_spread_and_bounds():
    """tf.random_normal(shape, mean=t, stddev=t), tf.random_uniform(minval=t, maxval=t):
    a noise level fed at run time."""
    mf.set_random_seed(0)
    level = mf.placeholder(mf.float32, [])
    normal = mf.random_normal([200000], mean=level, stddev=2 * level)
    truncated = mf.truncated_normal([200000], stddev=level)
    uniform = mf.random_uniform([200000], minval=level, maxval=level + 3)
    got_normal, got_truncated, got_uniform = _value([normal, truncated, uniform], {level: 2.0})
    assert abs(got_normal.mean() - 2) < 0.05 and abs(got_normal.std() - 4) < 0.05
    assert abs(got_truncated.std() - 2 * _TRUNCATED_STD) < 0.02
    assert np.abs(got_truncated).max() <= 4
    assert 2 <= got_uniform.min() and got_uniform.max() <= 5
    assert abs(got_uniform.mean() - 3.5) < 0.02


def test_random_uniform_of_an_integer_dtype_draws_integers_in_its_half_open_range():
    """TF1's tf.random_uniform([], 0, 4, dtype=tf.int32) (a random rotation, crop offset or
    index): every integer of [minval, maxval) about equally often, the dtype kept; the
    bounds may be tensors, and random_uniform_initializer takes an integer dtype too."""
    mf.set_random_seed(1)
    low = mf.placeholder(mf.int64, [])
    ints = mf.random_uniform([40000], -3, 4, dtype=mf.int32)
    fed = mf.random_uniform([1000], low, low + 2, dtype=mf.int64)
    table = mf.get_variable("ids", [1000], dtype=mf.int32,
                            initializer=mf.random_uniform_initializer(0, 10, dtype=mf.int32))
    assert ints.dtype is mf.int32 and ints.shape.as_list() == [40000]
    with mf.Session() as sess:
        sess.run(table.initializer)
        got, got_fed, got_table = sess.run([ints, fed, table], {low: 7})
    assert got.dtype == np.int32 and got_fed.dtype == np.int64
    counts = np.bincount(got + 3)
    assert len(counts) == 7 and counts.min() > 5300 and counts.max() < 6100
    assert set(np.unique(got_fed)) == {7, 8}
    assert got_table.min() == 0 and got_table.max() == 9


def test_random_uniform_of_an_integer_dtype_needs_maxval_below_it_minval():
    with pytest.raises(mf.errors.InvalidArgumentError, match="maxval must be given"):
        mf.random_uniform([3], 0, dtype=mf.int32)
    empty = mf.random_uniform([3], 5, 5, dtype=mf.int64)
    with pytest.raises(mf.errors.InvalidArgumentError, match="Need minval < maxval"):
        _value(empty)
    with pytest.raises(mf.errors.InvalidArgumentError, match="floating variables only"):
        mf.glorot_uniform_initializer(dtype=mf.int32)([2, 2])
