"""The cross-rank check run before a collective moves its data (or as it moves it).

Every rank describes its call in a small int64 record (collective, tensor name, algorithm,
reduction, root, dtype, shape) whose last entry is a fingerprint of the rest. The
ranks swap the fingerprint, with the operation's number, in a recursive-doubling exchange
of point-to-point messages (``exchange.py``): any rank that sees a header unlike its own
raises a flag that the later steps carry to every rank, so after log2(n) steps every rank
knows whether all made the same call. A small allreduce rides in the same messages
(``exchange.Exchange``): its check and its data cost one exchange.

Only when the flag is up (a bug: every rank sees it at once) are the records gathered on
rank 0, compared field by field, and the table sent back, so every rank raises
``InvalidArgumentError`` naming the field and which ranks hold which value, instead of
hanging in MPI or writing past a buffer. A rank that never makes the call is named at the
deadline: the ranks that wait tell rank 0 they are there, and rank 0 tells them who is
missing (Horovod's coordinator knows the same, at a cost on every call).
"""

from __future__ import annotations

import functools
import hashlib
import time
import zlib
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from mpiflow import errors
from mpiflow.comm.backoff import Backoff, poll_until
from mpiflow.comm.cluster import rank_ranges
from mpiflow.comm.collectives.exchange import Exchange
from mpiflow.comm.collectives.state import (
    CHECK_TAG,
    DETAIL_TAG,
    PRESENT_TAG,
    VERDICT_TAG,
    CommState,
    wall_ns_ago,
)
from mpiflow.comm.wire_dtypes import from_wire, wire_name

KINDS = ("allreduce", "broadcast", "allgather")
OPS = ("sum", "average")

# Record columns; each field is compared (and reported) as a whole.
_FIELDS = (("collective", (0,)), ("tensor name", (1,)), ("algorithm", (2,)),
           ("reduction", (3,)), ("root", (4,)), ("dtype", (5,)),
           ("shape", (6, 7, 8, 9, 10, 11)))
FIELDS_LEN = 12       # the described call; then its fingerprint
RECORD_LEN = FIELDS_LEN + 1
# A failed check's gathered row: the record, its number, carried bytes, and the tensor's
# name (UTF-8, cut at NAME_BYTES): the record holds only a hash of it, which no user reads.
NAME_BYTES = 160
TABLE_ROW_LEN = RECORD_LEN + 2 + NAME_BYTES // 8
_SHOWN_DIMS = 4


def _encode(text: str) -> int:
    return int.from_bytes(text.encode()[:8].ljust(8, b"\0"), "little", signed=True)


def _decode(code: int) -> str:
    return int(code).to_bytes(8, "little", signed=True).rstrip(b"\0").decode(errors="replace")


def make_record(kind: str, name: str | None, algorithm: str, op: str | None, root: int,
                dtype, shape, half_on_wire: bool = False) -> np.ndarray:
    """Return the int64 record that describes one rank's call (shared: do not modify).
    ``half_on_wire``: half floats move as they are (the reduction differs)."""
    return _record(kind, name, algorithm, op, root, wire_name(dtype), tuple(shape),
                   half_on_wire)


@functools.lru_cache(maxsize=4096)
def _record(kind, name, algorithm, op, root, dtype, shape, half_on_wire) -> np.ndarray:
    # Training issues the same calls every step: build each record once.
    dims = (list(shape) + [-1] * _SHOWN_DIMS)[:_SHOWN_DIMS]
    shape_hash = zlib.crc32(np.asarray(shape, dtype=np.int64).tobytes())
    name_hash = 0 if name is None else zlib.crc32(name.encode()) + 1
    fields = np.array([KINDS.index(kind), name_hash, _encode(algorithm),
                       -1 if op is None else OPS.index(op) + (len(OPS) if half_on_wire
                                                              else 0),
                       root, _encode(dtype),
                       len(shape), shape_hash, *dims], dtype=np.int64)
    fingerprint = int.from_bytes(hashlib.blake2b(fields.tobytes(), digest_size=7).digest(),
                                 "little")
    record = np.concatenate([fields, np.array([fingerprint], np.int64)])
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
        if value[0] < 0:
            return "-"
        wire = " with half floats on the wire" if value[0] >= len(OPS) else ""
        return repr(OPS[value[0] % len(OPS)]) + wire
    if field == "dtype":
        return from_wire(_decode(value[0])).name
    if field == "shape":
        ndim, dims = value[0], [d for d in value[2:] if d >= 0]
        more = ", ..." if ndim > _SHOWN_DIMS else ("," if ndim == 1 else "")
        return "(" + ", ".join(map(str, dims)) + more + ")"
    return str(value[0])


