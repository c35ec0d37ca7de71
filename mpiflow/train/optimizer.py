"""Optimizer: TF1's base class (compute_gradients, apply_gradients, minimize, slots).

A subclass declares its fused ops in ``_apply_ops`` (``{"dense": ..., "sparse": ...}``),
creates its slots in ``_create_slots`` and lists an op's inputs in ``_apply_inputs``; the
base class picks dense or sparse from the gradient's type (a Tensor or IndexedSlices) and
builds the op colocated with the variable, so on a parameter server each update is one
fused kernel next to the variable it writes.
"""

from __future__ import annotations

import contextlib

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import GraphKeys, Tensor, get_default_graph
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.framework.per_graph import PerGraph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.gradients import gradients
from mpiflow.ops import control_ops, math_ops, random_ops, sparse_ops, state_ops, training_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.variables import Variable

# train op -> the loss it minimizes, per graph: the progress report shows that loss when
# a step runs the train op, with no loss given to it.
MINIMIZED_LOSSES = PerGraph(dict)
_VALID_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)

# Which hook applies which kind of gradient.
_UPDATE_FOR_GRAD_TYPE = {Tensor: "_apply_dense",
                         IndexedSlices: "_apply_sparse_duplicate_indices"}


def check_at_least_zero(optimizer: str, **values) -> None:
    """Refuse a hyperparameter given as a Python number below zero (a regularization
    strength, an initial accumulator), as TensorFlow's ValueError; tensors pass."""
    for name, value in values.items():
        if isinstance(value, (int, float)) and value < 0.0:
            raise errors.InvalidArgumentError(
                f"{optimizer}: {name} must be zero or positive, got {value}")


