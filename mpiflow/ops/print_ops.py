"""``mf.print`` and ``mf.Print``: values printed when a step runs, one whole line each,
tagged with the rank's role (``[worker:1 r3] ``).

A line printed by a rank reaches the user through the MPI launcher, which forwards what
each rank writes as it comes: a line written in pieces can end up spliced with another
rank's. These kernels therefore build the whole text first and hand it to the runtime's
``print_lines``, which writes it tagged, with one system call.
"""

from __future__ import annotations

import sys

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Operation, Tensor
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, register_op

# Where a line may go: TensorFlow's names for the two standard streams.
_STREAMS = ("stderr", "stdout")
_DEFAULT_SUMMARIZE = 3


def _format(xp, value, summarize: int) -> str:
    """A tensor as TensorFlow prints it: ``summarize`` items at each end of every axis
    (all of them when negative), numpy's layout otherwise."""
    array = np.asarray(getattr(xp, "asnumpy", np.asarray)(value))
    if array.ndim == 0:
        return str(array.item())
    if summarize < 0:
        return np.array2string(array, threshold=array.size + 1, separator=" ")
    return np.array2string(array, threshold=2 * summarize, edgeitems=summarize,
                           separator=" ")


@register_op("PrintV2", attrs={"kinds": REQUIRED, "texts": REQUIRED, "sep": " ",
                               "end": "\n", "stream": "stderr",
                               "summarize": _DEFAULT_SUMMARIZE})
class PrintV2Op(OpDef):
    """Prints its literal texts and input tensors, in the order ``kinds`` gives ("t" a
    tensor, "s" a text)."""

    stateful = True
    gradient = None
    gpu_kernel = False      # printing reads the values on the host anyway

    def infer(self, b):
        return []

    def forward(self, xp, ctx, *values):
        attrs = ctx.attrs
        values, texts = iter(values), iter(attrs["texts"])
        parts = [_format(xp, next(values), attrs["summarize"]) if kind == "t"
                 else next(texts) for kind in attrs["kinds"]]
        line = attrs["sep"].join(parts) + attrs["end"]
        ctx.env.print_lines(line[:-1] if line.endswith("\n") else line, attrs["stream"])
        return None


@register_op("Print", attrs={"message": "", "first_n": -1, "summarize": _DEFAULT_SUMMARIZE})
class PrintOp(OpDef):
    """Passes its first input through and prints ``message`` and the other inputs, the
    first ``first_n`` times it runs (every time when negative)."""

    aliases_input = True
    stateful = True
    gpu_kernel = False      # printing reads the values on the host anyway

    def infer(self, b):
        return [(b.dtype(0), b.shape(0))]

    def prepare(self, ctx):
        ctx.printed = ctx.env.resource(f"{ctx.op.name}/printed", lambda: [0])

    def forward(self, xp, ctx, x, *data):
        first_n = ctx.attrs["first_n"]
        if first_n < 0 or ctx.printed[0] < first_n:
            ctx.printed[0] += 1
            summarize = ctx.attrs["summarize"]
            ctx.env.print_lines(ctx.attrs["message"] + "".join(
                _format(xp, d, summarize) for d in data), "stderr")
        return x

    def gradient(self, op, grad):
        return [grad] + [None] * (len(op.inputs) - 1)


def print_v2(*inputs, output_stream="stderr", summarize=_DEFAULT_SUMMARIZE, sep=" ",
             end="\n", name=None) -> Operation:
    """TF1's ``tf.print``: an op that prints ``inputs`` (tensors or plain values) each
    time it runs; run it, or make the ops that should print depend on it."""
    stream = _stream_name(output_stream)
    kinds, texts, tensors = [], [], []
    for item in inputs:
        if isinstance(item, (Tensor, np.ndarray)) or callable(getattr(item, "_as_tensor", None)):
            kinds.append("t")
            tensors.append(convert_to_tensor(item))
        else:
            kinds.append("s")
            texts.append(str(item))
    return apply_op("PrintV2", tensors, {"kinds": "".join(kinds), "texts": texts,
                                         "sep": sep, "end": end, "stream": stream,
                                         "summarize": -1 if summarize is None else
                                         int(summarize)}, name=name)


def print_(input_, data=(), message=None, first_n=None, summarize=None, name=None) -> Tensor:
    """TF1's ``tf.Print``: ``input_`` passed through, printing ``message`` and ``data``
    when it is computed (the first ``first_n`` times, if given)."""
    return apply_op("Print", [convert_to_tensor(input_)] +
                    [convert_to_tensor(d) for d in data],
                    {"message": message or "", "first_n": -1 if first_n is None else
                     int(first_n), "summarize": _DEFAULT_SUMMARIZE if summarize is None
                     else int(summarize)}, name=name).outputs[0]


def _stream_name(stream) -> str:
    """TensorFlow accepts ``sys.stderr``/``sys.stdout`` or their names."""
    for name in _STREAMS:
        if stream == name or stream in (getattr(sys, name), getattr(sys, f"__{name}__")):
            return name
    raise errors.InvalidArgumentError(
        f"mf.print cannot write to {stream!r}: expected sys.stderr, sys.stdout, 'stderr' or "
        "'stdout' (each rank's line goes through the launcher's output, tagged)")
