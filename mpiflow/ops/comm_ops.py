"""_Send and _Recv: the ops the partitioner puts on each edge that crosses ranks.

They carry the edge key and the peer rank as attrs (a Send also whether its Recv sits on
a GPU, so a CUDA-aware MPI can land the tensor in device memory); the executor runs them
itself (a Send hands its input to the transport, a Recv suspends the step until the
tensor arrives), so their OpDefs have shape functions but no kernels of their own.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.ops.registry import REQUIRED, OpDef, register_op


class _Transfer(OpDef):
    stateful = True
    gradient = None
    transfer = None

    def forward(self, xp, ctx, *inputs):
        raise errors.op_error(errors.InternalError,
                              "Transfer ops are run by the executor, not as kernels", ctx.op)


@register_op("_Send", attrs={"edge": REQUIRED, "peer": REQUIRED, "to_gpu": False})
class SendOp(_Transfer):
    transfer = "send"

    def infer(self, b):
        return []


@register_op("_Recv", attrs={"edge": REQUIRED, "peer": REQUIRED, "dtype": REQUIRED,
                             "shape": REQUIRED, "carries": ""})
class RecvOp(_Transfer):
    transfer = "recv"
    fresh_output = True         # a receive buffer of the step's own (the pool's, once free)

    def infer(self, b):
        return [(b.attrs["dtype"], b.attrs["shape"])]
