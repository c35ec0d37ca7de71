"""variable_scope / get_variable: named variable sharing with ``reuse``, as in TF1.

The store of named variables is per graph. ``get_variable`` creates a variable under the
full scope name, or returns the existing one when the scope reuses; the error for each
mismatch names the variable and says which ``reuse`` setting was meant.
"""

from __future__ import annotations

import contextlib
import functools

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys, get_default_graph
from mpiflow.framework.per_graph import PerGraph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import init_ops
from mpiflow.ops.constant_ops import python_dtype
from mpiflow.ops.variables import Variable, check_constraint


class _ReuseMode:
    def __repr__(self):
        return "mf.AUTO_REUSE"


AUTO_REUSE = _ReuseMode()


class VariableScope:
    """The current scope's name, reuse flag and defaults for ``get_variable``."""

    def __init__(self, reuse, name="", initializer=None, regularizer=None, dtype=None,
                 partitioner=None, custom_getter=None, name_scope="", constraint=None):
        self.name = name
        self.reuse = reuse
        self.initializer = initializer
        self.regularizer = regularizer
        self.constraint = constraint
        self.dtype = dtype
        self.partitioner = partitioner
        self.custom_getter = custom_getter
        self.original_name_scope = name_scope

    # TF1's, accepted and unused, as variable_scope's keywords of the same names.
    caching_device = None
    use_resource = False

    def reuse_variables(self):
        self.reuse = True

    def set_initializer(self, initializer):
        self.initializer = initializer

    def set_partitioner(self, partitioner):
        self.partitioner = partitioner

    def set_dtype(self, dtype):
        self.dtype = dtype

    def set_regularizer(self, regularizer):
        self.regularizer = regularizer

    def set_custom_getter(self, custom_getter):
        self.custom_getter = custom_getter

    def set_caching_device(self, caching_device):
        pass

    def set_use_resource(self, use_resource):
        pass

    def get_collection(self, name) -> list:
        """The items of collection ``name`` under this scope: names starting ``scope/``,
        so scope 'd' does not take 'd2''s variables (TensorFlow's rule)."""
        return get_default_graph().get_collection(name, self.name + "/" if self.name else None)

    def global_variables(self) -> list:
        return self.get_collection(GraphKeys.GLOBAL_VARIABLES)

    def trainable_variables(self) -> list:
        return self.get_collection(GraphKeys.TRAINABLE_VARIABLES)

    def local_variables(self) -> list:
        return self.get_collection(GraphKeys.LOCAL_VARIABLES)

    def get_variable(self, name, **kwargs):
        return _store().get_variable(self, name, **kwargs)


