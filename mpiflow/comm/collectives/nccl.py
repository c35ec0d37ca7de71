"""Collectives on GPU arrays by NCCL, through ``cupy.cuda.nccl`` (reached via backend.py).

The NCCL communicator is created lazily by the first operation: rank 0 makes the unique
id, an MPI Ibcast of its bytes hands it to every rank (non-blocking, so the deadline
applies), then every rank creates its communicator. The operations are enqueued on the
current cupy stream in issue order; an event recorded after them tells ``test()`` when
they are done. float16 and bfloat16 are reduced natively by NCCL (bfloat16 needs NCCL
>= 2.10 and a cupy with ``nccl.NCCL_BFLOAT16``; without it NCCL is not enabled for it).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from mpiflow import backend, dtype_table, errors
from mpiflow.comm.collectives.base import Collective, RequestStage, Stage

_UNIQUE_ID_BYTES = 128   # NCCL_UNIQUE_ID_BYTES


def _cupy():
    return backend.array_module("/device:GPU:0")


def _nccl_type(nccl, dtype):
    """cupy's NCCL type for ``dtype`` (``dtype_table``'s NCCL column), or None where this
    NCCL has none (bfloat16 before NCCL 2.10)."""
    row = dtype_table.row_of(dtype)
    if row is None or row.nccl is None:
        return None
    return getattr(nccl, f"NCCL_{row.nccl.upper()}", None)


class _NcclInit(Stage):
    """Make sure this communicator's NCCL communicator exists (first operation only)."""

    what = "the NCCL unique id from rank 0 (MPI_Ibcast)"
    collective = True

    def __init__(self, state, nccl):
        self.state, self.nccl = state, nccl

    def start(self) -> None:
        extras = self.state.extras
        if "nccl" in extras or "nccl_init" in extras:
            return   # made, or being made by an operation issued before this one
        uid = np.zeros(_UNIQUE_ID_BYTES, dtype=np.int8)
        if self.state.rank == 0:
            raw = self.nccl.get_unique_id()     # bytes (cupy 14) or a tuple of ints
            uid[:] = np.frombuffer(raw, np.int8) if isinstance(raw, (bytes, bytearray)) \
                else raw
        extras["nccl_init"] = (uid, self.state.data_comm.Ibcast([uid, MPI.INT8_T], 0))

    def test(self) -> bool:
        extras = self.state.extras
        if "nccl" in extras:
            return True
        uid, request = extras["nccl_init"]
        if not request.Test():
            return False
        # NCCL binds the communicator to the device that is current now, at creation
        # (ChainerMN creates it lazily for the same reason): bind the rank's GPU
        # (backend) before the first collective, and keep it current afterwards.
        try:
            extras["nccl"] = self.nccl.NcclCommunicator(
                self.state.size, tuple(int(v) for v in uid), self.state.rank)
        except TypeError:       # cupy 14 takes the id as bytes
            extras["nccl"] = self.nccl.NcclCommunicator(
                self.state.size, uid.tobytes(), self.state.rank)
        extras["nccl_device"] = _cupy().cuda.Device().id
        del extras["nccl_init"]
        return True

    def pending_ranks(self):
        return [0]


class _NcclCall(Stage):
    """Enqueue NCCL work (``launch(comm, stream_ptr)``) and wait for its event."""

    collective = True

    def __init__(self, state, launch, what: str):
        self.state, self.launch, self.what = state, launch, what
        self.event = None

    def start(self) -> None:
        cupy = _cupy()
        device = cupy.cuda.Device().id
        if device != self.state.extras["nccl_device"]:
            raise errors.FailedPreconditionError(
                f"{self.what}: the NCCL communicator was created on GPU "
                f"{self.state.extras['nccl_device']}, but GPU {device} is current now")
        stream = cupy.cuda.get_current_stream()
        self.launch(self.state.extras["nccl"], stream.ptr)
        self.event = cupy.cuda.Event(disable_timing=True)
        self.event.record(stream)

    def test(self) -> bool:
        return self.event.done


class NcclCollective(Collective):
    """Allreduce, broadcast and allgather of cupy arrays by NCCL."""

    name = "nccl"
    native_half = True

    @classmethod
    def enabled(cls, comm, array) -> tuple[bool, str]:
        if backend.nccl_module()[0] is not None and not backend.is_device_array(array):
            return False, "array is not a cupy array"
        return cls.reduces_on_gpu(array.dtype)

    @classmethod
    def reduces_on_gpu(cls, dtype) -> tuple[bool, str]:
        """Whether NCCL can reduce GPU arrays of ``dtype`` in this process, and why not:
        cupy's NCCL binding imports, a GPU is visible, no two ranks of this node share a
        GPU (NCCL refuses that), and NCCL has a type for ``dtype``."""
        nccl, why = backend.nccl_module()
        if nccl is None:
            return False, why
        if backend.ranks_share_gpus():
            return False, ("ranks of this node share a GPU (more local ranks than GPUs), "
                           "and NCCL refuses two ranks on one GPU")
        if _nccl_type(nccl, dtype) is None:
            return False, f"NCCL has no type for {np.dtype(dtype).name}"
        return True, ""

    def _stages(self, launch, what) -> list[Stage]:
        nccl, _ = backend.nccl_module()
        return [_NcclInit(self.state, nccl), _NcclCall(self.state, launch, what)]

    def _allreduce_stages(self, send, recv, op: str, seq: int, wire=None) -> list[Stage]:
        nccl, _ = backend.nccl_module()
        dtype = _nccl_type(nccl, send.dtype)
        reduction = nccl.NCCL_MAX if send.dtype.kind == "b" else nccl.NCCL_SUM

        def launch(comm, stream):
            comm.allReduce(send.data.ptr, recv.data.ptr, send.size, dtype, reduction, stream)
            if op == "average":
                _cupy().divide(recv, self.size, out=recv)
        return self._stages(launch, "ncclAllReduce")

    def _broadcast_stages(self, buf, root: int, seq: int) -> list[Stage]:
        nccl, _ = backend.nccl_module()
        return self._stages(
            lambda comm, stream: comm.bcast(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, root,
                                            stream), f"ncclBcast from rank {root}")

    def _allgather_stages(self, send, box: dict, seq: int) -> list[Stage]:
        nccl, _ = backend.nccl_module()
        mine = np.array([send.shape[0]], dtype=np.int64)
        counts = np.empty(self.size, dtype=np.int64)
        row_bytes = send.dtype.itemsize * math.prod(send.shape[1:])

        def launch(comm, stream):
            # NCCL gathers equal sizes: pad every rank's rows to the longest, then compact.
            cupy = _cupy()
            rows = int(counts.max())
            padded = cupy.zeros((rows,) + send.shape[1:], dtype=send.dtype)
            padded[:send.shape[0]] = send
            gathered = cupy.empty((self.size * rows,) + send.shape[1:], dtype=send.dtype)
            comm.allGather(padded.data.ptr, gathered.data.ptr, rows * row_bytes,
                           nccl.NCCL_UINT8, stream)
            box["out"] = cupy.concatenate(
                [gathered[i * rows:i * rows + int(counts[i])] for i in range(self.size)])
        sizes = RequestStage(
            lambda: self.state.data_comm.Iallgather([mine, MPI.INT64_T], [counts, MPI.INT64_T]),
            "MPI_Iallgather of the first dimensions")
        return [sizes] + self._stages(launch, "ncclAllGather")
