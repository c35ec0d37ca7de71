"""mf.layers behaves as TF1's tf.layers: variable names and collections, numbers against
numpy references, batch norm's UPDATE_OPS, dropout's training switch, reuse, errors that
name the layer, and gradients that train."""

import subprocess
import sys

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors
from tests.conftest import REPO_ROOT
from tests.ops.gradcheck import GradCase, check_gradient


def _run(fetches, feed=None):
    with mf.Session() as sess:
        sess.run([mf.global_variables_initializer(), mf.local_variables_initializer()])
        return sess.run(fetches, feed)


def _names(variables):
    return [v.op.name for v in variables]


# -- dense: names, numbers, reuse --------------------------------------------------------------

def test_dense_makes_kernel_and_bias_named_as_tf1_and_numbers_them_per_layer():
    x = mf.placeholder(mf.float32, [None, 3])
    mf.layers.dense(mf.layers.dense(x, 4), 2, use_bias=False)
    assert _names(mf.global_variables()) == ["dense/kernel", "dense/bias", "dense_1/kernel"]
    assert _names(mf.trainable_variables()) == _names(mf.global_variables())
    assert [v.shape.as_list() for v in mf.global_variables()] == [[3, 4], [4], [4, 2]]


def test_dense_is_activation_of_inputs_times_kernel_plus_bias(rng):
    xs = rng.standard_normal((5, 3)).astype(np.float32)
    k = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    x = mf.placeholder(mf.float32, [None, 3])
    out = mf.layers.dense(x, 4, activation=mf.nn.relu,
                          kernel_initializer=mf.constant_initializer(k),
                          bias_initializer=mf.constant_initializer(b))
    assert out.shape.as_list() == [None, 4]
    np.testing.assert_allclose(_run(out, {x: xs}), np.maximum(xs @ k + b, 0), rtol=1e-5)


def test_dense_on_rank_3_inputs_multiplies_along_the_last_axis(rng):
    xs = rng.standard_normal((2, 5, 3)).astype(np.float32)
    k = rng.standard_normal((3, 4)).astype(np.float32)
    x = mf.placeholder(mf.float32, [None, 5, 3])
    out = mf.layers.dense(x, 4, kernel_initializer=mf.constant_initializer(k))
    assert out.shape.as_list() == [None, 5, 4]
    np.testing.assert_allclose(_run(out, {x: xs}), xs @ k, rtol=1e-5)


def test_dense_defaults_are_glorot_uniform_kernel_and_zero_bias():
    mf.set_random_seed(3)
    layer = mf.layers.Dense(30)
    layer(mf.zeros([1, 50]))
    kernel, bias = _run([layer.kernel, layer.bias])
    limit = np.sqrt(6 / (50 + 30))
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.9 * limit
    assert np.all(bias == 0)


def test_layers_take_keras_names_of_activations_and_initializers(rng):
    """TF1's layers look strings up as Keras does: activation='relu',
    kernel_initializer='he_normal' (Keras' 'random_normal' has stddev 0.05)."""
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    mf.set_random_seed(0)
    x = mf.constant(xs)
    relu = mf.layers.dense(x, 2, activation="relu", kernel_initializer="ones",
                           bias_initializer="zeros")
    softmax = mf.layers.dense(x, 2, activation="softmax", kernel_initializer="ones")
    he = mf.layers.Dense(400, kernel_initializer="he_normal")
    he(mf.zeros([1, 300]))
    small = mf.layers.Dense(400, kernel_initializer="random_normal")
    small(mf.zeros([1, 300]))
    normalized = mf.layers.batch_normalization(x, gamma_initializer="zeros",
                                               beta_initializer="ones")
    got = _run([relu, softmax, he.kernel, small.kernel, normalized])
    np.testing.assert_allclose(got[0], np.maximum(xs.sum(1, keepdims=True), 0).repeat(2, 1),
                               rtol=1e-6)
    np.testing.assert_allclose(got[1], np.full((4, 2), 0.5), rtol=1e-6)
    assert abs(got[2].std() - np.sqrt(2 / 300)) < 0.002
    assert abs(got[3].std() - 0.05) < 0.001
    np.testing.assert_array_equal(got[4], np.ones((4, 3)))
    for bad, message in (({"activation": "selu"}, "Unknown activation in layer 'dense_4'"),
                         ({"kernel_initializer": "xavier"}, "Unknown kernel_initializer"),
                         ({"kernel_regularizer": "l2"}, "Bad kernel_regularizer")):
        with pytest.raises(errors.InvalidArgumentError, match=message):
            mf.layers.Dense(2, **bad)


