"""The proximal optimizers of TF1 (Duchi & Singer's FOBOS): a gradient step, then the
proximal map of L1 and L2 regularization, which sets small coordinates to exactly zero
(ApplyProximalGradientDescent, ApplyProximalAdagrad)."""

from __future__ import annotations

from mpiflow import errors
from mpiflow.train.adagrad import make_accumulators
from mpiflow.train.optimizer import Optimizer, check_at_least_zero


class _ProximalOptimizer(Optimizer):
    """What the two share: the L1 and L2 strengths, checked and given to the update."""

    def __init__(self, learning_rate, l1, l2, use_locking, name):
        check_at_least_zero(type(self).__name__, l1_regularization_strength=l1,
                            l2_regularization_strength=l2)
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._l1 = l1
        self._l2 = l2

    def _regularization(self, var):
        return [self._hyper(self._l1, var, "l1_regularization_strength"),
                self._hyper(self._l2, var, "l2_regularization_strength")]


class ProximalGradientDescentOptimizer(_ProximalOptimizer):
    """prox = var - lr * grad; var = sign(prox) * max(|prox| - lr * l1, 0) / (1 + lr * l2).
    No slots; sparse gradients update their rows only.

    Raises:
        InvalidArgumentError: a negative regularization strength.
    """

    _apply_ops = {"dense": "ApplyProximalGradientDescent",
                  "sparse": "SparseApplyProximalGradientDescent"}

    def __init__(self, learning_rate, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, use_locking=False,
                 name="ProximalGradientDescent"):
        super().__init__(learning_rate, l1_regularization_strength,
                         l2_regularization_strength, use_locking, name)

    def _apply_inputs(self, var, grad_inputs):
        return [var, self._hyper(self._learning_rate, var, "learning_rate"),
                *self._regularization(var), *grad_inputs]


class ProximalAdagradOptimizer(_ProximalOptimizer):
    """Adagrad's per-coordinate rate (accum += grad^2; rate = lr / sqrt(accum)) in the
    proximal step; slot "accumulator" (``<var>/ProximalAdagrad``) starts at
    ``initial_accumulator_value``.

    Raises:
        InvalidArgumentError: ``initial_accumulator_value`` is not positive, or a negative
            regularization strength.
    """

    _apply_ops = {"dense": "ApplyProximalAdagrad", "sparse": "SparseApplyProximalAdagrad"}
    slots_per_variable = 1

    def __init__(self, learning_rate, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="ProximalAdagrad"):
        if isinstance(initial_accumulator_value, (int, float)) and \
                initial_accumulator_value <= 0.0:
            raise errors.InvalidArgumentError(
                f"ProximalAdagradOptimizer: initial_accumulator_value must be positive, got "
                f"{initial_accumulator_value}")
        super().__init__(learning_rate, l1_regularization_strength,
                         l2_regularization_strength, use_locking, name)
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        make_accumulators(self, var_list, self._initial_accumulator_value)

    def _apply_inputs(self, var, grad_inputs):
        return [var, self.get_slot(var, "accumulator"),
                self._hyper(self._learning_rate, var, "learning_rate"),
                *self._regularization(var), *grad_inputs]
