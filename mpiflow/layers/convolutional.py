"""Conv2D with TF1's ``tf.layers`` arguments: ``<scope>/kernel`` [kh, kw, in, filters] and
``<scope>/bias`` [filters]; channels_first inputs are transposed around the NHWC op."""

from __future__ import annotations

import numbers

from mpiflow.layers.base import KernelLayer, layer_error, needs_defined
from mpiflow.layers.utils import normalize_data_format, normalize_padding, normalize_tuple
from mpiflow.ops.conv_ops import conv2d as nn_conv2d
from mpiflow.ops.init_ops import zeros_initializer
from mpiflow.ops.nn_ops import bias_add


class Conv2D(KernelLayer):
    """2-D convolution (cross-correlation, as TensorFlow) of rank-4 images."""

    input_ndim = 4

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 data_format="channels_last", dilation_rate=(1, 1), activation=None,
                 use_bias=True, kernel_initializer=None, bias_initializer=zeros_initializer(),
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        if not isinstance(filters, numbers.Integral) or filters < 1:
            raise layer_error(self, "Bad filters", expected="a positive int",
                              got=repr(filters))
        self._keep_kernel_options(activation, use_bias, kernel_initializer, bias_initializer,
                                  kernel_regularizer, bias_regularizer, kernel_constraint,
                                  bias_constraint)
        self.filters = int(filters)
        self.kernel_size = normalize_tuple(self, kernel_size, 2, "kernel_size")
        self.strides = normalize_tuple(self, strides, 2, "strides")
        self.dilation_rate = normalize_tuple(self, dilation_rate, 2, "dilation_rate")
        self.padding = normalize_padding(self, padding)
        self.layout = normalize_data_format(self, data_format)

    def build(self, input_shape):
        axis = self.layout.channel_axis
        channels = needs_defined(self, input_shape, axis, "channel dimension")
        self._input_axes = {axis: channels}
        self._add_kernel_and_bias(list(self.kernel_size) + [channels, self.filters],
                                  self.filters)

    def call(self, inputs):
        outputs = nn_conv2d(self.layout.to_channels_last(inputs), self.kernel,
                            strides=list(self.strides), padding=self.padding,
                            dilations=list(self.dilation_rate))
        if self.use_bias:
            outputs = bias_add(outputs, self.bias)
        outputs = self.layout.from_channels_last(outputs)
        return self.activation(outputs) if self.activation is not None else outputs


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
           data_format="channels_last", dilation_rate=(1, 1), activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=zeros_initializer(),
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
           kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """Functional ``Conv2D``: with ``name`` its variables are exactly ``<name>/kernel``."""
    layer = Conv2D(filters, kernel_size, strides=strides, padding=padding,
                   data_format=data_format, dilation_rate=dilation_rate,
                   activation=activation, use_bias=use_bias,
                   kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                   kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                   activity_regularizer=activity_regularizer,
                   kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                   trainable=trainable, name=name, _scope=name, _reuse=reuse)
    return layer.apply(inputs)


Convolution2D = Conv2D
convolution2d = conv2d
