"""``mf.losses``: TF1's ``tf.losses``, built from mpiflow's ops.

Each loss function weights its per-element losses, reduces them (``Reduction``; the
default divides by the number of nonzero weights) and adds the result to ``LOSSES``, so
``get_total_loss()`` sums a model's losses and its regularization losses as in TF1.
"""

from mpiflow import unsupported
from mpiflow.losses.collection import (
    add_loss,
    get_losses,
    get_regularization_loss,
    get_regularization_losses,
    get_total_loss,
)
from mpiflow.losses.functions import (
    absolute_difference,
    cosine_distance,
    hinge_loss,
    huber_loss,
    log_loss,
    mean_pairwise_squared_error,
    mean_squared_error,
    sigmoid_cross_entropy,
    softmax_cross_entropy,
    sparse_softmax_cross_entropy,
)
from mpiflow.losses.reduction import Reduction, compute_weighted_loss

__all__ = [
    "Reduction",
    "absolute_difference",
    "add_loss",
    "compute_weighted_loss",
    "cosine_distance",
    "get_losses",
    "get_regularization_loss",
    "get_regularization_losses",
    "get_total_loss",
    "hinge_loss",
    "huber_loss",
    "log_loss",
    "mean_pairwise_squared_error",
    "mean_squared_error",
    "sigmoid_cross_entropy",
    "softmax_cross_entropy",
    "sparse_softmax_cross_entropy",
]

__getattr__ = unsupported.namespace_getattr(__name__, "tf.losses")
