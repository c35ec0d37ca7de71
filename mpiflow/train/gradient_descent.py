"""GradientDescentOptimizer: var -= learning_rate * grad (ApplyGradientDescent)."""

from __future__ import annotations

from mpiflow.train.optimizer import Optimizer


class GradientDescentOptimizer(Optimizer):
    """Plain gradient descent; sparse gradients update only their rows.

    Args:
        learning_rate: a float, a scalar Tensor (e.g. a decay schedule) or a callable.
    """

    _apply_ops = {"dense": "ApplyGradientDescent", "sparse": "SparseApplyGradientDescent"}

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_inputs(self, var, grad_inputs):
        return [var, self._hyper(self._learning_rate, var, "learning_rate"), *grad_inputs]
