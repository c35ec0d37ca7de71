"""Conv1D, Conv2D and Conv2DTranspose with TF1's ``tf.layers`` arguments: ``<scope>/kernel``
([k, in, filters], [kh, kw, in, filters], and [kh, kw, filters, in] for the transpose) and
``<scope>/bias`` [filters]; channels_first inputs are transposed around the channels-last
ops."""

from __future__ import annotations

import numbers

from mpiflow.layers.base import KernelLayer, layer_error, needs_defined
from mpiflow.layers.utils import normalize_data_format, normalize_padding, normalize_tuple
from mpiflow.ops import array_ops, math_ops
from mpiflow.ops.conv_ops import conv1d as nn_conv1d
from mpiflow.ops.conv_ops import conv2d as nn_conv2d
from mpiflow.ops.conv_ops import conv2d_transpose as nn_conv2d_transpose
from mpiflow.ops.init_ops import zeros_initializer
from mpiflow.ops.nn_ops import bias_add


class Conv2D(KernelLayer):
    """2-D convolution (cross-correlation, as TensorFlow) of rank-4 images."""

    input_ndim = 4
    rank = 2

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
        self.kernel_size = normalize_tuple(self, kernel_size, self.rank, "kernel_size")
        self.strides = normalize_tuple(self, strides, self.rank, "strides")
        self.dilation_rate = normalize_tuple(self, dilation_rate, self.rank, "dilation_rate")
        self.padding = normalize_padding(self, padding)
        self.layout = normalize_data_format(self, data_format)

    def build(self, input_shape):
        axis = self.layout.channel_axis
        channels = needs_defined(self, input_shape, axis, "channel dimension")
        self._input_axes = {axis: channels}
        self._add_kernel_and_bias(list(self.kernel_size) + [channels, self.filters],
                                  self.filters)

    def call(self, inputs):
        outputs = self.convolve(self.layout.to_channels_last(inputs))
        if self.use_bias:
            outputs = bias_add(outputs, self.bias)
        outputs = self.layout.from_channels_last(outputs)
        return self.activation(outputs) if self.activation is not None else outputs

    def convolve(self, inputs):
        """The layer's convolution of channels-last ``inputs``."""
        return nn_conv2d(inputs, self.kernel, strides=list(self.strides),
                         padding=self.padding, dilations=list(self.dilation_rate))


class Conv1D(Conv2D):
    """1-D convolution of rank-3 sequences ([batch, steps, channels]), tf.nn.conv1d's."""

    input_ndim = 3
    rank = 1

    def __init__(self, filters, kernel_size, strides=1, padding="valid",
                 data_format="channels_last", dilation_rate=1, **kwargs):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate, **kwargs)

    def convolve(self, inputs):
        return nn_conv1d(inputs, self.kernel, self.strides[0], self.padding,
                         dilations=self.dilation_rate[0])


def _transposed_size(size, k, stride, padding):
    """The size a transposed convolution gives a dimension of ``size`` (an int or a
    scalar tensor), as TF1's Conv2DTranspose layer: ``size * stride`` for SAME, plus
    ``max(k - stride, 0)`` for VALID."""
    extra = max(k - stride, 0) if padding == "VALID" else 0
    return size * stride + extra


class Conv2DTranspose(Conv2D):
    """Transposed 2-D convolution (the upsampling of decoders and GAN generators):
    tf.nn.conv2d_transpose with a [kh, kw, filters, in] kernel, its output size
    ``in * stride`` for SAME and ``in * stride + max(k - stride, 0)`` for VALID."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 data_format="channels_last", **kwargs):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         data_format=data_format, **kwargs)
        if self.dilation_rate != (1, 1):
            raise layer_error(self, "Bad dilation_rate", expected="(1, 1): TF1's "
                              "Conv2DTranspose layer takes no dilation",
                              got=repr(self.dilation_rate))

    def build(self, input_shape):
        axis = self.layout.channel_axis
        channels = needs_defined(self, input_shape, axis, "channel dimension")
        self._input_axes = {axis: channels}
        self._add_kernel_and_bias(list(self.kernel_size) + [self.filters, channels],
                                  self.filters)

    def convolve(self, inputs):
        known = inputs.shape.as_list()
        dynamic = None
        sizes = []
        for a in range(3):
            if known[a] is None:
                dynamic = math_ops.shape(inputs) if dynamic is None else dynamic
                sizes.append(dynamic[a])
            else:
                sizes.append(known[a])
        n, h, w = sizes
        output_shape = [n] + [
            _transposed_size(size, k, s, self.padding)
            for size, k, s in zip((h, w), self.kernel_size, self.strides)] + [self.filters]
        if dynamic is not None:
            output_shape = array_ops.stack(output_shape)
        return nn_conv2d_transpose(inputs, self.kernel, output_shape,
                                   strides=list(self.strides), padding=self.padding)


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


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid",
           data_format="channels_last", dilation_rate=1, activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=zeros_initializer(),
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
           kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """Functional ``Conv1D``: with ``name`` its variables are exactly ``<name>/kernel``."""
    layer = Conv1D(filters, kernel_size, strides=strides, padding=padding,
                   data_format=data_format, dilation_rate=dilation_rate,
                   activation=activation, use_bias=use_bias,
                   kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                   kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                   activity_regularizer=activity_regularizer,
                   kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                   trainable=trainable, name=name, _scope=name, _reuse=reuse)
    return layer.apply(inputs)


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
                     data_format="channels_last", activation=None, use_bias=True,
                     kernel_initializer=None, bias_initializer=zeros_initializer(),
                     kernel_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, kernel_constraint=None,
                     bias_constraint=None, trainable=True, name=None, reuse=None):
    """Functional ``Conv2DTranspose``: with ``name`` its variables are exactly
    ``<name>/kernel``."""
    layer = Conv2DTranspose(filters, kernel_size, strides=strides, padding=padding,
                            data_format=data_format, activation=activation,
                            use_bias=use_bias, kernel_initializer=kernel_initializer,
                            bias_initializer=bias_initializer,
                            kernel_regularizer=kernel_regularizer,
                            bias_regularizer=bias_regularizer,
                            activity_regularizer=activity_regularizer,
                            kernel_constraint=kernel_constraint,
                            bias_constraint=bias_constraint, trainable=trainable, name=name,
                            _scope=name, _reuse=reuse)
    return layer.apply(inputs)




Convolution1D = Conv1D
convolution1d = conv1d
