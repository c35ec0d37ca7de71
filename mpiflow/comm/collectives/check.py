"""The cross-rank check run before a collective moves any data.

Every rank describes its call in a small int64 record (collective, tensor name, algorithm,
reduction, root, dtype, shape); rank 0 gathers the records point-to-point, compares them
and answers every rank with a verdict. A mismatch then raises ``InvalidArgumentError`` on
every rank, naming the field and which ranks hold which value, instead of hanging in MPI or
writing past a buffer. Because rank 0 hears from each rank separately it also knows who
never called: at its deadline it tells the ranks that did that those ranks are missing, so
every rank's ``DeadlineExceededError`` names them (Horovod's coordinator does the same).
Cost: one record to rank 0 and one 16-byte verdict back per operation (two latencies).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from mpiflow import errors
from mpiflow.comm.backoff import Backoff, poll_until
from mpiflow.comm.cluster import rank_ranges
from mpiflow.comm.collectives.state import CHECK_TAG, DETAIL_TAG, VERDICT_TAG, CommState
from mpiflow.comm.wire_dtypes import from_wire, wire_name

KINDS = ("allreduce", "broadcast", "allgather")
OPS = ("sum", "average")

# Record columns; each field is compared (and reported) as a whole.
_FIELDS = (("collective", (0,)), ("tensor name", (1,)), ("algorithm", (2,)),
           ("reduction", (3,)), ("root", (4,)), ("dtype", (5,)),
           ("shape", (6, 7, 8, 9, 10, 11)))
RECORD_LEN = 12
_SHOWN_DIMS = 4
_OK, _MISMATCH, _MISSING = 0, 1, 2


def _encode(text: str) -> int:
    return int.from_bytes(text.encode()[:8].ljust(8, b"\0"), "little", signed=True)


def _decode(code: int) -> str:
    return int(code).to_bytes(8, "little", signed=True).rstrip(b"\0").decode(errors="replace")


def make_record(kind: str, name: str | None, algorithm: str, op: str | None, root: int,
                dtype, shape) -> np.ndarray:
    """Return the int64 record that describes one rank's call (shared: do not modify)."""
    return _record(kind, name, algorithm, op, root, wire_name(dtype), tuple(shape))


@functools.lru_cache(maxsize=4096)
def _record(kind, name, algorithm, op, root, dtype, shape) -> np.ndarray:
    # Training issues the same calls every step: build each record once.
    dims = (list(shape) + [-1] * _SHOWN_DIMS)[:_SHOWN_DIMS]
    shape_hash = zlib.crc32(np.asarray(shape, dtype=np.int64).tobytes())
    name_hash = 0 if name is None else zlib.crc32(name.encode()) + 1
    record = np.array([KINDS.index(kind), name_hash, _encode(algorithm),
                       -1 if op is None else OPS.index(op), root, _encode(dtype),
                       len(shape), shape_hash, *dims], dtype=np.int64)
    record.flags.writeable = False
    return record


def format_ranks(ranks) -> str:
    """Return ``"rank 3"`` or ``"ranks 0-2,5"``."""
    ranks = sorted(int(r) for r in ranks)
    text = rank_ranges(ranks)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def _show(field: str, value: tuple) -> str:
    if field == "collective":
        return KINDS[value[0]]
    if field == "tensor name":
        return "no name" if value[0] == 0 else f"name #{value[0] - 1:08x}"
    if field == "algorithm":
        return repr(_decode(value[0]))
    if field == "reduction":
        return "-" if value[0] < 0 else repr(OPS[value[0]])
    if field == "dtype":
        return from_wire(_decode(value[0])).name
    if field == "shape":
        ndim, dims = value[0], [d for d in value[2:] if d >= 0]
        more = ", ..." if ndim > _SHOWN_DIMS else ("," if ndim == 1 else "")
        return "(" + ", ".join(map(str, dims)) + more + ")"
    return str(value[0])


def describe_mismatch(table: np.ndarray) -> str | None:
    """Return what the ranks' records (rows of ``table``) disagree on, or None."""
    if (table == table[0]).all():
        return None
    for field, cols in _FIELDS:
        groups: dict[tuple, list[int]] = {}
        for rank, row in enumerate(table):
            groups.setdefault(tuple(int(v) for v in row[list(cols)]), []).append(rank)
        if len(groups) > 1:
            label = field
            if field == "shape" and table[0][0] == KINDS.index("allgather"):
                label = "shape after the first dimension"
            parts = [f"{_show(field, v)} on {format_ranks(rs)}" for v, rs in groups.items()]
            return f"ranks disagree on the {label}: " + "; ".join(parts)
    return "ranks disagree on the call"


