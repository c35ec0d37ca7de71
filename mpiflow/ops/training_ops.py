"""Fused optimizer updates, in place on variable buffers: TF's Apply* and SparseApply* ops.

Each op lists its inputs by TF's names, in TF's order. One base class does what every
update shares: at build time it checks the variable and slot inputs are variables with
the var's shape and dtype, the hyperparameters are float scalars and the gradient fits
the var (or, for sparse ops, rows ``indices`` of it); at run time it resolves the slots
to their live buffers, casts the hyperparameters to the var's dtype and, for sparse ops,
sums the values of duplicate indices first (the semantics of TF's optimizers). A sparse
op that updates only the touched rows reuses its dense op's update on those rows.

On a GPU each dense update is one fused kernel (``FusedUpdate``): every slot and the
var are read and written once per step, where the array form launches a kernel per
arithmetic call and moves each intermediate through device memory.

The optimizers in ``mpiflow.train`` build these ops; a parameter server applies pushed
gradients with them. Must not import runtime, gradients or train.
"""

from __future__ import annotations

import threading

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, add_at, apply_op, elementwise_kernel, get_op_def, has_kernel_for, is_index,
    register_op)
from mpiflow.ops.state_ops import VARIABLE_OP_TYPES

# Input roles by TF's input names: buffers written in place, and the gradient.
_STATE_INPUTS = frozenset({"var", "accum", "m", "v", "ms", "mom", "mg", "linear",
                           "accum_update"})
_GRAD_INPUTS = frozenset({"grad", "delta"})


class FusedUpdate:
    """An update as one GPU kernel: C statements over the op's inputs by TF's names.

    ``reads`` are the inputs the body reads only; ``writes`` the buffers it updates in
    place (the var and its slots). ``variant(attrs)`` picks the body by the op's attrs.
    """

    def __init__(self, reads, writes, bodies, variant=lambda attrs: 0):
        self.reads, self.writes = tuple(reads), tuple(writes)
        self.bodies, self.variant = bodies, variant

    def run(self, xp, op_def, ctx, values) -> None:
        which = self.variant(ctx.attrs)
        kernel = elementwise_kernel(
            xp, f"mf_{op_def.type_name.lower()}_{which}",
            ", ".join(f"T {n}" for n in self.reads), ", ".join(f"T {n}" for n in self.writes),
            self.bodies[which])
        by_name = dict(zip(op_def.inputs, values))
        kernel(*[by_name[n] for n in self.reads + self.writes])