def test_a_named_functional_layer_needs_reuse_to_share_its_variables():
    x = mf.placeholder(mf.float32, [None, 3])
    first = mf.layers.dense(x, 4, name="fc")
    again = mf.layers.dense(x, 4, name="fc", reuse=True)
    assert _names(mf.global_variables()) == ["fc/kernel", "fc/bias"]
    assert again.op.name.startswith("fc_1/"), "a reused layer's ops get their own name scope"
    feed = {x: np.ones((2, 3), np.float32)}
    a, b = _run([first, again], feed)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(errors.InvalidArgumentError, match="fc/kernel already exists"):
        mf.layers.dense(x, 4, name="fc")


def test_a_model_function_reuses_its_layers_when_its_scope_is_entered_again():
    def model(x, reuse):
        with mf.variable_scope("model", reuse=reuse):
            return mf.layers.dense(mf.layers.dense(x, 4), 2)

    x = mf.placeholder(mf.float32, [None, 3])
    model(x, reuse=False)
    model(x, reuse=True)
    assert _names(mf.global_variables()) == [
        "model/dense/kernel", "model/dense/bias", "model/dense_1/kernel", "model/dense_1/bias"]


def test_a_layer_object_makes_its_variables_once_and_checks_later_inputs():
    layer = mf.layers.Dense(2, name="shared")
    layer(mf.placeholder(mf.float32, [None, 3]))
    layer(mf.placeholder(mf.float32, [None, 3]))
    assert _names(mf.global_variables()) == ["shared/kernel", "shared/bias"]
    assert layer.variables == layer.trainable_variables and len(layer.variables) == 2
    with pytest.raises(errors.InvalidArgumentError, match=r"layer 'shared' \(Dense\).*axis -1 "
                       "of size 3"):
        layer(mf.placeholder(mf.float32, [None, 5]))


def test_trainable_false_keeps_a_layers_variables_out_of_training():
    mf.layers.dense(mf.placeholder(mf.float32, [None, 3]), 2, trainable=False)
    assert mf.trainable_variables() == []
    assert _names(mf.global_variables()) == ["dense/kernel", "dense/bias"]


def test_kernel_regularizer_adds_half_the_squared_kernel_times_scale_to_the_collection():
    k = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = mf.placeholder(mf.float32, [None, 3])
    layer = mf.layers.Dense(2, kernel_initializer=mf.constant_initializer(k),
                            kernel_regularizer=mf.layers.l2_regularizer(0.1),
                            bias_regularizer=mf.layers.l1_regularizer(0.5))
    layer(x)
    losses = mf.losses.get_regularization_losses()
    assert len(losses) == 2 and layer.losses == losses
    assert losses[0].op.name.startswith("dense/kernel/Regularizer/")
    kernel_loss, bias_loss = _run(losses)
    np.testing.assert_allclose(kernel_loss, 0.1 * (k ** 2).sum() / 2, rtol=1e-6)
    assert bias_loss == 0
    np.testing.assert_allclose(_run(mf.losses.get_regularization_loss()), kernel_loss)


def test_regularizers_with_scale_0_add_nothing_and_negative_scales_are_refused():
    mf.layers.dense(mf.placeholder(mf.float32, [None, 3]), 2,
                    kernel_regularizer=mf.layers.l2_regularizer(0.0))
    assert mf.losses.get_regularization_losses() == []
    with pytest.raises(errors.InvalidArgumentError, match="l2_regularizer: scale must be >= 0"):
        mf.layers.l2_regularizer(-1.0)


