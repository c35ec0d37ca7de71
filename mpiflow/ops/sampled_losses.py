"""``nce_loss`` and ``sampled_softmax_loss``: losses over many classes (a vocabulary) that
score each example's true classes and a few sampled ones instead of every class, as
TensorFlow's, built from existing ops.

The class weights and biases are looked up with ``embedding_lookup`` (a table, a list of
shards or a PartitionedVariable), so their gradients are sparse: a step touches only the
rows of the classes it scored, and on a ps only those rows travel.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.scopes import name_scope
from mpiflow.ops import array_ops, data_flow_ops, math_ops
from mpiflow.ops.candidate_sampling_ops import log_uniform_candidate_sampler
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.control_ops import stop_gradient
from mpiflow.ops.nn_ops import (
    sigmoid_cross_entropy_with_logits, softmax_cross_entropy_with_logits_v2)
from mpiflow.ops.reduction_ops import reduce_max, reduce_sum
from mpiflow.ops.sparse_ops import embedding_lookup

# What an accidental hit's logit gets added: float32's lowest, as TensorFlow adds.
_HIT_PENALTY = -float(np.finfo(np.float32).max)


def _true_and_sampled(table, labels_flat, sampled, strategy):
    """Rows of ``table`` for the true classes and for the sampled ones: one lookup for
    both (one gather per shard), split back by a partition, as the counts of each are
    known only when the step runs."""
    rows = embedding_lookup(table, array_ops.concat([labels_flat, sampled], 0),
                            partition_strategy=strategy)
    which = array_ops.concat([math_ops.zeros_like(labels_flat, dtype=dtypes.int32),
                              math_ops.ones_like(sampled, dtype=dtypes.int32)], 0)
    return data_flow_ops.dynamic_partition(rows, which, 2)


def _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                    sampled_values, remove_accidental_hits, partition_strategy, name,
                    seed=None):
    """Return (logits [batch, num_true + num_sampled], labels of the same shape): the
    true classes' logits first, each labelled 1 / num_true, then the sampled classes',
    labelled 0; every logit less the log of its class's expected count."""
    if not isinstance(num_true, int) or num_true < 1:
        raise errors.InvalidArgumentError(
            f"{name}: num_true must be a positive int, got {num_true!r}")
    with name_scope(name, "compute_sampled_logits"):
        inputs = convert_to_tensor(inputs, name="inputs")
        labels = math_ops.cast(convert_to_tensor(labels, name="labels"), dtypes.int64)
        if labels.shape.ndims not in (None, 2):
            raise errors.InvalidArgumentError(
                f"{name}: labels must be [batch, num_true] class ids, got shape "
                f"{labels.shape} (reshape a [batch] vector to [batch, 1])")
        labels_flat = array_ops.reshape(labels, [-1])
        if sampled_values is None:
            sampled_values = log_uniform_candidate_sampler(
                labels, num_true=num_true, num_sampled=num_sampled, unique=True,
                range_max=num_classes, seed=seed)
        sampled, true_expected, sampled_expected = (
            stop_gradient(convert_to_tensor(s)) for s in sampled_values)
        sampled = math_ops.cast(sampled, dtypes.int64)
        dtype = inputs.dtype
        true_w, sampled_w = (math_ops.cast(w, dtype) for w in _true_and_sampled(
            weights, labels_flat, sampled, partition_strategy))
        true_b, sampled_b = (math_ops.cast(b, dtype) for b in _true_and_sampled(
            biases, labels_flat, sampled, partition_strategy))
        sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
        dim = array_ops.reshape(math_ops.shape(inputs)[1], [1])
        true_w = array_ops.reshape(true_w, array_ops.concat([[-1, num_true], dim], 0))
        true_logits = reduce_sum(array_ops.expand_dims(inputs, 1) * true_w, axis=2)
        true_logits = true_logits + array_ops.reshape(true_b, [-1, num_true])
        if remove_accidental_hits:
            # A sampled class that is one of the example's true classes is no negative:
            # its logit goes to float32's lowest, so it counts for nothing.
            hit = math_ops.equal(array_ops.expand_dims(labels, 2),
                                 array_ops.reshape(sampled, [1, 1, -1]))
            hits = reduce_max(math_ops.cast(hit, dtype), axis=1)
            sampled_logits = sampled_logits + hits * math_ops.cast(_HIT_PENALTY, dtype)
        true_logits = true_logits - math_ops.log(math_ops.cast(true_expected, dtype))
        sampled_logits = sampled_logits - math_ops.log(math_ops.cast(sampled_expected,
                                                                     dtype))
        logits = array_ops.concat([true_logits, sampled_logits], 1)
        targets = array_ops.concat([math_ops.ones_like(true_logits) / num_true,
                                    math_ops.zeros_like(sampled_logits)], 1)
        return logits, targets


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
             sampled_values=None, remove_accidental_hits=False, partition_strategy=None,
             name="nce_loss"):
    """Return the noise-contrastive estimation loss of each example, shape [batch].

    Args:
        weights: the class embeddings [num_classes, dim]: a table, a list of shards or a
            PartitionedVariable, looked up with ``partition_strategy`` as
            ``embedding_lookup`` looks it up (None: a PartitionedVariable's own strategy,
            "div" for the tables a TrainingMode splits, else "mod" as TensorFlow).
        biases: the class biases [num_classes], sharded like ``weights``.
        labels: int [batch, num_true] true class ids.
        inputs: [batch, dim] activations.
        num_sampled: how many negative classes to draw per step (shared by the batch).
        num_classes: how many classes there are.
        sampled_values: None (draw with ``log_uniform_candidate_sampler``, unique), or a
            sampler's (sampled, true_expected_count, sampled_expected_count).
        remove_accidental_hits: drop a sampled class that is one of the example's labels.

    Each true and sampled class is a logistic regression on its logit less the log of
    its expected count, so the loss is the sum over them of the sigmoid cross entropy.
    """
    logits, targets = _sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true,
        sampled_values, remove_accidental_hits, partition_strategy, name)
    losses = sigmoid_cross_entropy_with_logits(labels=targets, logits=logits,
                                               name="sampled_losses")
    return reduce_sum(losses, axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                         num_true=1, sampled_values=None, remove_accidental_hits=True,
                         partition_strategy=None, name="sampled_softmax_loss", seed=None):
    """Return the softmax cross entropy of each example over its true classes and
    ``num_sampled`` sampled ones, shape [batch]: an estimate of the full softmax loss
    for training (evaluate with the full softmax). Arguments as ``nce_loss``; by default
    a sampled class that is one of the example's labels is removed, as TensorFlow.
    ``seed`` seeds the sampler."""
    logits, targets = _sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true,
        sampled_values, remove_accidental_hits, partition_strategy, name, seed=seed)
    return softmax_cross_entropy_with_logits_v2(
        labels=stop_gradient(targets, name="labels_stop_gradient"), logits=logits)
