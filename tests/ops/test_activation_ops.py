"""Activations and softmax: forward against numpy, stability at |x| = 1000, gradients (and
the gradient ops' own gradients) against finite differences."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import apply_op
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(11)


def arr(*shape, low=-1.0, high=1.0):
    return R.uniform(low, high, size=shape)


def away_from(*shape, kinks=(0.0,), low=-2.0, high=8.0, margin=0.1):
    """Random values at least ``margin`` from every kink (finite differences need it)."""
    x = R.uniform(low, high, size=shape)
    for k in kinks:
        near = np.abs(x - k) < margin
        x[near] = k + np.where(x[near] >= k, margin, -margin) * 2
    return x


def op(type_name, *inputs, **attrs):
    return apply_op(type_name, list(inputs), attrs or None).outputs[0]


def second_order(fn):
    """d/dx of sum(fn(x) * w) times x: differentiates the activation's gradient op."""
    def build(x):
        w = mf.constant(np.linspace(-1.0, 1.0, int(np.prod(x.shape.as_list()))).reshape(
            x.shape.as_list()))
        return mf.gradients(mf.reduce_sum(fn(x) * w), x)[0] * x
    return build


GRAD_CASES = [
    GradCase("relu", mf.nn.relu, [away_from(3, 4)]),
    GradCase("relu_grad", lambda g, y: op("ReluGrad", g, y), [arr(3, 4), away_from(3, 4)],
             wrt=[0]),
    GradCase("relu6", mf.nn.relu6, [away_from(3, 4, kinks=(0.0, 6.0))]),
    GradCase("relu6_grad", lambda g, x: op("Relu6Grad", g, x),
             [arr(3, 4), away_from(3, 4, kinks=(0.0, 6.0))], wrt=[0]),
    GradCase("leaky_relu", lambda x: mf.nn.leaky_relu(x, alpha=0.1), [away_from(3, 4)]),
    GradCase("leaky_relu_grad", lambda g, x: op("LeakyReluGrad", g, x, alpha=0.3),
             [arr(3, 4), away_from(3, 4)], wrt=[0]),
    GradCase("elu", mf.nn.elu, [away_from(3, 4, low=-3.0, high=3.0)]),
    GradCase("elu_grad", lambda g, y: op("EluGrad", g, y),
             [arr(3, 4), away_from(3, 4, low=-0.9, high=2.0)]),
    GradCase("elu_second_order", second_order(mf.nn.elu), [away_from(2, 3, low=-3, high=3)]),
    GradCase("sigmoid", mf.nn.sigmoid, [arr(3, 4, low=-4, high=4)]),
    GradCase("sigmoid_grad", lambda y, dy: op("SigmoidGrad", y, dy),
             [arr(3, 4, low=0.05, high=0.95), arr(3, 4)]),
    GradCase("sigmoid_second_order", second_order(mf.nn.sigmoid), [arr(2, 3, low=-3, high=3)]),
    GradCase("tanh", mf.nn.tanh, [arr(3, 4, low=-3, high=3)]),
    GradCase("tanh_grad", lambda y, dy: op("TanhGrad", y, dy),
             [arr(3, 4, low=-0.95, high=0.95), arr(3, 4)]),
    GradCase("tanh_second_order", second_order(mf.nn.tanh), [arr(2, 3, low=-2, high=2)]),
    GradCase("softplus", mf.nn.softplus, [arr(3, 4, low=-5, high=5)]),
    GradCase("softplus_grad", lambda g, x: op("SoftplusGrad", g, x),
             [arr(3, 4), arr(3, 4, low=-4, high=4)]),
    GradCase("softplus_second_order", second_order(mf.nn.softplus),
             [arr(2, 3, low=-3, high=3)]),
    GradCase("softmax", mf.nn.softmax, [arr(3, 5, low=-3, high=3)]),
    GradCase("softmax_axis0", lambda x: mf.nn.softmax(x, axis=0), [arr(4, 2, 3)]),
    GradCase("softmax_second_order", second_order(mf.nn.softmax), [arr(2, 4)]),
    GradCase("log_softmax", mf.nn.log_softmax, [arr(3, 5, low=-3, high=3)]),
    GradCase("log_softmax_axis1", lambda x: mf.nn.log_softmax(x, axis=1), [arr(2, 4, 3)]),
    GradCase("log_softmax_second_order", second_order(mf.nn.log_softmax), [arr(2, 4)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("fn,ref", [
    (mf.nn.relu, lambda x: np.maximum(x, 0)),
    (mf.nn.relu6, lambda x: np.minimum(np.maximum(x, 0), 6)),
    (mf.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    (mf.nn.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    (mf.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (mf.nn.tanh, np.tanh),
    (mf.nn.softplus, lambda x: np.log(1 + np.exp(x))),
    (mf.nn.softmax, np_softmax),
    (lambda x: mf.nn.softmax(x, axis=0), lambda x: np_softmax(x, axis=0)),
    (mf.nn.log_softmax, lambda x: np.log(np_softmax(x))),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_numpy(fn, ref, dtype):
    x = (arr(4, 5) * 8).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    check_forward(fn, [x], ref(x.astype(np.float64)).astype(dtype), rtol=tol, atol=tol)


def test_relu_keeps_integer_dtype():
    x = np.array([-3, 0, 4], dtype=np.int32)
    check_forward(mf.nn.relu, [x], np.array([0, 0, 4], dtype=np.int32))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_leaky_relu_of_integers_is_float32_as_tensorflow(dtype):
    # TensorFlow's leaky_relu casts integer features to float32 (it was refused).
    x = np.array([-5, 3, 0, 7] if dtype != np.uint8 else [5, 3, 0, 7], dtype)
    want = np.where(x > 0, x, 0.5 * x.astype(np.float32)).astype(np.float32)
    check_forward(lambda a: mf.nn.leaky_relu(a, alpha=0.5), [x], want)
    assert mf.nn.leaky_relu(mf.constant(x)).dtype is mf.float32


def test_activations_are_stable_at_large_magnitudes():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32)
    check_forward(mf.nn.sigmoid, [x], [0.0, 1.9287499e-22, 0.5, 1.0, 1.0], rtol=1e-6, atol=0)
    check_forward(mf.nn.softplus, [x], [0.0, 1.9287499e-22, np.log(2.0), 50.0, 1000.0],
                  rtol=1e-6, atol=0)
    check_forward(mf.nn.elu, [x], [-1.0, -1.0, 0.0, 50.0, 1000.0])
    check_forward(mf.nn.tanh, [x], [-1.0, -1.0, 0.0, 1.0, 1.0])


def test_activation_gradients_are_finite_at_large_magnitudes():
    x = mf.placeholder(mf.float32, [4])
    ys = [mf.nn.sigmoid(x), mf.nn.softplus(x), mf.nn.tanh(x), mf.nn.elu(x)]
    grads = mf.gradients(mf.add_n([mf.reduce_sum(y) for y in ys]), x)[0]
    with mf.Session() as sess:
        got = sess.run(grads, {x: [-1000.0, -100.0, 100.0, 1000.0]})
    np.testing.assert_allclose(got, [0.0, 0.0, 2.0, 2.0], atol=1e-6)


def test_elu_gradient_at_a_nan_input_passes_the_gradient_as_tensorflow():
    # TensorFlow's EluGrad scales only where the output is negative; NaN is not.
    x = mf.placeholder(mf.float32, [4])
    grad = mf.gradients(mf.reduce_sum(mf.nn.elu(x) * 3.0), x)[0]
    with mf.Session() as sess:
        got = sess.run(grad, {x: np.array([np.nan, -1.0, 0.0, 2.0], np.float32)})
    np.testing.assert_allclose(got, [3.0, 3.0 * np.exp(-1.0), 3.0, 3.0], rtol=1e-6)


def test_softmax_and_log_softmax_are_stable_at_1000():
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 1000.0]], dtype=np.float32)
    third = 1.0 / 3.0
    check_forward(mf.nn.softmax, [x], [[1.0, 0.0, 0.0], [third, third, third]], atol=1e-7)
    check_forward(mf.nn.log_softmax, [x],
                  [[0.0, -1000.0, -2000.0], [np.log(third)] * 3], rtol=1e-6)


def test_softmax_over_an_empty_class_axis_is_empty_as_tensorflow():
    # numpy's max has no identity to start a zero-size axis from; TensorFlow returns the
    # empty tensor, and the gradient is empty too.
    x = mf.placeholder(mf.float32, [3, None])
    outs = [mf.nn.softmax(x), mf.nn.log_softmax(x), mf.nn.softmax(x, axis=0)]
    grad = mf.gradients(mf.add_n([mf.reduce_sum(y) for y in outs]), x)[0]
    with mf.Session() as sess:
        got = sess.run(outs + [grad], {x: np.zeros((3, 0), np.float32)})
    assert [g.shape for g in got] == [(3, 0)] * 4
    assert all(g.dtype == np.float32 for g in got)


def test_softmax_of_a_scalar_is_a_build_error_naming_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'probs' \(Softmax\)"):
        mf.nn.softmax(mf.constant(1.0), name="probs")


def test_softmax_axis_out_of_range_names_the_op():
    x = mf.placeholder(mf.float32, [2, 3])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"'LogSoftmax'.*got 2"):
        mf.nn.log_softmax(x, axis=2)


def test_sigmoid_rejects_integer_input_naming_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'Sigmoid'.*int32"):
        mf.nn.sigmoid(mf.constant([1, 2]))