class Optimizer:
    """Base class of the optimizers: ``Optimizer(use_locking, name)``.

    Subclasses set ``_apply_ops`` and override ``_create_slots``, ``_prepare``,
    ``_apply_inputs`` and, when they update state after all variables, ``_finish``.
    """

    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    _apply_ops: dict = {}
    # Slots each variable gets (their bytes count in the state a training mode's cost
    # model gives a worker or a ps: TrainingMode("auto")).
    slots_per_variable: int = 0

    def __init__(self, use_locking: bool, name: str):
        if not name:
            raise errors.InvalidArgumentError("Optimizer: a name must be given")
        self._use_locking = use_locking
        self._name = name
        self._slots = {}            # slot name -> {variable key: slot Variable}
        self._non_slot_dict = {}    # (name, graph, domain) -> Variable
        self._update_var = {}       # update op -> the variable it updates (for _finish)
        self._update_gates = {}     # variable key -> what its update waits on (gating_updates)

    def get_name(self) -> str:
        return self._name

    # -- the public API --------------------------------------------------------------------
    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        """Add ops that update ``var_list`` to minimize ``loss``; return the train op.

        Raises:
            InvalidArgumentError: ``loss`` is not a float scalar, there are no variables,
                or no variable has a gradient.
        """
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if all(g is None for g, _ in grads_and_vars):
            raise errors.InvalidArgumentError(
                "No gradients provided for any variable, check your graph for ops that do "
                f"not support gradients, between variables {_names(grads_and_vars)} and "
                f"loss '{_loss_name(loss)}'")
        train_op = self.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        if isinstance(loss, Tensor):
            MINIMIZED_LOSSES.of(loss.graph)[train_op] = loss
        return train_op

    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None) -> list:
        """Return [(gradient, variable)] of ``loss``; a gradient is None where there is none.

        Args:
            loss: a float scalar Tensor (or a callable returning one).
            var_list: variables to differentiate (default: the trainable variables).
            gate_gradients: GATE_GRAPH computes every gradient before any is used.
            grad_loss: the gradient of ``loss`` (default 1).

        Raises:
            InvalidArgumentError: ``loss`` is not a float scalar Tensor, there are no
                variables to optimize, or one is not a float Variable.
        """
        if callable(loss):
            loss = loss()
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise errors.InvalidArgumentError(
                f"gate_gradients must be GATE_NONE, GATE_OP or GATE_GRAPH (0, 1, 2), got "
                f"{gate_gradients!r}")
        loss = _check_loss(loss)
        if var_list is None:
            graph = loss.graph
            var_list = graph.get_collection(GraphKeys.TRAINABLE_VARIABLES) + \
                graph.get_collection(GraphKeys.TRAINABLE_RESOURCE_VARIABLES)
        else:
            var_list = flatten_nested(var_list)
        if not var_list:
            raise errors.InvalidArgumentError(
                f"No variables to optimize for loss '{loss.name}': create trainable "
                "variables first or pass var_list")
        for v in var_list:
            _check_variable(v)
        with loss.graph.as_default():
            grads = gradients(loss, [v._ref() for v in var_list], grad_ys=grad_loss,
                              gate_gradients=gate_gradients == self.GATE_OP,
                              aggregation_method=aggregation_method,
                              colocate_gradients_with_ops=colocate_gradients_with_ops)
            if gate_gradients == self.GATE_GRAPH:
                grads = _gate(grads)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Add the ops that apply ``grads_and_vars``; return the train op.

        A Tensor gradient takes the dense fused op, an IndexedSlices the sparse one; pairs
        with a None gradient are skipped. A variable with a ``constraint`` is then assigned
        ``constraint(its value after the update)``, next to it, as in TF1. With
        ``global_step``, the op returned also adds 1 to it, after every update.

        Raises:
            InvalidArgumentError: no pair, a gradient that is not a Tensor/IndexedSlices,
                every gradient None (the message lists the variables), or a sparse
                gradient for a variable with a constraint (TF1 refuses it too).
        """
        pairs = []
        for g, v in tuple(grads_and_vars):
            _check_variable(v)
            if g is not None and not isinstance(g, (Tensor, IndexedSlices)):
                try:
                    g = convert_to_tensor(g)
                except errors.InvalidArgumentError:
                    raise errors.InvalidArgumentError(
                        f"Gradient for variable '{v.name}' must be a Tensor, IndexedSlices or "
                        f"None, got {type(g).__name__}") from None
            if isinstance(g, IndexedSlices) and getattr(v, "constraint", None) is not None:
                raise errors.InvalidArgumentError(
                    f"Cannot use a constraint function on a sparse variable: '{v.name}' has "
                    "a constraint and its gradient is sparse (IndexedSlices, from a gather "
                    "or embedding_lookup); TF1 refuses it too. Leave the constraint out, or "
                    "project the variable yourself with mf.assign after the train op")
            pairs.append((g, v))
        if not pairs:
            raise errors.InvalidArgumentError("apply_gradients: no variables provided")
        var_list = [v for g, v in pairs if g is not None]
        if not var_list:
            raise errors.InvalidArgumentError(
                f"No gradients provided for any variable: {_names(pairs)}")
        graph = var_list[0].graph
        self._update_var = {}
        with graph.as_default():
            with graph.name_scope(None), graph.control_dependencies(None):
                self._create_slots(var_list)
            update_ops = []
            with graph.name_scope(name or self._name) as scope:
                self._prepare()
                for grad, var in pairs:
                    if grad is None:
                        continue
                    with graph.name_scope("update_" + var.op.name), \
                            graph.colocate_with(var.op), self._gated(var):
                        hook = getattr(self, _UPDATE_FOR_GRAD_TYPE[type(grad)])
                        update_ops.append(_constrained(hook(grad, var), var))
                        self._update_var[update_ops[-1]] = var
                if global_step is None:
                    train_op = self._finish(update_ops, scope)
                else:
                    # The whole chain on the global step's ps: a worker lost in the middle
                    # of a step then cannot leave its updates made and the step not counted
                    # (a group op on the worker would carry the order through it).
                    with graph.colocate_with(_op_of(global_step)):
                        with graph.control_dependencies([self._finish(update_ops,
                                                                       "update")]):
                            train_op = state_ops.assign_add(global_step, 1, name=scope).op
            collection = graph.get_collection_ref(GraphKeys.TRAIN_OP)
            if train_op not in collection:
                collection.append(train_op)
        return train_op

    @contextlib.contextmanager
    def gating_updates(self, gates):
        """Inside, ``apply_gradients`` makes the update of each variable of ``gates``
        ([(variable, bool scalar Tensor)]) change state only in the steps where its
        predicate is true (``Graph.state_changes_only_if``, inside any in force around
        the call): a worker that joined in hybrid mode leaves the tables on the ps alone,
        while the replicas' updates follow the step's count of contributors."""
        previous = self._update_gates
        self._update_gates = {_var_key(var): predicate for var, predicate in gates}
        try:
            yield
        finally:
            self._update_gates = previous

    def _gated(self, var):
        """Where the update of ``var`` (or state advanced with it, in ``_finish``) is
        made: under its gate (``gating_updates``), if it has one."""
        gate = self._update_gates.get(_var_key(var))
        return contextlib.nullcontext() if gate is None else \
            var.graph.state_changes_only_if(gate)

    def get_slot(self, var, name):
        """Return the slot ``name`` (e.g. "momentum") this optimizer made for ``var``."""
        return self._slots.get(name, {}).get(_var_key(var))

    def get_slot_names(self) -> list:
        return sorted(self._slots)

    def variables(self) -> list:
        """Return this optimizer's slot and non-slot variables in the default graph."""
        graph = get_default_graph()
        found = [v for (_, g, _), v in self._non_slot_dict.items() if g is graph]
        for per_var in self._slots.values():
            found.extend(v for v in per_var.values() if v.graph is graph)
        return sorted(found, key=lambda v: v.name)

    # -- hooks for subclasses ----------------------------------------------------------------
    def _create_slots(self, var_list) -> None:
        """Create the slots of every variable in ``var_list`` (once per variable)."""

    def _prepare(self) -> None:
        """Evaluate callable hyperparameters once per ``apply_gradients``."""

    def _apply_inputs(self, var, grad_inputs) -> list:
        """Return the fused op's inputs for ``var``; ``grad_inputs`` go in the grad place."""
        raise NotImplementedError

    def _apply_attrs(self) -> dict:
        return {"use_locking": bool(self._use_locking)}

    def _apply_dense(self, grad, var):
        return self._apply_fused("dense", var, [grad])

    def _apply_sparse_duplicate_indices(self, grad, var):
        """Apply the IndexedSlices ``grad``, whose indices may repeat (two lookups of one
        row): TF1's hook. An ``_apply_sparse`` of a subclass gets each index once, the
        values of a repeated one summed, as in TF1 (a ``scatter_update`` of a slot would
        otherwise keep one of the rows); the fused sparse ops sum repeats themselves."""
        if type(self)._apply_sparse is not Optimizer._apply_sparse:
            grad = sparse_ops.deduplicate_indexed_slices(grad)
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad, var):
        return self._apply_fused("sparse", var, [grad.values, grad.indices])

    def _apply_fused(self, kind, var, grad_inputs):
        op_type = self._apply_ops.get(kind)
        if op_type is None:
            raise errors.UnimplementedError(
                f"{type(self).__name__} has no {kind} update (it has "
                f"{sorted(self._apply_ops)}) for variable '{var.name}'")
        return training_ops.fused_apply(op_type, self._apply_inputs(var, grad_inputs),
                                        self._apply_attrs())

    def _finish(self, update_ops, name_scope):
        """Return the op grouping ``update_ops`` (subclasses add their final updates)."""
        return control_ops.group(*update_ops, name=name_scope)

    # -- slots and hyperparameters ------------------------------------------------------------
    def _hyper(self, value, var, name):
        """Return hyperparameter ``value`` (number, Tensor or callable) as a scalar Tensor of
        ``var``'s dtype, created where the caller is (colocated with ``var``)."""
        return self._scalar(value, var.dtype, name)

    def _scalar(self, value, dtype, name):
        """Return ``value`` (number, Tensor or callable) as a scalar Tensor of ``dtype``."""
        if callable(value) and not hasattr(value, "_as_tensor"):
            value = value()
        if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
            tensor = convert_to_tensor(value)
            if tensor.shape.ndims not in (None, 0):
                raise errors.InvalidArgumentError(
                    f"{self._name}: hyperparameter '{name}' must be a scalar, got tensor "
                    f"'{tensor.name}' of shape {tensor.shape}")
            return math_ops.cast(tensor, dtype)
        return constant(value, dtype=dtype, name=name)

    def _zeros_slot(self, var, slot_name, op_name):
        """Return the slot ``slot_name`` of ``var``, created as zeros if new."""
        return self._slot(var, lambda: random_ops.zeros(var.shape.as_list(), var.dtype),
                          slot_name, op_name)

    def _get_or_make_slot(self, var, val, slot_name, op_name):
        """Return the slot ``slot_name`` of ``var``, created with initial value ``val``."""
        return self._slot(var, val, slot_name, op_name)

    def _get_or_make_slot_with_initializer(self, var, initializer, shape, dtype, slot_name,
                                           op_name):
        """Return the slot ``slot_name`` of ``var``, created as ``initializer(shape,
        dtype=dtype)`` if new (TF1's signature, for optimizers users write)."""
        shape = TensorShape(shape).as_list()
        return self._slot(var, lambda: initializer(shape, dtype=dtypes.as_dtype(dtype)),
                          slot_name, op_name)

    @staticmethod
    def _call_if_callable(param):
        """``param()`` if it is callable (a hyperparameter given as a function), else
        ``param``: TF1's helper for ``_prepare``."""
        return param() if callable(param) and not hasattr(param, "_as_tensor") else param

    def _slot(self, var, initial_value, slot_name, op_name):
        per_var = self._slots.setdefault(slot_name, {})
        key = _var_key(var)
        if key not in per_var:
            per_var[key] = _create_slot(var, initial_value, op_name)
        return per_var[key]

    # -- non-slot state: one copy per domain ---------------------------------------------
    @staticmethod
    def _non_slot_domain(var) -> str:
        """The domain whose updates advance ``var``'s non-slot state: its device's job.

        State that is not a slot (Adam's beta powers) advances once per apply of the
        variables it serves, so it must live where those applies happen: a hybrid model's
        replicated variables (job "worker", applied by every replica) and its tables on the
        ps (applied there for each worker's push) each get their own copy, or one worker's
        steps would advance the state the others read. One process, or every variable on
        the ps, is one domain, and one copy, as in TensorFlow.
        """
        return DeviceSpec.from_string(var.device).job or ""

    def _domains(self, var_list) -> list:
        """``var_list`` grouped by ``_non_slot_domain``, the variables of each group by
        name; the ps's group first, then one process's, then the others by job: the
        order in which their state is made, so the first keeps TensorFlow's name
        whatever the variables are called."""
        groups = {}
        for v in sorted(var_list, key=lambda v: v.name):
            groups.setdefault(self._non_slot_domain(v), []).append(v)
        return [groups[d] for d in sorted(groups, key=lambda d: (d != "ps", d != "", d))]

    def _create_non_slot_variable(self, initial_value, name, colocate_with):
        """Return this optimizer's variable ``name`` (e.g. Adam's beta1_power) of the domain
        of ``colocate_with`` in its graph, created next to it if new.

        The first domain's copy is called ``name`` (TensorFlow's name); another domain's
        ``<name>_<job>`` (a hybrid model's ``beta1_power_worker`` on every worker beside
        its tables' ``beta1_power`` on the ps, see ``_domains``), which a checkpoint of a
        mode with one copy restores from ``name`` (``_restore_fallback``).
        """
        graph = colocate_with.graph
        domain = self._non_slot_domain(colocate_with)
        key = (name, graph, domain)
        if key not in self._non_slot_dict:
            taken = any(k[:2] == (name, graph) for k in self._non_slot_dict)
            with graph.as_default(), graph.name_scope(None), \
                    graph.control_dependencies(None), graph.colocate_with(colocate_with.op):
                variable = Variable(initial_value, trainable=False,
                                    name=f"{name}_{domain or 'local'}" if taken else name)
                if taken:   # a checkpoint of another mode holds the one copy, ``name``
                    variable._restore_fallback = name
                self._non_slot_dict[key] = variable
        return self._non_slot_dict[key]

    def _get_non_slot_variable(self, name, graph=None, var=None):
        """Return the non-slot variable ``name`` serving ``var`` (default: the first one
        made in ``graph``, TensorFlow's single copy)."""
        graph = graph if graph is not None else get_default_graph()
        if var is not None:
            return self._non_slot_dict.get((name, graph, self._non_slot_domain(var)))
        return next((v for (n, g, _), v in self._non_slot_dict.items()
                     if n == name and g is graph), None)

    def _updates_by_domain(self, update_ops) -> list:
        """``update_ops`` grouped by the domain of the variable each updates:
        ``[(a variable of the domain, [its update ops])]``."""
        groups = {}
        for op in update_ops:
            var = self._update_var[op]
            groups.setdefault(self._non_slot_domain(var), (var, []))[1].append(op)
        return list(groups.values())