class _ApplyOp(OpDef):
    """Base of the fused updates; subclasses set ``inputs`` and write ``update``."""

    stateful = True
    aliases_state = True
    gradient = None
    inputs = ()          # TF's input names, in order; input 0 is "var"
    sparse = False
    fused = None         # FusedUpdate: the same update as one GPU kernel

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.inputs:
            return
        cls.ref_inputs = tuple(i for i, n in enumerate(cls.inputs) if n in _STATE_INPUTS)
        cls._grad = next(i for i, n in enumerate(cls.inputs) if n in _GRAD_INPUTS)
        cls._indices = cls.inputs.index("indices") if "indices" in cls.inputs else None
        cls._scalars = tuple(i for i, n in enumerate(cls.inputs)
                             if n not in _STATE_INPUTS and n not in _GRAD_INPUTS
                             and n != "indices")

    # -- build time --------------------------------------------------------------------
    def infer(self, b):
        var_dt, var_shape = b.dtype(0), b.shape(0)
        if not var_dt.is_floating:
            raise b.error("Input 'var' must be a floating variable",
                          expected="bfloat16 or float16/32/64", got=var_dt.name)
        for i in self.ref_inputs:
            self._check_state_input(b, i, var_dt, var_shape)
        for i in self._scalars:
            if not b.dtype(i).is_floating or b.shape(i).ndims not in (None, 0):
                raise b.error(f"Input '{self.inputs[i]}' must be a float scalar",
                              expected="a float scalar (shape [])",
                              got=f"{b.dtype(i).name} of shape {b.shape(i)}")
        name = self.inputs[self._grad]
        if b.dtype(self._grad) is not var_dt:
            raise b.error(f"Input '{name}' must have the var's dtype", expected=var_dt.name,
                          got=b.dtype(self._grad).name)
        expected = self._grad_shape(b, var_shape)
        if not b.shape(self._grad).is_compatible_with(expected):
            raise b.error(f"Input '{name}' must match the var's shape", expected=expected,
                          got=b.shape(self._grad))
        return [(var_dt, var_shape)]

    def _check_state_input(self, b, i, var_dt, var_shape):
        name = self.inputs[i]
        producer = b.inputs[i].op
        if producer.type not in VARIABLE_OP_TYPES:
            raise b.error(f"Input '{name}' must be a variable (it is updated in place)",
                          expected="a VariableV2 output",
                          got=f"tensor '{b.inputs[i].name}' from a {producer.type} op")
        if b.dtype(i) is not var_dt:
            raise b.error(f"Input '{name}' must have the var's dtype", expected=var_dt.name,
                          got=b.dtype(i).name)
        if not b.shape(i).is_compatible_with(var_shape):
            raise b.error(f"Input '{name}' must have the var's shape", expected=var_shape,
                          got=b.shape(i))

    def _grad_shape(self, b, var_shape):
        return var_shape

    # -- run time ----------------------------------------------------------------------
    def forward(self, xp, ctx, *args):
        var = args[0].get()
        values = list(args)
        values[0] = var
        for i in self.ref_inputs[1:]:
            values[i] = args[i].get()
            if values[i].shape != var.shape:
                raise _run_error(ctx, f"Input '{self.inputs[i]}' does not match the var's "
                                 "shape", list(var.shape), list(values[i].shape))
        for i in self._scalars:
            values[i] = xp.asarray(args[i], dtype=var.dtype)
        self._run(xp, ctx, var, values)
        return var

    def _run(self, xp, ctx, var, values):
        grad = values[self._grad]
        if grad.shape != var.shape:
            raise _run_error(ctx, f"Input '{self.inputs[self._grad]}' does not match the "
                             "var's shape", list(var.shape), list(grad.shape))
        self.apply_update(xp, ctx, *values)

    def apply_update(self, xp, ctx, *values):
        """``update``, or its fused kernel where the var is a float32/64 GPU array."""
        if self.fused is not None and has_kernel_for(xp, values[0].dtype):
            self.fused.run(xp, self, ctx, values)
        else:
            self.update(xp, ctx, *values)

    def update(self, xp, ctx, *values):
        """Apply the update in place; ``values`` follow ``inputs``, slots as buffers."""
        raise NotImplementedError


class _SparseApplyOp(_ApplyOp):
    """Base of the sparse updates: ``grad`` holds rows ``indices`` of the var's gradient."""

    sparse = True

    def infer(self, b):
        i = self._indices
        if not is_index(b.dtype(i)):
            raise b.error("Input 'indices' must be int32 or int64", expected="int32 or int64",
                          got=b.dtype(i).name)
        if b.shape(i).ndims not in (None, 1):
            raise b.error("Input 'indices' must be a vector", expected="rank 1",
                          got=b.shape(i))
        if b.shape(0).ndims == 0:
            raise b.error("Input 'var' must have rank >= 1 for a sparse update",
                          got=b.shape(0))
        return super().infer(b)

    def _grad_shape(self, b, var_shape):
        if var_shape.ndims is None:
            return TensorShape(None)
        rows = b.shape(self._indices)
        n = rows.as_list()[0] if rows.ndims == 1 else None
        return TensorShape([n] + var_shape.as_list()[1:])

    def _run(self, xp, ctx, var, values):
        grad, indices = values[self._grad], values[self._indices]
        if indices.ndim != 1 or grad.shape != indices.shape + var.shape[1:]:
            raise _run_error(ctx, "Input 'grad' does not match the rows 'indices' of the var",
                             f"shape {list(indices.shape + var.shape[1:])}",
                             f"shape {list(grad.shape)}")
        if indices.size and (indices.min() < 0 or indices.max() >= var.shape[0]):
            bad = indices[(indices < 0) | (indices >= var.shape[0])][0]
            raise _run_error(ctx, "Index out of range", f"indices in [0, {var.shape[0]})",
                             int(bad))
        values[self._grad], values[self._indices] = sum_duplicates(xp, grad, indices)
        self.update(xp, ctx, *values)


