"""tf.train learning-rate schedules: each against TF1's formula written out in numpy, at
steps before, on and after its decay points; staircase; cycles and warm restarts; errors."""

import math

import numpy as np
import pytest

import mpiflow as mf

STEPS = [0, 1, 5, 9, 10, 11, 15, 29, 30, 31, 37, 69, 71, 100, 250]
LR = 0.5


def schedule_values(build, steps=STEPS, dtype=mf.float64):
    """Values of ``build(global_step)`` at each of ``steps``."""
    step = mf.placeholder(mf.int64, [], name="global_step")
    lr = build(step)
    assert lr.dtype is dtype and lr.shape.as_list() == []
    with mf.Session() as sess:
        return [sess.run(lr, {step: s}) for s in steps]


def check(build, reference, steps=STEPS, rtol=1e-12):
    got = schedule_values(build, steps)
    want = [reference(s) for s in steps]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-15)


def lr64():
    return mf.constant(LR, mf.float64)


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay(staircase):
    def reference(s):
        p = math.floor(s / 10) if staircase else s / 10
        return LR * 0.8 ** p
    check(lambda g: mf.train.exponential_decay(lr64(), g, 10, 0.8, staircase), reference)


@pytest.mark.parametrize("staircase", [False, True])
def test_natural_exp_decay(staircase):
    def reference(s):
        p = math.floor(s / 10) if staircase else s / 10
        return LR * math.exp(-0.3 * p)
    check(lambda g: mf.train.natural_exp_decay(lr64(), g, 10, 0.3, staircase), reference)


@pytest.mark.parametrize("staircase", [False, True])
def test_inverse_time_decay(staircase):
    def reference(s):
        p = math.floor(s / 10) if staircase else s / 10
        return LR / (1 + 0.5 * p)
    check(lambda g: mf.train.inverse_time_decay(lr64(), g, 10, 0.5, staircase), reference)


@pytest.mark.parametrize("power,cycle", [(1.0, False), (2.0, False), (0.5, True),
                                         (1.0, True)])
def test_polynomial_decay_stops_at_the_end_rate_or_cycles(power, cycle):
    def reference(s):
        steps = 30
        if cycle:
            steps *= 1 if s == 0 else math.ceil(s / steps)
        else:
            s = min(s, steps)
        return (LR - 0.01) * (1 - s / steps) ** power + 0.01
    check(lambda g: mf.train.polynomial_decay(lr64(), g, 30, 0.01, power, cycle), reference)


def test_polynomial_decay_defaults_end_at_1e_4():
    (at_end,) = schedule_values(lambda g: mf.train.polynomial_decay(lr64(), g, 10), [20])
    np.testing.assert_allclose(at_end, 1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_cosine_decay(alpha):
    def reference(s):
        t = min(s, 40) / 40
        return LR * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t)) + alpha)
    check(lambda g: mf.train.cosine_decay(lr64(), g, 40, alpha), reference)


def sgdr_reference(s, first, t_mul, m_mul, alpha):
    """Walk the periods one by one: period i lasts first * t_mul ** i steps."""
    start, length, i = 0.0, float(first), 0
    while s >= start + length:
        start, length, i = start + length, length * t_mul, i + 1
    t = (s - start) / length
    return LR * ((1 - alpha) * m_mul ** i * 0.5 * (1 + math.cos(math.pi * t)) + alpha)


@pytest.mark.parametrize("t_mul,m_mul,alpha", [(2.0, 1.0, 0.0), (2.0, 0.5, 0.1),
                                               (1.0, 0.9, 0.0), (1.5, 1.0, 0.05)])
def test_cosine_decay_restarts_starts_each_longer_period_from_a_lower_peak(t_mul, m_mul,
                                                                           alpha):
    check(lambda g: mf.train.cosine_decay_restarts(lr64(), g, 10, t_mul, m_mul, alpha),
          lambda s: sgdr_reference(s, 10, t_mul, m_mul, alpha), rtol=1e-9)