class WrappingOptimizer(Optimizer):
    """Base of optimizers that change how gradients travel but leave their application,
    and so the slots, to the optimizer they wrap (sync replicas, allreduce)."""

    def __init__(self, opt, use_locking, name):
        super().__init__(use_locking, name)
        self._opt = opt

    @property
    def slots_per_variable(self) -> int:
        return self._opt.slots_per_variable

    def gating_updates(self, gates):
        return self._opt.gating_updates(gates)     # the wrapped optimizer applies

    def get_slot(self, var, name):
        return self._opt.get_slot(var, name)

    def get_slot_names(self):
        return self._opt.get_slot_names()

    def variables(self):
        return self._opt.variables()


def _create_slot(var, initial_value, op_name):
    """A non-trainable variable named ``<var>/<op_name>``, colocated with ``var``."""
    graph = var.graph
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
            graph.colocate_with(var.op):
        slot = Variable(initial_value, trainable=False, name=f"{var.op.name}/{op_name}",
                        dtype=var.dtype)
    if not slot.shape.is_compatible_with(var.shape):
        raise errors.InvalidArgumentError(
            f"Slot '{slot.name}' has shape {slot.shape}, expected the shape of '{var.name}' "
            f"{var.shape}")
    info = getattr(var, "_save_slice_info", None)
    if info is not None:
        # The slot of a part is the same part of the full slot ("emb/Momentum"), so a
        # checkpoint reassembles slots as it does their variables (TensorFlow's rule).
        # The slot's own suffix, not op_name: Adam's second slot is "<var>/Adam_1".
        n = slot.shape.ndims
        suffix = slot.op.name[len(var.op.name) + 1:]
        slot_info = Variable.SaveSliceInfo(f"{info.full_name}/{suffix}", info.full_shape[:n],
                                           info.var_offset[:n], info.var_shape[:n])
        slot_info.lookup = info.lookup      # its rows are addressed as the variable's
        slot._set_save_slice_info(slot_info)
    return slot


