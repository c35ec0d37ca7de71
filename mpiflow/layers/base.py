"""``mf.layers.Layer``: the TF1 ``tf.layers`` base, one variable scope per layer.

A layer's variables live under its own variable scope, chosen once: the first call of an
unnamed layer takes the next free default name of the enclosing scope (``dense``,
``dense_1``), a functional call with ``name=`` takes that name as is (a second one without
``reuse`` then fails, as in TF1), and ``reuse`` shares an existing scope's variables. The
variables are made at the first call, when the input shape is known; later calls build
only ops, under the layer's name scope. Updates a layer makes (batch norm's moving
averages) go to ``UPDATE_OPS`` unless the layer is frozen (``trainable=False``), and its
losses to ``REGULARIZATION_LOSSES``, so TF1 training code that reads those collections
works unchanged.

Subclasses write ``build`` (variables, through ``add_weight``) and ``call`` (the ops).
Uses only the framework and ops layers.
"""

from __future__ import annotations

import re

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import GraphKeys, Tensor, get_default_graph
from mpiflow.framework.per_graph import PerGraph
from mpiflow.ops import activation_ops, init_ops, math_ops
from mpiflow.ops import variable_scope as vs
from mpiflow.ops.constant_ops import convert_to_tensor


def layer_error(layer, what, expected=None, got=None, cls=errors.InvalidArgumentError):
    """Return ``cls`` in the project's template, naming the layer instead of an op."""
    text = f"{what} in layer '{layer.name}' ({type(layer).__name__})"
    details = [f"{k} {v}" for k, v in (("expected", expected), ("got", got)) if v is not None]
    return cls(text + (": " + ", ".join(details) if details else ""))


def snake_case(class_name: str) -> str:
    """Return a layer class's default name: ``MaxPooling2D`` -> ``max_pooling2d``."""
    return re.sub(r"(?<=.)(?=[A-Z][a-z])", "_", class_name).lower()


# Layer names handed out per graph, so two unnamed Dense objects are dense and dense_1
# before either has a variable scope.
_NAMES_TAKEN = PerGraph(dict)


