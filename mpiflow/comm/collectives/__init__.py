"""Collectives over a communicator: one strategy per file, chosen from an ordered list.

``ALLREDUCE`` lists the strategies in order of preference. ``get_collective(name, comm,
array)`` returns the named one (an error says why when it cannot run here), or for
``"auto"`` the first whose ``preferred()`` holds:

- NCCL for cupy arrays (where ``cupy.cuda.nccl`` imports, a GPU is visible, no two ranks
  of the node share one, and NCCL has a type for the dtype: ``runs_on_gpu``);
- mpiflow's ring for host arrays of at least MPIFLOW_RING_MIN_BYTES (unset: 512 KiB
  between 2 ranks, 4 MiB among more, ``ring.ring_min_bytes``; 0 = never);
- MPI's Iallreduce otherwise.

Why 4 MiB, and 512 KiB for a pair: ``benchmarks/allreduce_bw.py`` on a 2-core VM, MPICH
5.0.2, float32, with the cross-rank check, bus bandwidth in MB/s (ring vs the mpi
strategy; MPI = the library's blocking Allreduce for reference)::

    ranks  size     MPI    mpi   ring
    2       4 KiB  1126    252    143
    2      64 KiB  3477   1938   1316
    2     256 KiB  5366   3872   4126
    2       1 MiB  4598   3675   4644
    2       4 MiB  4409   4336   5725
    2      64 MiB  1711   1683   3700
    4       4 KiB   234     41     23     (4 ranks on 2 cores)
    4      64 KiB  1260    387    309
    4     256 KiB  2223   1020    885
    4       1 MiB  2138   1511   1578
    4       4 MiB  2276   1617   2223
    4      64 MiB  1106    995   1869

Below 1 MiB the ring's Python per message and its 2 (n-1) dependent steps lose to MPI's
Iallreduce on 4 ranks; from 4 MiB it is as fast or faster on both, and far ahead at tens
of MiB, where MPICH's own allreduce slows down. Between 1 and 4 MiB on 4 ranks the two
traded places in the runs of the table; once the check became one exchange (it now
costs the mpi strategy less), three launches of ring against mpi, medians of 9 batches
each, gave the ring 0.73-0.95 of mpi's speed at 1 MiB, 0.75-1.04 at 2 MiB and 0.98-1.06
at 4 MiB: the threshold among more than two ranks went from 1 to 4 MiB. Between 2 ranks the ring is two steps and
wins from about 384 KiB: auto's bus bandwidth at 1 MiB against the better of ring and mpi
went from 0.89-0.92 (1 MiB threshold, auto took mpi) to 1.03-1.04 (256 KiB), at 64 KiB mpi
still ahead (0.76-0.79 of MPI against the ring's 0.60-0.62), two runs each. At 256 KiB
the two runs then gave the ring the lead, but seven later ones did not: the ring at
256 KiB ran 0.77-0.93 of the mpi strategy's speed (five runs of this table), 0.86 (two
launches, medians of 7 batches); at 384 KiB 0.96 and 1.15, at 512 KiB 1.05 and 1.08, at
768 KiB 1.13 and 1.23: the pair's threshold went to 512 KiB. Small
messages are best left to MPI, or to the check itself: a checked allreduce of at most
MPIFLOW_CHECK_CARRY_BYTES (32 KiB) moves in the cross-rank check's own recursive-doubling
messages (``exchange.py``), so check and data cost one exchange; a blocking call with
nothing queued before it runs that exchange at once (``handle.run_carried_now``), without
a stage, closure or handle. 2 ranks, 4 KiB, medians of 9 batches of 2000-3000 calls per
launch: 8.9-9.1 us against MPI's blocking Allreduce at 5.4 (0.60), where the check
followed by the data's Iallreduce took 11.6-14.6 us against 5.4-7.4 (0.47-0.52); the
exchange alone, without the call's Python around it, 5.1 us. On a faster machine, where
MPI's call took 3.5 us, mpiflow's took 7.5 (0.46) until a reused exchange kept its
messages as persistent requests and its last sum went straight into the output: 6.1 us
(0.56-0.60; 4 ranks on the 2 cores: 0.51-0.52). Larger sums below the
ring's threshold (and unchecked ones) go to MPI's Iallreduce (``handle.run_request_now``),
a checked one after the check's exchange.
"""

from __future__ import annotations

from mpi4py import MPI

from mpiflow import backend, errors
from mpiflow import config as config_lib
from mpiflow.comm.collectives.base import Collective, Handle, Stage
from mpiflow.comm.collectives.mpi import MpiCollective
from mpiflow.comm.collectives.nccl import NcclCollective
from mpiflow.comm.collectives.ring import RingCollective

ALLREDUCE: list[type[Collective]] = [NcclCollective, RingCollective, MpiCollective]
BY_NAME: dict[str, type[Collective]] = {cls.name: cls for cls in ALLREDUCE}

__all__ = ["ALLREDUCE", "BY_NAME", "Collective", "Handle", "MpiCollective", "NcclCollective",
           "RingCollective", "Stage", "Strategies", "copy_algorithm", "explain_auto",
           "get_collective", "runs_on_gpu", "select"]


