"""``mf.train``: the TF1 training API (optimizers, global step; cluster and sessions later)."""

from mpiflow.train.adagrad import AdagradOptimizer
from mpiflow.train.adam import AdamOptimizer
from mpiflow.train.global_step import (
    create_global_step, get_global_step, get_or_create_global_step, global_step)
from mpiflow.train.gradient_descent import GradientDescentOptimizer
from mpiflow.train.learning_rate_decay import exponential_decay, piecewise_constant
from mpiflow.train.momentum import MomentumOptimizer
from mpiflow.train.optimizer import Optimizer
from mpiflow.train.rmsprop import RMSPropOptimizer

__all__ = [
    "AdagradOptimizer", "AdamOptimizer", "GradientDescentOptimizer", "MomentumOptimizer",
    "Optimizer", "RMSPropOptimizer", "create_global_step", "exponential_decay",
    "get_global_step", "get_or_create_global_step", "global_step", "piecewise_constant",
]
