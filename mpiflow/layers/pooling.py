"""MaxPooling2D and AveragePooling2D with TF1's ``tf.layers`` arguments (``strides`` is
required there, unlike Keras, and stays so)."""

from __future__ import annotations

from mpiflow.layers.base import Layer
from mpiflow.layers.utils import normalize_data_format, normalize_padding, normalize_tuple
from mpiflow.ops.pooling_ops import avg_pool, max_pool


class _Pooling2D(Layer):
    """A window reduction (``pool``, an NHWC op) over rank-4 images."""

    input_ndim = 4
    pool = None

    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last",
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pool_size = normalize_tuple(self, pool_size, 2, "pool_size")
        self.strides = normalize_tuple(self, strides, 2, "strides")
        self.padding = normalize_padding(self, padding)
        self.layout = normalize_data_format(self, data_format)

    def call(self, inputs):
        pooled = type(self).pool(self.layout.to_channels_last(inputs),
                                 ksize=[1, *self.pool_size, 1], strides=[1, *self.strides, 1],
                                 padding=self.padding)
        return self.layout.from_channels_last(pooled)


class MaxPooling2D(_Pooling2D):
    """The maximum of each window (SAME pads with -inf)."""

    pool = staticmethod(max_pool)


class AveragePooling2D(_Pooling2D):
    """The mean of each window (SAME averages the real inputs only, as TensorFlow)."""

    pool = staticmethod(avg_pool)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Functional ``MaxPooling2D``."""
    return MaxPooling2D(pool_size, strides, padding=padding, data_format=data_format,
                        name=name).apply(inputs)


def average_pooling2d(inputs, pool_size, strides, padding="valid",
                      data_format="channels_last", name=None):
    """Functional ``AveragePooling2D``."""
    return AveragePooling2D(pool_size, strides, padding=padding, data_format=data_format,
                            name=name).apply(inputs)


MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
