"""The job's membership protocols between rank services: reset, join, leave, fail.

- reset: every rank clears its variables and resources and drops the partitions
  registered with it (``Session.reset``), answering ``reset_ok``;
- join: a rank serves until every other rank has left or joined as often (``Server.join``);
- bye: a rank leaving says how; the others stop waiting for it, and a step that needs it
  ends with an error naming it;
- fatal: a failing rank's last word, printed by every other rank before the abort;
- intr: an interrupted rank's last word: the others stop as interrupted, blaming nobody;
- stop: a rank stops gracefully (SIGTERM while training): the others stop after their
  current step too.

``JobMembership`` is a part of ``RankService`` (its base class), kept apart because these
protocols concern the job, not one step. It owns the join and reset counters and how
this rank leaves; it sends through the service's transport under its lock, waits with
its ``_wait_until``, and changes the service's state only through the service's own
methods (``_clear_state``, ``_forget_rank``, ``_reply``). The service's table of message
kinds routes these kinds to the handlers here.
"""

from __future__ import annotations

import os
import sys
import time

from mpiflow import errors, logger
from mpiflow.comm import launch_link, launcher_reaper
from mpiflow.runtime import interrupts

_FATAL_WAIT_S = 10.0
# From an interrupted rank's word to the moment proposed for all to leave: time for every
# other rank to hear it and answer.
_LEAVE_TOGETHER_S = 0.3


