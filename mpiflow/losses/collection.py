"""The loss collections: every ``mf.losses`` function adds its result to ``LOSSES`` and
regularizers add theirs to ``REGULARIZATION_LOSSES``, so ``get_total_loss`` can sum a
model's losses without the model code handing them around."""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.ops import math_ops
from mpiflow.ops.constant_ops import constant


def add_loss(loss, loss_collection=GraphKeys.LOSSES) -> None:
    """Add ``loss`` to ``loss_collection`` (nothing when the collection is None or "")."""
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES) -> list:
    """Return the losses in ``loss_collection`` whose names match ``scope`` (a regex)."""
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    """Return the sum of the regularization losses, or a constant 0.0 if there are none."""
    losses = get_regularization_losses(scope)
    if losses:
        return math_ops.add_n(losses, name=name)
    return constant(0.0)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """Return the sum of ``get_losses()`` (and, by default, the regularization losses).

    Raises:
        InvalidArgumentError: there is no loss to sum; a model whose losses were never
            added (``loss_collection=None``, or built with ``mf.nn`` ops) has none.
    """
    losses = get_losses(scope=scope)
    if add_regularization_losses:
        losses += get_regularization_losses(scope=scope)
    if not losses:
        raise errors.InvalidArgumentError(
            f"get_total_loss: no losses in the '{GraphKeys.LOSSES}' collection"
            f"{'' if scope is None else f' matching scope {scope!r}'}: expected a loss "
            "added by an mf.losses function or mf.losses.add_loss")
    return math_ops.add_n(losses, name=name)