def test_l1_l2_regularizer_adds_both_penalties():
    w = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
    loss = mf.layers.l1_l2_regularizer(0.5, 0.1)(mf.constant(w))
    np.testing.assert_allclose(_run(loss), 0.5 * np.abs(w).sum() + 0.1 * (w ** 2).sum() / 2,
                               rtol=1e-6)


def test_activity_regularizer_adds_its_loss_per_example():
    x = mf.constant(np.ones((4, 2), np.float32))
    mf.layers.dense(x, 3, kernel_initializer=mf.ones_initializer(),
                    activity_regularizer=lambda y: mf.reduce_sum(y))
    (loss,) = mf.losses.get_regularization_losses()
    np.testing.assert_allclose(_run(loss), 4 * 3 * 2 / 4)


def _constrained_layers(constrained: bool):
    """Three steps of a small model whose layers' variables have constraints (or none);
    returns the dense kernel, dense bias and batch-norm gamma after them."""
    def nonneg(v):
        return mf.maximum(v, 0.0)

    def unit(v):
        return mf.clip_by_norm(v, 1.0)

    def given(constraint):
        return constraint if constrained else None
    with mf.Graph().as_default():
        mf.set_random_seed(3)
        x = mf.constant(np.arange(-6.0, 6.0, dtype=np.float32).reshape(2, 2, 3, 1))
        dense = mf.layers.Dense(2, kernel_constraint=given(nonneg), bias_constraint=given(unit))
        conv = mf.layers.Conv2D(1, 2, kernel_constraint=given(unit),
                                bias_constraint=given(nonneg))
        norm = mf.layers.BatchNormalization(beta_constraint=given(nonneg),
                                            gamma_constraint=given(unit))
        y = dense(mf.layers.flatten(norm(conv(x), training=True)))
        if constrained:
            assert (dense.kernel.constraint, dense.bias.constraint) == (nonneg, unit)
            assert (conv.kernel.constraint, conv.bias.constraint) == (unit, nonneg)
            assert (norm.beta.constraint, norm.gamma.constraint) == (nonneg, unit)
            assert norm.moving_mean.constraint is None
        train = mf.train.GradientDescentOptimizer(0.5).minimize(
            mf.reduce_sum(mf.square(y - 3.0)))
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            return sess.run([dense.kernel, dense.bias, norm.gamma])


def test_constraints_go_to_the_layers_variables_and_project_them_after_each_update():
    free_kernel, free_bias, free_gamma = _constrained_layers(False)
    # the same seed without constraints leaves every projection something to do
    assert free_kernel.min() < 0.0 and np.linalg.norm(free_bias) > 1.0 and \
        np.linalg.norm(free_gamma) > 1.0
    kernel, bias, gamma = _constrained_layers(True)
    assert kernel.min() >= 0.0
    assert np.linalg.norm(bias) <= 1.0 + 1e-6 and np.linalg.norm(gamma) <= 1.0 + 1e-6


def test_a_built_layer_refuses_inputs_of_another_dtype_naming_itself():
    layer = mf.layers.Dense(2)
    layer(mf.placeholder(mf.float32, [None, 3]))
    with pytest.raises(errors.InvalidArgumentError, match="Input 0 has the wrong dtype in "
                       "layer 'dense' \\(Dense\\): expected float32, the dtype the layer was "
                       "built for, got float64"):
        layer(mf.placeholder(mf.float64, [None, 3]))