def describe_mismatch(table: np.ndarray, job_ranks=None, names=None) -> str | None:
    """Return what the ranks' records (rows of ``table``) disagree on, or None; the ranks
    named as ``job_ranks`` numbers them (default: by row). ``names``: each row's tensor
    name (None: unnamed), shown where the names differ instead of their hashes."""
    if (table == table[0]).all():
        return None
    for field, cols in _FIELDS:
        groups: dict[tuple, list[int]] = {}
        first_row: dict[tuple, int] = {}
        for rank, row in enumerate(table):
            value = tuple(int(v) for v in row[list(cols)])
            first_row.setdefault(value, rank)
            groups.setdefault(value, []).append(rank if job_ranks is None else job_ranks[rank])
        if len(groups) > 1:
            label = field
            if field == "shape" and table[0][0] == KINDS.index("allgather"):
                label = "shape after the first dimension"

            def show(value, field=field, first_row=first_row):
                if field == "tensor name" and names is not None and value[0] != 0:
                    return repr(names[first_row[value]])
                return _show(field, value)
            parts = [f"{show(v)} on {format_ranks(rs)}" for v, rs in groups.items()]
            return f"ranks disagree on the {label}: " + "; ".join(parts)
    return "ranks disagree on the call"


class CrossRankCheck:
    """The check of one operation, advanced by ``test()`` (never blocks while the ranks
    agree). Posted by ``post()`` in issue order, once the state's check communicator is
    ready (``CommState`` does both); only the oldest check in flight moves past its
    first step, so every rank sends its messages to a partner in one order.

    Args:
        state: the communicator's state.
        record: this rank's ``make_record(...)``.
        seq: the operation's number in issue order (the same on every rank).
        label: returns the operation as error messages name it (built only for errors).
        timeout: the operation's deadline (s): also bounds the wait for the records of
            a failed check.
        exchange: the ``exchange.Exchange`` it runs on: one carrying a small allreduce's
            tensor, summed when the check passes; None: a new one for the check alone.
        posted: the exchange was begun already (a blocking call's express run hands
            over the one it could not finish).
        name: the tensor's name, which a failed check shows for every rank.
    """

    def __init__(self, state: CommState, record: np.ndarray, seq: int,
                 label: Callable[[], str], timeout: float, exchange: Exchange | None = None,
                 posted: bool = False, name: str | None = None):
        self.state = state
        self.name = name
        self.record = record
        self.seq = seq
        self.label = label
        self.timeout = timeout
        self.exchange = exchange if exchange is not None else Exchange()
        self.rank, self.size = state.rank, state.size
        self.passed = False
        self.posted = posted

    def post(self) -> None:
        self.exchange.begin(self.state.check_comm, self.state.doubling_steps,
                            int(self.record[FIELDS_LEN]), self.seq)
        self.posted = True

    def test(self) -> bool:
        """Return whether the check passed; raise if it failed.

        Raises:
            InvalidArgumentError: the ranks disagree (same message on every rank).
        """
        if self.passed:
            return True
        if not self.posted or not self.exchange.advance():
            return False
        if not self.exchange.mismatch:
            self.passed = True
            return True
        try:
            table = self._gather_records()
        except errors.DeadlineExceededError as exc:   # the ranks are out of step here
            self.state.stop(self.seq, exc, self)
            raise
        raise self._mismatch_error(self._describe_mismatch(table))

    def waiting_on(self) -> tuple[str, list[int] | None]:
        """Return (what this rank waits for, the ranks it has not heard from: unknown)."""
        where = f", {self.exchange.waiting_for()}" if self.posted else ""
        return (f"the cross-rank check (an exchange of each rank's call fingerprint{where})",
                None)

    def expire(self, timeout: float, waited: float) -> errors.DeadlineExceededError:
        """At the deadline (``waited`` s after the issue): find out who never joined, and
        return the error to raise.

        The ranks that wait tell rank 0 so (point to point on the caller's communicator,
        which needs no rank to join anything); rank 0 listens for ``_roll_call_s`` and
        answers each with the ranks it did not hear from.
        """
        self.exchange.cancel()
        self._issued_ns = wall_ns_ago(waited)
        window = _roll_call_s(timeout)
        comm = self.state.comm
        stopped = self.state.stopped_elsewhere()
        if self.rank != 0 and 0 in stopped:
            # Rank 0, which would name the ranks missing, stopped: it will not answer.
            return self._stopped_error(timeout, stopped)
        if self.rank == 0:
            heard = self._roll_call(window)
            # A rank that stopped has given up (its roll-call message, sent before it
            # stopped, says nothing of where it is now) and reads no answer.
            stopped = self.state.stopped_elsewhere()
            heard -= set(stopped)
            missing = sorted(set(range(1, self.size)) - heard - set(stopped))
            self._answer(sorted(heard), np.array(missing, dtype=np.int64))
            if stopped and not missing:
                return self._stopped_error(timeout, stopped)
            return self._missing_error(
                missing, f"(MPIFLOW_TIMEOUT={timeout:g} s)"
                         f"{self._stopped_note(stopped)}")
        here = np.array([self.seq], dtype=np.int64)
        self.state.track_send(comm.Isend([here, MPI.INT64_T], 0, PRESENT_TAG), here)
        count = np.zeros(1, dtype=np.int64)      # rank 0's verdict: how many are missing
        request = comm.Irecv([count, MPI.INT64_T], 0, VERDICT_TAG)
        deadline = time.monotonic() + 2 * window + 1.0
        while not request.Test():
            if time.monotonic() > deadline:
                request.Cancel()
                return errors.DeadlineExceededError(
                    f"{self.label()}: waited for the cross-rank check, and rank 0 (which "
                    f"names the ranks missing) did not answer; not heard from rank "
                    f"{self.state.job_ranks[0]} "
                    f"(MPIFLOW_TIMEOUT={timeout:g} s)")
            time.sleep(0.001)
        missing = np.empty(int(count[0]), dtype=np.int64)
        self._receive_from(comm, missing, DETAIL_TAG)
        return self._missing_error(
            missing.tolist(), f"(rank {self.state.job_ranks[0]} reports that "
                              f"{format_ranks(self.state.in_the_job(missing))} never joined "
                              f"this collective){self._stopped_note(stopped)}")

    def _roll_call(self, window: float) -> set:
        """On rank 0: the ranks that said, within ``window`` s, that they wait at this
        operation (messages of older operations are taken off the wire and dropped)."""
        comm, status = self.state.comm, MPI.Status()
        heard, found = set(), np.empty(1, dtype=np.int64)
        deadline = time.monotonic() + window
        while len(heard) < self.size - 1 and time.monotonic() < deadline:
            if comm.Iprobe(MPI.ANY_SOURCE, PRESENT_TAG, status):
                comm.Recv([found, MPI.INT64_T], status.Get_source(), PRESENT_TAG)
                if int(found[0]) == self.seq:
                    heard.add(status.Get_source())
            else:
                time.sleep(0.001)
        return heard

    def _stopped_note(self, stopped: dict) -> str:
        return stopped_note(stopped, self.state.job_ranks, self.seq, self._issued_ns)

    def _stopped_error(self, timeout: float, stopped: dict) -> errors.DeadlineExceededError:
        """At the deadline, where the ranks not heard from are those that ``stopped``."""
        return errors.DeadlineExceededError(
            f"{self.label()}: waited for the cross-rank check (MPIFLOW_TIMEOUT="
            f"{timeout:g} s){self._stopped_note(stopped)}")

    def _missing_error(self, missing, why: str) -> errors.DeadlineExceededError:
        if not missing:
            return errors.DeadlineExceededError(
                f"{self.label()}: every rank waits at the cross-rank check, which never "
                f"completes: the ranks issued different numbers of collectives on this "
                f"communicator before it (one with check=False?) {why}")
        return errors.DeadlineExceededError(
            f"{self.label()}: waited for the cross-rank check; not heard from "
            f"{format_ranks(self.state.in_the_job(missing))} {why}")

    def _gather_records(self) -> np.ndarray:
        """Every rank's record, with its operation number and carried bytes, in rank
        order, on every rank (the check saw a mismatch)."""
        comm = self.state.check_comm
        name = np.zeros(NAME_BYTES, np.uint8)
        if self.name is not None:
            text = self.name.encode("utf-8")[:NAME_BYTES]
            name[:len(text)] = np.frombuffer(text, np.uint8)
        mine = np.concatenate([self.record, [self.seq, self.exchange.nbytes],
                               name.view(np.int64)]).astype(np.int64)
        table = np.empty((self.size, TABLE_ROW_LEN), dtype=np.int64)
        if self.rank == 0:
            table[0] = mine
            for j in range(1, self.size):
                self._receive_from(comm, table[j], CHECK_TAG, source=j)
            for j in range(1, self.size):
                self.state.track_send(comm.Isend([table, MPI.INT64_T], j, DETAIL_TAG), table)
        else:
            self.state.track_send(comm.Isend([mine, MPI.INT64_T], 0, CHECK_TAG), mine)
            self._receive_from(comm, table, DETAIL_TAG)
        return table

    def _describe_mismatch(self, table: np.ndarray) -> str:
        """What the gathered ``table`` says the ranks disagree on."""
        names = [bytes(row[RECORD_LEN + 2:].view(np.uint8)).rstrip(b"\0").decode(
            "utf-8", errors="replace") for row in table]
        problem = describe_mismatch(table[:, :RECORD_LEN], self.state.job_ranks, names)
        if problem is not None:
            return problem
        for column, what, show in (
                (RECORD_LEN, "the collective's number on this communicator",
                 lambda v: f"#{v}"),
                (RECORD_LEN + 1, "the bytes carried with the check",
                 lambda v: str(v) if v else "none")):
            groups: dict[int, list[int]] = {}
            for rank, row in enumerate(table):
                groups.setdefault(int(row[column]), []).append(self.state.job_ranks[rank])
            if len(groups) > 1:
                parts = "; ".join(f"{show(v)} on {format_ranks(rs)}" for v, rs in
                                  groups.items())
                why = (" (a collective issued on some ranks only, or with check=False on "
                       "some ranks only?)" if column == RECORD_LEN else
                       " (MPIFLOW_CHECK_CARRY_BYTES set differently on some ranks?)")
                return f"ranks disagree on {what}: {parts}{why}"
        return "ranks disagree on the call"

    def _answer(self, ranks, missing) -> None:
        """Tell ``ranks`` the ranks ``missing``: their count, then the list."""
        comm = self.state.comm
        verdict = np.array([len(missing)], dtype=np.int64)
        for j in ranks:
            self.state.track_send(comm.Isend([verdict, MPI.INT64_T], j, VERDICT_TAG), verdict)
            self.state.track_send(comm.Isend([missing, MPI.INT64_T], j, DETAIL_TAG), missing)

    def _receive_from(self, comm, buf: np.ndarray, tag: int, source: int = 0) -> None:
        # The sender sends it as soon as it knows, so this is a short wait, unless the
        # ranks are out of step: then the operation's deadline ends it.
        request = comm.Irecv([buf, MPI.INT64_T], source, tag)

        def expired(waited):
            return errors.DeadlineExceededError(
                f"{self.label()}: the details of a failed cross-rank check did not arrive "
                f"from rank {source} within {waited:.0f} s")
        poll_until(request.Test, self.timeout, expired, Backoff(spin_s=0.0, first_s=1e-5))

    def _mismatch_error(self, problem: str) -> errors.InvalidArgumentError:
        return errors.InvalidArgumentError(
            f"{self.label()}: cross-rank check failed, {problem}. Every rank must issue the "
            f"same collectives in the same order, with the same algorithm, dtype and "
            f"shape (allgather: the same shape after the first dimension)")


