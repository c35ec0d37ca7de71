"""The MPI library's own collectives (Iallreduce, Ibcast, Iallgatherv): the reference the
other strategies are tested against, and the fastest choice for small CPU arrays."""

from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from mpiflow import backend, dtype_table, errors, half_floats
from mpiflow.comm.collectives.base import CallStage, Collective, RequestStage, Stage
from mpiflow.comm.wire_dtypes import HALF_FLOATS


@functools.lru_cache(maxsize=64)
def mpi_reduction(dtype) -> tuple[MPI.Datatype, MPI.Op]:
    """Return the MPI datatype (``dtype_table``'s MPI column) and the "sum" operation for
    ``dtype`` (bool: logical or). Reductions are defined on the predefined datatypes only,
    not on derived or duplicated ones, which is why the table names those."""
    row = dtype_table.row_of(dtype)
    if row is None or row.mpi is None:
        raise errors.InvalidArgumentError(
            f"MPI has no datatype mpiflow reduces {np.dtype(dtype).name} as")
    return getattr(MPI, row.mpi), (MPI.LOR if row.numpy.kind == "b" else MPI.SUM)


@functools.lru_cache(maxsize=8)
def _half_sum(dtype) -> MPI.Op:
    """A sum MPI can apply to float16 or bfloat16 elements (it has no type for either):
    each pair of 2-byte elements added in numpy, rounded to the format."""
    dtype = np.dtype(dtype)

    def add(incoming, inout, datatype):
        half_floats.add_into(np.frombuffer(inout, dtype), np.frombuffer(incoming, dtype))
    return MPI.Op.Create(add, commute=True)


def _reduction_for(dtype) -> tuple[MPI.Datatype, MPI.Op]:
    if dtype in HALF_FLOATS:            # half floats kept on the wire (compression)
        return MPI.UINT16_T, _half_sum(dtype)
    return mpi_reduction(dtype)


class MpiCollective(Collective):
    """Collectives by the MPI library (buffer-based, non-blocking), on host arrays."""

    name = "mpi"
    carries_small_sums = True

    @classmethod
    def enabled(cls, comm, array) -> tuple[bool, str]:
        if backend.is_device_array(array):
            return False, ("array is a cupy array: MPI collectives take host arrays here "
                           "(staging through host memory is not implemented); use 'nccl'")
        return True, ""

    def _allreduce_request(self, dtype, op: str, half_on_wire: bool) -> tuple | None:
        if op != "sum":
            return None     # an average divides after the sum
        datatype, reduction = _reduction_for(dtype)
        state = self.state

        def post(send, recv):
            return state.data_comm.Iallreduce(
                MPI.IN_PLACE if send is recv else [send, datatype], [recv, datatype],
                reduction)
        return post, "MPI_Iallreduce"

    def _allreduce_stages(self, send, recv, op: str, seq: int, wire=None) -> list[Stage]:
        datatype, reduction = _reduction_for(send.dtype)
        if op == "average" and send.dtype in HALF_FLOATS:
            # Divided before the sum of the format, not after: the sum overflows (float16
            # past 65504) where the average does not.
            def prescale():
                half_floats.copyto(recv, half_floats.astype(send, np.float32) / self.size)
            return [CallStage(prescale, "the division by the number of ranks"),
                    RequestStage(lambda: self.state.data_comm.Iallreduce(
                        MPI.IN_PLACE, [recv, datatype], reduction), "MPI_Iallreduce")]
        source = MPI.IN_PLACE if send is recv else [send, datatype]
        stages: list[Stage] = [RequestStage(
            lambda: self.state.data_comm.Iallreduce(source, [recv, datatype], reduction),
            "MPI_Iallreduce")]
        if op == "average":
            stages.append(CallStage(lambda: np.divide(recv, self.size, out=recv),
                                    "the division by the number of ranks"))
        return stages