def test_a_layer_subclass_makes_its_variables_with_tf1s_add_variable():
    class Scale(mf.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_variable("w", [int(input_shape[-1])],
                                       initializer=mf.constant_initializer(2.0))

        def call(self, inputs):
            return inputs * self.w

    layer = Scale()
    out = layer(mf.ones([2, 3]))
    assert _names(layer.trainable_weights) == ["scale/w"]
    np.testing.assert_array_equal(_run(out), np.full((2, 3), 2.0))


# -- conv2d and pooling ------------------------------------------------------------------------

def _conv_reference(x, k, stride, padding):
    kh, kw = k.shape[:2]
    if padding == "same":
        oh, ow = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
        ph = max((oh - 1) * stride + kh - x.shape[1], 0)
        pw = max((ow - 1) * stride + kw - x.shape[2], 0)
        x = np.pad(x, [(0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)])
    oh = (x.shape[1] - kh) // stride + 1
    ow = (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, k.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
    return out


@pytest.mark.parametrize("padding,stride", [("valid", 1), ("same", 1), ("SAME", 2),
                                            ("Valid", 2)])
def test_conv2d_matches_a_numpy_convolution(rng, padding, stride):
    xs = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    k = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    x = mf.placeholder(mf.float32, [None, 7, 6, 3])
    out = mf.layers.conv2d(x, 4, (3, 2), strides=stride, padding=padding,
                           kernel_initializer=mf.constant_initializer(k),
                           bias_initializer=mf.constant_initializer(b))
    assert _names(mf.global_variables()) == ["conv2d/kernel", "conv2d/bias"]
    expected = _conv_reference(xs, k, stride, padding.lower()) + b
    got = _run(out, {x: xs})
    assert out.shape.as_list() == [None, *expected.shape[1:]]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_channels_first_layers_equal_channels_last_ones_on_transposed_images(rng):
    xs = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    k = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    init = mf.constant_initializer(k)
    last = mf.layers.max_pooling2d(mf.layers.conv2d(mf.constant(xs), 5, 3, padding="same",
                                                    kernel_initializer=init), 2, 2)
    first = mf.layers.max_pooling2d(
        mf.layers.conv2d(mf.constant(xs.transpose(0, 3, 1, 2)), 5, 3, padding="same",
                         data_format="channels_first", kernel_initializer=init),
        2, 2, data_format="channels_first")
    assert first.shape.as_list() == [2, 5, 3, 3]
    a, b = _run([last, first])
    np.testing.assert_allclose(b, a.transpose(0, 3, 1, 2), rtol=1e-5)


def test_conv1d_layer_matches_tensorflow_with_its_variables_named_as_tf1():
    # Recorded from TF 2.21's tf.compat.v1.layers (conv1d was missing: UnsupportedAPIError).
    z = mf.constant(np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32).reshape(1, 5, 1))
    out = mf.layers.conv1d(z, 2, 2, kernel_initializer=mf.constant_initializer(1.0),
                           bias_initializer=mf.constant_initializer(0.5))
    first = mf.layers.Conv1D(3, 2, dilation_rate=2, data_format="channels_first")(
        mf.zeros([2, 4, 7]))
    assert [(v.name, v.shape.as_list()) for v in mf.global_variables()] == [
        ("conv1d/kernel:0", [2, 1, 2]), ("conv1d/bias:0", [2]),
        ("conv1d_1/kernel:0", [2, 4, 3]), ("conv1d_1/bias:0", [3])]
    assert out.shape.as_list() == [1, 4, 2] and first.shape.as_list() == [2, 3, 5]
    np.testing.assert_array_equal(_run(out)[0], [[3.5, 3.5], [5.5, 5.5], [7.5, 7.5],
                                                 [9.5, 9.5]])


def test_conv2d_transpose_layer_upsamples_as_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1.layers (conv2d_transpose was missing): VALID
    # gives in * stride + max(k - stride, 0), SAME in * stride; the kernel is
    # [kh, kw, filters, in].
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32).reshape(1, 2, 2, 1)
    out = mf.layers.conv2d_transpose(mf.constant(x), 1, 3, strides=2,
                                     kernel_initializer=mf.constant_initializer(1.0))
    assert out.shape.as_list() == [1, 5, 5, 1]
    np.testing.assert_array_equal(_run(out)[0, :, :, 0], [
        [1, 1, 3, 2, 2], [1, 1, 3, 2, 2], [4, 4, 10, 6, 6], [3, 3, 7, 4, 4], [3, 3, 7, 4, 4]])
    fed = mf.placeholder(mf.float32, [None, 3, 4, 2])
    same = mf.layers.Conv2DTranspose(5, [2, 3], strides=(2, 1), padding="same")(fed)
    assert same.shape.as_list() == [None, 6, 4, 5]
    assert [(v.name, v.shape.as_list()) for v in mf.global_variables()][2:] == [
        ("conv2d_transpose_1/kernel:0", [2, 3, 5, 2]), ("conv2d_transpose_1/bias:0", [5])]
    assert _run(same, {fed: np.ones((3, 3, 4, 2), np.float32)}).shape == (3, 6, 4, 5)
    with pytest.raises(errors.InvalidArgumentError, match="Bad dilation_rate in layer"):
        mf.layers.Conv2DTranspose(2, 3, dilation_rate=2)


