"""Ops that order or pass values through: NoOp/group, Identity, StopGradient, CheckNumerics."""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.graph import Operation, Tensor, get_default_graph
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, register_op


@register_op("NoOp")
class NoOpOp(OpDef):
    gradient = None

    def infer(self, b):
        return []

    def forward(self, xp, ctx):
        return None


@register_op("Identity")
class IdentityOp(OpDef):
    hands_over_input = True
    aliases_input = True
    passes_sparse_gradients = True      # a variable's read passes gather's rows through

    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        return x

    def gradient(self, op, grad):
        return [grad]


@register_op("StopGradient")
class StopGradientOp(OpDef):
    aliases_input = True
    gradient = None

    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        return x


@register_op("CheckNumerics", attrs={"message": REQUIRED})
class CheckNumericsOp(OpDef):
    aliases_input = True

    def infer(self, b):
        if not b.dtype(0).is_floating:
            raise b.error("CheckNumerics needs a floating tensor",
                          expected="bfloat16 or float16/32/64", got=b.dtype(0).name)
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, x):
        if not xp.isfinite(x).all():
            kinds = [k for k, bad in (("NaN", xp.isnan(x).any()), ("Inf", xp.isinf(x).any()))
                     if bad]
            raise errors.op_error(
                errors.InvalidArgumentError,
                f"{ctx.attrs['message']}: Tensor had {' and '.join(kinds)} values", ctx.op)
        return x

    def gradient(self, op, grad):
        # As TensorFlow's: the gradient flowing back is checked too, so a step whose
        # backward pass meets NaN or Inf fails here instead of applying it.
        return [check_numerics(grad, "Not a number (NaN) or infinity (Inf) values detected "
                                     f"in gradient. {op.get_attr('message')}")]


def no_op(name=None) -> Operation:
    return apply_op("NoOp", [], name=name)


def identity(input, name=None) -> Tensor:
    """Return a tensor with the same value as ``input`` (a new graph node)."""
    return apply_op("Identity", [convert_to_tensor(input)], name=name).outputs[0]


def stop_gradient(input, name=None) -> Tensor:
    """Return ``input``; gradients do not flow back through the result."""
    return apply_op("StopGradient", [convert_to_tensor(input)], name=name).outputs[0]


def check_numerics(tensor, message, name=None) -> Tensor:
    """Return ``tensor``; raise InvalidArgumentError at run time if it has NaN or Inf."""
    return apply_op("CheckNumerics", [convert_to_tensor(tensor)], {"message": message},
                    name=name).outputs[0]


def group(*inputs, name=None) -> Operation:
    """Return a NoOp that runs after all ``inputs`` (ops, tensors or nested lists)."""
    flat = []
    stack = list(inputs)
    while stack:
        item = stack.pop(0)
        if isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif isinstance(item, dict):
            stack[:0] = list(item.values())
        elif item is not None:
            flat.append(item)
    graph = get_default_graph()
    ops = [graph._as_op(i, "group") for i in flat]
    with graph.control_dependencies(ops):
        return no_op(name=name or "group_deps")


def tuple_(tensors, name=None, control_inputs=None) -> list:
    """Return identities of ``tensors`` that are available only once all of them are."""
    ops = [t.op for t in tensors if t is not None] + list(control_inputs or [])
    with get_default_graph().name_scope(name or "tuple"):
        gate = group(*ops)
        with get_default_graph().control_dependencies([gate]):
            return [identity(t) if t is not None else None for t in tensors]