def _constrained(update, var):
    """``update`` of ``var``, then (with a constraint) the assign of ``constraint`` of the
    value it left: TF1's order, whatever ``_finish`` adds runs after the projection.
    The constraint gets a read made after the update (a Tensor), where TF1 hands it the
    variable: the variable's own ``read`` may have been taken before the update."""
    constraint = getattr(var, "constraint", None)
    if constraint is None:
        return update
    with var.graph.control_dependencies([update]):
        return state_ops.assign(var, constraint(var.read_value()))


def _var_key(var):
    return (var.graph, var.op.name)


def _op_of(value):
    return value.op


def flatten_nested(items) -> list:
    """The leaves of nested lists, tuples and dicts, in order."""
    out = []
    stack = [items]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        else:
            out.append(item)
    return out


def _check_loss(loss) -> Tensor:
    convert = getattr(loss, "_as_tensor", None)
    loss = convert() if callable(convert) else loss
    if not isinstance(loss, Tensor):
        raise errors.InvalidArgumentError(
            f"The loss must be a Tensor, got {type(loss).__name__}")
    _check_float("loss", loss)
    if loss.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"The loss '{loss.name}' must be a scalar, got shape {loss.shape}: reduce it "
            "with mf.reduce_mean or mf.reduce_sum first (TensorFlow would sum it silently, "
            "scaling the step by the batch size)")
    return loss


