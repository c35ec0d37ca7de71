"""Start-up meeting points: every rank arrives, or every arrived rank says who did not.

A blocking collective (``MPI_Comm_dup``, ``MPI_Comm_split``, the first gather of the
layout) waits without end for a rank that never calls it: one stuck in its own start-up,
or started with another script. Before each of those, mpiflow's ranks meet here first:
each rank tells rank 0 it arrived (and where: the point's name), rank 0 waits up to
``MPIFLOW_TIMEOUT`` and answers every rank with who arrived. Then the collective runs
with everyone present; or every rank that arrived raises DeadlineExceededError naming
the ranks that did not, and the job ends at once instead of hanging.

Point-to-point only, on the communicator about to be used, with tags of its own; a few
bytes per rank and one round trip, once per start-up step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mpiflow import config as config_lib
from mpiflow import errors
from mpiflow.comm import cluster  # cluster uses meet: its names are read at call time
from mpiflow.comm.backoff import Backoff, poll_until

ARRIVE_TAG = 7301
ANSWER_TAG = 7302
_POINT_BYTES = 128
# A rank other than 0 waits this much longer than rank 0 does, so that rank 0's answer
# (which names the missing ranks) comes first whenever rank 0 itself is there.
_EXTRA_WAIT_S = 2.0
_NAMED = 8          # missing ranks named one by one; more are counted


def meet(comm, point: str, cfg: config_lib.Config | None = None,
         describe: Callable[[int], str] | None = None) -> None:
    """Wait until every rank of ``comm`` has called ``meet`` with the same ``point``.

    Raises:
        DeadlineExceededError: on every rank that arrived, when some rank did not arrive
            within MPIFLOW_TIMEOUT; the message names those ranks and the point.
        InvalidArgumentError: ranks arrived at different points (different scripts).
    """
    from mpi4py import MPI  # noqa: PLC0415  (importing mpi4py.MPI initialises MPI)

    cfg = cfg or config_lib.default()
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return
    describe = describe or (lambda r: f"rank {r}")
    timeout = cfg.get("MPIFLOW_TIMEOUT")
    backoff = Backoff(spin_s=0.0, first_s=1e-6,
                      max_s=cfg.get("MPIFLOW_POLL_MAX_SLEEP_US") * 1e-6)
    name = np.zeros(_POINT_BYTES, np.uint8)
    raw = point.encode("utf-8")[:_POINT_BYTES]
    name[:len(raw)] = np.frombuffer(raw, np.uint8)
    if rank != 0:
        comm.Isend(name, 0, ARRIVE_TAG).Wait()     # eager: a few bytes
        answer = np.empty(size + 2 * _POINT_BYTES, np.uint8)
        request = comm.Irecv(answer, 0, ANSWER_TAG)

        def rank_0_never_came(waited):
            request.Cancel()
            request.Wait()
            return _brief(errors.DeadlineExceededError(
                f"Start-up: {describe(rank)} waited {timeout + _EXTRA_WAIT_S:g} s at "
                f"{point} for {describe(0)}, which never arrived there (MPIFLOW_TIMEOUT="
                f"{timeout:g}): it is stuck before it, or runs another program"))

        poll_until(request.Test, timeout + _EXTRA_WAIT_S, rank_0_never_came, backoff)
        _raise_if_missing(answer, size, point, rank, describe, timeout)
        return
    names = np.zeros((size, _POINT_BYTES), np.uint8)
    requests = [comm.Irecv(names[r], r, ARRIVE_TAG) for r in range(1, size)]
    try:
        poll_until(lambda: MPI.Request.Testall(requests), timeout, TimeoutError, backoff)
    except TimeoutError:
        pass        # those that did not arrive are named below
    arrived = np.ones(size, np.uint8)
    for r, request in enumerate(requests, start=1):
        if not request.Test():
            request.Cancel()
            request.Wait()
            arrived[r] = 0
    # Points that differ: report the first, as if that rank had not arrived.
    elsewhere = next((r for r in range(1, size) if arrived[r] and
                      not np.array_equal(names[r], name)), None)
    # The answer: who arrived, rank 0's point, and the point of the first rank elsewhere
    # (the rank elsewhere knows its own point, but not rank 0's).
    answer = np.concatenate([arrived, name, names[elsewhere] if elsewhere is not None
                             else np.zeros(_POINT_BYTES, np.uint8)])
    if elsewhere is not None:
        answer[elsewhere] = 2
    sends = [comm.Isend(answer, r, ANSWER_TAG) for r in range(1, size) if arrived[r]]
    MPI.Request.Waitall(sends)
    _raise_if_missing(answer, size, point, rank, describe, timeout)


def _brief(error):
    """A start-up error is said in one line: its traceback would add nothing."""
    error.brief = True
    return error


def _said_by_rank_0(error):
    """An error every arrived rank raises from rank 0's answer: rank 0 reports it (with
    where the missing ranks are) and ends the job; the others only say their line and
    wait for that (``runtime.process.follow_the_reporter``). Were each to report and
    abort, the first abort could end the job before rank 0's report is out."""
    error.reported_by_rank = 0
    return error


def _point_named(raw) -> str:
    return bytes(raw).rstrip(b"\0").decode("utf-8", "replace")


def _raise_if_missing(answer, size: int, point: str, rank, describe, timeout):
    arrived = answer[:size]
    if arrived[rank] == 2:      # this rank is elsewhere: rank 0's point is in the answer
        point = _point_named(answer[size:size + _POINT_BYTES])
    elsewhere = [r for r, flag in enumerate(arrived) if flag == 2]
    if elsewhere:
        other = _point_named(answer[size + _POINT_BYTES:])
        raise _said_by_rank_0(_brief(errors.InvalidArgumentError(
            f"Start-up: {describe(elsewhere[0])} arrived at {other} while {describe(0)} "
            f"arrived at {point}: the ranks run different programs (an MPMD launch?) or "
            "call mpiflow in a different order")))
    missing = [r for r, flag in enumerate(arrived) if flag == 0]
    if missing:
        named = ", ".join(describe(r) for r in missing[:_NAMED])
        if len(missing) > _NAMED:
            named += f" and {len(missing) - _NAMED} more (ranks {cluster.rank_ranges(missing)})"
        raise _said_by_rank_0(_brief(errors.DeadlineExceededError(
            f"Start-up: {describe(rank)} waited {timeout:g} s at {point} for {named} (of "
            f"{len(arrived)} ranks), which never arrived there "
            f"(MPIFLOW_TIMEOUT={timeout:g}): they are stuck before it, or run another "
            "program")))
