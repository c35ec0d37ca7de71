"""The steps in flight on this rank: partitions run as generators, parked where they wait
and resumed when what they wait for comes.

A partition's run (``Plan.run_steps``) yields a ``RecvWait`` where a Recv needs a tensor
and an ``EventWait`` where an async kernel must wait. ``Steps.advance`` runs one until it
waits or ends; a tensor that arrives (``deliver``) or an event that fires (``signal``,
then ``drain``) resumes the step parked on it. Each step is keyed by (client rank, step
id); an aborted step is forgotten with everything parked for it.
"""

from __future__ import annotations

import collections

from mpiflow.comm.rendezvous import MISSING, Rendezvous
from mpiflow.runtime.executor import EventWait


class Step:
    """One partition's run for one step, and what to do when it ends."""

    __slots__ = ("client", "step", "handle", "gen", "waiting", "on_done", "on_error")

    def __init__(self, client, step, handle, gen, on_done, on_error):
        self.client = client
        self.step = step
        self.handle = handle
        self.gen = gen
        self.waiting = None         # the RecvWait or EventWait it is parked on
        self.on_done = on_done
        self.on_error = on_error


class ClientStep:
    """A step this process started: its local result and the remote partitions not done."""

    def __init__(self, remote_ranks):
        self.remote_pending = set(remote_ranks)
        self.result = MISSING
        self.error = None
        self.local = None
        self.thread = None

    def finished(self) -> bool:
        return self.error is not None or (self.result is not MISSING and
                                          not self.remote_pending)

    def describe(self, step: int, describe_rank) -> str:
        """What this step waits for, for a timeout's message."""
        parts = []
        waiting = self.local.waiting if self.local else None
        if self.result is MISSING and waiting is not None:
            parts.append(waiting.describe(describe_rank))
        if self.remote_pending:
            parts.append("the partitions on " + ", ".join(
                describe_rank(r) for r in sorted(self.remote_pending)))
        return f"step {step}: " + " and ".join(parts or ["nothing"])


class Steps:
    """The parked steps of this rank and the tensors and events they wait for."""

    def __init__(self):
        self.rendezvous = Rendezvous()
        self.remote = {}            # (client, step) -> Step run here for another rank
        self.client = {}            # step id -> ClientStep this process started
        self._event_waiters = {}
        self._fired = []
        self._aborted = set()
        # (client, step, what it waited for) of the last steps run here that their client
        # gave up on (its timeout): asked where this rank is right after, the client's
        # report still says what its step here waited for.
        self.given_up: collections.deque = collections.deque(maxlen=8)
        self.running_for = None     # the client of the step ``advance`` runs now

    def parked(self, describe_rank, most: int = 8) -> list[str]:
        """What the steps run here for other ranks wait for, e.g. "step 9 of rank 1
        (worker:0): waits for tensor ...", then what those their client gave up on
        waited for (at most ``most`` of each, then how many more). Read from another
        thread while they move: a copy, best effort."""
        lines = []
        for (client, step), st in list(self.remote.items()):
            waiting = st.waiting
            if waiting is not None:
                lines.append(f"step {step} of {describe_rank(client)}: waits for "
                             f"{waiting.describe(describe_rank)}")
        if len(lines) > most:
            lines[most:] = [f"... and {len(lines) - most} more"]
        for client, step, waiting in list(self.given_up):
            lines.append(f"step {step} of {describe_rank(client)} (which gave up on it): "
                         f"waited for {waiting.describe(describe_rank)}")
        return lines

    def give_up(self, client: int, step: int) -> None:
        """Client ``client`` aborted its step ``step`` (it timed out, or failed): end the
        part run here, noting what it waited for (``parked``), and forget the step."""
        st = self.remote.pop((client, step), None)
        if st is not None:
            if st.waiting is not None:
                self.given_up.append((client, step, st.waiting))
            st.gen.close()
        self.forget(client, step)

    def advance(self, st: Step, value=None) -> None:
        """Run ``st`` until it waits for a tensor or an event, or ends."""
        self.running_for = st.client
        while True:
            try:
                wanted = st.gen.send(value)
            except StopIteration as stop:
                st.on_done(stop.value)
                return
            except Exception as exc:
                st.on_error(exc)
                return
            if type(wanted) is EventWait:
                st.waiting = wanted
                self._event_waiters.setdefault(wanted.key, []).append(st)
                return
            value = self.rendezvous.take_or_wait((st.client, st.step, wanted.edge), st)
            if value is MISSING:
                st.waiting = wanted
                return
            st.waiting = None

    def deliver(self, client: int, step: int, edges, values) -> None:
        """Tensors of (``client``, ``step``) arrived, one per edge of ``edges`` (a
        message's): keep them all, then resume the step parked on one of them, which takes
        the others as it reaches their Recvs (a pull of many variables resumes its step
        once, not once per variable)."""
        if (client, step) in self._aborted:
            return
        parked = None
        for edge, value in zip(edges, values):
            waiter = self.rendezvous.put((client, step, edge), value)
            if waiter is not None:
                parked = waiter, value
        if parked is not None:
            waiter, value = parked
            waiter.waiting = None
            self.advance(waiter, value)

    def signal(self, key) -> None:
        """Note that ``key`` was signalled; parked steps resume once the current kernel
        and step are done (never inside the kernel that signalled)."""
        self._fired.append(key)

    def signal_all(self) -> None:
        """Let every step parked on an event look again (a rank left: what it waits for
        may never come, and the kernel can say so)."""
        self._fired.extend(self._event_waiters)

    def drain(self) -> None:
        """Resume every step parked on a signalled event (its kernel runs again)."""
        while self._fired:
            key = self._fired.pop(0)
            for st in self._event_waiters.pop(key, ()):
                if (st.client, st.step) not in self._aborted:
                    st.waiting = None
                    self.advance(st)

    def fail_client_steps(self, make_error, thread=None, needing=None) -> None:
        """End with ``make_error()`` (one error each: steps of several threads may raise
        them at once) the steps this process started that have not failed yet: those
        started by ``thread``, or those waiting for rank ``needing``'s partition."""
        for client_step in self.client.values():
            if client_step.error is None and (
                    (thread is not None and client_step.thread == thread) or
                    (needing is not None and needing in client_step.remote_pending)):
                client_step.error = make_error()

    def forget(self, client: int, step: int) -> None:
        """Drop step (``client``, ``step``) and whatever is parked for it."""
        self._aborted.add((client, step))
        self.rendezvous.drop(lambda key: key[0] == client and key[1] == step)

    def forget_client(self, client: int) -> None:
        """A rank left: end the steps it asked this one to run."""
        for key in [k for k in self.remote if k[0] == client]:
            self.remote.pop(key).gen.close()
            self.forget(*key)
