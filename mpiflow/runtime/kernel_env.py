"""What a kernel may ask of the runtime, and nothing more: its whole interface.

A kernel gets ``ctx.env``, a ``KernelEnv``: the variables (``ref``), its random generator
(``rng``), memory for a result that may become a variable's buffer (``value_empty``),
shared resources (``resource``), graphs run on the host by themselves
(``host_function``), the rank's output (``print_lines``), signals for steps
parked on an event (``notify``), the collectives of its process group (``collectives``),
collective handles to advance between kernels (``track``) or to be woken by once done
(``watch``), who has left the job or rests in join (``departed``, ``tasks_of``,
``resting``, ``joined_ahead``), and whether the job is stopping gracefully (``stopping_gracefully``).
``LocalEnv`` serves an in-process session (no cluster: asking for collectives is an error
that says so); ``ServiceEnv`` serves the rank service of a cluster rank. Op modules use
nothing of the runtime but this (the layering test holds them to it); everything else
about the runtime is free to change.
"""

from __future__ import annotations

import os
import sys
import threading

from mpiflow import backend, errors, logger
from mpiflow.runtime import interrupts


class KernelEnv:
    """The part every runtime shares: the task's variables and resources (a
    ``ResourceStore``) and the collective handles in flight, advanced between the kernels
    of a running step and while a step waits (``poll``)."""

    def __init__(self, store):
        self.store = store
        self._tracked = []
        self.tracking = False           # plain attribute: checked after every kernel

    def ref(self, op):
        """The handle on variable ``op``'s buffer (a ``StateRef``)."""
        return self.store.ref(op)

    def rng(self, op):
        """The random generator of random op ``op``, seeded from its attrs."""
        return self.store.rng(op)

    def value_empty(self, shape, dtype):
        """An uninitialised host array for a result that may become a variable's buffer
        (an initializer's draw, which an ``Assign`` then keeps instead of copying):
        ``backend.value_empty``."""
        return backend.value_empty(shape, dtype)

    def variables_held(self) -> list:
        """The names of the variables initialized in this task's store, sorted."""
        return sorted(self.store.buffers)

    def print_lines(self, text: str, stream: str) -> None:
        """Print ``text`` to ``stream`` ("stdout" or "stderr"), each line tagged with this
        rank's role, all with one system call: a launcher forwards every rank's output as
        it comes, and a line written in pieces gets spliced with another rank's (one
        write to a pipe stays whole up to PIPE_BUF bytes)."""
        fd, python_stream = {"stdout": (1, sys.stdout), "stderr": (2, sys.stderr)}[stream]
        tag = logger.line_tag()
        data = "".join(tag + line + "\n" for line in text.split("\n")).encode(
            errors="replace")
        python_stream.flush()       # what the script printed before comes out first
        while data:
            data = data[os.write(fd, data):]

    def resource(self, name: str, factory):
        """The shared resource ``name`` of this task, made by ``factory()`` if new."""
        return self.store.resource(name, factory)

    def host_function(self, graph_def: bytes, inputs, outputs):
        """``f(*values)`` running the graph ``graph_def`` (msgpack bytes) on the host in
        a session of its own: ``outputs``' values with ``inputs`` fed ``values`` (a
        ``Dataset.map`` function the dataset engine applies to each element)."""
        from mpiflow.runtime.host_functions import host_function
        return host_function(graph_def, inputs, outputs)

    def track(self, handle, key=None) -> None:
        """Advance collective ``handle`` until it is done (a fusion bucket started early,
        finishing while the backward pass goes on); then signal ``key``, if given."""
        self._tracked.append((handle, key))
        self.tracking = True

    def watch(self, handle, key) -> None:
        """Signal ``key`` once collective ``handle`` is done (a parked kernel's wake-up)."""
        self.track(handle, key)

    def poll(self) -> bool:
        """Advance the tracked handles; signal and forget the finished ones. Return
        whether any finished.

        A handle that failed counts as finished: its error stays with it, and the kernel
        that waits on it meets the error when it tests the handle (the error then names
        that op), not whichever wait happened to poll it.
        """
        still, finished = [], []
        for item in self._tracked:
            try:
                done = item[0].test()
            except errors.MpiflowError:
                done = True
            (finished if done else still).append(item)
        self._tracked = still
        self.tracking = bool(still)
        for _, key in finished:
            if key is not None:
                self.notify(key)
        return bool(finished)

    def notify(self, key) -> None:
        """Signal ``key``: steps whose async kernel waits on it run that kernel again."""
        raise NotImplementedError

    def collectives(self, group: str):
        """The collectives of process group ``group`` (``GroupCollectives``)."""
        raise errors.FailedPreconditionError(
            "Collective ops need a distributed session: create mf.train.Server(cluster) and "
            "open the session on server.target")

    def departed(self, job: str) -> list:
        """``(task, description)`` of the tasks of ``job`` that left or died."""
        return []

    def joined_ahead(self, job: str) -> list:
        """The tasks of ``job`` that wait in a join (``server.join()``) this rank has not
        made: a collective with them cannot finish before this rank joins too."""
        return []

    def tasks_of(self, job: str) -> int | None:
        """How many tasks ``job`` has (None without a cluster)."""
        return None

    def step_client(self) -> int | None:
        """The rank whose step the running kernel is part of (None in one process): what
        a shared resource notes of who added to it, for a report of where a rank is."""
        return None

    def resting(self, job: str) -> list:
        """The tasks of ``job`` that have joined the join this rank serves in: done
        training for now."""
        return []

    def chief_can_move(self) -> bool:
        """Whether a lost chief's duties go to a surviving worker (MPIFLOW_ELASTIC)."""
        return False

    def stopping_gracefully(self) -> bool:
        """Whether the job is stopping after its current steps (SIGTERM: Slurm's time
        limit): workers that ended since did so on purpose."""
        return False


