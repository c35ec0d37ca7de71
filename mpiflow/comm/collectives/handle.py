"""The handle of a collective in flight, and the steps (stages) it runs through.

A ``Handle`` runs the cross-rank check, waits for its turn in the communicator's issue
order, then advances its stages one after another; ``test()`` does all of it without
blocking, ``wait()`` polls ``test()`` with a back-off, and every operation has a deadline.

A blocking call with nothing issued before it still in line (``run_now``) skips the
queue: its check and stages run at once, polled tightly, and only an operation that takes
longer than ``_EXPRESS_S`` becomes a ``Handle`` (adopted where it stands) and waits with
the back-off and the deadline. Small collectives spend most of their time in that
bookkeeping otherwise (4 KiB on 2 ranks: 3 us in MPI, 7 more in the queue and handle).
An operation that one MPI request does whole (``run_request_now``: the mpi strategy's
sums) or that its check's messages carry (``run_carried_now``: its small sums) goes
further: no stage or closure exists unless it has to wait.
A wait polls without yielding for ``CommState.tight_poll_s`` first (not at all on a
crowded node).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from mpiflow import errors
from mpiflow.comm.backoff import Backoff, poll_until
from mpiflow.comm.collectives.check import (
    FIELDS_LEN,
    CrossRankCheck,
    format_ranks,
    stopped_note,
)
from mpiflow.comm.collectives.exchange import Exchange
from mpiflow.comm.collectives.state import CommState, wall_ns_ago

_MISSING = object()
# How long run_now polls a step before handing it to a Handle: while other operations are
# in flight (the Handle's waits move them on; the express run does not), and alone, where
# the Handle's wait would only poll the same request, each poll costing more Python (4
# ranks on 2 cores, 256 KiB: 0.77-0.84 of MPI's blocking Allreduce with 200 us, 0.84-0.89
# with 2 ms, the same as MPIFLOW_COLLECTIVE_SPIN_US's default).
_EXPRESS_S = 200e-6
_EXPRESS_ALONE_S = 2e-3


class Stage:
    """One step of an operation: ``start()`` once, then ``test()`` until it returns True.

    ``collective``: the step starts a collective of the library underneath (an MPI
    non-blocking collective, an NCCL call), which every rank must start in one order on
    the communicator; point-to-point steps (the ring's) and local ones need no order.
    """

    what = "a collective"
    collective = False

    def start(self) -> None:
        pass

    def test(self) -> bool:
        return True

    def pending_ranks(self) -> list[int] | None:
        """Return the ranks this step still waits for; None when MPI does not tell."""
        return None


class RequestStage(Stage):
    """A step that is one or more MPI requests, posted by ``post()`` at start (MPI's
    non-blocking collectives)."""

    collective = True

    def __init__(self, post: Callable[[], MPI.Request | Sequence[MPI.Request]], what: str):
        self._post = post
        self.what = what
        self._requests: list[MPI.Request] = []

    @classmethod
    def of(cls, request: MPI.Request, what: str) -> RequestStage:
        """The stage of a request already posted (started: only tested from now on)."""
        stage = cls(None, what)
        stage._requests = [request]
        stage.test = request.Test
        return stage

    def start(self) -> None:
        posted = self._post()
        if isinstance(posted, MPI.Request):
            self._requests = [posted]
            self.test = posted.Test                 # one request: test it directly
            return
        self._requests = list(posted)
        if len(self._requests) == 1:
            self.test = self._requests[0].Test

    def test(self) -> bool:
        return MPI.Request.Testall(self._requests)


class CallStage(Stage):
    """A local step (a conversion, a division) run when the steps before it are done."""

    def __init__(self, call: Callable[[], Any], what: str):
        self._call = call
        self.what = what

    def start(self) -> None:
        self._call()


class Handle:
    """A collective in flight.

    ``test()`` advances the operation without blocking (a caller that polls it drives a
    ring to completion) and returns whether it is done; ``wait()`` polls it with a back-off
    that leaves the core to other ranks; ``result`` is the output once done.

    Every operation has a deadline (``timeout`` seconds, MPIFLOW_TIMEOUT by default,
    counted from its issue): past it, ``test()`` and ``wait()`` raise
    ``DeadlineExceededError`` naming the collective, the tensor and the ranks not heard
    from, and the operation is dead. A rank's operations start in the order they were
    issued, whatever order their handles are tested in.
    """

    def __init__(self, state: CommState, describe: tuple, build: Callable[[int], list[Stage]],
                 finish: Callable[[], Any], record: np.ndarray | None, timeout: float,
                 backoff: Backoff, exchange: Exchange | None = None):
        self._describe = describe
        self.timeout = timeout
        self._state = state
        self._build = build
        self._finish = finish
        self._backoff = backoff
        self._stages: collections.deque = collections.deque()
        self._stage: Stage | None = None
        self._data_started = False
        self._result = _MISSING
        self._error: errors.MpiflowError | None = None
        self._issued = time.monotonic()
        self._check = None
        if record is _ADOPTED:
            return
        with state.lock:
            self.seq = state.submit(self)
            if record is not None and state.size > 1:
                # Checks are posted in issue order: they match by order on every rank.
                self._check = CrossRankCheck(state, record, self.seq, lambda: self.label,
                                             timeout, exchange, name=describe[1])
                state.submit_check(self._check)

    @classmethod
    def adopt(cls, state: CommState, describe: tuple, build, finish, timeout: float,
              backoff: Backoff, seq: int, issued: float, check, stages, stage) -> Handle:
        """The handle of an operation ``run_now`` started (number ``seq``, its check
        posted): still at its check, it heads the queue; else it is in its data phase,
        at ``stage`` with ``stages`` to follow. The caller holds the state's lock."""
        handle = cls(state, describe, build, finish, _ADOPTED, timeout, backoff)
        handle.seq, handle._issued, handle._check = seq, issued, check
        if stages is None:
            state.requeue_first(handle)
        else:
            handle._data_started = True
            handle._stage, handle._stages = stage, stages
            state.in_flight(handle)
        return handle

    @property
    def label(self) -> str:
        """The operation as messages name it: kind, tensor, strategy, array, rank."""
        return describe_call(*self._describe)

    # -- called by CommState.pump, in issue order ------------------------------------------
    @property
    def failed(self) -> bool:
        return self._error is not None

    def check_passed(self) -> bool:
        if self._check is None:
            return True
        try:
            return self._check.test()
        except errors.MpiflowError as exc:
            self._error = exc
            return False

    def begin_data(self) -> None:
        self._data_started = True
        try:
            self._stages.extend(self._build(self.seq))
            self._advance()
        except errors.MpiflowError as exc:
            self._error = exc

    def progress(self) -> bool:
        """Advance the data phase as far as it goes now; return whether it is over
        (complete or failed). ``CommState.pump`` drives every operation in flight with
        it, so one rank waiting on a later handle still moves the earlier ones along."""
        if self._error is not None:
            return True
        try:
            return self._advance()
        except errors.MpiflowError as exc:
            self._error = exc
            return True

    def holds_collectives(self) -> bool:
        """Whether a step of this operation that starts a collective is still to start:
        no later operation may start one before it (every rank must start them in one
        order)."""
        return self._error is None and any(stage.collective for stage in self._stages)

    # -- public ----------------------------------------------------------------------------
    def test(self) -> bool:
        """Advance the operation without blocking; return whether it is complete.

        Raises:
            the operation's error: InvalidArgumentError from the cross-rank check,
            DeadlineExceededError past the deadline.
        """
        if self._result is not _MISSING:
            return True
        with self._state.lock:
            if self._result is not _MISSING:    # another thread finished it meanwhile
                return True
            state = self._state
            if self._error is None and state.stopped is not None and \
                    not self._data_started:
                self._error = state.refusal(self.seq)
            if self._error is None:
                if state.has_queued():          # move on what is in flight, start what
                    state.pump()                # waits for its turn
                if self._error is None and self._data_started and self._advance():
                    self._result = self._finish()
                    return True
            if self._error is None and self._past_deadline():
                if self._check is not None and not self._check.passed:
                    self._error = self._check.expire(self.timeout,
                                                      time.monotonic() - self._issued)
                else:
                    self._error = self._deadline_error(time.monotonic() - self._issued)
                state.stop(self.seq, self._error, self,
                           overdue=time.monotonic() - self._issued - self.timeout)
            if self._error is not None:
                # Raised again at every test: without its last traceback, which each raise
                # of one exception object would otherwise append to.
                raise self._error.with_traceback(None)
        return False

    def wait(self, timeout: float | None = None) -> Any:
        """Complete the operation and return its result.

        Args:
            timeout: give up this wait after so many seconds (the operation stays alive);
                None waits up to the operation's own deadline.

        Raises:
            DeadlineExceededError: naming the collective, the tensor and the ranks not
                heard from; the errors of ``test()``.
        """
        # Most small operations complete within microseconds of their issue: poll at
        # once for a few, before the back-off's bookkeeping and yields.
        eager_until = time.perf_counter() + self._state.tight_poll_s
        while True:
            if self.test():
                return self._result
            if time.perf_counter() >= eager_until:
                break
        state, seen = self._state, self._state.transfers_done

        def done():
            nonlocal seen
            if self.test():
                return True
            if state.transfers_done != seen:      # data is moving: poll on, do not sleep
                seen = state.transfers_done
                self._backoff.reset()
            return False

        poll_until(done, timeout, lambda waited: self._deadline_error(waited), self._backoff)
        return self._result

    @property
    def result(self) -> Any:
        """The output (the reduced array, the broadcast array, the gathered array)."""
        if self._result is _MISSING:
            raise errors.FailedPreconditionError(
                f"{self.label}: the result is not there yet; call wait(), or test() until "
                f"it returns True")
        return self._result

    def __repr__(self) -> str:
        state = "done" if self._result is not _MISSING else (
            "failed" if self._error is not None else "in flight")
        return f"<Handle #{self.seq} {self.label}: {state}>"

    # -- internals -------------------------------------------------------------------------
    def _advance(self) -> bool:
        while True:
            if self._stage is not None and not self._stage.test():
                return False
            if not self._stages:
                self._stage = None
                return True
            self._stage = self._stages.popleft()
            self._stage.start()

    def _past_deadline(self) -> bool:
        return time.monotonic() - self._issued > self.timeout

    def _waiting_on(self) -> tuple[str, list[int] | None]:
        if self._check is not None and not self._check.passed:
            return self._check.waiting_on()
        if not self._data_started:
            head = self._state.blocking_head(self)
            if head is not None:
                what, ranks = head._waiting_on()
                return f"collective #{head.seq} issued before it ({head.label}): {what}", ranks
            return "every rank to join the collectives' communicator (MPI_Comm_idup)", None
        if self._stage is None:
            return "nothing (complete)", []
        return self._stage.what, self._stage.pending_ranks()

    def _deadline_error(self, waited: float) -> errors.DeadlineExceededError:
        what, ranks = self._waiting_on()
        if ranks is None:
            # Named as in the job, so that each is asked where it is (the one that is not
            # in this call shows where it is instead).
            named = errors.first_of(f"rank {r}" for r in self._state.others_in_the_job())
            heard = ("the ranks not heard from are unknown (inside MPI; every rank of the "
                     f"communicator must make this call: {named})")
        else:
            heard = f"not heard from {format_ranks(self._state.in_the_job(ranks))}" \
                if ranks else "all ranks heard"
        note = stopped_note(self._state.stopped_elsewhere(), self._state.job_ranks, self.seq,
                            wall_ns_ago(waited))
        return errors.DeadlineExceededError(
            f"{self.label}: waited {waited:.1f} s for {what}; {heard} "
            f"(MPIFLOW_TIMEOUT={self.timeout:g} s){note}")


_ADOPTED = object()      # Handle's record argument when ``adopt`` builds it


def _settles(test, state: CommState) -> bool:
    """Poll ``test()`` for up to ``_EXPRESS_S`` (``_EXPRESS_ALONE_S`` with nothing else in
    flight on ``state``), tightly for ``state.tight_poll_s``, then yielding the core to the
    ranks beside this one; return whether it returned True."""
    if test():
        return True
    tight_s = state.tight_poll_s
    limit_s = _EXPRESS_S if state.has_queued() else _EXPRESS_ALONE_S
    start = time.perf_counter()
    while True:
        if test():
            return True
        waited = time.perf_counter() - start
        if waited > limit_s:
            return False
        if waited >= tight_s:
            os.sched_yield()


def run_now(state: CommState, describe: tuple, build, finish, record, timeout: float,
            new_backoff: Callable[[], Backoff], exchange: Exchange | None = None) -> Any:
    """Run a blocking collective; return its result.

    With no operation of the communicator queued or unposted (nothing issued before it
    still waits for its turn), it starts at once: the check, then each stage, each polled
    for up to ``_EXPRESS_S``; one that takes longer makes the operation a ``Handle``,
    adopted where it stands, whose ``wait()`` goes on with the back-off and the deadline.
    Otherwise it is issued as a Handle and waited for. Either way it takes its number in
    issue order, as on every other rank. ``exchange``: the check's, carrying the
    operation's data (a small allreduce), as ``Handle`` takes it.
    """
    with state.lock:
        seq = state.start_now()
        if seq is None:
            handle = Handle(state, describe, build, finish, record, timeout, new_backoff(),
                            exchange)
        else:
            handle = _express(state, seq, describe, build, finish, record, timeout,
                              new_backoff, exchange)
            if handle is None:
                return finish()
    return handle.wait()


def run_request_now(state: CommState, describe: tuple, record, post,
                    what: str, send, out, timeout: float,
                    new_backoff: Callable[[], Backoff]) -> Any:
    """``run_now`` for an operation that one MPI request does whole (``post(send, out)``
    posts it, ``what`` names it; ``out`` is the result), as small allreduces are.

    The express run is the whole call here: the check (``record``; None for no check),
    the request, each polled for up to
    ``_EXPRESS_S``; the stages and closures a Handle needs are built only for a call
    that waits its turn or outlives its express run. A 4 KiB allreduce costs a few
    microseconds, so each object made per call shows.
    """
    with state.lock:
        seq = state.start_now()
        if seq is None:
            handle = Handle(state, describe, request_stages(post, what, send, out),
                            lambda: out, record, timeout, new_backoff())
        else:
            issued = time.monotonic()
            check = None if record is None else \
                _express_check(state, describe, record, seq, timeout, None)
            if check is not None:
                handle = Handle.adopt(state, describe, request_stages(post, what, send, out),
                                      lambda: out, timeout, new_backoff(), seq, issued,
                                      check, None, None)
            else:
                posted = post(send, out)
                if _settles(posted.Test, state):
                    return out
                handle = Handle.adopt(state, describe, None, lambda: out, timeout,
                                      new_backoff(), seq, issued, None, collections.deque(),
                                      RequestStage.of(posted, what))
    return handle.wait()


def run_carried_now(state: CommState, describe: tuple, record, send, out,
                    divisor: int | None, timeout: float,
                    new_backoff: Callable[[], Backoff]) -> Any:
    """``run_now`` for an allreduce whose check carries it (``exchange.Exchange``): the
    express run is the exchange alone, on an exchange taken from the state's pool and
    given back when the sum is in ``out`` (divided by ``divisor``, an average); a Handle
    and its closures are made only for a call that waits its turn or outlives its
    express run."""
    with state.lock:
        seq = state.start_now()
        exchange = _loaded(state, send, out, divisor)
        if seq is not None:
            issued = time.monotonic()
            check = _express_check(state, describe, record, seq, timeout, exchange)
            if check is None:
                exchange.deliver()
                state.exchanges.give(exchange)
                return out
        finish = _carried_finish(state, exchange, out)
        if seq is None:
            handle = Handle(state, describe, no_stages, finish, record, timeout,
                            new_backoff(), exchange)
        else:
            handle = Handle.adopt(state, describe, no_stages, finish, timeout, new_backoff(),
                                  seq, issued, check, None, None)
    return handle.wait()


def carry(state: CommState, send, out, divisor: int | None) -> tuple[Exchange, Callable]:
    """An exchange from the state's pool loaded with ``send``, and the ``finish`` of its
    operation: the sum into ``out`` (divided by ``divisor``: an average), the exchange
    given back; returns ``out``. Under the state's lock, as ``finish`` runs."""
    exchange = _loaded(state, send, out, divisor)
    return exchange, _carried_finish(state, exchange, out)


def _loaded(state: CommState, send, out, divisor: int | None) -> Exchange:
    exchange = state.exchanges.take(send.dtype, send.shape)
    exchange.load(send, out, divisor)
    return exchange


def _carried_finish(state: CommState, exchange: Exchange, out) -> Callable[[], Any]:
    def finish():
        exchange.deliver()
        state.exchanges.give(exchange)
        return out
    return finish


def no_stages(seq: int) -> list[Stage]:
    """The ``build`` of an operation its check does whole (a carried allreduce)."""
    return []


def request_stages(post, what: str, send, out) -> Callable[[int], list[Stage]]:
    """The ``build`` of an operation that one request does whole (``post(send, out)``)."""
    return lambda seq: [RequestStage(lambda: post(send, out), what)]


def _express_check(state, describe, record, seq, timeout, exchange) -> CrossRankCheck | None:
    """An express run's cross-rank check, begun now and polled for up to ``_EXPRESS_S``:
    None when it passed; the check, still in flight, for the Handle that adopts the
    operation. A failed check raises here, as ``test()`` would. Runs on ``exchange``
    (a carried allreduce's), else on the state's spare one: no object is made for a check
    that passes at once."""
    if exchange is None:
        exchange = state.spare_exchange
    exchange.begin(state.check_comm, state.doubling_steps, int(record[FIELDS_LEN]), seq)
    passed = _settles(exchange.advance, state)
    if passed and not exchange.mismatch:
        return None
    if exchange is state.spare_exchange:     # the check takes it along
        state.spare_exchange = Exchange()
    check = CrossRankCheck(state, record, seq, lambda: describe_call(*describe), timeout,
                           exchange, posted=True, name=describe[1])
    if passed:
        check.test()            # raises: the ranks made different calls
    return check


def _express(state, seq, describe, build, finish, record, timeout, new_backoff, exchange):
    """``run_now``'s direct run of operation ``seq``, under the state's lock: None when it
    completed, else the Handle that goes on with it."""
    issued = time.monotonic()
    check = None
    if record is not None and state.size > 1:
        check = _express_check(state, describe, record, seq, timeout, exchange)
        if check is not None:
            return Handle.adopt(state, describe, build, finish, timeout, new_backoff(), seq,
                                issued, check, None, None)
    stages = build(seq)
    for i, stage in enumerate(stages):
        stage.start()
        if not _settles(stage.test, state):
            return Handle.adopt(state, describe, build, finish, timeout, new_backoff(), seq,
                                issued, check, collections.deque(stages[i + 1:]), stage)
    return None


def describe_call(kind: str, name: str | None, strategy: str, array, rank: int,
                  size: int) -> str:
    """Return e.g. ``"allreduce 'grad/w' (ring, float32[1009]) on rank 1 of 4"``."""
    tensor = f" '{name}'" if name else ""
    return f"{kind}{tensor} ({strategy}, {describe_array(array)}) on rank {rank} of {size}"


def describe_array(array) -> str:
    """Return e.g. ``"float32[7, 13]"``."""
    return f"{np.dtype(array.dtype).name}{list(array.shape)}"
