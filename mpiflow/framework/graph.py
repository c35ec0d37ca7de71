"""Graph, Operation and Tensor: the dataflow graph a user builds, as plain data.

An Operation holds its type, inputs, control inputs, attrs (plain values, DTypes,
TensorShapes, numpy arrays) and device string; nothing callable is stored on it, so a
graph serialises to a GraphDef-like dict (see ``graph_def.py``) and can be shipped to
another rank. Kernels, shape functions and gradients live in ``mpiflow.ops``; Python
operators on Tensor are attached by ``mpiflow.ops`` at import time.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import threading

from mpiflow import errors
from mpiflow.framework import device_spec as _device_spec
from mpiflow.framework.dtypes import DType
from mpiflow.framework.tensor_shape import TensorShape

_VALID_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")
_VALID_SCOPE_NAME = re.compile(r"^[A-Za-z0-9_.\-/>]*$")
DEFAULT_GRAPH_SEED = 87654321


# Up to this many ops a name that is not in the graph gets "did you mean" suggestions.
_SUGGEST_UP_TO_OPS = 10_000


class GraphKeys:
    """Standard collection names, as in TensorFlow."""

    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    METRIC_VARIABLES = "metric_variables"
    MODEL_VARIABLES = "model_variables"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    TRAINABLE_RESOURCE_VARIABLES = "trainable_resource_variables"
    GLOBAL_STEP = "global_step"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    TRAIN_OP = "train_op"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    SAVERS = "savers"
    QUEUE_RUNNERS = "queue_runners"
    CONCATENATED_VARIABLES = "concatenated_variables"
    # mpiflow's own: the variables each worker holds its own copy of (allreduce mode, the
    # dense part of hybrid mode), and the ops that make every copy equal to worker 0's.
    REPLICATED_VARIABLES = "replicated_variables"
    REPLICA_BROADCAST_OPS = "replica_broadcast_ops"


class Tensor:
    """One output of an Operation: a symbolic handle evaluated by ``Session.run``."""

    __slots__ = ("_op", "_value_index", "_dtype", "_shape", "_consumers", "__weakref__")

    # Stops numpy from treating a Tensor as an array in ``ndarray + Tensor``.
    __array_priority__ = 100

    def __init__(self, op: "Operation", value_index: int, dtype: DType, shape: TensorShape):
        self._op = op
        self._value_index = value_index
        self._dtype = dtype
        self._shape = shape
        self._consumers = []

    @property
    def op(self) -> "Operation":
        return self._op

    @property
    def value_index(self) -> int:
        return self._value_index

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def graph(self) -> "Graph":
        return self._op.graph

    @property
    def name(self) -> str:
        return f"{self._op.name}:{self._value_index}"

    @property
    def device(self) -> str:
        return self._op.device

    @property
    def shape(self) -> TensorShape:
        return self._shape

    def get_shape(self) -> TensorShape:
        return self._shape

    def set_shape(self, shape) -> None:
        """Refine the static shape; raise if ``shape`` contradicts what is known."""
        try:
            self._shape = self._shape.merge_with(shape)
        except errors.InvalidArgumentError:
            raise errors.InvalidArgumentError(
                f"Cannot set shape of tensor '{self.name}' to {TensorShape(shape)}: its "
                f"known shape is {self._shape}") from None

    def consumers(self) -> list:
        return list(self._consumers)

    def eval(self, feed_dict=None, session=None):
        """Evaluate this tensor in ``session`` (default: the default session)."""
        return _session_for(self.graph, session, "Tensor.eval()").run(self, feed_dict)

    def __repr__(self):
        return f"<mf.Tensor '{self.name}' shape={self._shape} dtype={self._dtype.name}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __bool__(self):
        raise errors.InvalidArgumentError(
            f"Using tensor '{self.name}' as a Python bool is not allowed: it has no value "
            "until Session.run; use mf.cond-free logic or evaluate it first")

    def __iter__(self):
        raise errors.InvalidArgumentError(
            f"Tensor '{self.name}' is not iterable: use mf.unstack or mf.split")

    def __len__(self):
        raise errors.InvalidArgumentError(
            f"len() of tensor '{self.name}' is not defined: use tensor.shape")


class Operation:
    """A node of the graph: type, inputs, control inputs, attrs, device and outputs."""

    __slots__ = ("_graph", "_id", "_name", "_type", "_inputs", "_control_inputs", "_attrs",
                 "_device", "_outputs", "_control_outputs", "__weakref__")

    def __init__(self, graph, op_id, name, op_type, inputs, control_inputs, attrs, device,
                 output_specs):
        self._graph = graph
        self._id = op_id
        self._name = name
        self._type = op_type
        self._inputs = tuple(inputs)
        self._control_inputs = list(control_inputs)
        self._attrs = dict(attrs)
        self._device = device
        self._outputs = [Tensor(self, i, dtype, shape)
                         for i, (dtype, shape) in enumerate(output_specs)]
        self._control_outputs = []

    @property
    def graph(self) -> "Graph":
        return self._graph

    @property
    def name(self) -> str:
        return self._name

    @property
    def type(self) -> str:
        return self._type

    @property
    def inputs(self) -> tuple:
        return self._inputs

    @property
    def control_inputs(self) -> list:
        return list(self._control_inputs)

    @property
    def outputs(self) -> list:
        return list(self._outputs)

    @property
    def attrs(self) -> dict:
        return dict(self._attrs)

    @property
    def device(self) -> str:
        return self._device

    def _set_device(self, device) -> None:
        self._device = _device_spec.canonical(device)

    def get_attr(self, name):
        try:
            return self._attrs[name]
        except KeyError:
            raise errors.InvalidArgumentError(
                f"Op '{self._name}' ({self._type}) has no attr '{name}': it has "
                f"{sorted(self._attrs)}") from None

    def colocation_groups(self) -> list:
        """Return the ``loc:@name`` groups this op is colocated with (itself by default)."""
        return list(self._attrs.get("_class", [f"loc:@{self._name}"]))

    def _add_control_input(self, op: "Operation") -> None:
        if op not in self._control_inputs:
            self._control_inputs.append(op)
            op._control_outputs.append(self)

    def run(self, feed_dict=None, session=None) -> None:
        """Run this op in ``session`` (default: the default session)."""
        _session_for(self._graph, session, "Operation.run()").run(self, feed_dict)

    def __repr__(self):
        return f"<mf.Operation '{self._name}' type={self._type}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


class _FutureOp:
    """Stands for an op not created yet in a colocation scope: its group, no device."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    device = ""

    def colocation_groups(self) -> list:
        return [f"loc:@{self._name}"]