class JobMembership:
    """Reset, join, leave and fail: the protocols every rank of the job takes part in."""

    def _init_membership(self) -> None:
        # How this rank leaves, said in its "bye": a peer that still needs it says why.
        self.leaving_how = "its script ended"
        # Set once this rank's own failure is being reported: a peer's failure heard then
        # (several ranks raising at once) is not why this rank ends, and is not said.
        self.failed = False
        # join() calls made by each peer so far: the n-th join of a rank returns once every
        # other rank has left or made its n-th join too (so joins can be used repeatedly).
        self._joins = 0
        self._peer_joins = {r: 0 for r in self.peers.ranks()}
        self._resets = 0
        self._closed = False
        # rank -> when it proposed to leave (s since the epoch), once it said it stops for an
        # interrupt
        self._interrupted_peers = {}
        # Called when this rank succeeds a lost chief (MPIFLOW_ELASTIC, ps training).
        self.on_chief_lost = []

    def reset(self) -> None:
        """Clear every variable and shared resource on every rank, and drop the partitions
        registered there (``Session.reset``); returns once every live rank has."""
        with self._lock:
            self._resets += 1
            n = self._resets
            peers = self.peers.active()
            for rank in peers:
                self.transport.send(rank, {"k": "reset", "n": n})
            self._clear_state()
        self._await_replies([("reset", rank, n) for rank in peers], "the reset of")

    def join(self) -> None:
        """Serve until every other rank has left or joined as often, then return."""
        with self._lock:
            self._joins += 1
            for rank in self.peers.active():
                self.transport.send(rank, {"k": "join", "n": self._joins})
        # The predicate runs at every poll: drop each peer once it is done, so a serving
        # rank checks one peer per poll, not all of them.
        pending = list(self._peer_joins)

        def everyone_joined():
            while pending:
                rank = pending[-1]
                if not self.peers.is_gone(rank) and self._peer_joins[rank] < self._joins:
                    return False
                pending.pop()
            return True

        self._wait_until(everyone_joined, None)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Tell every rank this one is leaving, and leave once they have all left (at exit).

        Waiting for every peer's "bye" means no message is still on its way here when MPI
        finalizes (UCX warns of each unmatched one); the heartbeats keep running meanwhile,
        so a peer lost during the wait ends it. A peer still busy after ``timeout`` (or
        MPIFLOW_TIMEOUT, if shorter) is not waited for any longer.
        """
        lost = self.lost_summary()
        if lost and self.rank == 0:
            count = len(self.peers.lost_on_the_way)
            workers_lost = self.peers.tasks_among("worker", self.peers.lost_on_the_way)
            # Every worker lost is no job that went on: say what happened to them instead.
            said = "every worker was lost, the job could not go on" if \
                len(workers_lost) == self.peers.tasks_of("worker") else \
                f"the job went on without {count} rank(s)"
            logger.get_logger("mpiflow.elastic").warning("%s: %s", said, lost)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # Every peer gets a "bye", also one that already left: it waits for ours.
            for rank in self.peers.ranks():
                if not self.peers.is_dead(rank):
                    self.transport.send(rank, {"k": "bye", "how": self.leaving_how})
        try:
            self._wait_until(self.peers.all_gone, lambda: "the other ranks to leave",
                             min(timeout, self.timeout))
            with self._lock:
                self.transport.flush(timeout)
        except errors.OpError:
            pass    # a lost or stuck peer: leave anyway (its loss was reported elsewhere)
        self.peers.stop()

    def announce_failure(self, summary: str, grace_s: float = 1.0) -> None:
        """Tell every other rank this one failed (best effort), then give them a moment.

        A rank that hears it prints "aborted because rank R (...) failed" and waits for
        this rank's MPI_Abort (exiting 1 by itself if it never comes).
        """
        try:
            with self._lock:
                self._send_to_active({"k": "fatal", "msg": summary,
                                      "who": self.describe(self.rank), "host": self.host})
                # The whole grace, not only until the sends complete: the others need it
                # to print their line, and the launcher to forward it, before the abort.
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    self.transport.complete_sends()
                    time.sleep(0.01)
        except BaseException:   # dying anyway: never mask the original error, not even
            pass                # for the launcher's signal ending the job meanwhile

    def announce_interrupt(self, signum: int, origin: str | None,
                           grace_s: float) -> tuple[float, bool]:
        """Tell every other rank this one stops for an interrupt (Ctrl-C, SIGTERM) that
        ``origin`` got (None: this rank); return when they should all leave (seconds
        since the epoch), and whether every rank still there said it stops too.

        A rank that was not interrupted itself stops too, naming ``origin``, not blaming
        this rank. Leaving together matters: the first rank to exit makes the launcher
        kill the others (perhaps before their line is out, and the job then ends as
        "killed"). So every rank proposes a moment to leave, hears every other's (up to
        ``grace_s``) and leaves at the latest one: the same moment everywhere. Where all
        agreed, each rank may also tell the launcher its exit is no crash
        (``launcher_release``); where one did not answer, the launcher's kill is what
        ends it.
        """
        origin = origin or self.describe_self()
        leave_at = time.time() + _LEAVE_TOGETHER_S
        agreed = False
        try:
            with self._lock:
                self._send_to_active({"k": "intr", "sig": int(signum), "who": origin,
                                      "at": int(leave_at * 1e6)})
            self._wait_until(lambda: all(r in self._interrupted_peers or self.peers.is_gone(r)
                                         for r in self.peers.ranks()),
                             lambda: "the other ranks to stop", grace_s,
                             during_interrupt=True)
            agreed = True
        except BaseException:   # leaving anyway: a lost peer or the grace ran out
            pass
        return min(max([leave_at, *self._interrupted_peers.values()]),
                   time.time() + grace_s), agreed

    @property
    def resting(self) -> list:
        """The ranks that have joined the join this rank serves in (``server.join()``,
        ``mf.train.join``): done training for this phase, so no step waits for their
        progress (synchronous replicas, bounded staleness). Their sync loop or other
        threads may still run steps here."""
        if not self._joins:
            return []
        return [r for r, n in self._peer_joins.items() if n >= self._joins]

    @property
    def ahead_in_join(self) -> list:
        """The ranks waiting in a join (``server.join()``) this rank has not made: they
        take part in nothing more (a collective with them) until it joins too."""
        return [r for r, n in self._peer_joins.items()
                if n > self._joins and not self.peers.is_gone(r)]

    def wait_for_others_done(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until every other rank has left or serves (joined):
        a chief stopping gracefully saves its last checkpoint after the other workers'
        last steps, so none of them is lost."""
        def others_done():
            return all(self.peers.is_gone(r) or self._peer_joins[r] > 0
                       for r in self.peers.ranks())
        try:
            self._wait_until(others_done, lambda: "the other workers to stop", timeout)
        except Exception:      # saving anyway: a worker that does not stop loses its step
            pass

    def announce_stop(self, signum: int) -> None:
        """Tell every other rank this one stops gracefully for ``signum`` (SIGTERM): they
        stop after their current step too (``interrupts.on_peer_stopping``)."""
        with self._lock:
            self._send_to_active({"k": "stop", "sig": int(signum),
                                  "who": self.describe_self()})

    # -- elastic training ----------------------------------------------------------------
    def _handle_losses(self) -> None:
        """Ranks this one found lost that the job goes on without (MPIFLOW_ELASTIC): say so
        once, forget them, and tell the others (who may not watch them)."""
        with self._lock:
            for rank in self.peers.take_newly_lost():
                self._say_lost(rank)
                self._after_loss(rank)
                self._send_to_active({"k": "gone", "rank": rank,
                                      "how": self.peers.how_it_left(rank)})
            # The steps parked here look again now: found in an idle round, a loss may
            # come with no message after it to resume them (every worker parked on this
            # ps, waiting for the one lost, would wait for ever).
            self.steps.drain()

    def _say_lost(self, rank: int) -> None:
        """Log a loss once for the job: on the lowest-numbered rank still there (several
        ranks may find it, or hear of it), while it takes part (not while it leaves, when
        the ranks below it may have left before it)."""
        if not self._closed and all(r > self.rank or self.peers.is_gone(r)
                                    for r in self.peers.ranks()):
            logger.get_logger("mpiflow.elastic").warning(
                "%s on %s is lost: %s; training goes on without it (MPIFLOW_ELASTIC)",
                self.describe(rank), self.peers.hosts[rank], self.peers.how_it_left(rank))

    def _after_loss(self, rank: int) -> None:
        """Whatever waited for ``rank`` stops waiting; what it started here is dropped;
        ``mpiflow launch`` hears of it (the lost rank may never close its line)."""
        launch_link.tell("gone", rank=int(rank), why=self.peers.how_it_left(rank))
        if self.peers.heartbeat is not None:
            self.peers.heartbeat.forget(rank)
        self.transport.forget(rank)
        self.steps.signal_all()
        self._forget_rank(rank)
        self._succeed_if_chief(rank)

    def _succeed_if_chief(self, rank: int) -> None:
        """``rank`` is lost: if it was the chief and this rank succeeds it, take over."""
        if rank == self.peers.chief() and self.peers.chief_can_move and \
                self.peers.successor() == self.rank:
            for wake in self.on_chief_lost:
                wake()

    def look_for_losses(self, seconds: float = 0.6) -> None:
        """Serve for ``seconds``, looking for lost ranks (a local check runs every half
        second) and hearing of those others found: a chief's successor does this before
        its session ends, so a chief lost just before the end still has its last
        checkpoint written."""
        try:
            self._wait_until(lambda: False, lambda: "news of lost ranks", seconds)
        except errors.DeadlineExceededError:
            pass

    def announce_chief_can_move(self) -> None:
        """The chief's duties can move to a survivor if it is lost (MPIFLOW_ELASTIC, async
        ps): every rank, and ``mpiflow launch``, then go on without it too."""
        with self._lock:
            self.peers.chief_can_move = True
            self._send_to_active({"k": "chief_moves"})
        launch_link.tell("chief_moves")

    def leave_failed(self, summary: str, timeout: float = 2.0) -> None:
        """This rank fails, and the job can go on without it (MPIFLOW_ELASTIC): say
        "bye" as failed (the others forget it, as after any "bye") instead of ending the
        job."""
        with self._lock:
            self._closed = True
            self.leaving_how = f"it failed: {summary}"
            self._send_to_active({"k": "bye", "how": self.leaving_how})
            try:
                self.transport.flush(timeout)
            except errors.OpError:
                pass
        self.peers.stop()

    def lost_summary(self) -> str:
        """Who the job went on without, for the last word of a rank (empty: nobody)."""
        return "; ".join(f"{self.describe(r)} on {self.peers.hosts[r]} "
                         f"({self.peers.how_it_left(r)})" for r in self.peers.lost_on_the_way)

    def _send_to_active(self, header: dict) -> None:
        for rank in self.peers.active():
            self.transport.send(rank, header)

    # -- handlers --------------------------------------------------------------------------
    def _on_reset(self, source, h, arrays):
        self._clear_state()
        self.transport.send(source, {"k": "reset_ok", "n": h["n"]})

    def _on_reset_ok(self, source, h, arrays):
        self._reply(("reset", source, h["n"]))

    def _on_join(self, source, h, arrays):
        self._peer_joins[source] = max(self._peer_joins[source], int(h["n"]))
        self.steps.signal_all()     # a step waiting for that rank's progress looks again

    def _on_bye(self, source, h, arrays):
        self.peers.mark_left(source, h["how"])
        if h["how"].startswith("it failed:") and source not in self.peers.lost_on_the_way:
            self.peers.lost_on_the_way.append(source)       # an elastic worker's failure
            self._succeed_if_chief(source)
        # Steps parked on an event may wait for what the leaving rank would have done
        # (its gradient, its part of a collective): they look again, and say so.
        self.steps.signal_all()
        self._forget_rank(source)

    def _on_fatal(self, source, h, arrays):
        if interrupts.interrupted() or self.failed:
            return      # stopping already: a peer failing on the way out is no news
        sys.stderr.write(f"[{self.describe_self()}] aborted because "
                         f"{h['who']} on {h['host']} failed: {h['msg']}\n")
        sys.stderr.flush()
        launch_link.tell("aborted", why=f"{h['who']} on {h['host']} failed")
        launcher_reaper.end_launcher_later()
        # Wait for the failed rank's MPI_Abort to end the job: a rank that left first
        # would make the launcher kill every rank at once, the failed one before it says
        # why and others before their lines are forwarded. Leave alone only if it never
        # comes (the failed rank hangs).
        time.sleep(_FATAL_WAIT_S)
        os._exit(1)

    def _on_chief_moves(self, source, h, arrays):
        self.peers.chief_can_move = True

    def _on_gone(self, source, h, arrays):
        if self.peers.lose(h["rank"], h["how"], found_here=False):
            self._say_lost(h["rank"])
            self._after_loss(h["rank"])

    def _on_stop(self, source, h, arrays):
        interrupts.on_peer_stopping(h["who"], h["sig"])

    def _on_interrupted(self, source, h, arrays):
        self._interrupted_peers[source] = h["at"] * 1e-6
        interrupts.on_peer_interrupted(h["who"], h["sig"])