class CrossRankCheck:
    """The check of one operation, advanced by ``test()`` (never blocks).

    Args:
        state: the communicator's state (the check runs on ``state.comm``).
        record: this rank's ``make_record(...)``.
        label: returns the operation as error messages name it (built only for errors).
    """

    def __init__(self, state: CommState, record: np.ndarray, label: Callable[[], str]):
        self.state = state
        self.label = label
        self.rank, self.size = state.rank, state.size
        self.passed = self.size == 1
        if self.passed:
            return
        comm = state.comm
        if self.rank == 0:
            self.table = np.empty((self.size, RECORD_LEN), dtype=np.int64)
            self.table[0] = record
            self._recvs = {j: comm.Irecv([self.table[j], MPI.INT64_T], j, CHECK_TAG)
                           for j in range(1, self.size)}
        else:
            state.track_send(comm.Isend([record, MPI.INT64_T], 0, CHECK_TAG), record)
            self.verdict = np.zeros(2, dtype=np.int64)
            self._verdict_request = comm.Irecv([self.verdict, MPI.INT64_T], 0, VERDICT_TAG)

    def test(self) -> bool:
        """Return whether the check passed; raise if it failed.

        Raises:
            InvalidArgumentError: the ranks disagree (same message on every rank).
            DeadlineExceededError: rank 0 reported ranks that never joined.
        """
        if self.passed:
            return True
        if self.rank == 0:
            for j in [j for j, r in self._recvs.items() if r.Test()]:
                del self._recvs[j]
            if self._recvs:
                return False
            problem = describe_mismatch(self.table)
            self._answer(range(1, self.size), _MISMATCH if problem else _OK,
                         self.table if problem else None)
            if problem:
                raise self._mismatch_error(problem)
            self.passed = True
            return True
        if not self._verdict_request.Test():
            return False
        status, count = (int(v) for v in self.verdict)
        if status == _OK:
            self.passed = True
            return True
        if status == _MISMATCH:
            table = np.empty((self.size, RECORD_LEN), dtype=np.int64)
            self._receive_detail(table)
            raise self._mismatch_error(describe_mismatch(table))
        missing = np.empty(count, dtype=np.int64)
        self._receive_detail(missing)
        raise errors.DeadlineExceededError(
            f"{self.label()}: rank 0 (which gathers the cross-rank check) reports that "
            f"{format_ranks(missing)} never joined this collective; not heard from "
            f"{format_ranks(missing)}")

    def waiting_on(self) -> tuple[str, list[int]]:
        """Return (what this rank waits for, the ranks it has not heard from)."""
        if self.rank == 0:
            return "the cross-rank check (gathered on rank 0)", sorted(self._recvs)
        return "the verdict of the cross-rank check from rank 0", [0]

    def grace(self, timeout: float) -> float:
        """Extra seconds a waiting rank gives rank 0 to report who is missing."""
        return 0.0 if self.rank == 0 or self.passed else min(10.0, 0.5 * timeout + 0.5)

    def expire(self) -> None:
        """At the deadline on rank 0: tell the ranks that joined which ones did not."""
        if self.passed or self.rank != 0 or not self._recvs:
            return
        missing = np.array(sorted(self._recvs), dtype=np.int64)
        present = [j for j in range(1, self.size) if j not in self._recvs]
        self._answer(present, _MISSING, missing)
        for request in self._recvs.values():
            request.Cancel()
        self._recvs = {}

    def _answer(self, ranks, status: int, detail) -> None:
        comm = self.state.comm
        verdict = np.array([status, 0 if detail is None else len(detail)], dtype=np.int64)
        for j in ranks:
            self.state.track_send(comm.Isend([verdict, MPI.INT64_T], j, VERDICT_TAG), verdict)
            if detail is not None:
                self.state.track_send(comm.Isend([detail, MPI.INT64_T], j, DETAIL_TAG), detail)

    def _receive_detail(self, buf: np.ndarray) -> None:
        # Rank 0 sent it right after the verdict, so this is a short wait.
        request = self.state.comm.Irecv([buf, MPI.INT64_T], 0, DETAIL_TAG)

        def expired(waited):
            return errors.DeadlineExceededError(
                f"{self.label()}: the details of a failed cross-rank check did not arrive "
                f"from rank 0 within {waited:.0f} s")
        poll_until(request.Test, 30.0, expired, Backoff(spin_s=0.0, first_s=1e-5))

    def _mismatch_error(self, problem: str) -> errors.InvalidArgumentError:
        return errors.InvalidArgumentError(
            f"{self.label()}: cross-rank check failed, {problem}. Every rank must issue the "
            f"same collectives in the same order, with the same algorithm, dtype and "
            f"shape (allgather: the same shape after the first dimension)")