class LocalEnv(KernelEnv):
    """An in-process session's: events are a condition other threads of this process
    wait on (a sync-replicas step waiting for its chief's loop)."""

    def __init__(self, store):
        super().__init__(store)
        self._events = threading.Condition(threading.Lock())
        self._signals = {}
        self.cancel_reason = None

    def notify(self, key) -> None:
        with self._events:
            self._signals[key] = self._signals.get(key, 0) + 1
            self._events.notify_all()

    def wait_event(self, key, timeout: float) -> None:
        """Block this thread until ``key`` is signalled or ``timeout`` seconds pass.

        Callers re-check their condition after each return (a signal may come between
        their check and this wait), so a short timeout is the usual way to call it.
        """
        with self._events:
            seen = self._signals.get(key, 0)
            self._events.wait_for(lambda: self._signals.get(key, 0) != seen, timeout)

    def cancel_waits(self, reason: str) -> None:
        """Make every wait of this session end with CancelledError."""
        with self._events:
            self.cancel_reason = reason
            self._events.notify_all()


class ServiceEnv(KernelEnv):
    """A cluster rank's: events (``notify``), process groups and departures are the rank
    service's."""

    def __init__(self, service):
        super().__init__(service.store)
        self._service = service
        self._groups = {}

    def notify(self, key) -> None:
        self._service.steps.signal(key)

    def collectives(self, group: str):
        found = self._groups.get(group)
        if found is None:
            from mpiflow.runtime.group_collectives import GroupCollectives  # imports MPI
            found = self._groups[group] = GroupCollectives(self, self._service, group)
        return found

    def departed(self, job: str) -> list:
        return self._service.peers.departed(job)

    def joined_ahead(self, job: str) -> list:
        return self._service.peers.tasks_among(job, self._service.ahead_in_join)

    def tasks_of(self, job: str) -> int | None:
        return self._service.peers.tasks_of(job)

    def step_client(self) -> int | None:
        return self._service.steps.running_for

    def resting(self, job: str) -> list:
        return self._service.peers.tasks_among(job, self._service.resting)

    def chief_can_move(self) -> bool:
        return self._service.peers.chief_can_move

    def stopping_gracefully(self) -> bool:
        return interrupts.stopping()
