"""The collectives of one process group on this rank, as collective kernels use them.

Kernels of ``mpiflow.ops.collective_ops`` reach MPI only through this adapter, which they
get from ``ctx.env.collectives(group)`` (ops know no communicators); a kernel that must
wait ``watch``es its handles and the rank service wakes it when they are done.
"""

from __future__ import annotations

import numpy as np

from mpiflow import backend, errors
from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
from mpiflow.comm.collectives import Strategies, copy_algorithm, runs_on_gpu
from mpiflow.comm.collectives.state import job_ranks_of


class GroupCollectives:
    """The collectives of one process group (e.g. every worker) on this rank; its
    strategies are kept from call to call (``Strategies``)."""

    def __init__(self, env, service, group: str):
        if group not in service.groups:
            raise errors.FailedPreconditionError(
                f"Rank {service.rank} is not in process group '{group}' (its groups: "
                f"{sorted(service.groups)}): collectives run among the ranks of one job")
        self._env = env
        self.comm = service.groups[group]
        self.group = group
        self._strategies = Strategies(self.comm)
        # Named in a wait's description, which another thread may ask for (a report of
        # where this rank is): found once, without MPI then.
        self._job_ranks = job_ranks_of(self.comm)
        self._own = self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def other_ranks(self) -> list[int]:
        """The other ranks of the group, numbered as in the job (MPI_COMM_WORLD)."""
        return self._job_ranks[:self._own] + self._job_ranks[self._own + 1:]

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    def allreduce_async(self, array, op, algorithm, name, half_on_wire=False):
        return self._strategies.get(algorithm, array).allreduce_async(
            array, op=op, name=name, half_on_wire=half_on_wire)

    def broadcast_async(self, array, root, name):
        return self._strategies.get(copy_algorithm(array), array).broadcast_async(
            array, root=root, name=name)

    def broadcast_variable_async(self, buffer, root, name):
        """Broadcast into ``buffer`` in place: a variable's own buffer, which a writer's
        kernel gets wherever the kernel runs. Where NCCL cannot serve a GPU variable (ranks
        share the GPU) the plan runs the kernel on the host, and the plan's copies, which
        bring other collectives' inputs there, do not apply to a buffer written in place:
        it crosses through host memory here, and what arrives is written back into it."""
        if not backend.is_device_array(buffer) or runs_on_gpu("auto", [buffer.dtype]):
            return self.broadcast_async(buffer, root, name)
        if self.rank == root:
            return self.broadcast_async(backend.to_host(buffer), root, name)
        landing = np.empty(buffer.shape, buffer.dtype)
        return _WrittenBack(self.broadcast_async(landing, root, name), buffer)

    def allgather_async(self, array, name):
        return self._strategies.get(copy_algorithm(array), array).allgather_async(
            array, name=name)

    def fused_allreduce(self, specs, algorithm, op, threshold_bytes, name,
                        half_on_wire=False):
        """Return a FusedAllreduce over ``specs`` ((name, dtype, nbytes, device) tuples)."""
        return FusedAllreduce(self.comm, [TensorSpec(*s) for s in specs], algorithm=algorithm,
                              op=op, threshold_bytes=threshold_bytes, name=name,
                              half_on_wire=half_on_wire)

    def watch(self, handle, key) -> None:
        self._env.watch(handle, key)


class _WrittenBack:
    """A staged broadcast's handle: once its host buffer holds the root's values, its
    ``result`` writes them into the GPU buffer they were received for."""

    def __init__(self, handle, device_buffer):
        self._handle = handle
        self._device_buffer = device_buffer

    def test(self) -> bool:
        return self._handle.test()

    @property
    def result(self):
        received = self._handle.result
        if self._device_buffer is not None:
            backend.upload_into(self._device_buffer, received)
            self._device_buffer = None
        return received
