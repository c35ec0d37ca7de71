"""AdagradOptimizer: accum += grad^2; var -= lr * grad / sqrt(accum) (ApplyAdagrad)."""

from __future__ import annotations

from mpiflow import errors
from mpiflow.ops import init_ops
from mpiflow.train.optimizer import Optimizer


class AdagradOptimizer(Optimizer):
    """Adagrad; slot "accumulator" (``<var>/Adagrad``) starts at ``initial_accumulator_value``.

    Raises:
        InvalidArgumentError: ``initial_accumulator_value`` is not positive.
    """

    _apply_ops = {"dense": "ApplyAdagrad", "sparse": "SparseApplyAdagrad"}
    slots_per_variable = 1

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
                 name="Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise errors.InvalidArgumentError(
                f"AdagradOptimizer: initial_accumulator_value must be positive, got "
                f"{initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        make_accumulators(self, var_list, self._initial_accumulator_value)

    def _apply_inputs(self, var, grad_inputs):
        return [var, self.get_slot(var, "accumulator"),
                self._hyper(self._learning_rate, var, "learning_rate"), *grad_inputs]


def make_accumulators(optimizer: Optimizer, var_list, initial_value) -> None:
    """Each variable's "accumulator" slot of squared gradients, filled with
    ``initial_value``: Adagrad's, which ProximalAdagrad keeps too."""
    init = init_ops.Constant(initial_value)
    for v in var_list:
        optimizer._get_or_make_slot(
            v, lambda v=v: init(v.shape.as_list(), dtype=v.dtype), "accumulator",
            optimizer._name)