class _StateGate:
    """An entry of the control-dependency stack: ``state_changes_only_if(predicate)``."""

    __slots__ = ("predicate",)

    def __init__(self, predicate):
        self.predicate = predicate


class Graph:
    """A TensorFlow-1-style dataflow graph with its scopes and collections."""

    def __init__(self):
        self._lock = threading.RLock()
        self._ops_by_name = {}
        self._ops = []
        self._names_in_use = {}
        self._name_stack = ""
        self._device_stack = []            # entries: str device, callable, or None (reset)
        # entries: list of ops, None (reset), or a _StateGate (see state_changes_only_if)
        self._control_dependencies_stack = []
        self._colocation_stack = []        # entries: Operation, or None (ignore_existing)
        self._collections = {}
        self._finalized = False
        self.seed = None
        self._attr_scope = {}
        # Values of higher layers' PerGraph slots (framework/per_graph.py), keyed by the
        # PerGraph that owns each: nothing else reads or writes them.
        self._per_graph_slots = {}

    # -- op creation ---------------------------------------------------------------
    def foreign_input_error(self, tensor, op_name: str, op_type: str, index: int):
        """The error for input ``index`` of a new op ``op_name``, ``tensor``, which belongs
        to another graph. A function's graph (``Dataset.map``'s) overrides it to say what
        to do there instead."""
        return errors.InvalidArgumentError(
            f"Input {index} of op '{op_name}' ({op_type}): tensor '{tensor.name}' must be "
            "from the same graph as the op (the default graph); build every op of a "
            "model inside one 'with graph.as_default()' block")

    def create_op(self, op_type: str, inputs, attrs: dict, output_specs, name: str,
                  control_inputs=(), device=None) -> Operation:
        """Add an op; apply control-dependency, colocation and device scopes to it.

        ``name`` must already be unique (see ``unique_name``); ``output_specs`` is a list of
        ``(DType, TensorShape)`` computed by the op's shape function in ``mpiflow.ops``.
        """
        with self._lock:
            self._check_not_finalized()
            for t in inputs:
                if t.graph is not self:
                    raise errors.InvalidArgumentError(
                        f"Input '{t.name}' of op '{name}' ({op_type}) belongs to another "
                        "graph: every input must come from the graph the op is created in")
            control = list(control_inputs) + self._current_control_dependencies(inputs)
            deduped = []
            for c in control:
                if c.graph is not self:
                    raise errors.InvalidArgumentError(
                        f"Control input '{c.name}' of op '{name}' ({op_type}) belongs to "
                        "another graph")
                if c not in deduped:
                    deduped.append(c)
            attrs = dict(attrs)
            coloc = self._current_colocation()
            if coloc is not None:
                attrs["_class"] = coloc.colocation_groups()
            op = Operation(self, len(self._ops), name, op_type, inputs, deduped, attrs, "",
                           output_specs)
            # Device functions run even for colocated ops (a round-robin setter advances
            # on a slot variable too, as in TensorFlow); colocation then has the last word.
            op._device = self._apply_device_stack(op, device)
            if coloc is not None:
                op._device = coloc.device
            self._ops.append(op)
            self._ops_by_name[name] = op
            for t in op._inputs:
                t._consumers.append(op)
            for c in deduped:
                c._control_outputs.append(op)
            return op

    def _apply_device_stack(self, op, explicit):
        """Apply device scopes innermost first, as TensorFlow does: a string fills only the
        fields still unset, a function sees the device so far and returns the new one, and
        a ``device(None)`` scope stops the outer scopes from applying."""
        op._device = ""
        entries = self._device_stack + ([explicit] if explicit else [])
        for entry in reversed(entries):
            if entry is None:
                break
            if isinstance(entry, (str, _device_spec.DeviceSpec)):
                op._device = _device_spec.merge_device(_device_spec.canonical(entry),
                                                       op._device)
            else:
                result = entry(op)
                op._device = _device_spec.canonical(result) if result else ""
        return op._device

    def _check_not_finalized(self):
        if self._finalized:
            raise errors.FailedPreconditionError(
                "Graph is finalized and cannot be modified (MonitoredTrainingSession "
                "finalizes it): build every op before creating the session")

    def finalize(self) -> None:
        self._finalized = True

    @property
    def finalized(self) -> bool:
        return self._finalized

    def _unsafe_unfinalize(self) -> None:
        self._finalized = False

    # -- names ---------------------------------------------------------------------
    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """Return ``name`` under the current name scope, suffixed ``_N`` if already taken."""
        if self._name_stack:
            name = self._name_stack + "/" + name
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base = name
            while name.lower() in self._names_in_use:
                name = f"{base}_{count}"
                count += 1
            if mark_as_used:
                self._names_in_use[name.lower()] = 1
        return name

    def get_name_scope(self) -> str:
        return self._name_stack

    @contextlib.contextmanager
    def name_scope(self, name):
        """Open a name scope; yield its prefix ending in '/' (TensorFlow's semantics).

        ``None`` or ``""`` returns to the root scope; a name ending in '/' re-enters that
        exact scope instead of making a new unique one.
        """
        old = self._name_stack
        if not name:
            new = ""
        elif name.endswith("/"):
            if not _VALID_SCOPE_NAME.match(name):
                raise errors.InvalidArgumentError(f"'{name}' is not a valid scope name")
            new = name[:-1]
        else:
            if not _VALID_OP_NAME.match(name):
                raise errors.InvalidArgumentError(
                    f"'{name}' is not a valid scope name: expected letters, digits, '.', "
                    "'_', '-' and '/' (not starting with '_', '-' or '/')")
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield (new + "/") if new else ""
        finally:
            self._name_stack = old

    # -- device / control dependency / colocation scopes ----------------------------
    @contextlib.contextmanager
    def device(self, device_name_or_function):
        """Place ops created inside on a device string or by a device function.

        A string merges onto the enclosing device (inner fields win); a function receives
        each new op (with the device so far) and returns its device; None clears. An empty
        string or DeviceSpec sets no field, so the enclosing scopes apply as they are (as in
        TensorFlow; only None clears them).
        """
        entry = device_name_or_function
        if isinstance(entry, (str, _device_spec.DeviceSpec)):
            entry = _device_spec.canonical(entry)   # parse now: errors at the with line
        elif entry is not None and not isinstance(entry, _device_spec.DeviceSpec) \
                and not callable(entry):
            raise errors.InvalidArgumentError(
                f"mf.device() takes a device string, DeviceSpec, device function or None, "
                f"got {entry!r}")
        self._device_stack.append(entry)
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        """Make ops created inside run after ``control_inputs`` (None clears the stack)."""
        if control_inputs is None:
            self._control_dependencies_stack.append(None)
        else:
            ops = []
            for c in control_inputs:
                op = self._as_op(c, "control_dependencies")
                ops.append(op)
            self._control_dependencies_stack.append(ops)
        try:
            yield
        finally:
            self._control_dependencies_stack.pop()

    @contextlib.contextmanager
    def state_changes_only_if(self, predicate):
        """Make the ops created inside that change state (write a variable, a slot, an
        accumulator) do so only in the steps where the bool scalar ``predicate`` is true;
        in the others they leave the state as it is (their output is its value).

        TensorFlow writes this with ``tf.cond``; an optimizer wrapper that may drop a
        gradient (``DropStaleGradientOptimizer``) puts the wrapped optimizer's whole update
        under it. ``control_dependencies(None)`` clears it, as it clears the control
        dependencies: what is made there (slots, their initializers) runs unconditioned.
        """
        if not isinstance(predicate, Tensor) or predicate.graph is not self:
            raise errors.InvalidArgumentError(
                f"state_changes_only_if: expected a bool Tensor of this graph, got "
                f"{predicate!r}")
        self._control_dependencies_stack.append(_StateGate(predicate))
        try:
            yield
        finally:
            self._control_dependencies_stack.pop()

    def current_state_gate(self):
        """The predicate of the innermost ``state_changes_only_if`` in force, else None."""
        gate = None
        for entry in self._control_dependencies_stack:
            if entry is None:
                gate = None
            elif type(entry) is _StateGate:
                gate = entry.predicate
        return gate

    def _as_op(self, item, what) -> Operation:
        if isinstance(item, Tensor):
            item = item.op
        elif hasattr(item, "op") and isinstance(getattr(item, "op"), Operation):
            item = item.op   # Variable and friends
        if not isinstance(item, Operation):
            raise errors.InvalidArgumentError(
                f"{what}: expected an Operation or Tensor, got {item!r}")
        if item.graph is not self:
            raise errors.InvalidArgumentError(
                f"{what}: '{item.name}' belongs to another graph")
        return item

    def _current_control_dependencies(self, inputs):
        ops = []
        for entry in self._control_dependencies_stack:
            if entry is None:
                ops = []
            elif type(entry) is not _StateGate:
                ops.extend(entry)
        input_ops = {t.op for t in inputs}
        return [op for op in ops if op not in input_ops]

    @contextlib.contextmanager
    def colocate_with(self, op, ignore_existing: bool = False):
        """Place ops created inside on the device of ``op`` and in its colocation group.

        ``colocate_with(None, ignore_existing=True)`` resets both the colocation and the
        device scopes around it, as TensorFlow's does: ops made inside have no device
        until a scope inside gives them one (they run on the session's own task).
        """
        if op is None:
            if not ignore_existing:
                raise errors.InvalidArgumentError(
                    "colocate_with(None) resets colocation only with ignore_existing=True")
            with self._colocation_reset(), self.device(None):
                yield
            return
        entry = self._as_op(op, "colocate_with")
        if ignore_existing:
            self._colocation_stack.append(None)
        self._colocation_stack.append(entry)
        try:
            yield
        finally:
            self._colocation_stack.pop()
            if ignore_existing:
                self._colocation_stack.pop()

    @contextlib.contextmanager
    def _colocation_reset(self):
        """Ops created inside are colocated with nothing; device scopes still apply (what
        a variable, the global step or a Saver is built under, unlike the public
        ``colocate_with(None, ignore_existing=True)``, which resets devices too)."""
        self._colocation_stack.append(None)
        try:
            yield
        finally:
            self._colocation_stack.pop()

    @contextlib.contextmanager
    def _colocate_with_future(self, name: str):
        """Put ops created inside in the colocation group of op ``name``, which does not
        exist yet (a variable's initializer, made before the variable): placement puts
        them wherever that op lands. Outer device scopes do not apply (TensorFlow's way
        for a variable's initial value)."""
        self._colocation_stack.append(_FutureOp(name))
        try:
            with self.device(None):
                yield
        finally:
            self._colocation_stack.pop()

    def _current_colocation(self):
        return self._colocation_stack[-1] if self._colocation_stack else None

    # -- lookup ------------------------------------------------------------------------
    def get_operations(self) -> list:
        return list(self._ops)

    def get_operation_by_name(self, name: str) -> Operation:
        try:
            return self._ops_by_name[name]
        except KeyError:
            # The closest names, where the graph is small enough to look (about 3 ms for
            # 5,000 ops: a lookup that misses on purpose, the global step's, pays it too).
            close = difflib.get_close_matches(name, self._ops_by_name, n=3) \
                if len(self._ops_by_name) <= _SUGGEST_UP_TO_OPS else []
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise errors.NotFoundError(
                f"The graph has no operation named '{name}'{hint}") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise errors.InvalidArgumentError(
                f"Tensor name '{name}' is not of the form 'op_name:output_index'")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op._outputs):
            raise errors.NotFoundError(
                f"Op '{op_name}' ({op.type}) has {len(op._outputs)} outputs, so it has no "
                f"tensor '{name}'")
        return op._outputs[int(index)]

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """Return the Tensor or Operation that ``obj`` (object or name) denotes here."""
        if isinstance(obj, str):
            if ":" in obj and allow_tensor:
                return self.get_tensor_by_name(obj)
            if allow_operation:
                return self.get_operation_by_name(obj)
        target = getattr(obj, "_as_graph_element", None)
        if callable(target):
            obj = target()
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise errors.InvalidArgumentError(
                    f"{'Tensor' if isinstance(obj, Tensor) else 'Operation'} '{obj.name}' "
                    "is not an element of this graph")
            if isinstance(obj, Tensor) and allow_tensor:
                return obj
            if isinstance(obj, Operation) and allow_operation:
                return obj
        kinds = " or ".join(k for k, ok in (("Tensor", allow_tensor),
                                             ("Operation", allow_operation)) if ok)
        raise errors.InvalidArgumentError(f"Cannot interpret {obj!r} as a {kinds}")

    @property
    def version(self) -> int:
        return len(self._ops)

    def as_graph_def(self) -> dict:
        """Return this graph as a plain-data GraphDef dict (msgpack/JSON friendly)."""
        from mpiflow.framework.graph_def import as_graph_def
        return as_graph_def(self)

    # -- collections -------------------------------------------------------------------
    def add_to_collection(self, name, value) -> None:
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value) -> None:
        """Add ``value`` to each collection of ``names`` (once, if one is named twice)."""
        for name in ([names] if isinstance(names, str) else dict.fromkeys(names)):
            self.add_to_collection(name, value)

    def get_collection(self, name, scope=None) -> list:
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [i for i in items if hasattr(i, "name") and pattern.match(i.name)]

    def get_collection_ref(self, name) -> list:
        return self._collections.setdefault(name, [])

    def clear_collection(self, name) -> None:
        self._collections.pop(name, None)

    def get_all_collection_keys(self) -> list:
        return sorted(self._collections)

    # -- seeds ---------------------------------------------------------------------------
    def op_seeds(self, op_seed=None):
        """Return (graph_seed, op_seed) for a random op, as TensorFlow's ``get_seed``."""
        if self.seed is not None:
            return self.seed, (len(self._ops) if op_seed is None else op_seed)
        if op_seed is not None:
            return DEFAULT_GRAPH_SEED, op_seed
        return None, None

    # -- default graph -----------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        _DEFAULT_GRAPH_STACK.append(self)
        try:
            yield self
        finally:
            _DEFAULT_GRAPH_STACK.remove(self)

    def __repr__(self):
        return f"<mf.Graph with {len(self._ops)} ops>"


