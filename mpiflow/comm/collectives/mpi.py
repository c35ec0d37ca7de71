"""The MPI library's own collectives (Iallreduce, Ibcast, Iallgatherv): the reference the
other strategies are tested against, and the fastest choice for small CPU arrays."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from mpiflow import backend
from mpiflow.comm.collectives.base import CallStage, Collective, RequestStage, Stage


def mpi_reduction(dtype) -> tuple[MPI.Datatype, MPI.Op]:
    """Return the MPI datatype and the "sum" operation for ``dtype`` (bool: logical or)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return MPI.C_BOOL, MPI.LOR
    # The predefined types (the names in framework/dtypes.py's MPI column): reductions
    # are defined on those only, not on derived or duplicated ones.
    bits = 8 * dtype.itemsize
    name = {"i": f"INT{bits}_T", "u": f"UINT{bits}_T",
            "f": {4: "FLOAT", 8: "DOUBLE"}.get(dtype.itemsize, "")}[dtype.kind]
    return getattr(MPI, name), MPI.SUM


class MpiCollective(Collective):
    """Collectives by the MPI library (buffer-based, non-blocking), on host arrays."""

    name = "mpi"

    @classmethod
    def enabled(cls, comm, array) -> tuple[bool, str]:
        if backend.is_device_array(array):
            return False, ("array is a cupy array: MPI collectives take host arrays here "
                           "(staging through host memory is not implemented); use 'nccl'")
        return True, ""

    def _allreduce_stages(self, send, recv, op: str, seq: int) -> list[Stage]:
        datatype, reduction = mpi_reduction(send.dtype)
        source = MPI.IN_PLACE if send is recv else [send, datatype]
        stages: list[Stage] = [RequestStage(
            lambda: self.state.data_comm.Iallreduce(source, [recv, datatype], reduction),
            "MPI_Iallreduce")]
        if op == "average":
            stages.append(CallStage(lambda: np.divide(recv, self.size, out=recv),
                                    "the division by the number of ranks"))
        return stages
