"""Candidate samplers: the negative classes a sampled loss (``nce_loss``,
``sampled_softmax_loss``) scores instead of every class, as TensorFlow's.

A sampler draws ``num_sampled`` classes in [0, range_max) from its distribution (with
``unique``, distinct ones: it draws until it has that many) and says how often each true
and each sampled class is expected among the draws. The losses subtract the log of that
count, so the estimate is not biased towards the classes drawn most. Draws come from the
session's generator for the op, seeded from (graph seed, op seed) like the random ops: a
fixed seed repeats mpiflow's draws, not TensorFlow's.
"""

from __future__ import annotations

import math

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.math_ops import cast
from mpiflow.ops.random_ops import _seed_attrs
from mpiflow.ops.registry import OpDef, apply_op, register_op, require_dtype

_SAMPLER_ATTRS = {"num_true": 1, "num_sampled": 1, "unique": True, "range_max": 1,
                  "seed": 0, "seed2": 0}


class _CandidateSampler(OpDef):
    """Input true_classes int64 [batch, num_true]; outputs sampled_candidates int64
    [num_sampled], true_expected_count float32 [batch, num_true], sampled_expected_count
    float32 [num_sampled]. A subclass gives ``draw(rng, n, range_max)`` and
    ``probability(classes, range_max)``."""

    stateful = True
    tuple_outputs = True
    gpu_kernel = False       # a draw-until-distinct loop in Python; its outputs are small
    gradient = None

    def infer(self, b):
        require_dtype(b, 0, lambda dt: dt is dtypes.int64, "true_classes")
        num_true, num_sampled = b.attrs["num_true"], b.attrs["num_sampled"]
        range_max = b.attrs["range_max"]
        if num_sampled < 1 or range_max < 1 or num_true < 1:
            raise b.error("num_true, num_sampled and range_max must be positive",
                          got=f"{num_true}, {num_sampled} and {range_max}")
        if b.attrs["unique"] and num_sampled > range_max:
            raise b.error("Sampler's range is too small for unique samples",
                          expected=f"num_sampled <= range_max ({range_max})",
                          got=num_sampled)
        true = b.shape(0)
        if true.ndims is not None and (true.ndims != 2 or true[1] not in (None, num_true)):
            raise b.error("true_classes must be a matrix of num_true columns",
                          expected=f"shape [batch, {num_true}]", got=true)
        return [(dtypes.int64, [num_sampled]), (dtypes.float32, true),
                (dtypes.float32, [num_sampled])]

    def prepare(self, ctx):
        ctx.rng = ctx.env.rng(ctx.op)

    def forward(self, xp, ctx, true_classes):
        n, range_max = ctx.attrs["num_sampled"], ctx.attrs["range_max"]
        if ctx.attrs["unique"]:
            sampled, tries = self._distinct(ctx.rng, n, range_max)
        else:
            sampled, tries = self.draw(ctx.rng, n, range_max), n

        def expected(classes):
            p = self.probability(classes.astype(np.float64), range_max)
            # With no draw repeated, TensorFlow counts p per draw; else the chance that
            # at least one of the ``tries`` draws is the class.
            count = p * n if tries == n else -np.expm1(tries * np.log1p(-p))
            return count.astype(np.float32)
        return sampled, expected(true_classes), expected(sampled)

    def _distinct(self, rng, n, range_max):
        """``n`` distinct draws in the order drawn, and how many draws that took."""
        picked, seen, tries = [], set(), 0
        while len(picked) < n:
            for value in self.draw(rng, max(n - len(picked), 16), range_max).tolist():
                tries += 1
                if value not in seen:
                    seen.add(value)
                    picked.append(value)
                    if len(picked) == n:
                        break
        return np.asarray(picked, dtype=np.int64), tries


@register_op("LogUniformCandidateSampler", attrs=dict(_SAMPLER_ATTRS))
class LogUniformCandidateSamplerOp(_CandidateSampler):
    """P(k) = log((k + 2) / (k + 1)) / log(range_max + 1): Zipf-like, for classes sorted
    by decreasing frequency (a vocabulary by word count)."""

    def draw(self, rng, n, range_max):
        values = np.exp(rng.random(n) * math.log1p(range_max)).astype(np.int64) - 1
        return np.minimum(values, range_max - 1)

    def probability(self, classes, range_max):
        return np.log((classes + 2.0) / (classes + 1.0)) / math.log1p(range_max)


@register_op("UniformCandidateSampler", attrs=dict(_SAMPLER_ATTRS))
class UniformCandidateSamplerOp(_CandidateSampler):
    """P(k) = 1 / range_max."""

    def draw(self, rng, n, range_max):
        return rng.integers(0, range_max, size=n, dtype=np.int64)

    def probability(self, classes, range_max):
        return np.full(classes.shape, 1.0 / range_max)


def _sampler(type_name, true_classes, num_true, num_sampled, unique, range_max, seed, name):
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
               for v in (num_true, num_sampled, range_max)):
        raise errors.InvalidArgumentError(
            f"{type_name}: num_true, num_sampled and range_max must be Python ints, got "
            f"{num_true!r}, {num_sampled!r} and {range_max!r}")
    true_classes = cast(convert_to_tensor(true_classes), dtypes.int64)
    attrs = dict(_seed_attrs(seed), num_true=int(num_true), num_sampled=int(num_sampled),
                 unique=bool(unique), range_max=int(range_max))
    return tuple(apply_op(type_name, [true_classes], attrs, name=name).outputs)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                  seed=None, name=None):
    """Return (sampled_candidates, true_expected_count, sampled_expected_count): classes
    drawn with P(k) = log((k + 2) / (k + 1)) / log(range_max + 1), as TensorFlow's.

    Raises:
        InvalidArgumentError: true_classes not [batch, num_true], a count that is not a
            positive int, or ``unique`` with num_sampled > range_max.
    """
    return _sampler("LogUniformCandidateSampler", true_classes, num_true, num_sampled,
                    unique, range_max, seed, name)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                              seed=None, name=None):
    """Return (sampled_candidates, true_expected_count, sampled_expected_count): classes
    drawn uniformly from [0, range_max), as TensorFlow's."""
    return _sampler("UniformCandidateSampler", true_classes, num_true, num_sampled, unique,
                    range_max, seed, name)