def _unique_layer_name(base: str) -> str:
    taken = _NAMES_TAKEN.of(get_default_graph())
    count = taken.get(base, 0)
    taken[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


def reject_unimplemented(layer, **settings) -> None:
    """Refuse TF1 arguments mpiflow does not implement, where they are not their default.

    Each value in ``settings`` is (given, default); silently ignoring a renorm flag would
    train a different model than the script asked for.
    """
    for arg, (given, default) in settings.items():
        if given is not default and given != default:
            raise layer_error(layer, f"Unsupported argument '{arg}'", expected=repr(default),
                              got=repr(given), cls=errors.UnimplementedError)


# Keras names TF1's layers take for ``activation=`` (``None`` and 'linear': none).
ACTIVATIONS = {"relu": activation_ops.relu, "relu6": activation_ops.relu6,
               "elu": activation_ops.elu, "sigmoid": activation_ops.sigmoid,
               "tanh": activation_ops.tanh, "softplus": activation_ops.softplus,
               "softmax": activation_ops.softmax, "leaky_relu": activation_ops.leaky_relu,
               "linear": None}

# Keras names TF1's layers take for ``*_initializer=``; Keras' random ones default to a
# 0.05 spread, not the 1.0 of tf.random_normal_initializer.
INITIALIZERS = {
    "zeros": init_ops.Zeros, "zero": init_ops.Zeros, "ones": init_ops.Ones,
    "one": init_ops.Ones, "constant": init_ops.Constant,
    "glorot_uniform": init_ops.GlorotUniform, "glorot_normal": init_ops.GlorotNormal,
    "he_normal": init_ops.he_normal, "he_uniform": init_ops.he_uniform,
    "lecun_normal": init_ops.lecun_normal, "lecun_uniform": init_ops.lecun_uniform,
    "variance_scaling": init_ops.VarianceScaling,
    "random_normal": lambda: init_ops.RandomNormal(0.0, 0.05),
    "normal": lambda: init_ops.RandomNormal(0.0, 0.05),
    "random_uniform": lambda: init_ops.RandomUniform(-0.05, 0.05),
    "uniform": lambda: init_ops.RandomUniform(-0.05, 0.05),
    "truncated_normal": lambda: init_ops.TruncatedNormal(0.0, 0.05),
}


def get_activation(layer, activation):
    """Return ``activation`` as a function (or None): a callable as is, or a Keras name."""
    if activation is None or callable(activation):
        return activation
    if isinstance(activation, str) and activation in ACTIVATIONS:
        return ACTIVATIONS[activation]
    raise layer_error(layer, "Unknown activation", expected="a function of a tensor or one "
                      f"of {sorted(ACTIVATIONS)}", got=repr(activation))


def get_initializer(layer, initializer, arg: str):
    """Return ``initializer`` (None: get_variable's default), taking Keras names too."""
    if initializer is None or callable(initializer):
        return initializer
    if isinstance(initializer, str) and initializer in INITIALIZERS:
        return INITIALIZERS[initializer]()
    raise layer_error(layer, f"Unknown {arg}", expected="an initializer or one of "
                      f"{sorted(INITIALIZERS)}", got=repr(initializer))


class Layer:
    """Base class of the layers; a callable that builds ops on tensors.

    Class attributes a subclass sets:
        input_ndim: the rank ``call`` needs (None: any), checked at every call.
        min_ndim: the least rank ``call`` accepts.
        float_inputs: whether inputs must be floating (layers with variables, pooling).
    """

    input_ndim = None
    min_ndim = None
    float_inputs = True

    def __init__(self, trainable=True, name=None, dtype=None, activity_regularizer=None,
                 **kwargs):
        scope = kwargs.pop("_scope", None)
        self._reuse = kwargs.pop("_reuse", None)
        if kwargs:
            raise errors.InvalidArgumentError(
                f"{type(self).__name__}: unknown keyword argument(s) {sorted(kwargs)}")
        self.trainable = bool(trainable)
        self._dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self._base_name = name or snake_case(type(self).__name__)
        self._name = name or _unique_layer_name(self._base_name)
        self.activity_regularizer = activity_regularizer
        self.built = False
        self._input_axes = {}          # axis -> size that later calls must match
        self._variables = []
        self._updates = []
        self._losses = []
        self._scope = None
        if scope:
            with vs.variable_scope(scope) as captured:
                self._scope = captured

    # -- what TF1 code reads off a layer ------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self):
        return self._dtype

    @property
    def scope_name(self) -> str:
        if self._scope is None:
            raise layer_error(self, "No name scope yet", expected="a called layer",
                              cls=errors.FailedPreconditionError)
        return self._scope.name

    @property
    def variables(self) -> list:
        return list(self._variables)

    weights = variables

    @property
    def trainable_variables(self) -> list:
        return [v for v in self._variables if v.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list:
        return [v for v in self._variables if not v.trainable]

    non_trainable_weights = non_trainable_variables

    @property
    def updates(self) -> list:
        """The layer's update ops; none while it is frozen (``trainable=False``), as TF1,
        so a frozen batch norm keeps its moving statistics."""
        return list(self._updates) if self.trainable else []

    @property
    def losses(self) -> list:
        return list(self._losses)

    # -- what subclasses write ------------------------------------------------------------
    def build(self, input_shape) -> None:
        """Make the layer's variables for inputs of ``input_shape`` (default: none)."""

    def call(self, inputs, **kwargs):
        return inputs

    # -- what subclasses use --------------------------------------------------------------
    def add_weight(self, name, shape, dtype=None, initializer=None, regularizer=None,
                   trainable=None, constraint=None, partitioner=None, **kwargs):
        """Make (or, under reuse, fetch) the variable ``<layer scope>/<name>``.

        A regularizer's loss goes to REGULARIZATION_LOSSES (through ``get_variable``, once,
        when the variable is made) and to this layer's ``losses``; a constraint goes to
        the variable (the optimizers project it after each update).
        """
        trainable = (True if trainable is None else bool(trainable)) and self.trainable
        graph = get_default_graph()
        known = len(graph.get_collection(GraphKeys.REGULARIZATION_LOSSES))
        variable = vs.get_variable(name, shape=shape, dtype=dtype or self._dtype,
                                   initializer=initializer, regularizer=regularizer,
                                   trainable=trainable, partitioner=partitioner,
                                   constraint=constraint)
        self._losses.extend(graph.get_collection(GraphKeys.REGULARIZATION_LOSSES)[known:])
        if not any(variable is v for v in self._variables):
            self._variables.append(variable)
        return variable

    add_variable = add_weight  # TF1's name for it

    def add_update(self, updates, inputs=None) -> None:
        self._updates.extend(updates if isinstance(updates, (list, tuple)) else [updates])

    def add_loss(self, losses, inputs=None) -> None:
        """Record ``losses`` as this layer's and as regularization losses (TF1 layers)."""
        losses = losses if isinstance(losses, (list, tuple)) else [losses]
        graph = get_default_graph()
        for loss in losses:
            self._losses.append(loss)
            graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, inputs, *args, **kwargs):
        """Build the layer's ops on ``inputs`` (its variables too, at the first call)."""
        self._set_scope(kwargs.pop("scope", None))
        inputs = self._convert(inputs)
        graph = get_default_graph()
        first_update = len(self._updates)
        reuse = True if self.built else self._reuse
        with vs.variable_scope(self._scope, reuse=reuse, auxiliary_name_scope=False), \
                graph.name_scope(self._scope.original_name_scope):
            self._check_input(inputs)
            if not self.built:
                if self._dtype is None:
                    self._dtype = inputs.dtype
                self.build(inputs.shape)
                self.built = True
            outputs = self.call(inputs, *args, **kwargs)
            if self.activity_regularizer is not None:
                self._regularize_activity(outputs)
        collected = graph.get_collection_ref(GraphKeys.UPDATE_OPS)
        for update in self._updates[first_update:] if self.trainable else []:
            if not any(update is u for u in collected):
                collected.append(update)
        return outputs

    apply = __call__

    def _set_scope(self, scope=None) -> None:
        if self._scope is not None:
            return
        if self._reuse:
            with vs.variable_scope(scope if scope is not None else self._base_name) as captured:
                self._scope = captured
        else:
            with vs.variable_scope(scope, default_name=self._base_name) as captured:
                self._scope = captured

    def _convert(self, inputs) -> Tensor:
        if isinstance(inputs, (list, tuple)) and any(
                isinstance(i, Tensor) or hasattr(i, "_as_tensor") for i in inputs):
            raise layer_error(self, "Several inputs given", expected="one tensor",
                              got=f"a {type(inputs).__name__} of {len(inputs)}")
        return convert_to_tensor(inputs)

    def _check_input(self, inputs: Tensor) -> None:
        """Check ``inputs`` against what ``call`` needs, naming this layer."""
        shape = inputs.shape
        if self.float_inputs and not inputs.dtype.is_floating:
            raise layer_error(self, "Input 0 has the wrong dtype", expected="a floating "
                              "tensor", got=f"{inputs.dtype.name} ('{inputs.name}')")
        ndims = shape.ndims
        if self.input_ndim is not None and ndims != self.input_ndim:
            raise layer_error(self, "Input 0 has the wrong rank",
                              expected=f"rank {self.input_ndim}",
                              got=f"rank {ndims} (shape {shape}, '{inputs.name}')")
        if self.min_ndim is not None and (ndims is None or ndims < self.min_ndim):
            raise layer_error(self, "Input 0 has the wrong rank",
                              expected=f"rank >= {self.min_ndim}",
                              got=f"rank {ndims} (shape {shape}, '{inputs.name}')")
        if self._variables and inputs.dtype != self._dtype:
            raise layer_error(self, "Input 0 has the wrong dtype",
                              expected=f"{self._dtype.name}, the dtype the layer was built "
                              "for", got=f"{inputs.dtype.name} ('{inputs.name}')")
        for axis, size in self._input_axes.items():
            if shape[axis] is not None and shape[axis] != size:
                raise layer_error(self, "Input 0 has the wrong shape",
                                  expected=f"axis {axis} of size {size}, as at its first "
                                  "call", got=f"shape {shape} ('{inputs.name}')")

    def _regularize_activity(self, outputs) -> None:
        with get_default_graph().name_scope("ActivityRegularizer"):
            loss = self.activity_regularizer(outputs)
            if loss is None:
                return
            batch = math_ops.cast(math_ops.shape(outputs)[0], loss.dtype)
            self.add_loss(math_ops.divide(loss, batch))

    def __repr__(self):
        return f"<mf.layers.{type(self).__name__} '{self.name}'>"


class KernelLayer(Layer):
    """A layer with a kernel and an optional bias (Dense, Conv2D): the options they share,
    kept and checked one way, and their variables made one way."""

    def _keep_kernel_options(self, activation, use_bias, kernel_initializer,
                             bias_initializer, kernel_regularizer, bias_regularizer,
                             kernel_constraint, bias_constraint) -> None:
        self.activation = get_activation(self, activation)
        self.use_bias = use_bias
        self.kernel_initializer = get_initializer(self, kernel_initializer,
                                                  "kernel_initializer")
        self.bias_initializer = get_initializer(self, bias_initializer, "bias_initializer")
        for arg, value in (("kernel_regularizer", kernel_regularizer),
                           ("bias_regularizer", bias_regularizer),
                           ("kernel_constraint", kernel_constraint),
                           ("bias_constraint", bias_constraint)):
            if value is not None and not callable(value):
                raise layer_error(self, f"Bad {arg}", expected="None or a function of the "
                                  "weights (mf.layers.l2_regularizer(scale) for a "
                                  "regularizer)", got=repr(value))
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.kernel = self.bias = None

    def _add_kernel_and_bias(self, kernel_shape: list, units: int) -> None:
        self.kernel = self.add_weight("kernel", kernel_shape,
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint)
        if self.use_bias:
            self.bias = self.add_weight("bias", [units], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint)


def needs_defined(layer, input_shape, axis: int, what: str) -> int:
    """Return ``input_shape[axis]``; raise naming the layer when it is unknown, since the
    variables' shapes depend on it."""
    size = input_shape[axis]
    if size is None:
        raise layer_error(layer, f"The {what} of the inputs must be defined",
                          expected=f"a known size at axis {axis}", got=f"shape {input_shape}")
    return int(size)