def select(name: str, comm: MPI.Intracomm, array,
           config: config_lib.Config | None = None) -> type[Collective]:
    """Return the strategy class ``get_collective`` would use (see the module docstring).

    Raises:
        InvalidArgumentError: ``name`` is unknown (the message lists the known names), or
            names a strategy that is not enabled here (the message says why).
    """
    config = config or config_lib.default()
    if not hasattr(array, "dtype") or not hasattr(array, "shape"):
        raise errors.InvalidArgumentError(
            f"A collective algorithm is chosen for an array like the ones it will reduce: "
            f"expected a numpy or cupy array, got {type(array).__name__}")
    if name == "auto":
        for cls in ALLREDUCE:
            if cls.preferred(comm, array, config)[0]:
                return cls
        raise errors.InvalidArgumentError(
            "No collective algorithm can run on this array: " + explain_auto(comm, array, config))
    cls = BY_NAME.get(name)
    if cls is None:
        raise errors.op_error(errors.InvalidArgumentError,
                              f"Unknown collective algorithm {name!r}",
                              expected="one of " + ", ".join(repr(n) for n in [*BY_NAME, "auto"]),
                              got=repr(name))
    ok, why = cls.enabled(comm, array)
    if not ok:
        raise errors.InvalidArgumentError(f"Collective algorithm {name!r} is not enabled: "
                                          f"{name}: {why}")
    return cls


def runs_on_gpu(name: str, dtypes) -> bool:
    """Whether collective ``name`` reduces GPU tensors of ``dtypes`` where they are (NCCL).

    The one answer to where a collective runs: a plan places the kernel of a collective op
    by it (on its GPU, or on the host with copies around it), and the strategy chosen for
    the arrays it then gets (``select`` for an allreduce, ``copy_algorithm`` for a
    broadcast or allgather, which have no algorithm of their own: "auto") is NCCL
    exactly for the GPU ones. "auto" takes NCCL only where
    ``NcclCollective.reduces_on_gpu`` holds for every dtype; a named "nccl" always runs
    on the GPU, where ``select`` says why NCCL cannot run, if it cannot.
    """
    if name == "auto":
        return all(NcclCollective.reduces_on_gpu(d)[0] for d in dtypes)
    return name == NcclCollective.name


def copy_algorithm(array) -> str:
    """The strategy broadcast and allgather take for ``array``: NCCL for a GPU array (a
    plan puts such a kernel on the GPU only where ``runs_on_gpu`` says NCCL runs; a host
    kernel broadcasting into a GPU variable stages it through host memory first), MPI's
    own for a host array. They reduce nothing, so the ring would add nothing (it copies
    with MPI's calls too), and a size rule could choose differently on ranks whose parts
    of an allgather differ in size."""
    return NcclCollective.name if backend.is_device_array(array) else MpiCollective.name


def get_collective(name: str, comm: MPI.Intracomm, array,
                   config: config_lib.Config | None = None) -> Collective:
    """Return the strategy ``name`` ("nccl", "ring", "mpi" or "auto") over ``comm``.

    Args:
        name: a strategy name, or "auto" for the first preferred one in ``ALLREDUCE``.
        comm: the communicator of the ranks taking part (any mpi4py Intracomm).
        array: an array like the ones it will reduce (decides host or GPU, and size).
        config: where the knobs are read (default: the process environment).

    Raises:
        InvalidArgumentError: as ``select``.
    """
    return select(name, comm, array, config)(comm, config)


_MAX_CHOSEN = 4096


class Strategies:
    """The strategies of one communicator, each made once and kept, and which one each
    kind of array (strategy name, array type, dtype, bytes) gets, found once.

    Training makes the same calls every step, and a strategy keeps what it found out
    about each call's signature (its checks, its cross-rank record): choosing and making
    one afresh for every call (``get_collective``) took a graph's checked 4 KiB allreduce
    op on 2 ranks from 27 us a call to 50-60. Settings (MPIFLOW_TIMEOUT,
    MPIFLOW_RING_MIN_BYTES, the check's carry) are read when a strategy or a kind of
    array is first met.
    """

    def __init__(self, comm: MPI.Intracomm, config: config_lib.Config | None = None):
        self.comm = comm
        self.config = config
        self._made: dict = {}        # strategy class -> its instance
        self._chosen: dict = {}      # kind of array -> the strategy it gets

    def get(self, name: str, array) -> Collective:
        """The strategy ``get_collective(name, comm, array)`` would return, kept.

        Raises:
            InvalidArgumentError: as ``select``.
        """
        key = (name, type(array), array.dtype, array.nbytes)
        strategy = self._chosen.get(key)
        if strategy is None:
            cls = select(name, self.comm, array, self.config)
            strategy = self._made.get(cls)
            if strategy is None:
                strategy = self._made[cls] = cls(self.comm, self.config)
            if len(self._chosen) >= _MAX_CHOSEN:       # shapes that never repeat
                self._chosen.clear()
            self._chosen[key] = strategy
        return strategy


def explain_auto(comm: MPI.Intracomm, array, config: config_lib.Config | None = None) -> str:
    """Return one clause per strategy saying whether "auto" would take it, and why not."""
    config = config or config_lib.default()
    parts = []
    for cls in ALLREDUCE:
        ok, why = cls.preferred(comm, array, config)
        parts.append(f"{cls.name}: {'yes' if ok else why}")
    return "; ".join(parts)