def test_conv2d_transpose_layer_channels_first_is_channels_last_transposed(rng):
    xs = rng.standard_normal((2, 3, 4, 2)).astype(np.float32)
    init = mf.constant_initializer(rng.standard_normal((3, 3, 5, 2)))
    last = mf.layers.conv2d_transpose(mf.constant(xs), 5, 3, strides=2, padding="same",
                                      kernel_initializer=init)
    first = mf.layers.conv2d_transpose(mf.constant(xs.transpose(0, 3, 1, 2)), 5, 3,
                                       strides=2, padding="same",
                                       data_format="channels_first", kernel_initializer=init)
    assert first.shape.as_list() == [2, 5, 6, 8]
    a, b = _run([last, first])
    np.testing.assert_allclose(b, a.transpose(0, 3, 1, 2), rtol=1e-5)


def test_pooling_layers_take_window_maxima_and_means():
    xs = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    x = mf.constant(xs)
    top = mf.layers.MaxPooling2D(2, 2)(x)
    mean = mf.layers.average_pooling2d(x, pool_size=[2, 2], strides=2)
    windows = xs.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4, 5)
    got_top, got_mean = _run([top, mean])
    np.testing.assert_array_equal(got_top, windows.max(axis=(3, 4)))
    np.testing.assert_allclose(got_mean, windows.mean(axis=(3, 4)))


def test_conv_and_pooling_errors_name_the_layer_and_what_it_expected():
    flat = mf.placeholder(mf.float32, [None, 10])
    with pytest.raises(errors.InvalidArgumentError, match=r"Input 0 has the wrong rank in "
                       r"layer 'conv2d' \(Conv2D\): expected rank 4, got rank 2"):
        mf.layers.conv2d(flat, 4, 3)
    with pytest.raises(errors.InvalidArgumentError, match=r"Unknown padding in layer "
                       r"'max_pooling2d' \(MaxPooling2D\): expected 'valid' or 'same', got "
                       "'full'"):
        mf.layers.MaxPooling2D(2, 2, padding="full")
    with pytest.raises(errors.InvalidArgumentError, match="Unknown data_format.*'NHWC'"):
        mf.layers.Conv2D(4, 3, data_format="NHWC")
    with pytest.raises(errors.InvalidArgumentError, match="channel dimension of the inputs "
                       "must be defined"):
        mf.layers.conv2d(mf.placeholder(mf.float32, [None, 5, 5, None]), 4, 3)
    with pytest.raises(errors.InvalidArgumentError, match="Bad kernel_size"):
        mf.layers.Conv2D(4, (3, 3, 3))
    with pytest.raises(errors.InvalidArgumentError, match="wrong dtype.*floating"):
        mf.layers.dense(mf.placeholder(mf.int32, [None, 3]), 2)


# -- flatten, dropout --------------------------------------------------------------------------

def test_flatten_keeps_the_batch_and_joins_the_rest_channels_last_first():
    xs = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    x = mf.placeholder(mf.float32, [None, 3, 2, 2])
    flat = mf.layers.flatten(x)
    from_nchw = mf.layers.Flatten(data_format="channels_first")(x)
    assert flat.shape.as_list() == [None, 12]
    a, b = _run([flat, from_nchw], {x: xs})
    np.testing.assert_array_equal(a, xs.reshape(2, 12))
    np.testing.assert_array_equal(b, xs.transpose(0, 2, 3, 1).reshape(2, 12))
    assert mf.layers.flatten(mf.constant([1, 2, 3])).shape.as_list() == [3, 1]


