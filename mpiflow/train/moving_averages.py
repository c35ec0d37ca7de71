"""ExponentialMovingAverage: TF1's ``tf.train.ExponentialMovingAverage``, built from ops.

A TF1 script keeps shadow copies of its weights, moved towards the weights after each
step, and evaluates (or exports) with the shadows, which are smoother than the last
step's weights. Each shadow is a non-trainable variable named
``<variable>/<ema name>``, next to its variable (on its ps), so a checkpoint of the
training graph holds both and an evaluation graph restores the shadows into the model's
own variables with ``Saver(ema.variables_to_restore())``.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.ops import control_ops, math_ops, random_ops, state_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.variables import (
    Variable,
    global_variables,
    moving_average_variables,
    trainable_variables,
)
from mpiflow.train.optimizer import _create_slot

__all__ = ["ExponentialMovingAverage"]

_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)


class MovingAverageTypeError(errors.InvalidArgumentError, TypeError):
    """A value to average is not a float16, float32 or float64 tensor. Also a
    ``TypeError``, which TensorFlow raises, so a script's ``except TypeError`` holds."""


class ExponentialMovingAverage:
    """Shadow variables that follow variables or tensors:
    ``shadow -= (shadow - value) * (1 - decay)`` each time the op of ``apply`` runs.

    Args:
        decay: a float or float scalar tensor, usually close to 1 (0.999).
        num_updates: optional count of updates so far (the global step): the decay used
            is then ``min(decay, (1 + num_updates) / (10 + num_updates))``, so the
            shadows follow quickly early in training.
        zero_debias: the shadows of tensors (which start at zero) are divided by
            ``1 - decay ^ updates``, so they are not pulled towards zero at first. A
            Variable's shadow starts at the variable's initial value and is never
            debiased, as in TensorFlow.
        name: the suffix of the shadows' names and the name scope of the update ops.
    """

    def __init__(self, decay, num_updates=None, zero_debias=False,
                 name="ExponentialMovingAverage"):
        self._decay = decay
        self._num_updates = num_updates
        self._zero_debias = zero_debias
        self._name = name
        self._averages = {}         # id of the averaged Variable/Tensor -> its shadow
        self._debiased = {}         # id of a debiased shadow -> (biased, local_step)

    @property
    def name(self) -> str:
        return self._name

    def apply(self, var_list=None):
        """Create the shadows of ``var_list`` (default: the trainable variables) that do
        not exist yet, and return one op that updates every shadow of ``var_list``.

        Each update reads its value, and a Variable ``num_updates`` (the global step),
        where the op runs: under ``control_dependencies([train_op])`` the shadows follow
        the weights after the step, with the step's count, in every training mode.
        Shadows of Variables start at the variable's initial value, shadows of tensors
        at zero; all are global, non-trainable variables.

        Raises:
            MovingAverageTypeError: a value that is not float16, float32 or float64
                (also a TypeError).
        """
        if var_list is None:
            var_list = trainable_variables()
        var_list = list(var_list)
        for value in var_list:
            if value.dtype.base_dtype not in _FLOATS:
                raise MovingAverageTypeError(
                    f"ExponentialMovingAverage.apply: the values to average must be half, "
                    f"float or double, got {value.dtype.name} '{value.name}'")
        graph = get_default_graph()
        for value in var_list:
            if id(value) not in self._averages:
                self._averages[id(value)] = (value, self._create_shadow(value))
        with graph.name_scope(self._name) as scope:
            decay = convert_to_tensor(self._decay, name="decay")
            if self._num_updates is not None:
                count = self._num_updates
                if isinstance(count, Variable):     # read where the update is (see above)
                    count = count.read_value()
                updates = math_ops.cast(count, dtypes.float32, name="num_updates")
                decay = math_ops.minimum(
                    decay, math_ops.cast((1.0 + updates) / (10.0 + updates), decay.dtype))
            updates = [self._update(value, decay) for value in var_list]
            return control_ops.group(*updates, name=scope)

    def _create_shadow(self, value):
        graph = value.graph
        if isinstance(value, Variable):
            shadow = _create_slot(value, value.initial_value, self._name)
            graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, value)
            return shadow
        # A tensor's shadow is placed by the device scopes, as any new variable.
        if not value.shape.is_fully_defined():
            raise errors.InvalidArgumentError(
                f"ExponentialMovingAverage.apply: the shadow of tensor '{value.name}' needs "
                f"its shape, which the graph leaves open ({value.shape})")
        shape = value.shape.as_list()
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
            shadow = Variable(lambda: random_ops.zeros(shape, value.dtype), trainable=False,
                              name=f"{value.op.name}/{self._name}")
        if self._zero_debias:
            self._debiased[id(shadow)] = _debias_state(shadow)
        return shadow

    def _update(self, value, decay):
        """The op moving the shadow of ``value`` one step towards its value now."""
        shadow = self.average(value)
        graph = shadow.graph
        with graph.name_scope("AssignMovingAvg") as scope:
            now = value.read_value() if isinstance(value, Variable) else value
            # 1 - decay in the decay's dtype, then the shadow's, as TensorFlow rounds it.
            rate = math_ops.cast(1.0 - decay, shadow.dtype)
            if id(shadow) in self._debiased:
                return _debiased_update(shadow, *self._debiased[id(shadow)], now, rate,
                                        scope)
            with graph.colocate_with(shadow.op):
                return state_ops.assign_sub(shadow, (shadow - now) * rate, name=scope)

    def average(self, var):
        """The shadow of ``var`` (a Variable or tensor given to ``apply``), else None."""
        found = self._averages.get(id(var))
        return None if found is None or found[0] is not var else found[1]

    def average_name(self, var) -> str:
        """The name of ``var``'s shadow in a checkpoint: its shadow's name once ``apply``
        made one, else the name ``apply`` would give it (``<var>/<ema name>``)."""
        shadow = self.average(var)
        if shadow is not None:
            return shadow.op.name
        return var.graph.unique_name(f"{var.op.name}/{self._name}", mark_as_used=False)

    def variables_to_restore(self, moving_avg_variables=None) -> dict:
        """``{checkpoint name: variable}`` for a Saver that restores the shadows into
        the variables they follow: each of ``moving_avg_variables`` (default: the
        trainable variables and ``moving_average_variables()``) from its shadow's name,
        every other global variable from its own name."""
        if moving_avg_variables is None:
            moving_avg_variables = trainable_variables() + moving_average_variables()
        name_map = {}
        averaged = {}
        for var in moving_avg_variables:
            averaged.setdefault(id(var), var)
        for var in averaged.values():
            name_map[self.average_name(var)] = var
        averaged_names = {var.name for var in averaged.values()}
        for var in global_variables():
            if var.name not in averaged_names and var.op.name not in name_map:
                name_map[var.op.name] = var
        return name_map


def _debias_state(shadow):
    """The variables of a zero-debiased shadow: the biased average, which starts at zero
    (``<shadow>/biased``), and the count of updates (``<shadow>/local_step``)."""
    graph = shadow.graph
    shape = shadow.shape.as_list()
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
            graph.colocate_with(shadow.op):
        biased = Variable(lambda: random_ops.zeros(shape, shadow.dtype), trainable=False,
                          name=f"{shadow.op.name}/biased")
        count = Variable(lambda: random_ops.zeros([], shadow.dtype), trainable=False,
                         name=f"{shadow.op.name}/local_step")
    return biased, count


def _debiased_update(shadow, biased, count, value, rate, name):
    """Move the biased average, count the update and set ``shadow`` to
    ``biased / (1 - (1 - rate) ^ count)``."""
    with shadow.graph.colocate_with(shadow.op):
        new_biased = state_ops.assign_sub(biased, (biased - value) * rate)
        new_count = state_ops.assign_add(count, math_ops.cast(1, shadow.dtype))
        factor = 1.0 - math_ops.pow(1.0 - rate, new_count)
        return state_ops.assign(shadow, new_biased / factor, name=name)