class _RowwiseSparseOp(_SparseApplyOp):
    """A sparse update that runs its dense op's ``update`` on the touched rows only."""

    dense = None          # the dense op's type name

    def update(self, xp, ctx, *values):
        indices = values[self._indices]
        rows = {i: values[i][indices] for i in self.ref_inputs}
        dense_values = [rows.get(i, v) for i, v in enumerate(values) if i != self._indices]
        get_op_def(self.dense).apply_update(xp, ctx, *dense_values)
        for i, r in rows.items():
            values[i][indices] = r


def sum_duplicates(xp, values, indices):
    """Return (values summed per index, sorted unique indices): TF's deduplication."""
    unique, inverse = xp.unique(indices, return_inverse=True)
    inverse = inverse.reshape(-1)
    if unique.size == indices.size:
        summed = xp.empty_like(values)
        summed[inverse] = values
    else:
        summed = xp.zeros((unique.size,) + values.shape[1:], dtype=values.dtype)
        add_at(xp, summed, inverse, values)
    return summed, unique


def _run_error(ctx, what, expected, got):
    return errors.op_error(errors.InvalidArgumentError, what, ctx.op, expected=expected,
                           got=got)


def _sparse_variant(type_name, dense_cls):
    """Register ``type_name``: ``dense_cls``'s update on rows, with 'indices' after 'grad'."""
    # The dense op's gradient may be named 'delta' (as ApplyProximalGradientDescent's);
    # a sparse op's is 'grad', as in TensorFlow.
    names = ["grad" if n == "delta" else n for n in dense_cls.inputs]
    names.insert(names.index("grad") + 1, "indices")
    body = {"inputs": tuple(names), "dense": dense_cls.type_name,
            "__doc__": f"{dense_cls.type_name} on the rows 'indices' only (duplicates summed)."}
    cls = type(type_name + "Op", (_RowwiseSparseOp,), body)
    return register_op(type_name, attrs=dict(dense_cls.attrs))(cls)


# -- gradient descent -----------------------------------------------------------------------

@register_op("ApplyGradientDescent", attrs={"use_locking": False})
class ApplyGradientDescentOp(_ApplyOp):
    """var -= alpha * delta."""

    inputs = ("var", "alpha", "delta")
    fused = FusedUpdate(("alpha", "delta"), ("var",), ["var -= alpha * delta"])
    donating_inputs = (2,)

    def update(self, xp, ctx, var, alpha, delta):
        if xp is not np:
            var -= alpha * delta
        elif 2 in ctx.donated and type(delta) is np.ndarray and \
                delta.shape == var.shape and delta.dtype == alpha.dtype:
            delta *= alpha          # the step's own gradient: scaled where it is
            var -= delta
        else:
            subtract_scaled(var, alpha, delta)


# Block of ``subtract_scaled``: small enough to stay in the L2 cache between its two
# passes, large enough that the Python loop over blocks costs little beside them (the 6
# updates of an MLP 784-512-512-10: 184 us with blocks of 2**14, 122 us with 2**17).
_BLOCK_ELEMENTS = 1 << 17
_scratch = threading.local()


def subtract_scaled(var, alpha, delta) -> None:
    """``var -= alpha * delta`` on host arrays, without a temporary the size of ``var``.

    Block by block through a small per-thread scratch buffer: the whole-size temporary of
    the plain expression costs a third of the update's time (it is written, then read
    back from memory) on a large variable.
    """
    if var.size <= _BLOCK_ELEMENTS or not var.flags.c_contiguous or \
            delta.dtype != var.dtype or delta.shape != var.shape:
        var -= alpha * delta
        return
    flat_var, flat_delta = var.reshape(-1), delta.reshape(-1)   # a view of var
    scratch = getattr(_scratch, "buffers", None)
    if scratch is None:
        scratch = _scratch.buffers = {}
    block = scratch.get(var.dtype)
    if block is None:
        block = scratch[var.dtype] = np.empty(_BLOCK_ELEMENTS, var.dtype)
    for start in range(0, flat_var.size, _BLOCK_ELEMENTS):
        end = min(start + _BLOCK_ELEMENTS, flat_var.size)
        part = block[:end - start]
        np.multiply(flat_delta[start:end], alpha, out=part)
        flat_var[start:end] -= part


