"""Variable: a named buffer that persists across ``Session.run`` calls (TF1 semantics).

A Variable is three ops: ``VariableV2`` (the buffer), ``Assign`` of its initial value
(the initializer) and an ``Identity`` named ``read`` (the value other ops consume and
gradients are taken against), colocated with the buffer.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.dtypes import as_dtype
from mpiflow.framework.graph import GraphKeys, Tensor, get_default_graph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import control_ops, state_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import apply_op


class SaveSliceInfo:
    """Where one partition of a partitioned variable sits in the full variable.

    A checkpoint saves a part under ``full_name`` with ``spec`` (TensorFlow's slice spec,
    e.g. "10 4 0,5:0,4": the full shape, then ``offset,length`` per dimension), so the
    full variable can be reassembled, or restored into another partitioning.

    ``lookup`` is how ``embedding_lookup`` addresses the parts ("" = not looked up as a
    table): with "div" an id's row is its row of the full variable, in any partitioning;
    with "mod" it depends on the number of parts, so a checkpoint of such a table
    restores only into as many parts (the Saver records and checks it).
    """

    __slots__ = ("full_name", "full_shape", "lookup", "var_offset", "var_shape")

    def __init__(self, full_name: str, full_shape, var_offset, var_shape):
        self.lookup = ""
        self.full_name = full_name
        self.full_shape = [int(d) for d in full_shape]
        self.var_offset = [int(d) for d in var_offset]
        self.var_shape = [int(d) for d in var_shape]
        if not len(self.full_shape) == len(self.var_offset) == len(self.var_shape):
            raise errors.InvalidArgumentError(
                f"SaveSliceInfo for '{full_name}': full_shape {self.full_shape}, var_offset "
                f"{self.var_offset} and var_shape {self.var_shape} must have one entry per "
                "dimension")

    @property
    def spec(self) -> str:
        full = " ".join(str(d) for d in self.full_shape)
        slices = ":".join(f"{o},{n}" for o, n in zip(self.var_offset, self.var_shape))
        return f"{full} {slices}"

    def to_dict(self) -> dict:
        return {"full_name": self.full_name, "full_shape": list(self.full_shape),
                "var_offset": list(self.var_offset), "var_shape": list(self.var_shape)}

    def __eq__(self, other):
        if not isinstance(other, SaveSliceInfo):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"SaveSliceInfo({self.full_name!r}, spec={self.spec!r})"


# numpy's limit on one array's bytes (a signed 64-bit size).
_MAX_ARRAY_BYTES = 2 ** 63 - 1


def check_constraint(where: str, constraint):
    """Return a variable's ``constraint`` (None, or a callable the optimizer applies to the
    variable's value after each update); anything else is refused, naming ``where``."""
    if constraint is not None and not callable(constraint):
        raise errors.InvalidArgumentError(
            f"{where}: constraint must be None or a callable (the projection applied after "
            f"each update), got {type(constraint).__name__} {constraint!r}")
    return constraint


