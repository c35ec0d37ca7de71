"""AdamOptimizer (Kingma & Ba), TF1's formulation with bias-corrected step size (ApplyAdam).

lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m = beta1 * m + (1 - beta1) * g;
v = beta2 * v + (1 - beta2) * g^2; var -= lr_t * m / (sqrt(v) + epsilon).
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import control_ops, state_ops
from mpiflow.train.optimizer import Optimizer


class AdamOptimizer(Optimizer):
    """Adam; slots "m" (``<var>/Adam``) and "v" (``<var>/Adam_1``), and non-slot variables
    beta1_power and beta2_power colocated with the first variable by name, one pair per
    domain of variables applied together (``Optimizer._non_slot_domain``: a hybrid model's
    replicated variables and its tables on the ps each advance their own).

    A sparse gradient gives the same result as its densified gradient (m and v decay on
    every row), as TF1's AdamOptimizer.
    """

    _apply_ops = {"dense": "ApplyAdam", "sparse": "SparseApplyAdam"}
    slots_per_variable = 2

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon

    def _create_slots(self, var_list):
        for domain in self._domains(var_list):
            first_var = domain[0]
            # float64 models keep the powers in float64; others in float32 (as TF).
            dtype = dtypes.float64 if first_var.dtype is dtypes.float64 else dtypes.float32
            # Each power starts at its beta, which may be a tensor, as in TensorFlow.
            for name, beta, value in (("beta1_power", "beta1", self._beta1),
                                      ("beta2_power", "beta2", self._beta2)):
                self._create_non_slot_variable(
                    lambda value=value, dtype=dtype, beta=beta: self._scalar(value, dtype,
                                                                             beta),
                    name, first_var)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _get_beta_accumulators(self, graph=None, var=None):
        """The (beta1_power, beta2_power) serving ``var`` (default: the first pair)."""
        graph = graph if graph is not None else get_default_graph()
        return (self._get_non_slot_variable("beta1_power", graph, var),
                self._get_non_slot_variable("beta2_power", graph, var))

    def _apply_inputs(self, var, grad_inputs):
        self._check_betas(var)
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph, var)
        return [var, self.get_slot(var, "m"), self.get_slot(var, "v"),
                self._hyper(beta1_power, var, "beta1_power"),
                self._hyper(beta2_power, var, "beta2_power"),
                self._hyper(self._learning_rate, var, "learning_rate"),
                self._hyper(self._beta1, var, "beta1"),
                self._hyper(self._beta2, var, "beta2"),
                self._hyper(self._epsilon, var, "epsilon"), *grad_inputs]

    def _check_betas(self, var):
        """Refuse a beta below 1 that rounds to 1 in ``var``'s dtype (beta2=0.999 does in
        bfloat16): the second moment would stay 0 and the first step divide by epsilon."""
        dtype = var.dtype.np_dtype
        for name, beta in (("beta1", self._beta1), ("beta2", self._beta2)):
            if isinstance(beta, (int, float)) and beta < 1 and \
                    float(np.asarray(beta).astype(dtype)) >= 1:
                below_one = 1 - var.dtype.base_dtype.epsneg
                raise errors.InvalidArgumentError(
                    f"{self._name}: {name}={beta} rounds to 1.0 in {var.dtype.name} (variable "
                    f"'{var.op.name}'), so Adam would diverge: keep the variables in float32 "
                    f"and cast them to {var.dtype.name} in the model, or use {name} <= "
                    f"{below_one}")

    def _finish(self, update_ops, name_scope):
        """Advance each domain's powers once its own updates are done."""
        graph = get_default_graph()
        advances = []
        for var, updates in self._updates_by_domain(update_ops):
            beta1_power, beta2_power = self._get_beta_accumulators(graph, var)
            # Under the gate of the domain's updates (a joined worker's tables on the ps).
            with graph.control_dependencies(updates), graph.colocate_with(beta1_power.op), \
                    self._gated(var):
                advances.append(state_ops.assign(
                    beta1_power, beta1_power * self._hyper(self._beta1, beta1_power, "beta1")))
                advances.append(state_ops.assign(
                    beta2_power, beta2_power * self._hyper(self._beta2, beta2_power, "beta2")))
        return control_ops.group(*update_ops, *advances, name=name_scope)

