"""BatchNormalization with TF1's ``tf.layers`` arguments, variables and update ops.

Variables ``gamma``, ``beta`` (trainable) and ``moving_mean``, ``moving_variance`` (global,
not trainable). In training the batch's moments normalize, and two ops
``moving -= (moving - batch) * (1 - momentum)`` go to ``UPDATE_OPS``: nothing runs them
unless the train op depends on that collection, exactly as in TF1. In inference the moving
moments normalize and no update is made. A bool tensor ``training`` decides at run time:
both moments are computed and the updates' momentum becomes 1 (no change) in inference.

TF1 takes its fused kernel for 4-D inputs normalized over axis 1 or 3 unless
``fused=False``; that kernel feeds the moving variance the unbiased (n / (n - 1)) batch
variance and raises epsilon to at least 1.001e-5. Those two differences are kept, so
moving statistics match TF1 for the same inputs in both paths.

As in TF1, 16-bit inputs (float16, bfloat16) get float32 variables and are normalized in
float32, the output cast back: moving averages kept in float16 would round away most
momentum updates.
"""

from __future__ import annotations

import numbers

from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.layers.base import (
    Layer,
    get_initializer,
    layer_error,
    needs_defined,
    reject_unimplemented,
)
from mpiflow.layers.utils import smart_select, training_value
from mpiflow.ops import math_ops
from mpiflow.ops.array_ops import reshape, size
from mpiflow.ops.init_ops import ones_initializer, zeros_initializer
from mpiflow.ops.nn_ops import moments
from mpiflow.ops.state_ops import assign_sub

# The smallest epsilon of TF's fused batch norm kernel (a cuDNN requirement it applies on
# every device).
_FUSED_MIN_EPSILON = 1.001e-5

_HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


