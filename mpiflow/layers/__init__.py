"""``mf.layers``: TF1's ``tf.layers``, functional and class forms, built from mpiflow's ops.

Variable names, defaults and collections follow TF1 (``dense/kernel``, ``dense_1/kernel``,
batch norm's moving averages in ``UPDATE_OPS``), so TF1 models and their checkpoints'
variable names carry over. Only framework and ops are used underneath.
"""

from mpiflow import unsupported
from mpiflow.layers.base import Layer
from mpiflow.layers.convolutional import (
    Conv1D,
    Conv2D,
    Conv2DTranspose,
    Convolution1D,
    Convolution2D,
    conv1d,
    conv2d,
    conv2d_transpose,
    convolution1d,
    convolution2d,
)
from mpiflow.layers.core import Dense, Dropout, Flatten, dense, dropout, flatten
from mpiflow.layers.normalization import BatchNormalization, batch_normalization
from mpiflow.layers.pooling import (
    AveragePooling2D,
    AvgPool2D,
    MaxPool2D,
    MaxPooling2D,
    average_pooling2d,
    max_pooling2d,
)
from mpiflow.layers.regularizers import l1_l2_regularizer, l1_regularizer, l2_regularizer

__all__ = [
    "AveragePooling2D",
    "AvgPool2D",
    "BatchNormalization",
    "Conv1D",
    "Conv2D",
    "Conv2DTranspose",
    "Convolution1D",
    "Convolution2D",
    "Dense",
    "Dropout",
    "Flatten",
    "Layer",
    "MaxPool2D",
    "MaxPooling2D",
    "average_pooling2d",
    "batch_normalization",
    "conv1d",
    "conv2d",
    "conv2d_transpose",
    "convolution1d",
    "convolution2d",
    "dense",
    "dropout",
    "flatten",
    "l1_l2_regularizer",
    "l1_regularizer",
    "l2_regularizer",
    "max_pooling2d",
]

__getattr__ = unsupported.namespace_getattr(__name__, "tf.layers")