def stopped_note(stopped: dict, job_ranks, seq: int, issued_ns: int) -> str:
    """``"; rank 0 stopped its collectives here ..."`` for the ranks ``stopped`` (rank:
    ``state.Stopped``, from ``CommState.stopped_elsewhere``), or ``""``; the ranks named
    as ``job_ranks`` (``CommState.job_ranks``) numbers them. ``seq`` is the collective
    this rank waited for, issued at ``issued_ns`` (its wall clock).

    A rank whose deadline at this same collective passed after this rank had issued it
    waited alongside this one (for a third rank, say) and only reached its deadline
    first: it is named as such, not as a sign that this rank arrived late. One that
    stopped at an earlier collective, or whose deadline at this one passed before this
    rank issued it, had given up before this rank got there. (Wall clocks of different
    hosts differ by milliseconds, deadlines are seconds apart.)"""
    alongside: list[int] = []
    by_seq: dict[int, list[int]] = {}
    for rank, stop in stopped.items():
        if stop.seq == seq and stop.deadline_ns >= issued_ns:
            alongside.append(job_ranks[rank])
        else:
            by_seq.setdefault(stop.seq, []).append(job_ranks[rank])
    note = ""
    if alongside:
        note += (f"; {format_ranks(sorted(alongside))} also waited for this collective "
                 f"(#{seq}) and gave up on it first")
    if by_seq:
        parts = "; ".join(
            f"{format_ranks(sorted(ranks))} stopped {'its' if len(ranks) == 1 else 'their'} "
            f"collectives on this communicator when collective #{number} passed its "
            f"deadline there" for number, ranks in sorted(by_seq.items()))
        note += (f"; {parts}, so the ranks are out of step on this communicator (this "
                 f"rank arrived late?)")
    return note


def _roll_call_s(timeout: float) -> float:
    """How long rank 0 listens for the ranks waiting at a check that timed out: they reach
    their own deadlines about when it does (each counts from its own issue)."""
    return min(10.0, 0.5 * timeout + 0.5)