class BatchNormalization(Layer):
    """Normalize over every axis but ``axis``, then scale by gamma and shift by beta."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=zeros_initializer(), gamma_initializer=ones_initializer(),
                 moving_mean_initializer=zeros_initializer(),
                 moving_variance_initializer=ones_initializer(), beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 renorm=False, renorm_clipping=None, renorm_momentum=0.99, fused=None,
                 trainable=True, virtual_batch_size=None, adjustment=None, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        reject_unimplemented(self, renorm=(renorm, False),
                             renorm_clipping=(renorm_clipping, None),
                             virtual_batch_size=(virtual_batch_size, None),
                             adjustment=(adjustment, None))
        self.axis = [axis] if isinstance(axis, numbers.Integral) else list(axis)
        self.momentum = momentum
        self.epsilon = epsilon
        self.center = center
        self.scale = scale
        self.fused = fused
        initializers = {"gamma": gamma_initializer, "beta": beta_initializer,
                        "moving_mean": moving_mean_initializer,
                        "moving_variance": moving_variance_initializer}
        self.initializers = {name: get_initializer(self, init, f"{name}_initializer")
                             for name, init in initializers.items()}
        self.regularizers = {"gamma": gamma_regularizer, "beta": beta_regularizer}
        self.gamma_constraint = gamma_constraint
        self.beta_constraint = beta_constraint
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def build(self, input_shape):
        ndims = input_shape.ndims
        if ndims is None:
            raise layer_error(self, "Input has undefined rank", expected="a known rank",
                              got=f"shape {input_shape}")
        axes = self._normalized_axes(ndims)
        sizes = {a: needs_defined(self, input_shape, a, f"axis {a}") for a in axes}
        self._input_axes = sizes
        self._reduction_axes = [i for i in range(ndims) if i not in sizes]
        self._broadcast_shape = [sizes.get(i, 1) for i in range(ndims)]
        self._param_shape = [sizes[axes[0]]] if len(axes) == 1 else self._broadcast_shape
        self._fused = self.fused is not False and ndims == 4 and axes in ([1], [3])
        self._param_dtype = dtypes.float32 if self.dtype in _HALF_FLOATS else self.dtype
        if self.scale:
            self.gamma = self._param("gamma")
        if self.center:
            self.beta = self._param("beta")
        self.moving_mean = self._param("moving_mean", trainable=False)
        self.moving_variance = self._param("moving_variance", trainable=False)

    def _normalized_axes(self, ndims):
        axes = []
        for a in self.axis:
            if not isinstance(a, numbers.Integral) or not -ndims <= a < ndims:
                raise layer_error(self, "Bad axis", expected=f"ints in [{-ndims}, {ndims}) "
                                  f"for a rank-{ndims} input", got=repr(self.axis))
            axes.append(int(a) % ndims)
        if len(set(axes)) != len(axes):
            raise layer_error(self, "Duplicate axis", expected="distinct axes",
                              got=repr(self.axis))
        return sorted(axes)

    def _param(self, name, trainable=True):
        return self.add_weight(name, self._param_shape, dtype=self._param_dtype,
                               initializer=self.initializers[name],
                               regularizer=self.regularizers.get(name),
                               constraint=getattr(self, f"{name}_constraint", None),
                               trainable=trainable)

    def call(self, inputs, training=False):
        if inputs.dtype in _HALF_FLOATS:
            return math_ops.cast(self.call(math_ops.cast(inputs, self._param_dtype),
                                           training), inputs.dtype)
        training = training_value(self, training)
        if training is False:
            return self._normalize(inputs, self._broadcast(self.moving_mean),
                                   self._broadcast(self.moving_variance))
        mean, variance = moments(inputs, self._reduction_axes, keep_dims=True)
        self._add_updates(inputs, mean, variance, training)
        return self._normalize(
            inputs,
            smart_select(training, lambda: mean, lambda: self._broadcast(self.moving_mean)),
            smart_select(training, lambda: variance,
                         lambda: self._broadcast(self.moving_variance)))

    def _broadcast(self, param):
        """``param`` shaped to broadcast against the inputs (a view)."""
        if len(self._param_shape) == len(self._broadcast_shape):
            return param
        return reshape(param, self._broadcast_shape)

    def _normalize(self, inputs, mean, variance):
        epsilon = max(self.epsilon, _FUSED_MIN_EPSILON) if self._fused else self.epsilon
        inv = math_ops.rsqrt(variance + epsilon)
        if self.gamma is not None:
            inv = inv * self._broadcast(self.gamma)
        shift = -mean * inv
        if self.beta is not None:
            shift = self._broadcast(self.beta) + shift
        return inputs * inv + shift

    def _add_updates(self, inputs, mean, variance, training):
        dtype = self.moving_mean.dtype
        momentum = smart_select(training, lambda: math_ops.cast(self.momentum, dtype),
                                lambda: math_ops.cast(1.0, dtype))
        if self._fused:
            count = math_ops.cast(size(inputs), dtype) / float(self._param_shape[0])
            variance = variance * (count / math_ops.maximum(count - 1, 1.0))
        self.add_update([_assign_moving_average(self.moving_mean, mean, momentum,
                                                self._param_shape),
                         _assign_moving_average(self.moving_variance, variance, momentum,
                                                self._param_shape)])


def _assign_moving_average(variable, value, momentum, shape):
    with get_default_graph().name_scope("AssignMovingAvg") as scope:
        delta = (variable - reshape(value, shape)) * (1.0 - momentum)
        return assign_sub(variable, delta, name=scope)


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=zeros_initializer(),
                        gamma_initializer=ones_initializer(),
                        moving_mean_initializer=zeros_initializer(),
                        moving_variance_initializer=ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                        training=False, trainable=True, name=None, reuse=None, renorm=False,
                        renorm_clipping=None, renorm_momentum=0.99, fused=None,
                        virtual_batch_size=None, adjustment=None):
    """Functional ``BatchNormalization``; ``training`` is a Python bool or a bool tensor
    (default False: normalize with the moving moments, no updates)."""
    layer = BatchNormalization(
        axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
        beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
        moving_mean_initializer=moving_mean_initializer,
        moving_variance_initializer=moving_variance_initializer,
        beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
        beta_constraint=beta_constraint, gamma_constraint=gamma_constraint, renorm=renorm,
        renorm_clipping=renorm_clipping, renorm_momentum=renorm_momentum, fused=fused,
        trainable=trainable, virtual_batch_size=virtual_batch_size, adjustment=adjustment,
        name=name, _scope=name, _reuse=reuse)
    return layer.apply(inputs, training=training)

