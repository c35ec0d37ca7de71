"""AdadeltaOptimizer (Zeiler, 2012): a step scaled by the ratio of the running RMS of past
updates to that of the gradients (ApplyAdadelta)."""

from __future__ import annotations

from mpiflow.train.optimizer import Optimizer


class AdadeltaOptimizer(Optimizer):
    """Adadelta; slots "accum" (``<var>/Adadelta``) and "accum_update"
    (``<var>/Adadelta_1``), both zeros, as TF1 names them. Sparse gradients update their
    rows only.

    accum = rho * accum + (1 - rho) * grad^2;
    update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad;
    accum_update = rho * accum_update + (1 - rho) * update^2; var -= learning_rate * update.
    """

    _apply_ops = {"dense": "ApplyAdadelta", "sparse": "SparseApplyAdadelta"}
    slots_per_variable = 2

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False,
                 name="Adadelta"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._rho = rho
        self._epsilon = epsilon

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _apply_inputs(self, var, grad_inputs):
        return [var, self.get_slot(var, "accum"), self.get_slot(var, "accum_update"),
                self._hyper(self._learning_rate, var, "learning_rate"),
                self._hyper(self._rho, var, "rho"),
                self._hyper(self._epsilon, var, "epsilon"), *grad_inputs]