def test_dropout_is_the_identity_unless_training():
    xs = np.ones((100, 100), np.float32)
    out = mf.layers.dropout(mf.constant(xs), rate=0.5)
    assert out.op.type == "Identity"
    np.testing.assert_array_equal(_run(out), xs)


def test_dropout_in_training_drops_a_rate_fraction_and_scales_the_rest():
    mf.set_random_seed(0)
    out = mf.layers.dropout(mf.constant(np.ones((200, 200), np.float32)), rate=0.25,
                            training=True)
    got = _run(out)
    assert set(np.unique(got)) == {0.0, np.float32(1 / 0.75)}
    assert abs((got == 0).mean() - 0.25) < 0.01


def test_dropout_follows_a_bool_tensor_at_run_time():
    training = mf.placeholder(mf.bool, [])
    out = mf.layers.Dropout(rate=0.5)(mf.ones([50, 50]), training=training)
    with mf.Session() as sess:
        assert (sess.run(out, {training: True}) == 0).any()
        np.testing.assert_array_equal(sess.run(out, {training: False}), np.ones((50, 50)))
    with pytest.raises(errors.InvalidArgumentError, match="Bad rate.*\\[0, 1\\)"):
        mf.layers.Dropout(rate=1.0)


def test_training_takes_the_ints_0_and_1_as_tf1_does():
    """TF1's layers pass ``training`` to smart_cond, which takes 0 and 1 for False and
    True (scripts written with an ``is_training = 1`` flag)."""
    dropped = mf.layers.dropout(mf.ones([50, 50]), 0.5, training=1)
    kept = mf.layers.dropout(mf.ones([50, 50]), 0.5, training=0)
    mf.layers.batch_normalization(mf.ones([4, 3]), training=1)
    assert len(mf.get_collection(mf.GraphKeys.UPDATE_OPS)) == 2
    got_dropped, got_kept = _run([dropped, kept])
    assert (got_dropped == 0).any()
    np.testing.assert_array_equal(got_kept, np.ones((50, 50)))
    with pytest.raises(errors.InvalidArgumentError, match="Bad training argument"):
        mf.layers.dropout(mf.ones([2]), training=2)


# -- batch normalization -----------------------------------------------------------------------

def test_batch_norm_variables_moving_stats_are_global_but_not_trainable():
    mf.layers.batch_normalization(mf.placeholder(mf.float32, [None, 3]), training=True)
    assert _names(mf.global_variables()) == [
        "batch_normalization/gamma", "batch_normalization/beta",
        "batch_normalization/moving_mean", "batch_normalization/moving_variance"]
    assert _names(mf.trainable_variables()) == [
        "batch_normalization/gamma", "batch_normalization/beta"]
    assert mf.local_variables() == []


def test_batch_norm_in_training_normalizes_with_the_batch_and_queues_two_updates(rng):
    xs = (3 + 2 * rng.standard_normal((8, 3))).astype(np.float32)
    out = mf.layers.batch_normalization(mf.constant(xs), training=True)
    updates = mf.get_collection(mf.GraphKeys.UPDATE_OPS)
    assert [u.op.name for u in updates] == ["batch_normalization/AssignMovingAvg",
                                            "batch_normalization/AssignMovingAvg_1"]
    expected = (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 1e-3)
    np.testing.assert_allclose(_run(out), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,fused,unbiased", [((8, 3), None, False),
                                                  ((2, 3, 4, 3), None, True),
                                                  ((2, 3, 4, 3), False, False)])