class _VariableStore:
    def __init__(self):
        self.vars = {}
        self.partitioned_vars = {}      # full name -> PartitionedVariable
        self.scope_stack = [VariableScope(False)]
        self.scope_counts = {}

    def get_variable(self, scope, name, shape=None, dtype=None, initializer=None,
                     regularizer=None, trainable=True, collections=None,
                     validate_shape=True, partitioner=None, custom_getter=None,
                     constraint=None):
        full = f"{scope.name}/{name}" if scope.name else name
        custom_getter = custom_getter or scope.custom_getter
        initializer = initializer if initializer is not None else scope.initializer
        kwargs = dict(
            shape=shape, dtype=_variable_dtype(full, dtype, scope.dtype, initializer),
            initializer=initializer,
            regularizer=regularizer if regularizer is not None else scope.regularizer,
            trainable=trainable, collections=collections, validate_shape=validate_shape,
            reuse=scope.reuse,
            partitioner=partitioner if partitioner is not None else scope.partitioner,
            constraint=check_constraint(
                f"get_variable('{full}')",
                constraint if constraint is not None else scope.constraint))
        if custom_getter is not None:
            return custom_getter(self._true_getter, full, **kwargs)
        return self._true_getter(full, **kwargs)

    def _true_getter(self, name, shape=None, dtype=dtypes.float32, initializer=None,
                     regularizer=None, trainable=True, collections=None, validate_shape=True,
                     reuse=False, partitioner=None, constraint=None, **unused):
        # As in TensorFlow, a scope's partitioner leaves scalars whole (there is no axis
        # to cut), and reuse=True finds a partitioned variable without being given the
        # partitioner again.
        if shape is not None and TensorShape(shape).ndims == 0:
            partitioner = None
        if partitioner is not None or (reuse is True and name in self.partitioned_vars):
            if not _PARTITIONED_GETTER:
                raise errors.UnimplementedError(
                    f"get_variable('{name}'): partitioned variables are not available "
                    "(mpiflow.ops.partitioned_variables was not imported)")
            return _PARTITIONED_GETTER[0](
                self, name, shape=shape, dtype=dtype, initializer=initializer,
                regularizer=regularizer, trainable=trainable, collections=collections,
                validate_shape=validate_shape, reuse=reuse, partitioner=partitioner,
                constraint=constraint)
        if name in self.partitioned_vars:
            raise errors.InvalidArgumentError(
                f"No partitioner was provided, but a partitioned version of the variable was "
                f"found: {name}/part_0. Perhaps a variable of the same name was already "
                "created with partitioning?")
        return self._single(name, shape=shape, dtype=dtype, initializer=initializer,
                            regularizer=regularizer, trainable=trainable,
                            collections=collections, validate_shape=validate_shape,
                            reuse=reuse, constraint=constraint)

    def _single(self, name, shape=None, dtype=dtypes.float32, initializer=None,
                regularizer=None, trainable=True, collections=None, validate_shape=True,
                reuse=False, constraint=None):
        dtype = dtypes.as_dtype(dtype)
        if name in self.vars:
            if reuse is False or reuse is None:
                raise errors.InvalidArgumentError(
                    f"Variable {name} already exists, disallowed. Did you mean to set "
                    "reuse=True or reuse=mf.AUTO_REUSE in VarScope?")
            var = self.vars[name]
            if shape is not None and not var.shape.is_compatible_with(shape):
                raise errors.InvalidArgumentError(
                    f"Trying to share variable {name}, but specified shape "
                    f"{TensorShape(shape)} and found shape {var.shape}")
            if dtype is not var.dtype:
                raise errors.InvalidArgumentError(
                    f"Trying to share variable {name}, but specified dtype {dtype.name} and "
                    f"found dtype {var.dtype.name}")
            return var
        if reuse is True:
            raise errors.InvalidArgumentError(
                f"Variable {name} does not exist, or was not created with "
                "mf.get_variable(). Did you mean to set reuse=mf.AUTO_REUSE in VarScope?")
        init_value = _initial_value(name, shape, dtype, initializer)
        graph = get_default_graph()
        with graph.name_scope(None):
            var = Variable(init_value, trainable=trainable, collections=collections,
                           validate_shape=validate_shape, name=name, dtype=dtype,
                           constraint=constraint)
        if var.op.name != name:
            raise errors.AlreadyExistsError(
                f"get_variable('{name}'): an op named '{name}' already exists in the graph "
                f"(not made by get_variable), so the variable would be '{var.op.name}'")
        self.vars[name] = var
        if regularizer is not None:
            with graph.name_scope(name + "/Regularizer/"):
                loss = regularizer(var.value())
            if loss is not None:
                graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
        return var


