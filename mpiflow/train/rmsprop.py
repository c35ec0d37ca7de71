"""RMSPropOptimizer: ms = decay * ms + (1 - decay) * grad^2;
mom = momentum * mom + lr * grad / sqrt(ms + epsilon); var -= mom (ApplyRMSProp)."""

from __future__ import annotations

from mpiflow.ops import init_ops
from mpiflow.train.optimizer import Optimizer


class RMSPropOptimizer(Optimizer):
    """RMSProp; ``centered=True`` also tracks the mean gradient (ApplyCenteredRMSProp).

    Slots as TF1: "rms" (``<var>/RMSProp``, starts at ones), "mg" when centered, then
    "momentum" (zeros).
    """

    _apply_ops = {"dense": "ApplyRMSProp", "sparse": "SparseApplyRMSProp"}
    _centered_ops = {"dense": "ApplyCenteredRMSProp", "sparse": "SparseApplyCenteredRMSProp"}

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
                 use_locking=False, centered=False, name="RMSProp"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._decay = decay
        self._momentum = momentum
        self._epsilon = epsilon
        self._centered = centered
        if centered:
            self._apply_ops = self._centered_ops

    @property
    def slots_per_variable(self) -> int:
        return 3 if self._centered else 2

    def _create_slots(self, var_list):
        for v in var_list:
            self._get_or_make_slot(
                v, lambda v=v: init_ops.Ones()(v.shape.as_list(), dtype=v.dtype), "rms",
                self._name)
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _apply_inputs(self, var, grad_inputs):
        slots = [self.get_slot(var, "rms"), self.get_slot(var, "momentum")]
        if self._centered:
            slots.insert(0, self.get_slot(var, "mg"))
        return [var, *slots, self._hyper(self._learning_rate, var, "learning_rate"),
                self._hyper(self._decay, var, "decay"),
                self._hyper(self._momentum, var, "momentum"),
                self._hyper(self._epsilon, var, "epsilon"), *grad_inputs]