def _check_variable(v) -> None:
    if not callable(getattr(v, "_ref", None)):
        raise errors.InvalidArgumentError(
            f"Optimizers update Variables, got {type(v).__name__} {v!r}")
    _check_float("variable", v)


def _check_float(what, value) -> None:
    if value.dtype not in _VALID_DTYPES:
        raise errors.InvalidArgumentError(
            f"Invalid type {value.dtype.name} for {what} '{value.name}', expected one of "
            f"{[d.name for d in _VALID_DTYPES]}")


def _gate(grads) -> list:
    """Return ``grads`` behind one barrier: none is usable before all are computed."""
    flat = []
    for g in grads:
        if isinstance(g, IndexedSlices):
            flat.extend([g.values, g.indices])
        elif g is not None:
            flat.append(g)
    if not flat:
        return list(grads)
    gate = control_ops.group(*flat, name="gradient_gate")
    out = []
    with get_default_graph().control_dependencies([gate]):
        for g in grads:
            if isinstance(g, IndexedSlices):
                g = IndexedSlices(control_ops.identity(g.values), control_ops.identity(g.indices),
                                  g.dense_shape)
            elif g is not None:
                g = control_ops.identity(g)
            out.append(g)
    return out


def _names(pairs) -> list:
    return [v.name for _, v in pairs]


def _loss_name(loss) -> str:
    return getattr(loss, "name", repr(loss))
