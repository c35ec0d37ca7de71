"""The collectives of one process group on this rank, as collective kernels use them.

Kernels of ``mpiflow.ops.collective_ops`` reach MPI only through this adapter, which they
get from ``ctx.env.collectives(group)`` (ops know no communicators); a kernel that must
wait ``watch``es its handles and the rank service wakes it when they are done.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
from mpiflow.comm.collectives import copy_algorithm, select

_MAX_CHOSEN = 4096


class GroupCollectives:
    """The collectives of one process group (e.g. every worker) on this rank.

    Training makes the same calls every step, so each strategy is made once per group
    and kept (it keeps what it found out about each call's signature: its checks, its
    cross-rank record), and which strategy an array of a kind and size gets is found
    once. Choosing and making them afresh for every call took a graph's checked 4 KiB
    allreduce op on 2 ranks from 27 us a call to 50-60. Settings (MPIFLOW_TIMEOUT,
    MPIFLOW_RING_MIN_BYTES, the check's carry) are read when the group first meets a
    strategy or a size.
    """

    def __init__(self, env, service, group: str):
        if group not in service.groups:
            raise errors.FailedPreconditionError(
                f"Rank {service.rank} is not in process group '{group}' (its groups: "
                f"{sorted(service.groups)}): collectives run among the ranks of one job")
        self._env = env
        self.comm = service.groups[group]
        self.group = group
        self._strategies = {}       # strategy class -> its instance on this group
        self._chosen = {}           # (name, array kind and size) -> the strategy it gets

    def _strategy(self, name: str, array):
        key = (name, type(array), array.dtype, array.nbytes)
        strategy = self._chosen.get(key)
        if strategy is None:
            cls = select(name, self.comm, array)
            strategy = self._strategies.get(cls)
            if strategy is None:
                strategy = self._strategies[cls] = cls(self.comm)
            if len(self._chosen) >= _MAX_CHOSEN:       # shapes that never repeat
                self._chosen.clear()
            self._chosen[key] = strategy
        return strategy

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    def allreduce_async(self, array, op, algorithm, name, half_on_wire=False):
        return self._strategy(algorithm, array).allreduce_async(
            array, op=op, name=name, half_on_wire=half_on_wire)

    def broadcast_async(self, array, root, name):
        return self._strategy(copy_algorithm(array), array).broadcast_async(
            array, root=root, name=name)

    def allgather_async(self, array, name):
        return self._strategy(copy_algorithm(array), array).allgather_async(
            array, name=name)

    def fused_allreduce(self, specs, algorithm, op, threshold_bytes, name,
                        half_on_wire=False):
        """Return a FusedAllreduce over ``specs`` ((name, dtype, nbytes, device) tuples)."""
        return FusedAllreduce(self.comm, [TensorSpec(*s) for s in specs], algorithm=algorithm,
                              op=op, threshold_bytes=threshold_bytes, name=name,
                              half_on_wire=half_on_wire)

    def watch(self, handle, key) -> None:
        self._env.watch(handle, key)