class Variable:
    """A TF1 variable: ``Variable(initial_value, trainable=True, name=None, dtype=None)``.

    ``caching_device`` and ``use_resource`` are accepted and change nothing (a read is
    placed where its reader is; reads show the value where the step reads it). A
    ``constraint`` (a callable) is kept: the optimizers assign ``constraint(value)`` to the
    variable after each of its dense updates, as TF1's do."""

    def __init__(self, initial_value=None, trainable=True, collections=None,
                 validate_shape=True, name=None, dtype=None, expected_shape=None,
                 caching_device=None, constraint=None, use_resource=None):
        self._constraint = check_constraint(f"Variable '{name or 'Variable'}'", constraint)
        if initial_value is None:
            raise errors.InvalidArgumentError(
                f"Variable '{name or 'Variable'}': initial_value must be given")
        graph = get_default_graph()
        self._trainable = bool(trainable)
        with graph.name_scope(name or "Variable") as scope:
            op_name = scope[:-1]
            # An initializer (a callable: get_variable's) runs where its variable lives,
            # as in TensorFlow: a table on a ps is made there, never on the chief.
            where = graph._colocate_with_future(op_name) if callable(initial_value) else \
                graph._colocation_reset()
            with graph.name_scope("Initializer"), where:
                value = initial_value() if callable(initial_value) else initial_value
                if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
                    value = convert_to_tensor(value)
                    if dtype is not None and value.dtype.base_dtype != \
                            as_dtype(dtype).base_dtype:
                        # As TensorFlow: a cast would be silent (1.5 becomes 1).
                        raise errors.InvalidArgumentError(
                            f"Variable '{op_name}': initial_value '{value.name}' is "
                            f"{value.dtype.name}, but dtype={as_dtype(dtype).name} was "
                            "asked for: cast it first (tf.cast) or leave dtype out")
                else:
                    value = convert_to_tensor(value, dtype=dtype, name="initial_value")
            shape = value.shape if validate_shape else TensorShape(None)
            if expected_shape is not None:
                shape = shape.merge_with(expected_shape)
            if validate_shape and not shape.is_fully_defined():
                raise errors.InvalidArgumentError(
                    f"Variable '{op_name}': initial value must have a fully defined shape "
                    f"(got {shape}) unless validate_shape=False")
            if shape.is_fully_defined() and \
                    shape.num_elements() * value.dtype.size > _MAX_ARRAY_BYTES:
                raise errors.InvalidArgumentError(
                    f"Variable '{op_name}' of shape {shape.as_list()} ({value.dtype.name}) "
                    f"would take {shape.num_elements() * value.dtype.size:.3g} bytes, more "
                    "than any array can hold: make it smaller, or split it over several "
                    "ps with a partitioner")
            self._variable = apply_op(
                "VariableV2", [], {"shape": shape, "dtype": value.dtype},
                name=scope).outputs[0]
            self._initial_value = value
            with graph.colocate_with(self._variable.op):
                self._initializer_op = state_ops.assign(
                    self._variable, value, validate_shape=validate_shape, name="Assign").op
                self._snapshot = control_ops.identity(self._variable, name="read")
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        collections = list(collections)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        graph.add_to_collections(collections, self)
        self._save_slice_info = None
        # The checkpoint key a restore reads where this variable's own is absent (a
        # hybrid worker's copy of Adam's beta powers restores from the one copy another
        # mode saved); None: none.
        self._restore_fallback = None

    # -- identity ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._variable.name

    @property
    def op(self):
        return self._variable.op

    @property
    def graph(self):
        return self._variable.graph

    @property
    def device(self) -> str:
        return self._variable.device

    @property
    def dtype(self):
        return self._variable.dtype

    @property
    def shape(self) -> TensorShape:
        return self._variable.shape

    def get_shape(self) -> TensorShape:
        return self._variable.shape

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def constraint(self):
        """The projection the optimizers apply after each update (None: none)."""
        return self._constraint

    @property
    def initializer(self):
        return self._initializer_op

    @property
    def initial_value(self) -> Tensor:
        return self._initial_value

    def initialized_value(self) -> Tensor:
        """Return the variable's value once initialized, for another variable's initial
        value: the value if the variable is initialized when the step reads it, else its
        initial value, as TF1's (which builds a cond). Built outside any control
        dependencies, next to the variable."""
        graph = self.graph
        with graph.control_dependencies(None), graph.colocate_with(self._variable.op):
            return state_ops.initialized_value(self._variable, self._initial_value)

    def value(self) -> Tensor:
        """Return the ``read`` snapshot tensor other ops consume."""
        return self._snapshot

    def read_value(self) -> Tensor:
        """Return a new read of the variable (a separate Identity)."""
        with self.graph.colocate_with(self._variable.op):
            return control_ops.identity(self._variable, name="read")

    def _ref(self) -> Tensor:
        return self._variable

    def _set_save_slice_info(self, save_slice_info: SaveSliceInfo) -> None:
        """Mark this variable as one partition of a larger one (see SaveSliceInfo)."""
        self._save_slice_info = save_slice_info

    SaveSliceInfo = SaveSliceInfo

    def _as_tensor(self) -> Tensor:
        return self._snapshot

    def _as_graph_element(self) -> Tensor:
        return self._snapshot

    # -- updates -------------------------------------------------------------------------
    # read_value=False gives the update's op, as TF1's (sess.run of it returns None).
    def assign(self, value, use_locking=False, name=None, read_value=True):
        out = state_ops.assign(self._variable, value, name=name)
        return out if read_value else out.op

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        out = state_ops.assign_add(self._variable, delta, name=name)
        return out if read_value else out.op

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        out = state_ops.assign_sub(self._variable, delta, name=name)
        return out if read_value else out.op

    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        return state_ops.scatter_add(self._variable, sparse_delta.indices,
                                     sparse_delta.values, name=name)

    def scatter_sub(self, sparse_delta, use_locking=False, name=None):
        return state_ops.scatter_sub(self._variable, sparse_delta.indices,
                                     sparse_delta.values, name=name)

    def eval(self, session=None):
        return self._snapshot.eval(session=session)

    def load(self, value, session=None):
        """Assign ``value`` now, through ``session`` (default session)."""
        from mpiflow.framework.graph import _session_for
        _session_for(self.graph, session, "Variable.load()").run(
            self._initializer_op, {self._initial_value: value})

    def __repr__(self):
        return f"<mf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


def _delegate(name):
    def method(self, *args):
        return getattr(self._snapshot, name)(*args)
    method.__name__ = name
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
            "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
            "__neg__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__getitem__",
            "__floordiv__", "__mod__"):
    setattr(Variable, _op, _delegate(_op))
Variable.__array_priority__ = 100


def global_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def local_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def trainable_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def model_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def moving_average_variables(scope=None) -> list:
    """The variables an ``ExponentialMovingAverage`` averages (its ``apply`` adds each
    Variable it is given, not tensors, to ``GraphKeys.MOVING_AVERAGE_VARIABLES``)."""
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    """Return one op that runs the initializers of ``var_list``."""
    return control_ops.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")


initialize_all_variables = global_variables_initializer
all_variables = global_variables