def _variable_dtype(name, dtype, scope_dtype, initializer) -> dtypes.DType:
    """The dtype of variable ``name``: an initializer that is a value (a number, an array,
    a Tensor) gives its own, as in TensorFlow (``initializer=0`` makes an int32 variable,
    whatever the scope's dtype), and an explicit ``dtype`` must be it; an initializer
    function makes ``dtype``, else the scope's, else float32."""
    if initializer is None or callable(initializer):
        return dtypes.as_dtype(dtype or scope_dtype or dtypes.float32)
    own = getattr(initializer, "dtype", None)
    value_dtype = own if isinstance(own, dtypes.DType) else python_dtype(initializer)
    if dtype is not None and dtypes.as_dtype(dtype) is not value_dtype:
        raise errors.InvalidArgumentError(
            f"get_variable('{name}'): the initializer's type {value_dtype.name} and the "
            f"explicit dtype {dtypes.as_dtype(dtype).name} don't match (a value initializer "
            f"gives the variable its dtype, as in TensorFlow; convert the value, e.g. "
            f"np.asarray(value, {dtypes.as_dtype(dtype).name}), or leave dtype out)")
    return value_dtype


def _initial_value(name, shape, dtype, initializer):
    if initializer is None:
        initializer = init_ops.GlorotUniform() if dtype.is_floating else init_ops.Zeros()
    if isinstance(initializer, type) and issubclass(initializer, init_ops.Initializer):
        initializer = initializer()
    if not callable(initializer):   # a value: a Tensor, array or Python number
        if shape is not None:
            raise errors.InvalidArgumentError(
                f"get_variable('{name}'): when initializer is a value, do not give a shape "
                f"(got shape {TensorShape(shape)})")
        return initializer
    if shape is None:
        raise errors.InvalidArgumentError(
            f"get_variable('{name}'): a shape is needed to create a variable with an "
            "initializer function")
    shape = TensorShape(shape)
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"get_variable('{name}'): shape {shape} must be fully defined")
    return lambda: initializer(shape.as_list(), dtype=dtype)


# Set by mpiflow.ops.partitioned_variables (which imports this module):
# ``getter(store, full_name, *, shape, dtype, initializer, regularizer, trainable,
# collections, validate_shape, reuse, partitioner, constraint) -> PartitionedVariable``.
_PARTITIONED_GETTER = []


# Each graph's variables and scopes, as tf.compat.v1 keeps them per graph.
_STORES = PerGraph(_VariableStore)


def _store() -> _VariableStore:
    return _STORES.of(get_default_graph())


def get_variable_scope() -> VariableScope:
    return _store().scope_stack[-1]


@contextlib.contextmanager
def variable_scope(name_or_scope=None, default_name=None, values=None, initializer=None,
                   regularizer=None, reuse=None, dtype=None, partitioner=None,
                   custom_getter=None, auxiliary_name_scope=True, constraint=None, *,
                   caching_device=None, use_resource=None):
    """Open a variable scope (and a name scope); ``reuse`` is True, AUTO_REUSE or inherited.

    Re-entering a scope by name or as an object keeps the variable prefix; the name scope
    becomes unique (``foo_1``, after the scope's last name part for an object, inside the
    current name scope), as in TensorFlow. ``caching_device`` and ``use_resource`` are TF1's and
    change nothing, as in ``get_variable``.
    """
    store = _store()
    graph = get_default_graph()
    parent = store.scope_stack[-1]
    if isinstance(name_or_scope, VariableScope):
        full = name_or_scope.name
        # As in TensorFlow: a new name scope after the scope's last name part, made
        # unique inside the current one ('a_1/'); the root scope opens none.
        name_scope_name = full.split("/")[-1]
        base = name_or_scope
    else:
        if name_or_scope is None:
            if default_name is None:
                raise errors.InvalidArgumentError(
                    "variable_scope: give name_or_scope or default_name")
            rel = _unique_scope(store, parent.name, default_name)
        else:
            rel = name_or_scope
            if not isinstance(rel, str) or not rel:
                raise errors.InvalidArgumentError(
                    f"variable_scope: name must be a non-empty string, got {rel!r}")
        full = f"{parent.name}/{rel}" if parent.name else rel
        name_scope_name = rel
        base = parent
    store.scope_counts[full] = store.scope_counts.get(full, 0) + 1
    # A scope re-entered as an object gives back, when left, the counts it was entered with.
    saved_counts = dict(store.scope_counts) if isinstance(name_or_scope, VariableScope) \
        else None
    if reuse is None or reuse is False:
        # reuse is inherited: a scope inside a reusing scope reuses too.
        new_reuse = True if parent.reuse is True else (
            AUTO_REUSE if parent.reuse is AUTO_REUSE else (base.reuse or False)
            if isinstance(name_or_scope, VariableScope) else False)
    else:
        new_reuse = reuse
    # auxiliary_name_scope=False leaves the current name scope as it is (TensorFlow).
    current = graph.get_name_scope() + "/" if graph.get_name_scope() else ""
    names = graph.name_scope(name_scope_name) if auxiliary_name_scope and name_scope_name \
        else contextlib.nullcontext(current)
    with names as ns:
        # A scope object keeps the name scope it was first opened in (TensorFlow's rule).
        if isinstance(name_or_scope, VariableScope):
            ns = name_or_scope.original_name_scope
        scope = VariableScope(
            new_reuse, full, initializer if initializer is not None else base.initializer,
            regularizer or base.regularizer,
            dtype or base.dtype, partitioner or base.partitioner,
            _chain_getters(custom_getter, base.custom_getter), ns,
            constraint if constraint is not None else base.constraint)
        store.scope_stack.append(scope)
        try:
            yield scope
        finally:
            store.scope_stack.pop()
            _close_subscopes(store, full, saved_counts)


