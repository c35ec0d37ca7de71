"""Initializers: callables ``init(shape, dtype)`` that build the ops of an initial value."""

from __future__ import annotations

import math
import numbers

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import random_ops
from mpiflow.ops.constant_ops import constant


class Initializer:
    """Base class: ``__call__(shape, dtype=None, partition_info=None) -> Tensor``."""

    dtype = dtypes.float32

    def _dtype(self, dtype):
        return dtypes.as_dtype(dtype if dtype is not None else self.dtype)

    def get_config(self) -> dict:
        return {}


class Zeros(Initializer):
    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.zeros(shape, self._dtype(dtype))


class Ones(Initializer):
    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.ones(shape, self._dtype(dtype))


class Constant(Initializer):
    """Fill with a scalar, or take a value of as many elements as the shape (reshaped).

    As TF1's ``tf.constant_initializer``, a value with fewer elements is completed with
    its last one (``[1, 2]`` for shape [4] is [1, 2, 2, 2]); ``verify_shape=True`` takes
    only a value of exactly the requested shape.
    """

    def __init__(self, value=0, dtype=dtypes.float32, verify_shape=False):
        self.value = value
        self.dtype = dtypes.as_dtype(dtype)
        self.verify_shape = verify_shape

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = self._dtype(dtype)
        value = np.asarray(self.value)
        if self.verify_shape and list(value.shape) != TensorShape(shape).as_list():
            raise errors.InvalidArgumentError(
                f"constant_initializer(verify_shape=True): value of shape "
                f"{list(value.shape)} is not the variable shape {TensorShape(shape).as_list()}")
        if value.size == 1:
            return random_ops.filled(shape, value.reshape(()), dtype, "Const")
        if partition_info is not None and \
                value.size == TensorShape(partition_info.full_shape).num_elements():
            # A value for the whole partitioned variable: this part takes its slice.
            value = value.reshape(partition_info.full_shape)[tuple(
                slice(o, o + n) for o, n in zip(partition_info.var_offset,
                                                TensorShape(shape).as_list()))]
        if list(value.shape) != TensorShape(shape).as_list():
            count = TensorShape(shape).num_elements()
            if not 0 < value.size <= count:
                raise errors.InvalidArgumentError(
                    f"constant_initializer: value of shape {list(value.shape)} does not fit "
                    f"the variable shape {TensorShape(shape).as_list()}: expected at most "
                    f"{count} elements (fewer are completed with the last one)")
            flat = value.reshape(-1)
            value = np.concatenate([flat, np.repeat(flat[-1:], count - flat.size)])
            value = value.reshape(TensorShape(shape).as_list())
        return constant(value, dtype=dtype)


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.random_normal(shape, self.mean, self.stddev, self._dtype(dtype),
                                        seed=self.seed)


class TruncatedNormal(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.truncated_normal(shape, self.mean, self.stddev, self._dtype(dtype),
                                           seed=self.seed)


class RandomUniform(Initializer):
    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=dtypes.float32):
        self.minval, self.maxval, self.seed = minval, maxval, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.random_uniform(shape, self.minval, self.maxval, self._dtype(dtype),
                                         seed=self.seed)


def _fans(shape):
    dims = TensorShape(shape).as_list()
    if len(dims) < 1:
        return 1, 1
    if len(dims) == 1:
        return dims[0], dims[0]
    if len(dims) == 2:
        return dims[0], dims[1]
    receptive = int(np.prod(dims[:-2]))
    return dims[-2] * receptive, dims[-1] * receptive


class VarianceScaling(Initializer):
    """Scale by fan-in/out: the rule behind glorot (Xavier) and He initialisation."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None,
                 dtype=dtypes.float32):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise errors.InvalidArgumentError(
                f"VarianceScaling mode must be fan_in, fan_out or fan_avg, got {mode!r}")
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0:
            raise errors.InvalidArgumentError(
                f"VarianceScaling scale must be a positive number, got {scale!r}")
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise errors.InvalidArgumentError(
                "VarianceScaling distribution must be truncated_normal, untruncated_normal "
                f"or uniform, got {distribution!r}")
        self.scale, self.mode, self.distribution = scale, mode, distribution
        self.seed, self.dtype = seed, dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = self._dtype(dtype)
        if not dtype.is_floating:
            raise errors.InvalidArgumentError(
                f"VarianceScaling (glorot, he, lecun) initializes floating variables only, "
                f"got dtype {dtype.name}")
        # A partition is scaled as the whole variable is (TensorFlow's rule).
        fan_in, fan_out = _fans(shape if partition_info is None else partition_info.full_shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        scale = self.scale / max(1.0, n)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * scale)
            return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)
        if self.distribution == "truncated_normal":
            # 0.879... is the stddev of a unit normal truncated to [-2, 2].
            stddev = math.sqrt(scale) / 0.87962566103423978
            return random_ops.truncated_normal(shape, 0.0, stddev, dtype, seed=self.seed)
        return random_ops.random_normal(shape, 0.0, math.sqrt(scale), dtype, seed=self.seed)


class GlorotUniform(VarianceScaling):
    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "uniform", seed, dtype)


class GlorotNormal(VarianceScaling):
    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)


zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
random_uniform_initializer = RandomUniform
variance_scaling_initializer = VarianceScaling
glorot_uniform_initializer = GlorotUniform
glorot_normal_initializer = GlorotNormal


def he_normal(seed=None):
    return VarianceScaling(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed=None):
    return VarianceScaling(2.0, "fan_in", "uniform", seed)


def lecun_normal(seed=None):
    return VarianceScaling(1.0, "fan_in", "truncated_normal", seed)


def lecun_uniform(seed=None):
    return VarianceScaling(1.0, "fan_in", "uniform", seed)
