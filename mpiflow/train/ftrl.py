"""FtrlOptimizer: FTRL-Proximal (McMahan et al., 2013), TF1's formulation (ApplyFtrl, or
ApplyFtrlV2 with L2 shrinkage), used for wide embedding and linear models: its L1 term
sets rarely useful coordinates to exactly zero."""

from __future__ import annotations

from mpiflow import errors
from mpiflow.ops import init_ops, math_ops
from mpiflow.train.optimizer import Optimizer, check_at_least_zero


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal; slots "accum" (``<var>/Ftrl``, starts at
    ``initial_accumulator_value``) and "linear" (``<var>/Ftrl_1``, zeros), as TF1 names them
    (``accum_name``, ``linear_name`` rename them).

    ``l2_shrinkage_regularization_strength`` > 0 adds ``2 * shrinkage * var`` to the
    gradient linear takes (ApplyFtrlV2); ``beta`` adds ``beta / (2 * learning_rate)`` to
    the L2 strength, as TensorFlow's. Sparse gradients update their rows only.

    Raises:
        InvalidArgumentError: ``learning_rate_power`` above zero, or a negative
            ``initial_accumulator_value`` or regularization strength.
    """

    _apply_ops = {"dense": "ApplyFtrl", "sparse": "SparseApplyFtrl"}
    _shrinkage_ops = {"dense": "ApplyFtrlV2", "sparse": "SparseApplyFtrlV2"}
    slots_per_variable = 2

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="Ftrl", accum_name=None, linear_name=None,
                 l2_shrinkage_regularization_strength=0.0, beta=None):
        super().__init__(use_locking, name)
        if isinstance(learning_rate_power, (int, float)) and learning_rate_power > 0.0:
            raise errors.InvalidArgumentError(
                f"FtrlOptimizer: learning_rate_power must be zero or negative, got "
                f"{learning_rate_power}")
        check_at_least_zero(
            "FtrlOptimizer", initial_accumulator_value=initial_accumulator_value,
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
            l2_shrinkage_regularization_strength=l2_shrinkage_regularization_strength)
        self._learning_rate = learning_rate
        self._learning_rate_power = learning_rate_power
        self._initial_accumulator_value = initial_accumulator_value
        self._l1 = l1_regularization_strength
        self._l2 = l2_regularization_strength
        self._l2_shrinkage = l2_shrinkage_regularization_strength
        self._beta = 0.0 if beta is None else beta
        self._accum_name = accum_name
        self._linear_name = linear_name
        # Without shrinkage the plain update (ApplyFtrl), as TF1 chooses; a tensor may be
        # anything, so it takes ApplyFtrlV2.
        if not (isinstance(self._l2_shrinkage, (int, float)) and self._l2_shrinkage <= 0.0):
            self._apply_ops = self._shrinkage_ops

    def _create_slots(self, var_list):
        for v in var_list:
            init = init_ops.Constant(self._initial_accumulator_value)
            self._get_or_make_slot(
                v, lambda v=v, init=init: init(v.shape.as_list(), dtype=v.dtype), "accum",
                self._accum_name or self._name)
            self._zeros_slot(v, "linear", self._linear_name or self._name)

    def _l2_strength(self, var):
        """The L2 strength the update takes: l2 + beta / (2 * learning_rate)."""
        l2 = self._hyper(self._l2, var, "l2_regularization_strength")
        if isinstance(self._beta, (int, float)) and self._beta == 0.0:
            return l2
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        return l2 + self._hyper(self._beta, var, "beta") / (2.0 * math_ops.maximum(lr, 1e-36))

    def _apply_inputs(self, var, grad_inputs):
        shrinkage = []
        if self._apply_ops is self._shrinkage_ops:
            shrinkage = [self._hyper(self._l2_shrinkage, var,
                                     "l2_shrinkage_regularization_strength")]
        return [var, self.get_slot(var, "accum"), self.get_slot(var, "linear"), *grad_inputs,
                self._hyper(self._learning_rate, var, "learning_rate"),
                self._hyper(self._l1, var, "l1_regularization_strength"),
                self._l2_strength(var), *shrinkage,
                self._hyper(self._learning_rate_power, var, "learning_rate_power")]
