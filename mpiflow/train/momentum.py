"""MomentumOptimizer: accum = momentum * accum + grad; var -= lr * accum (ApplyMomentum)."""

from __future__ import annotations

from mpiflow.train.optimizer import Optimizer


class MomentumOptimizer(Optimizer):
    """Gradient descent with momentum (Nesterov's variant with ``use_nesterov=True``).

    Slot "momentum" (variable ``<var>/Momentum``) holds the accumulator.
    """

    _apply_ops = {"dense": "ApplyMomentum", "sparse": "SparseApplyMomentum"}
    slots_per_variable = 1

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _apply_attrs(self):
        return {**super()._apply_attrs(), "use_nesterov": bool(self._use_nesterov)}

    def _apply_inputs(self, var, grad_inputs):
        return [var, self.get_slot(var, "momentum"),
                self._hyper(self._learning_rate, var, "learning_rate"), *grad_inputs,
                self._hyper(self._momentum, var, "momentum")]
