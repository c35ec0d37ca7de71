"""The collective strategy base: operations over a communicator.

A strategy (one per file: ``mpi.py``, ``ring.py``, ``nccl.py``) subclasses ``Collective``
and supplies the stages that move the data; this base owns what every strategy shares:
argument checks, the float16/bfloat16 path, the cross-rank check record and the
``Handle`` (in ``handle.py``) that ``*_async`` returns (Horovod's pattern: ``test()``
advances, ``wait()`` completes, ``result`` holds the output).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np
from mpi4py import MPI

from mpiflow import backend, dtype_table, errors, half_floats
from mpiflow import config as config_lib
from mpiflow.comm.backoff import Backoff
from mpiflow.comm.collectives.check import OPS, make_record
from mpiflow.comm.collectives.handle import (
    CallStage,
    Handle,
    RequestStage,
    Stage,
    carry,
    describe_array,
    describe_call,
    no_stages,
    request_stages,
    run_carried_now,
    run_now,
    run_request_now,
)
from mpiflow.comm.collectives.state import comm_state, make_backoff
from mpiflow.comm.traffic import TRAFFIC, allreduce_bytes
from mpiflow.comm.wire_dtypes import HALF_FLOATS

_MAX_PLANS = 4096

__all__ = ["CallStage", "Collective", "Handle", "RequestStage", "Stage", "describe_array"]


def _array_module(array):
    return backend.array_module("/device:GPU:0") if backend.is_device_array(array) else np


def _copy_into(target, result):
    """Copy ``result`` into ``target`` (an array that is not C-contiguous); return it."""
    target[...] = result
    return target


class _Plan(NamedTuple):
    """What an allreduce signature allows, worked out at its first call."""

    xp: Any                 # numpy or cupy
    widen: bool             # half floats summed in float32
    record: np.ndarray | None   # the cross-rank check's record (None: no check to run)
    carried: bool           # the check's messages carry the data (``exchange.Exchange``)
    wire: Any               # the dtype chunks cross in, where not the working array's
    moved: int              # bytes sent (and received) by a bandwidth-optimal algorithm
    request: Callable | None    # post(send, recv): one request that does it all
    request_what: str | None    # what that request is, for messages


class Collective:
    """A collective strategy over a communicator (the workers' process set).

    Subclasses set ``name``, implement ``enabled()`` and ``_allreduce_stages()``, and may
    override ``_broadcast_stages()``/``_allgather_stages()`` (here: MPI's Ibcast and
    Iallgatherv, the reference). Collectives must be issued in the same order on every
    rank of the communicator; each call is checked across ranks first unless
    ``check=False``.

    Args:
        comm: any mpi4py Intracomm; its data moves on a private duplicate.
        config: where MPIFLOW_TIMEOUT and the polling and strategy knobs are read.
    """

    name: ClassVar[str] = "base"
    # True: a checked allreduce of at most MPIFLOW_CHECK_CARRY_BYTES moves in the check's
    # own messages (one exchange for both), where this strategy would post one request.
    carries_small_sums: ClassVar[bool] = False
    native_half: ClassVar[bool] = False   # False: float16 and bfloat16 are summed in float32
    # True: sums float32 chunks whose crossings go as half floats (half_on_wire)
    accumulates_wire_in_float32: ClassVar[bool] = False

    def __init__(self, comm: MPI.Intracomm, config: config_lib.Config | None = None):
        self.comm = comm
        self.config = config or config_lib.default()
        self.state = comm_state(comm)
        self.rank, self.size = self.state.rank, self.state.size
        self.timeout = self.config.get("MPIFLOW_TIMEOUT")
        self._carry_bytes = self.config.get("MPIFLOW_CHECK_CARRY_BYTES") \
            if self.carries_small_sums and self.size > 1 else -1
        model = make_backoff(self.config)
        self._backoff_args = (model.spin_s, model.first_s, model.max_s)
        self._new_backoff = lambda: Backoff(*self._backoff_args)
        self._plans: dict = {}            # allreduce signature -> what it allows

    @classmethod
    def enabled(cls, comm: MPI.Intracomm, array) -> tuple[bool, str]:
        """Return ``(True, "")`` if this strategy can run on ``array``, else (False, why)."""
        raise NotImplementedError

    @classmethod
    def preferred(cls, comm: MPI.Intracomm, array, config: config_lib.Config) -> tuple[bool, str]:
        """Return whether ``algorithm="auto"`` should take this strategy, and why not."""
        return cls.enabled(comm, array)

    # -- allreduce -------------------------------------------------------------------------
    def allreduce_async(self, array, op: str = "sum", out=None, *, name: str | None = None,
                        check: bool = True, timeout: float | None = None,
                        half_on_wire: bool = False) -> Handle:
        """Start summing (or averaging) ``array`` over every rank; return its handle.

        Args:
            array: this rank's contribution, of a dtype in ``mpiflow.dtype_table``. bool
                "sum" is logical or. float16 and bfloat16
                are summed in float32 (converted, reduced, converted back) except by NCCL.
            op: "sum" or "average" (floating dtypes only).
            out: where the result goes (same shape and dtype, C-contiguous); ``array``
                itself for in place, whatever its layout (a view that is not C-contiguous
                is summed through a contiguous copy, written back into the view only);
                None allocates it.
            name: the tensor's name, for the cross-rank check and error messages.
            check: compare (name, algorithm, op, dtype, shape) across ranks first.
                Without it, ranks that call otherwise get what MPI does with
                mismatched calls: a hang until the deadline, an MPI error, or (Open
                MPI, a longer message than a receive's buffer) memory written past
                that buffer. Leave it off only where the calls cannot differ (fused
                buckets after their first round: the graph fixes their shapes).
            timeout: seconds before DeadlineExceededError (default MPIFLOW_TIMEOUT).
            half_on_wire: a float16 or bfloat16 array moves as it is, half the bytes of
                float32 (compressed gradients). A strategy that can
                (``accumulates_wire_in_float32``: the ring) still adds in float32, each
                partial sum rounded to the format only to cross; MPI's applies a sum of
                the format (each addition rounded to it). An average divides each rank's
                part first, so it stays in the format's range wherever the average does.
                Without it, half floats are summed in float32 and rounded once.

        Raises:
            InvalidArgumentError: bad op, dtype or out, or this strategy cannot run here.
        """
        describe = ("allreduce", name, self.name, array, self.rank, self.size)
        plan = self._plan_of(describe, array, op, name, check, half_on_wire)
        return self._issue(*self._allreduce_call(describe, plan, array, op, out, timeout))

    def _allreduce_buffers(self, describe, plan: _Plan, array, out) -> tuple:
        """An allreduce's ``(send, out, target)``, its bytes counted: ``send`` is
        ``array`` C-contiguous, ``out`` where the sum lands (checked or allocated), and
        ``target`` None, or the array the sum is copied into afterwards: in place on an
        array that is not C-contiguous, the sum is taken in place on a contiguous copy
        (MPI and the ring move contiguous buffers only)."""
        TRAFFIC.add("allreduce", plan.moved, plan.moved)
        if array.flags.c_contiguous:
            return array, self._output(describe, out, plan.xp), None
        send = plan.xp.ascontiguousarray(array)
        if out is array:
            return send, send, self._writable(describe, array, "array (in place)")
        return send, self._output(describe, out, plan.xp), None

    def _allreduce_call(self, describe, plan: _Plan, array, op, out, timeout) -> tuple:
        """An allreduce's closures: ``(describe, build, finish, record, timeout,
        exchange)``, for ``_issue`` or ``_run_now``."""
        send, out, target = self._allreduce_buffers(describe, plan, array, out)
        if plan.carried:    # the check's messages sum it: nothing is left to do after
            with self.state.lock:
                exchange, deliver = carry(self.state, send, out, self._divisor(op))

            def finish_carried():       # under the state's lock (Handle.test)
                result = deliver()
                return result if target is None else _copy_into(target, result)
            return describe, no_stages, finish_carried, plan.record, timeout, exchange
        widen, wire = plan.widen, plan.wire
        work = half_floats.astype(send, np.float32) if widen else None
        if wire is not None and op == "average":
            # Partial sums cross in the half format: divided first, they stay within it
            # wherever the average does (float16 ends at 65504).
            work /= self.size
            op = "sum"
        if plan.request is not None:
            build = request_stages(plan.request, plan.request_what, send, out)
        else:
            def build(seq):
                if widen:
                    return self._allreduce_stages(work, work, op, seq, wire)
                return self._allreduce_stages(send, out, op, seq)

        def finish():
            if widen:
                half_floats.copyto(out, work)
            return out if target is None else _copy_into(target, out)
        return describe, build, finish, plan.record, timeout, None

    def _plan_of(self, describe, array, op, name, check, half_on_wire) -> _Plan:
        """What a call's signature allows, found out once: training makes the same calls
        every step (the checks raise the first time, and never pass a bad call)."""
        try:
            signature = (type(array), array.dtype, array.shape, op, name, check, half_on_wire)
            plan = self._plans.get(signature)
        except AttributeError:          # not an array: say so
            self._accept("allreduce", name, array)
            raise
        except TypeError:               # an unhashable argument: checked, never kept
            signature, plan = None, None
        if plan is None:
            plan = self._allreduce_plan(describe, array, op, name, check, half_on_wire)
            if signature is not None:
                if len(self._plans) >= _MAX_PLANS:
                    self._plans.clear()
                self._plans[signature] = plan
        return plan

    def _allreduce_plan(self, describe, array, op, name, check, half_on_wire=False) -> _Plan:
        """Check an allreduce's signature; return its ``_Plan``."""
        self._accept("allreduce", name, array)
        if op not in OPS:
            raise self._error(describe, f"unknown reduction {op!r}, expected one of "
                                        f"{list(OPS)}")
        if op == "average" and not dtype_table.is_floating(array.dtype):
            raise self._error(describe, f"op='average' needs a floating dtype, got "
                                        f"{array.dtype}; use op='sum' and divide as your "
                                        f"dtype requires")
        # float16, bfloat16: convert, reduce in float32, convert back (MPI has no type for
        # either; summing in float32 also rounds once instead of once per rank).
        half = array.dtype in HALF_FLOATS and not self.native_half
        wire = array.dtype if half and half_on_wire and self.accumulates_wire_in_float32 \
            else None
        widen = half and (not half_on_wire or wire is not None)
        record = make_record("allreduce", name, self.name, op, -1, array.dtype,
                             array.shape, half_on_wire and array.dtype in HALF_FLOATS) \
            if check and self.size > 1 else None
        moved = allreduce_bytes(array.size * (4 if widen and wire is None else
                                              array.dtype.itemsize), self.size)
        request = None if widen else self._allreduce_request(array.dtype, op, half_on_wire)
        # An average of half floats kept on the wire divides before the sum: not carried.
        carried = record is not None and not widen and array.nbytes <= self._carry_bytes \
            and not (op == "average" and array.dtype in HALF_FLOATS)
        return _Plan(_array_module(array), widen, record, carried, wire, moved,
                     *(request or (None, None)))

    def allreduce(self, array, op: str = "sum", out=None, *, name: str | None = None,
                  check: bool = True, timeout: float | None = None,
                  half_on_wire: bool = False) -> Any:
        """Blocking ``allreduce_async(...).wait()``; return the result. With nothing
        issued before it still in line, it runs at once (``handle.run_now``; where one
        MPI request does it all, ``handle.run_request_now``)."""
        describe = ("allreduce", name, self.name, array, self.rank, self.size)
        plan = self._plan_of(describe, array, op, name, check, half_on_wire)
        timeout = self.timeout if timeout is None else timeout
        if plan.carried:
            send, out, target = self._allreduce_buffers(describe, plan, array, out)
            result = run_carried_now(self.state, describe, plan.record, send, out,
                                     self._divisor(op), timeout, self._new_backoff)
            return result if target is None else _copy_into(target, result)
        if plan.request is None:
            return self._run_now(*self._allreduce_call(describe, plan, array, op, out,
                                                       timeout))
        send, out, target = self._allreduce_buffers(describe, plan, array, out)
        result = run_request_now(self.state, describe, plan.record, plan.request,
                                 plan.request_what, send, out, timeout, self._new_backoff)
        return result if target is None else _copy_into(target, result)

    # -- broadcast -------------------------------------------------------------------------
    def broadcast_async(self, array, root: int = 0, *, name: str | None = None,
                        check: bool = True, timeout: float | None = None) -> Handle:
        """Start copying ``array`` of rank ``root`` into ``array`` of every rank.

        Every rank passes an array of the root's shape and dtype; the result is that array,
        overwritten in place on the other ranks.
        """
        return self._issue(*self._broadcast_call(array, root, name, check, timeout))

    def _broadcast_call(self, array, root, name, check, timeout) -> tuple:
        describe = self._accept("broadcast", name, array)
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or \
                not 0 <= root < self.size:
            raise self._error(describe, f"bad root {root!r}, expected a rank in "
                                        f"[0, {self.size})")
        root = int(root)
        if self.rank != root:
            self._writable(describe, array, "array (the broadcast's result)")
        xp = _array_module(array)
        buf = array if array.flags.c_contiguous else xp.ascontiguousarray(array)

        def finish():
            if buf is not array and self.rank != root:     # the root only sent it
                array[...] = buf
            return array
        record = make_record("broadcast", name, self.name, None, root, array.dtype,
                             array.shape) if check else None
        if self.size > 1:
            TRAFFIC.add("broadcast", sent=array.nbytes if self.rank == root else 0,
                        received=0 if self.rank == root else array.nbytes)
        return (describe, lambda seq: self._broadcast_stages(buf, root, seq), finish, record,
                timeout)

    def broadcast(self, array, root: int = 0, *, name: str | None = None,
                  check: bool = True, timeout: float | None = None) -> Any:
        """Blocking ``broadcast_async(...).wait()``; return the array (at once where it
        can, as ``allreduce``)."""
        return self._run_now(*self._broadcast_call(array, root, name, check, timeout))

    # -- allgather -------------------------------------------------------------------------
    def allgather_async(self, array, *, name: str | None = None, check: bool = True,
                        timeout: float | None = None) -> Handle:
        """Start concatenating every rank's ``array`` along the first dimension.

        The first dimension may differ from rank to rank (the sizes are gathered first);
        the rest of the shape and the dtype must agree. The result is a new array with the
        ranks' rows in rank order.
        """
        return self._issue(*self._allgather_call(array, name, check, timeout))

    def _allgather_call(self, array, name, check, timeout) -> tuple:
        describe = self._accept("allgather", name, array)
        if array.ndim == 0:
            raise self._error(describe, "allgather needs an array with a first dimension, "
                                        "got a scalar")
        xp = _array_module(array)
        send = array if array.flags.c_contiguous else xp.ascontiguousarray(array)
        box: dict = {}
        record = make_record("allgather", name, self.name, None, -1, array.dtype,
                             array.shape[1:]) if check else None
        def finish():
            others = box["out"].nbytes - send.nbytes    # what this rank did not have
            TRAFFIC.add("allgather", sent=others, received=others)
            return box["out"]
        return (describe, lambda seq: self._allgather_stages(send, box, seq), finish, record,
                timeout)

    def allgather(self, array, *, name: str | None = None, check: bool = True,
                  timeout: float | None = None) -> Any:
        """Blocking ``allgather_async(...).wait()``; return the gathered array (at once
        where it can, as ``allreduce``)."""
        return self._run_now(*self._allgather_call(array, name, check, timeout))

    # -- strategy hooks --------------------------------------------------------------------
    def _allreduce_request(self, dtype, op: str, half_on_wire: bool) -> tuple | None:
        """Where one MPI request does a whole allreduce of ``dtype`` and ``op``: ``(post,
        what)``, ``post(send, recv)`` posting it (``recv is send``: in place). A blocking
        call with nothing before it then runs without the closures and steps' objects
        (``handle.run_request_now``), the express path's cost per call: None (the
        default) for a strategy of several steps."""
        return None

    def _allreduce_stages(self, send, recv, op: str, seq: int, wire=None) -> list[Stage]:
        """Return the steps that leave the sum (or average) of ``send`` in ``recv``.

        ``recv is send`` means in place; both are C-contiguous and of one dtype. ``wire``
        (strategies with ``accumulates_wire_in_float32`` only): the dtype chunks cross in.
        """
        raise NotImplementedError

    def _broadcast_stages(self, buf, root: int, seq: int) -> list[Stage]:
        return [RequestStage(lambda: self.state.data_comm.Ibcast([buf, MPI.BYTE], root),
                             f"MPI_Ibcast from rank {root}")]

    def _allgather_stages(self, send, box: dict, seq: int) -> list[Stage]:
        mine = np.array([send.shape[0]], dtype=np.int64)
        counts = np.empty(self.size, dtype=np.int64)
        row_bytes = send.dtype.itemsize * math.prod(send.shape[1:])

        def gather_sizes():
            return self.state.data_comm.Iallgather([mine, MPI.INT64_T], [counts, MPI.INT64_T])

        def gather_rows():
            out = np.empty((int(counts.sum()),) + send.shape[1:], dtype=send.dtype)
            box["out"] = out
            nbytes = counts * row_bytes
            displs = np.concatenate(([0], np.cumsum(nbytes)[:-1]))
            return self.state.data_comm.Iallgatherv(
                [send, MPI.BYTE], [out, (nbytes.tolist(), displs.tolist()), MPI.BYTE])
        return [RequestStage(gather_sizes, "MPI_Iallgather of the first dimensions"),
                RequestStage(gather_rows, "MPI_Iallgatherv")]

    # -- helpers ---------------------------------------------------------------------------
    def _accept(self, kind: str, name: str | None, array) -> tuple:
        """Check that this strategy takes ``array``; return the operation's description
        (formatted into a label only when a message needs it)."""
        if not hasattr(array, "dtype") or not hasattr(array, "shape"):
            raise errors.InvalidArgumentError(
                f"{kind}{f' {name!r}' if name else ''} ({self.name}) on rank {self.rank} of "
                f"{self.size}: expected a numpy or cupy array, got {type(array).__name__}")
        describe = (kind, name, self.name, array, self.rank, self.size)
        if name is not None and not isinstance(name, str):
            raise self._error(describe, f"the tensor's name must be a str or None, got "
                                        f"{type(name).__name__} {name!r}")
        if dtype_table.row_of(array.dtype) is None:
            raise self._error(describe, f"unsupported dtype {array.dtype}, expected one of "
                                        f"{', '.join(dtype_table.names())}")
        ok, why = self.enabled(self.comm, array)
        if not ok:
            raise self._error(describe, f"{self.name}: {why}")
        return describe

    @staticmethod
    def _error(describe: tuple, text: str) -> errors.InvalidArgumentError:
        return errors.InvalidArgumentError(f"{describe_call(*describe)}: {text}")

    def _output(self, describe: tuple, out, xp):
        array = describe[3]
        if out is None:
            return xp.empty(array.shape, dtype=array.dtype)
        if out is array:
            return self._writable(describe, out, "array (in place)")
        flags = out.flags if type(out) is type(array) else None
        if flags is None or out.shape != array.shape or out.dtype != array.dtype or \
                not flags.c_contiguous:
            got = describe_array(out) if hasattr(out, "dtype") else ""
            why = ""
            if got and out.shape == array.shape:
                if out.dtype == array.dtype:
                    why = " (not C-contiguous)"
                elif out.dtype.name == array.dtype.name:
                    why = f" (byte order {out.dtype.str}, expected {array.dtype.str})"
            raise self._error(describe, f"bad out, expected a C-contiguous "
                                        f"{type(array).__name__} {describe_array(array)}, "
                                        f"got {type(out).__name__} {got}".rstrip() + why)
        if (out.base is not None or array.base is not None) and \
                xp.may_share_memory(out, array):
            # MPI refuses aliased buffers (or aborts the job), and the ring would read
            # what it already wrote: in place is ``out=array`` itself.
            raise self._error(describe, "out overlaps the input array; pass out=array "
                                        "(the same object) for in place, or a separate out")
        if not getattr(flags, "writeable", True):          # cupy arrays have no flag
            self._writable(describe, out, "out")            # raises
        return out

    def _writable(self, describe: tuple, array, what: str):
        """Return ``array`` where the result may be written into it, else raise: before
        the call's check, so a read-only buffer is named here instead of failing inside
        MPI after the other ranks have started moving data (cupy arrays have no flag)."""
        if getattr(array.flags, "writeable", True):
            return array
        raise self._error(describe, f"the {what} is read-only, and the result is written "
                                    f"into it; pass a writable array (or out=None for a "
                                    f"new one)")

    def _divisor(self, op: str) -> int | None:
        """What a carried sum is divided by: the ranks for an average, nothing for a sum."""
        return self.size if op == "average" else None

    def _issue(self, describe, build, finish, record, timeout, exchange=None) -> Handle:
        return Handle(self.state, describe, build, finish, record,
                      self.timeout if timeout is None else timeout, self._new_backoff(),
                      exchange)

    def _run_now(self, describe, build, finish, record, timeout, exchange=None) -> Any:
        return run_now(self.state, describe, build, finish, record,
                       self.timeout if timeout is None else timeout, self._new_backoff,
                       exchange)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}' on {self.size} ranks>"