@register_op("SparseApplyGradientDescent", attrs={"use_locking": False})
class SparseApplyGradientDescentOp(_SparseApplyOp):
    """var[indices] -= alpha * grad (scatter-sub; duplicate indices summed)."""

    inputs = ("var", "alpha", "grad", "indices")

    def update(self, xp, ctx, var, alpha, grad, indices):
        var[indices] -= alpha * grad


# -- momentum ---------------------------------------------------------------------------------

@register_op("ApplyMomentum", attrs={"use_locking": False, "use_nesterov": False})
class ApplyMomentumOp(_ApplyOp):
    """accum = accum * momentum + grad; var -= lr * accum (Nesterov:
    var -= lr * grad + lr * momentum * accum)."""

    inputs = ("var", "accum", "lr", "grad", "momentum")
    fused = FusedUpdate(
        ("lr", "grad", "momentum"), ("var", "accum"),
        ["accum = accum * momentum + grad; var -= accum * lr",
         "accum = accum * momentum + grad; var -= grad * lr + accum * (lr * momentum)"],
        lambda attrs: int(bool(attrs["use_nesterov"])))

    def update(self, xp, ctx, var, accum, lr, grad, momentum):
        accum *= momentum
        accum += grad
        if ctx.attrs["use_nesterov"]:
            var -= grad * lr
            var -= accum * (lr * momentum)
        else:
            var -= accum * lr


_sparse_variant("SparseApplyMomentum", ApplyMomentumOp)


# -- Adagrad ------------------------------------------------------------------------------------

@register_op("ApplyAdagrad", attrs={"use_locking": False, "update_slots": True})
class ApplyAdagradOp(_ApplyOp):
    """accum += grad^2; var -= lr * grad / sqrt(accum)."""

    inputs = ("var", "accum", "lr", "grad")
    fused = FusedUpdate(
        ("lr", "grad"), ("var", "accum"),
        ["var -= lr * grad / sqrt(accum)",
         "accum += grad * grad; var -= lr * grad / sqrt(accum)"],
        lambda attrs: int(bool(attrs["update_slots"])))

    def update(self, xp, ctx, var, accum, lr, grad):
        if ctx.attrs["update_slots"]:
            accum += xp.square(grad)
        step = _scratch(xp, xp.sqrt(accum))
        xp.divide(grad, step, out=step)
        step *= lr
        var -= step


_sparse_variant("SparseApplyAdagrad", ApplyAdagradOp)


# -- RMSProp ------------------------------------------------------------------------------------