def test_running_the_update_ops_moves_the_moving_stats_as_tf1(rng, shape, fused, unbiased):
    """TF1's fused kernel (4-D inputs) feeds the moving variance the n/(n-1) variance."""
    xs = rng.standard_normal(shape).astype(np.float32)
    layer = mf.layers.BatchNormalization(momentum=0.9, fused=fused)
    layer(mf.constant(xs), training=True)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.get_collection(mf.GraphKeys.UPDATE_OPS))
        mean, variance = sess.run([layer.moving_mean, layer.moving_variance])
    axes = tuple(range(len(shape) - 1))
    n = np.prod(shape[:-1])
    batch_var = xs.var(axes) * (n / (n - 1) if unbiased else 1)
    np.testing.assert_allclose(mean, 0.1 * xs.mean(axes), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(variance, 0.9 + 0.1 * batch_var, rtol=1e-5)


def test_batch_norm_in_inference_uses_the_moving_stats_and_adds_no_update(rng):
    xs = rng.standard_normal((4, 2)).astype(np.float32)
    out = mf.layers.batch_normalization(
        mf.constant(xs), moving_mean_initializer=mf.constant_initializer([1.0, -1.0]),
        moving_variance_initializer=mf.constant_initializer([4.0, 0.25]), epsilon=0.0)
    assert mf.get_collection(mf.GraphKeys.UPDATE_OPS) == []
    np.testing.assert_allclose(_run(out), (xs - [1, -1]) / [2, 0.5], rtol=1e-5)


def test_batch_norm_with_a_training_tensor_switches_stats_and_updates_at_run_time(rng):
    xs = (5 + rng.standard_normal((6, 2))).astype(np.float32)
    training = mf.placeholder(mf.bool, [])
    layer = mf.layers.BatchNormalization(momentum=0.5, epsilon=0.0)
    out = layer(mf.constant(xs), training=training)
    updates = mf.get_collection(mf.GraphKeys.UPDATE_OPS)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(out, {training: False}), xs, rtol=1e-6)
        sess.run(updates, {training: False})
        np.testing.assert_array_equal(sess.run(layer.moving_mean), [0, 0])
        normalized = sess.run(out, {training: True})
        np.testing.assert_allclose(normalized.mean(0), [0, 0], atol=1e-5)
        sess.run(updates, {training: True})
        np.testing.assert_allclose(sess.run(layer.moving_mean), 0.5 * xs.mean(0), rtol=1e-5)


def test_a_frozen_batch_norm_normalizes_with_the_batch_but_keeps_its_moving_stats(rng):
    """TF1: a layer made with trainable=False has no updates, so UPDATE_OPS (what the
    train op depends on) leaves a frozen batch norm's moving statistics as they are."""
    xs = (3 + rng.standard_normal((6, 2))).astype(np.float32)
    layer = mf.layers.BatchNormalization(trainable=False, momentum=0.5, epsilon=0.0)
    out = layer(mf.constant(xs), training=True)
    assert layer.updates == []
    assert mf.get_collection(mf.GraphKeys.UPDATE_OPS) == []
    np.testing.assert_allclose(_run(out), (xs - xs.mean(0)) / xs.std(0), rtol=1e-4,
                               atol=1e-5)
    layer.trainable = True
    assert len(layer.updates) == 2, "the updates were made, and count once unfrozen"


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_batch_norm_of_16_bit_inputs_keeps_float32_variables_and_moving_stats(rng, half):
    """TF1 makes a batch norm's variables float32 for 16-bit inputs and normalizes in
    float32: a float16 moving variance of 1 cannot take a 0.01 * 0.05 step."""
    xs = rng.standard_normal((64, 3))
    xs = (xs - xs.mean(0)) / xs.std(0) * np.sqrt(1.05) + 0.5
    inputs = mf.cast(mf.constant(xs.astype(np.float32)), half)
    layer = mf.layers.BatchNormalization(fused=False)
    out = layer(inputs, training=True)
    assert out.dtype == mf.as_dtype(half)
    assert [v.dtype for v in layer.variables] == [mf.float32] * 4
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        normalized, _ = sess.run([out, mf.get_collection(mf.GraphKeys.UPDATE_OPS)])
        variance = sess.run(layer.moving_variance)
    seen = xs.astype(np.float32).astype(mf.as_dtype(half).as_numpy_dtype).astype(np.float64)
    np.testing.assert_allclose(variance, 0.99 + 0.01 * seen.var(0), rtol=1e-6)
    np.testing.assert_allclose(normalized.astype(np.float64),
                               (seen - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-3),
                               atol=0.05)