class _GlobalDefault:
    graph = None


_DEFAULT_GRAPH_STACK = []
_DEFAULT_SESSION_STACK = []


def get_default_graph() -> Graph:
    if _DEFAULT_GRAPH_STACK:
        return _DEFAULT_GRAPH_STACK[-1]
    if _GlobalDefault.graph is None:
        _GlobalDefault.graph = Graph()
    return _GlobalDefault.graph


def reset_default_graph() -> None:
    """Replace the global default graph with a fresh one (not allowed inside as_default)."""
    if _DEFAULT_GRAPH_STACK:
        raise errors.FailedPreconditionError(
            "Do not use reset_default_graph() inside a 'with graph.as_default()' block")
    _GlobalDefault.graph = Graph()


def get_default_session():
    """Return the innermost session entered with ``with sess`` / ``as_default()``, or None."""
    return _DEFAULT_SESSION_STACK[-1] if _DEFAULT_SESSION_STACK else None


class DefaultSessionScope:
    """Make ``session`` the default one inside a ``with`` block (``Session.as_default``
    and ``with sess:`` return this): the stack of default sessions is the framework's.

    A class, not a generator: ``sess.as_default().__enter__()`` without keeping the
    object (a TF1 idiom) must leave the session the default, which a generator's
    clean-up at garbage collection would undo.
    """

    def __init__(self, session):
        self._session = session

    def __enter__(self):
        _DEFAULT_SESSION_STACK.append(self._session)
        return self._session

    def __exit__(self, *exc):
        if self._session in _DEFAULT_SESSION_STACK:
            _DEFAULT_SESSION_STACK.remove(self._session)
        return False


def _session_for(graph, session, caller):
    session = session if session is not None else get_default_session()
    if session is None:
        raise errors.FailedPreconditionError(
            f"{caller} needs a session: pass session=sess or call it inside 'with sess:' / "
            "'with sess.as_default():'")
    if session.graph is not graph:
        raise errors.InvalidArgumentError(
            f"{caller}: the session's graph is not the graph of this element")
    return session


def validate_op_name(name: str) -> None:
    if not isinstance(name, str) or not _VALID_OP_NAME.match(name):
        raise errors.InvalidArgumentError(
            f"'{name}' is not a valid op name: expected letters, digits, '.', '_', '-' and "
            "'/' (not starting with '_', '-' or '/')")