def test_cosine_decay_restarts_takes_t_mul_as_a_tensor_too():
    for t_mul in (1.0, 2.0):
        check(lambda g: mf.train.cosine_decay_restarts(
            lr64(), g, 10, mf.constant(t_mul, mf.float64), 0.5),
            lambda s: sgdr_reference(s, 10, t_mul, 0.5, 0.0), rtol=1e-9)


def test_linear_cosine_decay():
    def reference(s, periods=2.0, alpha=0.1, beta=0.01):
        t = min(s, 50) / 50
        cosine = 0.5 * (1 + math.cos(math.pi * 2 * periods * t))
        return LR * ((alpha + 1 - t) * cosine + beta)
    check(lambda g: mf.train.linear_cosine_decay(lr64(), g, 50, 2.0, 0.1, 0.01), reference)


def test_piecewise_constant_takes_the_lower_value_on_a_boundary():
    x = mf.placeholder(mf.int64, [])
    lr = mf.train.piecewise_constant(x, [10, 20], [1.0, 0.5, 0.1])
    with mf.Session() as sess:
        got = [sess.run(lr, {x: s}) for s in (0, 10, 11, 20, 21, 1000)]
    np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.5, 0.1, 0.1])


def test_a_python_float_rate_is_float32_as_in_tensorflow():
    (value,) = schedule_values(lambda g: mf.train.exponential_decay(0.1, g, 10, 0.5), [10],
                               dtype=mf.float32)
    np.testing.assert_allclose(value, 0.05, rtol=1e-6)


def test_the_rate_follows_the_global_step_during_training():
    step = mf.train.get_or_create_global_step()
    w = mf.Variable(0.0, dtype=mf.float64, name="w")
    lr = mf.train.exponential_decay(lr64(), step, 1, 0.5, staircase=True)
    train_op = mf.train.GradientDescentOptimizer(lr).minimize(-w, global_step=step)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(3):
            sess.run(train_op)
        assert sess.run(w) == LR + LR / 2 + LR / 4        # d(-w)/dw = -1, lr halves


@pytest.mark.parametrize("schedule", ["exponential_decay", "natural_exp_decay",
                                      "inverse_time_decay", "polynomial_decay",
                                      "cosine_decay", "cosine_decay_restarts",
                                      "linear_cosine_decay"])
def test_a_missing_global_step_is_refused_naming_the_schedule(schedule):
    fn = getattr(mf.train, schedule)
    args = (0.1, None, 10) + ((0.5,) if schedule.endswith(("exp_decay", "time_decay",
                                                           "exponential_decay")) else ())
    with pytest.raises(mf.errors.InvalidArgumentError, match=f"{schedule}: global_step"):
        fn(*args)


def test_piecewise_constant_refuses_mismatched_lengths_and_dtypes():
    with pytest.raises(mf.errors.InvalidArgumentError, match="one more element"):
        mf.train.piecewise_constant(mf.constant(1), [1, 2], [1.0, 2.0])
    with pytest.raises(mf.errors.InvalidArgumentError, match="same dtype"):
        mf.train.piecewise_constant(mf.constant(1), [1], [1.0, np.float64(2.0)])


def test_piecewise_constant_refuses_boundaries_that_decrease():
    # TF fails when a step falls in two of the overlapping intervals (11 to 100 here);
    # mpiflow gave values[0] there silently.
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"boundaries must be increasing.*\(100 before 10\)"):
        mf.train.piecewise_constant(mf.constant(50), [100, 10], [1.0, 0.5, 0.1])
    # Equal boundaries are allowed, as in TF: the value between them is never used.
    rate = mf.train.piecewise_constant(mf.constant(10), [10, 10], [1.0, 0.5, 0.1])
    with mf.Session() as sess:
        assert sess.run(rate) == 1.0
