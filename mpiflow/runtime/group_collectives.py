"""The collectives of one process group on this rank, as collective kernels use them.

Kernels of ``mpiflow.ops.collective_ops`` reach MPI only through this adapter, which they
get from ``ctx.env.collectives(group)`` (ops know no communicators); a kernel that must
wait ``watch``es its handles and the rank service wakes it when they are done.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
from mpiflow.comm.collectives import Strategies, copy_algorithm
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