def _chain_getters(inner, outer):
    """The custom getter of a scope opened with ``inner`` inside one that has ``outer``.

    Nested scopes' getters compose, as in TensorFlow: ``inner`` is called first, and the
    getter it is handed calls ``outer`` around the true getter, so a cast-to-float16
    getter on the model scope keeps working when a layer scope adds its own.
    """
    if inner is None or outer is None:
        return inner or outer

    def chained(getter, *args, **kwargs):
        return inner(functools.partial(outer, getter), *args, **kwargs)
    return chained


def _close_subscopes(store, full, saved_counts):
    """Forget the default names taken inside ``full`` once it is left, as TF1 does.

    So a model function that opens ``variable_scope("model", reuse=...)`` and calls
    ``layers.dense`` gets ``model/dense`` on every call, and its second call reuses the
    first call's variables instead of asking for ``model/dense_1``.
    """
    if saved_counts is not None:
        store.scope_counts = saved_counts
        return
    inside = full + "/"
    for name in store.scope_counts:
        if name.startswith(inside):
            store.scope_counts[name] = 0


def _unique_scope(store, prefix, name):
    full = f"{prefix}/{name}" if prefix else name
    if not store.scope_counts.get(full):
        return name
    i = 1
    while store.scope_counts.get(f"{full}_{i}"):
        i += 1
    return f"{name}_{i}"


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None,
                 trainable=True, collections=None, validate_shape=True, partitioner=None,
                 custom_getter=None, caching_device=None, use_resource=None,
                 constraint=None):
    """Return the variable ``scope/name``, creating it unless the scope reuses.

    ``caching_device`` and ``use_resource`` are TF1's and change nothing here: a read is
    placed where its reader is, and a variable reads as ``Variable`` says. A
    ``constraint`` (default: the scope's) goes to the variable (to each part of a
    partitioned one): the optimizers project it after each update, as in TF1.
    """
    return get_variable_scope().get_variable(
        name, shape=shape, dtype=dtype, initializer=initializer, regularizer=regularizer,
        trainable=trainable, collections=collections, validate_shape=validate_shape,
        partitioner=partitioner, custom_getter=custom_getter, constraint=constraint)


def get_local_variable(name, shape=None, dtype=None, initializer=None, **kwargs):
    collections = [GraphKeys.LOCAL_VARIABLES]
    return get_variable(name, shape, dtype, initializer, trainable=False,
                        collections=collections, **kwargs)
