"""Dense, Dropout and Flatten with TF1's ``tf.layers`` arguments and variable names."""

from __future__ import annotations

import numbers

import numpy as np

from mpiflow.layers.base import KernelLayer, Layer, layer_error, needs_defined
from mpiflow.layers.utils import normalize_data_format, smart_select, training_value
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import concat, expand_dims, reshape, stack
from mpiflow.ops.control_ops import identity
from mpiflow.ops.init_ops import zeros_initializer
from mpiflow.ops.nn_ops import bias_add
from mpiflow.ops.nn_ops import dropout as nn_dropout


class Dense(KernelLayer):
    """``activation(inputs @ kernel + bias)`` over the last axis of ``inputs``.

    Variables ``<scope>/kernel`` [in, units] (glorot uniform by default) and
    ``<scope>/bias`` [units] (zeros). Inputs of rank > 2 are multiplied along their last
    axis, every leading axis kept.
    """

    min_ndim = 2

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=zeros_initializer(), kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, trainable=True, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        if not isinstance(units, numbers.Integral) or units < 1:
            raise layer_error(self, "Bad units", expected="a positive int", got=repr(units))
        self._keep_kernel_options(activation, use_bias, kernel_initializer, bias_initializer,
                                  kernel_regularizer, bias_regularizer, kernel_constraint,
                                  bias_constraint)
        self.units = int(units)

    def build(self, input_shape):
        inputs = needs_defined(self, input_shape, -1, "last dimension")
        self._input_axes = {-1: inputs}
        self._add_kernel_and_bias([inputs, self.units], self.units)

    def call(self, inputs):
        if inputs.shape.ndims == 2:
            outputs = math_ops.matmul(inputs, self.kernel)
        else:
            outputs = self._matmul_last_axis(inputs)
        if self.use_bias:
            outputs = bias_add(outputs, self.bias)
        return self.activation(outputs) if self.activation is not None else outputs

    def _matmul_last_axis(self, inputs):
        """[..., in] @ [in, units] as one 2-D matmul: fold the leading axes into rows."""
        lead = inputs.shape.as_list()[:-1]
        rows = reshape(inputs, [-1, inputs.shape[-1]])
        product = math_ops.matmul(rows, self.kernel)
        if sum(d is None for d in lead) <= 1:
            out_shape = [-1 if d is None else d for d in lead] + [self.units]
        else:
            out_shape = concat([math_ops.shape(inputs)[:-1],
                                np.asarray([self.units], np.int32)], 0)
        outputs = reshape(product, out_shape)
        outputs.set_shape(lead + [self.units])
        return outputs


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
          trainable=True, name=None, reuse=None):
    """Functional ``Dense``: with ``name`` its variables are exactly ``<name>/kernel``."""
    layer = Dense(units, activation=activation, use_bias=use_bias,
                  kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                  kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                  activity_regularizer=activity_regularizer,
                  kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                  trainable=trainable, name=name, _scope=name, _reuse=reuse)
    return layer.apply(inputs)


class Dropout(Layer):
    """Zero a ``rate`` fraction of the inputs in training and scale the rest by
    1 / (1 - rate); the identity otherwise."""

    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(rate, numbers.Real) and not 0 <= rate < 1:
            raise layer_error(self, "Bad rate", expected="a drop fraction in [0, 1)",
                              got=repr(rate))
        self.rate = rate
        self.noise_shape = noise_shape
        self.seed = seed

    def call(self, inputs, training=False):
        training = training_value(self, training)
        return smart_select(training, lambda: self._dropped(inputs),
                            lambda: identity(inputs))

    def _dropped(self, inputs):
        if isinstance(self.rate, numbers.Real) and self.rate == 0:
            return identity(inputs)
        return nn_dropout(inputs, noise_shape=self._noise_shape(inputs), seed=self.seed,
                          rate=self.rate)

    def _noise_shape(self, inputs):
        """The noise shape with each None taken from the inputs' run-time shape."""
        if self.noise_shape is None or None not in list(self.noise_shape):
            return self.noise_shape
        dynamic = math_ops.shape(inputs)
        return stack([dynamic[i] if d is None else np.int32(d)
                      for i, d in enumerate(self.noise_shape)])


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Functional ``Dropout``; ``training`` is a Python bool or a bool tensor (default
    False: the identity, as TF1)."""
    return Dropout(rate, noise_shape=noise_shape, seed=seed, name=name).apply(
        inputs, training=training)


class Flatten(Layer):
    """Reshape [batch, d1, d2, ...] to [batch, d1 * d2 * ...] (channels last first, as TF1)."""

    min_ndim = 1
    float_inputs = False

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.layout = normalize_data_format(self, data_format)

    def call(self, inputs):
        if inputs.shape.ndims == 1:
            return expand_dims(inputs, 1)
        inputs = self.layout.to_channels_last(inputs)
        shape = inputs.shape.as_list()
        rest = shape[1:]
        width = int(np.prod(rest)) if None not in rest else None
        # -1 cannot stand for the batch when a row is empty, nor for an unknown width.
        target = [-1, width] if width else stack(
            [math_ops.shape(inputs)[0], np.int32(-1 if width is None else 0)])
        outputs = reshape(inputs, target)
        outputs.set_shape([shape[0], width])
        return outputs


def flatten(inputs, name=None, data_format="channels_last"):
    """Functional ``Flatten``."""
    return Flatten(name=name, data_format=data_format).apply(inputs)