@register_op("ApplyRMSProp", attrs={"use_locking": False})
class ApplyRMSPropOp(_ApplyOp):
    """ms = rho * ms + (1 - rho) * grad^2; mom = momentum * mom + lr * grad / sqrt(ms + eps);
    var -= mom."""

    inputs = ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad")
    fused = FusedUpdate(
        ("lr", "rho", "momentum", "epsilon", "grad"), ("var", "ms", "mom"),
        ["ms = rho * ms + ((T)1 - rho) * grad * grad; "
         "mom = momentum * mom + lr * grad / sqrt(ms + epsilon); var -= mom"])

    def update(self, xp, ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
        _moving_average(ms, rho, xp.square(grad))
        _momentum_step(xp, var, mom, lr, momentum, grad, _scratch(xp, ms + epsilon))


@register_op("ApplyCenteredRMSProp", attrs={"use_locking": False})
class ApplyCenteredRMSPropOp(_ApplyOp):
    """RMSProp normalised by the variance: mg = rho * mg + (1 - rho) * grad;
    ms as RMSProp; mom = momentum * mom + lr * grad / sqrt(ms - mg^2 + eps); var -= mom."""

    inputs = ("var", "mg", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad")
    fused = FusedUpdate(
        ("lr", "rho", "momentum", "epsilon", "grad"), ("var", "mg", "ms", "mom"),
        ["mg = rho * mg + ((T)1 - rho) * grad; ms = rho * ms + ((T)1 - rho) * grad * grad; "
         "mom = momentum * mom + lr * grad / sqrt(ms - mg * mg + epsilon); var -= mom"])

    def update(self, xp, ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
        _moving_average(mg, rho, grad.copy())
        _moving_average(ms, rho, xp.square(grad))
        denom = _scratch(xp, xp.square(mg))
        xp.subtract(ms, denom, out=denom)
        denom += epsilon
        _momentum_step(xp, var, mom, lr, momentum, grad, denom)


def _scratch(xp, value):
    """``value`` as an array the update may write into: numpy gives a 0-d variable's
    arithmetic back as a scalar, which no ``out=`` takes."""
    return value if isinstance(value, xp.ndarray) else xp.asarray(value)


def _moving_average(acc, rho, value):
    """acc = rho * acc + (1 - rho) * value, in place; ``value`` is scratch (overwritten)."""
    acc *= rho
    value *= 1 - rho
    acc += value


def _momentum_step(xp, var, mom, lr, momentum, grad, denom):
    """mom = momentum * mom + lr * grad / sqrt(denom); var -= mom (``denom`` is consumed)."""
    xp.sqrt(denom, out=denom)
    xp.divide(grad, denom, out=denom)
    denom *= lr
    mom *= momentum
    mom += denom
    var -= mom


_sparse_variant("SparseApplyRMSProp", ApplyRMSPropOp)
_sparse_variant("SparseApplyCenteredRMSProp", ApplyCenteredRMSPropOp)


# -- Adam ---------------------------------------------------------------------------------------

@register_op("ApplyAdam", attrs={"use_locking": False, "use_nesterov": False})
class ApplyAdamOp(_ApplyOp):
    """lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power);
    m = beta1 * m + (1 - beta1) * grad; v = beta2 * v + (1 - beta2) * grad^2;
    var -= lr_t * m / (sqrt(v) + epsilon)  (Nesterov: m replaced by
    beta1 * m + (1 - beta1) * grad)."""

    inputs = ("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2",
              "epsilon", "grad")
    fused = FusedUpdate(
        ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"),
        ("var", "m", "v"),
        ["m = beta1 * m + ((T)1 - beta1) * grad; v = beta2 * v + ((T)1 - beta2) * grad * grad; "
         "var -= lr * sqrt((T)1 - beta2_power) / ((T)1 - beta1_power) * m "
         "/ (sqrt(v) + epsilon)",
         "m = beta1 * m + ((T)1 - beta1) * grad; v = beta2 * v + ((T)1 - beta2) * grad * grad; "
         "var -= lr * sqrt((T)1 - beta2_power) / ((T)1 - beta1_power) "
         "* (beta1 * m + ((T)1 - beta1) * grad) / (sqrt(v) + epsilon)"],
        lambda attrs: int(bool(attrs["use_nesterov"])))

    def update(self, xp, ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon,
               grad):
        m *= beta1
        m += grad * (1 - beta1)
        v *= beta2
        v += xp.square(grad) * (1 - beta2)
        numer = None
        if ctx.attrs["use_nesterov"]:
            numer = grad * (1 - beta1)
            numer += m * beta1
        _adam_step(xp, var, m, v, beta1_power, beta2_power, lr, epsilon, numer)


@register_op("SparseApplyAdam", attrs={"use_locking": False, "use_nesterov": False})
class SparseApplyAdamOp(_SparseApplyOp):
    """Adam with rows of the gradient, as TF1's AdamOptimizer._apply_sparse: m and v decay
    on every row, the touched rows get their (1 - beta1) * grad and (1 - beta2) * grad^2,
    and every row of var moves, so the result equals ApplyAdam on the densified gradient.
    (TF has no such kernel; its optimizer composes the same update from assign, scatter_add
    and assign_sub.)"""

    inputs = ("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2",
              "epsilon", "grad", "indices")

    def update(self, xp, ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon,
               grad, indices):
        m *= beta1
        m[indices] += grad * (1 - beta1)
        v *= beta2
        v[indices] += xp.square(grad) * (1 - beta2)
        numer = None
        if ctx.attrs["use_nesterov"]:
            numer = m * beta1
            numer[indices] += grad * (1 - beta1)
        _adam_step(xp, var, m, v, beta1_power, beta2_power, lr, epsilon, numer)


def _adam_step(xp, var, m, v, beta1_power, beta2_power, lr, epsilon, numer=None):
    """var -= lr_t * numer / (sqrt(v) + epsilon), numer defaulting to m."""
    lr_t = lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power)
    step = _scratch(xp, xp.sqrt(v))
    step += epsilon
    numer = m * lr_t if numer is None else numer * lr_t
    xp.divide(numer, step, out=step)
    var -= step


# -- FTRL-Proximal ---------------------------------------------------------------------------

# One FTRL step in C, shared by ApplyFtrl ({shrunk} = grad) and ApplyFtrlV2; the powers
# accum^(-lr_power) are square roots where lr_power is -0.5, as TensorFlow computes them.
_FTRL_BODY = (
    "T shrunk = {shrunk}; T new_accum = accum + grad * grad; T p_old, p_new; "
    "if (lr_power == (T)-0.5) {{ p_old = sqrt(accum); p_new = sqrt(new_accum); }} "
    "else {{ p_old = pow(accum, -lr_power); p_new = pow(new_accum, -lr_power); }} "
    "linear += shrunk - (p_new - p_old) / lr * var; "
    "T quadratic = p_new / lr + (T)2 * l2; "
    "T sgn = (T)((linear > (T)0) - (linear < (T)0)); "
    "var = fabs(linear) > l1 ? (sgn * l1 - linear) / quadratic : (T)0; "
    "accum = new_accum")


def _ftrl_power(xp, accum, lr_power):
    """accum^(-lr_power): a square root where lr_power is -0.5 (TensorFlow's special
    case, exact where the power rounds)."""
    return xp.sqrt(accum) if lr_power == -0.5 else xp.power(accum, -lr_power)


def _ftrl_step(xp, var, accum, linear, grad, lr, l1, l2, lr_power, shrunk_grad):
    """The FTRL-Proximal update in place: linear takes the (shrunk) gradient less the
    change of the per-coordinate rate times var; var is the closed-form minimiser, zero
    where |linear| <= l1 (the L1 sparsity); accum adds grad^2 (the unshrunk gradient)."""
    new_accum = accum + xp.square(grad)
    p_old, p_new = _ftrl_power(xp, accum, lr_power), _ftrl_power(xp, new_accum, lr_power)
    linear += shrunk_grad - (p_new - p_old) / lr * var
    quadratic = p_new / lr + 2 * l2
    var[...] = xp.where(xp.abs(linear) > l1, (xp.sign(linear) * l1 - linear) / quadratic, 0)
    accum[...] = new_accum


@register_op("ApplyFtrl", attrs={"use_locking": False})
class ApplyFtrlOp(_ApplyOp):
    """FTRL-Proximal (McMahan et al.): accum_new = accum + grad^2;
    linear += grad - (accum_new^-lr_power - accum^-lr_power) / lr * var;
    var = (sign(linear) * l1 - linear) / (accum_new^-lr_power / lr + 2 * l2) where
    |linear| > l1, else 0; accum = accum_new."""

    inputs = ("var", "accum", "linear", "grad", "lr", "l1", "l2", "lr_power")
    fused = FusedUpdate(("grad", "lr", "l1", "l2", "lr_power"), ("var", "accum", "linear"),
                        [_FTRL_BODY.format(shrunk="grad")])

    def update(self, xp, ctx, var, accum, linear, grad, lr, l1, l2, lr_power):
        _ftrl_step(xp, var, accum, linear, grad, lr, l1, l2, lr_power, grad)


@register_op("ApplyFtrlV2", attrs={"use_locking": False})
class ApplyFtrlV2Op(_ApplyOp):
    """ApplyFtrl with L2 shrinkage: linear takes grad + 2 * l2_shrinkage * var in place of
    grad (accum still adds grad^2)."""

    inputs = ("var", "accum", "linear", "grad", "lr", "l1", "l2", "l2_shrinkage", "lr_power")
    fused = FusedUpdate(("grad", "lr", "l1", "l2", "l2_shrinkage", "lr_power"),
                        ("var", "accum", "linear"),
                        [_FTRL_BODY.format(shrunk="grad + (T)2 * l2_shrinkage * var")])

    def update(self, xp, ctx, var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
        _ftrl_step(xp, var, accum, linear, grad, lr, l1, l2, lr_power,
                   grad + 2 * l2_shrinkage * var)


_sparse_variant("SparseApplyFtrl", ApplyFtrlOp)
_sparse_variant("SparseApplyFtrlV2", ApplyFtrlV2Op)


# -- Adadelta -----------------------------------------------------------------------------------

@register_op("ApplyAdadelta", attrs={"use_locking": False})
class ApplyAdadeltaOp(_ApplyOp):
    """accum = rho * accum + (1 - rho) * grad^2;
    update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad; var -= lr * update;
    accum_update = rho * accum_update + (1 - rho) * update^2."""

    inputs = ("var", "accum", "accum_update", "lr", "rho", "epsilon", "grad")
    fused = FusedUpdate(
        ("lr", "rho", "epsilon", "grad"), ("var", "accum", "accum_update"),
        ["accum = accum * rho + grad * grad * ((T)1 - rho); "
         "T update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad; "
         "var -= update * lr; "
         "accum_update = accum_update * rho + update * update * ((T)1 - rho)"])

    def update(self, xp, ctx, var, accum, accum_update, lr, rho, epsilon, grad):
        _moving_average(accum, rho, xp.square(grad))
        step = _scratch(xp, xp.sqrt(accum_update + epsilon))
        step /= xp.sqrt(accum + epsilon)
        step *= grad
        var -= step * lr
        _moving_average(accum_update, rho, xp.square(step))


_sparse_variant("SparseApplyAdadelta", ApplyAdadeltaOp)


# -- proximal updates -----------------------------------------------------------------------

# The proximal step in C on ``prox`` (var after the plain step) at rate ``rate``.
_PROXIMAL_BODY = (
    "T shrink = (T)1 + l2 * rate; "
    "var = l1 > (T)0 ? (T)((prox > (T)0) - (prox < (T)0)) "
    "* fmax(fabs(prox) - rate * l1, (T)0) / shrink : prox / shrink")


def _proximal_step(xp, var, prox, rate, l1, l2):
    """var = the proximal map of L1 and L2 at ``rate`` applied to ``prox``: soft
    thresholding by rate * l1 (where l1 > 0), then scaling by 1 / (1 + rate * l2)."""
    if l1 > 0:
        prox = xp.sign(prox) * xp.maximum(xp.abs(prox) - rate * l1, 0)
    var[...] = prox / (1 + l2 * rate)


@register_op("ApplyProximalGradientDescent", attrs={"use_locking": False})
class ApplyProximalGradientDescentOp(_ApplyOp):
    """prox = var - alpha * delta; var = sign(prox) * max(|prox| - alpha * l1, 0)
    / (1 + alpha * l2) (without the thresholding where l1 is 0)."""

    inputs = ("var", "alpha", "l1", "l2", "delta")
    fused = FusedUpdate(("alpha", "l1", "l2", "delta"), ("var",),
                        ["T rate = alpha; T prox = var - delta * rate; " + _PROXIMAL_BODY])

    def update(self, xp, ctx, var, alpha, l1, l2, delta):
        _proximal_step(xp, var, var - delta * alpha, alpha, l1, l2)


@register_op("ApplyProximalAdagrad", attrs={"use_locking": False})
class ApplyProximalAdagradOp(_ApplyOp):
    """accum += grad^2; rate = lr / sqrt(accum); then ApplyProximalGradientDescent's
    step at that per-coordinate rate."""

    inputs = ("var", "accum", "lr", "l1", "l2", "grad")
    fused = FusedUpdate(("lr", "l1", "l2", "grad"), ("var", "accum"),
                        ["accum += grad * grad; T rate = lr / sqrt(accum); "
                         "T prox = var - grad * rate; " + _PROXIMAL_BODY])

    def update(self, xp, ctx, var, accum, lr, l1, l2, grad):
        accum += xp.square(grad)
        rate = lr / xp.sqrt(accum)
        _proximal_step(xp, var, var - grad * rate, rate, l1, l2)


_sparse_variant("SparseApplyProximalGradientDescent", ApplyProximalGradientDescentOp)
_sparse_variant("SparseApplyProximalAdagrad", ApplyProximalAdagradOp)


# -- Python functions (TF's training_ops names) -----------------------------------------------

def fused_apply(op_type: str, inputs, attrs=None, name=None) -> Tensor:
    """Add the fused update ``op_type`` on ``inputs`` (in the op's order); return its output.

    Variables (or their VariableV2 tensors) go in the var and slot positions; Python
    numbers and arrays elsewhere become constants of the var's dtype.

    Raises:
        InvalidArgumentError: wrong number of inputs, or the op's shape/dtype checks fail.
    """
    op_def = get_op_def(op_type)
    inputs = list(inputs)
    if len(inputs) != len(op_def.inputs):
        raise errors.InvalidArgumentError(
            f"{op_type} takes {len(op_def.inputs)} inputs {list(op_def.inputs)}, got "
            f"{len(inputs)}")
    var = _ref_tensor(inputs[0])
    tensors = []
    for i, value in enumerate(inputs):
        if i in op_def.ref_inputs:
            tensors.append(_ref_tensor(value))
        elif _is_tensor_like(value):
            tensors.append(convert_to_tensor(value))
        else:
            dtype = None if op_def.inputs[i] == "indices" else var.dtype
            tensors.append(convert_to_tensor(value, dtype=dtype, name=op_def.inputs[i]))
    return apply_op(op_type, tensors, attrs, name=name).outputs[0]


def _ref_tensor(value):
    get = getattr(value, "_ref", None)
    return get() if callable(get) else value


def _is_tensor_like(value):
    return isinstance(value, Tensor) or callable(getattr(value, "_as_tensor", None))


def _op_function(op_type, py_name):
    def fn(*inputs, name=None, **kwargs):
        op_def = get_op_def(op_type)
        attrs = {k: kwargs.pop(k) for k in list(kwargs) if k in op_def.attrs}
        inputs = list(inputs) + [kwargs.pop(n) for n in op_def.inputs[len(inputs):]
                                 if n in kwargs]
        if kwargs:
            raise errors.InvalidArgumentError(
                f"{py_name}() got unexpected arguments {sorted(kwargs)}: it takes inputs "
                f"{list(op_def.inputs)} and attrs {sorted(op_def.attrs)}")
        return fused_apply(op_type, inputs, attrs, name=name)
    fn.__name__ = py_name
    fn.__doc__ = f"Add a {op_type} op (inputs {list(get_op_def(op_type).inputs)})."
    return fn


apply_gradient_descent = _op_function("ApplyGradientDescent", "apply_gradient_descent")
sparse_apply_gradient_descent = _op_function("SparseApplyGradientDescent",
                                             "sparse_apply_gradient_descent")
apply_momentum = _op_function("ApplyMomentum", "apply_momentum")
sparse_apply_momentum = _op_function("SparseApplyMomentum", "sparse_apply_momentum")
apply_adagrad = _op_function("ApplyAdagrad", "apply_adagrad")
sparse_apply_adagrad = _op_function("SparseApplyAdagrad", "sparse_apply_adagrad")
apply_rms_prop = _op_function("ApplyRMSProp", "apply_rms_prop")
sparse_apply_rms_prop = _op_function("SparseApplyRMSProp", "sparse_apply_rms_prop")
apply_centered_rms_prop = _op_function("ApplyCenteredRMSProp", "apply_centered_rms_prop")
sparse_apply_centered_rms_prop = _op_function("SparseApplyCenteredRMSProp",
                                              "sparse_apply_centered_rms_prop")
apply_adam = _op_function("ApplyAdam", "apply_adam")
sparse_apply_adam = _op_function("SparseApplyAdam", "sparse_apply_adam")
apply_ftrl = _op_function("ApplyFtrl", "apply_ftrl")
sparse_apply_ftrl = _op_function("SparseApplyFtrl", "sparse_apply_ftrl")
apply_ftrl_v2 = _op_function("ApplyFtrlV2", "apply_ftrl_v2")
sparse_apply_ftrl_v2 = _op_function("SparseApplyFtrlV2", "sparse_apply_ftrl_v2")
apply_adadelta = _op_function("ApplyAdadelta", "apply_adadelta")
sparse_apply_adadelta = _op_function("SparseApplyAdadelta", "sparse_apply_adadelta")
apply_proximal_gradient_descent = _op_function("ApplyProximalGradientDescent",
                                               "apply_proximal_gradient_descent")
sparse_apply_proximal_gradient_descent = _op_function(
    "SparseApplyProximalGradientDescent", "sparse_apply_proximal_gradient_descent")
apply_proximal_adagrad = _op_function("ApplyProximalAdagrad", "apply_proximal_adagrad")
sparse_apply_proximal_adagrad = _op_function("SparseApplyProximalAdagrad",
                                             "sparse_apply_proximal_adagrad")