def test_batch_norm_over_channels_first_keeps_per_channel_parameters(rng):
    xs = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    layer = mf.layers.BatchNormalization(axis=1, epsilon=0.0)
    out = layer(mf.constant(xs), training=True)
    assert layer.gamma.shape.as_list() == [3]
    expected = (xs - xs.mean((0, 2, 3), keepdims=True)) / xs.std((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(_run(out), expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_refuses_what_it_does_not_implement_and_bad_axes():
    with pytest.raises(errors.UnimplementedError, match="Unsupported argument 'renorm'"):
        mf.layers.BatchNormalization(renorm=True)
    with pytest.raises(errors.InvalidArgumentError, match=r"Bad axis in layer "
                       r"'batch_normalization.*' \(BatchNormalization\): expected ints in "
                       r"\[-2, 2\)"):
        mf.layers.batch_normalization(mf.placeholder(mf.float32, [None, 3]), axis=2)


def test_batch_norm_gradient_matches_finite_differences(rng):
    def normalize(x):
        return mf.layers.batch_normalization(x, center=False, scale=False, training=True)
    check_gradient(GradCase("batch_normalization", normalize,
                            [rng.standard_normal((5, 3))]))


# -- training through the layers ---------------------------------------------------------------

def test_gradients_reach_every_layer_and_a_small_cnn_learns(rng):
    mf.set_random_seed(1)
    xs = rng.standard_normal((64, 6, 6, 1)).astype(np.float32)
    ys = (xs[:, :3].sum(axis=(1, 2, 3)) > xs[:, 3:].sum(axis=(1, 2, 3))).astype(np.int64)
    x = mf.placeholder(mf.float32, [None, 6, 6, 1])
    y = mf.placeholder(mf.int64, [None])
    training = mf.placeholder_with_default(False, [])
    net = mf.layers.conv2d(x, 8, 3, padding="same", activation=mf.nn.relu)
    net = mf.layers.batch_normalization(net, training=training)
    net = mf.layers.max_pooling2d(net, 2, 2)
    net = mf.layers.dropout(mf.layers.flatten(net), rate=0.1, training=training)
    logits = mf.layers.dense(net, 2)
    loss = mf.losses.sparse_softmax_cross_entropy(y, logits)
    grads = mf.gradients(loss, mf.trainable_variables())
    assert all(g is not None for g in grads)
    with mf.control_dependencies(mf.get_collection(mf.GraphKeys.UPDATE_OPS)):
        train = mf.train.AdamOptimizer(0.01).minimize(loss)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        first = sess.run(loss, {x: xs, y: ys})
        for _ in range(60):
            sess.run(train, {x: xs, y: ys, training: True})
        last = sess.run(loss, {x: xs, y: ys})
        moving_mean = sess.run(mf.global_variables("batch_normalization/moving_mean")[0])
    assert last < first / 2, (first, last)
    assert np.abs(moving_mean).sum() > 0, "the update ops ran with the train op"


# -- the TF1 spellings -------------------------------------------------------------------------

def test_tensorflow_compat_v1_imports_reach_these_namespaces():
    code = ("from mpiflow.run import alias_tensorflow; alias_tensorflow()\n"
            "import mpiflow\nimport tensorflow.compat.v1 as tf\n"
            "import tensorflow.compat.v1.layers as layers\n"
            "from tensorflow.compat.v1 import losses\nimport tensorflow.metrics\n"
            "assert layers is tf.layers is mpiflow.layers is mpiflow.compat.v1.layers\n"
            "assert losses is mpiflow.losses and tensorflow.metrics is mpiflow.metrics\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
