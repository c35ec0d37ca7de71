"""RankService: this rank's engine, serving the partitions other ranks registered here
and driving the steps this process starts.

Every rank has one. It dispatches messages by one table (``KINDS``: kind -> what the
message carries, and its handler) and runs the protocols between ranks:

- register / close: a client ships a partition (plain GraphDef nodes) once; ranks keep
  it under a handle and drop it when the client's session closes;
- run / done / err / abort: a client starts a step on every rank with a piece of it;
  tensors of the step travel as ``t`` messages (``transfers``); each rank reports done or
  the error, and an aborted step is forgotten everywhere;
- join / reset / bye / fatal: serving until every rank is done, clearing the cluster,
  leaving, and a failing rank's last word (``membership``).

A step is a generator parked where it waits (``steps``), so one ps interleaves the steps
of every worker without threads, and a client waiting for its own step keeps serving the
others meanwhile. Every wait goes through ``waiting.wait_until``; who is alive is
``comm.peers``'s.
"""

from __future__ import annotations

import socket
import threading

from mpiflow import backend, config, errors
from mpiflow.comm.backoff import Backoff
from mpiflow.comm.cluster import Layout
from mpiflow.comm.peers import Peers
from mpiflow.comm.transport import Transport
from mpiflow.framework.graph import Graph
from mpiflow.framework.graph_def import import_graph_def
from mpiflow.ops.registry import registered_op_types
from mpiflow.runtime import interrupts, tracing, waiting, whereabouts
from mpiflow.runtime.executor import Plan
from mpiflow.runtime.kernel_env import ServiceEnv
from mpiflow.runtime.membership import JobMembership
from mpiflow.runtime.messages import (
    INT,
    OPT_INT,
    STR,
    STRS,
    Kind,
    check_message,
    error_header,
    rebuild_error,
)
from mpiflow.runtime.resources import ResourceStore
from mpiflow.runtime.steps import ClientStep, Step, Steps
from mpiflow.runtime.transfers import StepIO

# How long a waiting rank polls before it sleeps, unless MPIFLOW_POLL_SPIN_US says.
CROWDED_SPIN_US = 2000          # more ranks on the node than cores
OWN_CORE_SPIN_US = 20000        # a core for every rank


def poll_spin_us() -> int:
    """Microseconds a waiting rank polls before it sleeps: MPIFLOW_POLL_SPIN_US, else
    by whether the node has a core for each of the job's ranks on it (known once the
    layout is, ``backend.set_local_rank``)."""
    spin_us = config.get("MPIFLOW_POLL_SPIN_US")
    if spin_us is not None:
        return spin_us
    return CROWDED_SPIN_US if backend.node_crowded() else OWN_CORE_SPIN_US


class RankService(JobMembership):
    """The per-process server loop and client driver (one per MPI process)."""

    def __init__(self, comm, timeout=None, max_sleep_s=None):
        max_sleep = max_sleep_s if max_sleep_s is not None else \
            config.get("MPIFLOW_POLL_MAX_SLEEP_US") * 1e-6
        self.host = socket.gethostname()
        # One gathering of the layout serves the core share, the local liveness checks
        # and the heartbeats' host names.
        layout = Layout.from_comm(comm, host=self.host)
        self.cpu_threads = backend.share_cpu_cores(layout.cpu_threads)
        # The GPU binding (applied lazily), and the processors that say a node is crowded.
        backend.set_local_rank(layout.local_rank, layout.local_size, layout.node_cpus)
        # Yielding polls keep replies at microseconds and give the core to any rank that
        # needs it, even on a crowded node: 3-4 ranks on 2 cores stepped a small model
        # 2.6x faster with 2000 us than with 50 us, and a big one no slower
        # (benchmarks/peers/ps_mlp.py). A rank with a core of its own polls longer: it
        # takes that core from nobody, while a sleep ends late (100 us for 20 us asked
        # on a VM), so a worker waiting 3 ms for a ps's apply of 16 MiB saw the reply
        # about 0.5 ms late after 2000 us (pushes of 16 MiB: 0.71-0.75 of raw MPI with
        # 2000 us, 0.81-0.91 with 20000; on a crowded node longer polls did not help).
        # An idle rank still backs off to sleeps.
        spin_us = poll_spin_us()
        self._new_backoff = lambda: Backoff(spin_s=spin_us * 1e-6, max_s=max_sleep)
        self.transport = Transport(comm)
        self.rank = self.transport.rank
        self.size = self.transport.size
        self.timeout = timeout if timeout is not None else config.get("MPIFLOW_TIMEOUT")
        self.peers = Peers(comm, layout, self.host, config.heartbeat_settings(),
                           elastic=config.get("MPIFLOW_ELASTIC"))
        if self.peers.heartbeat is not None:     # a peer that gives up waiting asks
            self.peers.heartbeat.whereabouts = whereabouts.report
        self.transport.peer_lost = self._peer_lost
        self.transport.peer_failed = self._peer_failed
        self.transport.receiver_dead = self.peers.is_dead
        self.store = ResourceStore()
        self.store.write_barrier = self.transport.wait_guard
        self.env = ServiceEnv(self)         # what kernels of this rank see of it
        self.steps = Steps()
        whereabouts.parked_steps = lambda: self.steps.parked(self.describe)
        self.groups = {}            # process-group name -> communicator
        self._partitions = {}       # (client, handle) -> Plan registered here
        self._replies = {}          # (what, rank, n) -> None or the error it reported
        self._next_step = 0
        self._next_handle = 0
        self._init_membership()
        # Sessions may run steps from several threads (a sync-replicas chief runs its sync
        # loop beside training): every MPI call and every change of this state happens
        # under this lock, and a waiting thread releases it between polls.
        self._lock = threading.RLock()
        tracing.TRACER.describe = self.describe_self

    def describe(self, rank: int) -> str:
        return self.peers.describe(rank)

    def describe_self(self) -> str:
        """This rank as every line about it names it: "rank 2 (worker:1) on node3"."""
        return f"{self.describe(self.rank)} on {self.host}"

    @property
    def lost_contact(self) -> bool:
        """Whether the heartbeats found a rank lost (then MPI_Abort may never return)."""
        return self.peers.lost_contact

    def add_group(self, name: str, comm) -> None:
        """Make ``comm`` (a sub-communicator, e.g. the workers') the process group ``name``."""
        self.groups[name] = comm

    # -- client side: registration, steps ----------------------------------------------------
    def register(self, partitions: dict) -> dict:
        """Register ``{rank: node list}`` on those ranks; return ``{rank: handle}``."""
        with self._lock:
            handles = {}
            for rank, nodes in partitions.items():
                self.peers.check_not_gone(rank, "register a partition on")
                handles[rank] = self._next_handle
                self._next_handle += 1
                self.transport.send(rank, {"k": "reg", "c": self.rank, "h": handles[rank],
                                           "n": nodes})
        failures = self._await_replies([("reg", r, h) for r, h in handles.items()],
                                       "registration of a partition on")
        if failures:
            self.unregister(handles)
            raise failures[0]
        return handles

    def _await_replies(self, keys, what: str) -> list:
        """Wait for the reply of every key; return the errors among them."""
        self._wait_until(lambda: all(k in self._replies for k in keys),
                         lambda: what + " " + ", ".join(
                             self.describe(k[1]) for k in keys if k not in self._replies))
        with self._lock:
            return [e for e in (self._replies.pop(k) for k in keys) if e is not None]

    def _reply(self, key, error=None) -> None:
        """Record the reply ``key`` = (what, rank, n) that ``_await_replies`` waits for."""
        self._replies[key] = error

    def _clear_state(self) -> None:
        """Drop every variable, resource and registered partition of this rank."""
        self.store.clear()
        self._partitions.clear()

    def _forget_rank(self, rank: int) -> None:
        """``rank`` left: drop what it registered and asked here, and end the steps of
        ours that still need it (they could never finish)."""
        for key in [k for k in self._partitions if k[0] == rank]:
            del self._partitions[key]
        self.steps.forget_client(rank)
        self.steps.fail_client_steps(lambda: errors.UnavailableError(
            f"{self.describe(rank)} left the job while rank {self.rank} was running a step "
            "that needs it"), needing=rank)

    def _peer_lost(self, rank: int) -> bool:
        """Whether ``rank``, whose message this rank is receiving or whose receipt of one
        a writer waits for, was lost (the checks of the dead run here too: this rank
        waits on that message)."""
        self.peers.check()
        return self.peers.is_dead(rank)

    def _peer_failed(self, rank: int, exc: Exception) -> None:
        """MPI failed a message with ``rank``: MPICH does so for a rank whose process
        ended, in a job that goes on after it (``-disable-auto-cleanup``, elastic). A rank
        the job can go on without is lost here, as if its death had been found; another
        ends this rank with an error that names it."""
        if self.peers.is_dead(rank):
            return
        describe_error = getattr(exc, "Get_error_string", None)     # an MPI.Exception's
        why = (describe_error() if callable(describe_error) else str(exc)).strip()
        # A failed Testall says only where its requests' errors are: nothing to show.
        why = "" if "MPI_ERROR field" in why else f" ({why})"
        if self.peers.expendable(rank):
            self.peers.lose(rank, f"MPI failed a message with it{why}: its process ended")
            return
        error = errors.UnavailableError(
            f"MPI failed a message between rank {self.rank} and {self.describe(rank)}{why}: "
            f"its process has ended or its host is unreachable; rank {self.rank} cannot "
            "continue")
        error.brief = True
        raise error

    def unregister(self, handles: dict) -> None:
        """Tell each rank to drop the partition registered under its handle."""
        with self._lock:
            for rank, handle in handles.items():
                if not self.peers.is_gone(rank):
                    self.transport.send(rank, {"k": "close", "c": self.rank, "h": handle})

    def run_step(self, local_plan, feed_values, handles: dict, timeout=None, trace=None):
        """Run one step: the remote partitions in ``handles`` and ``local_plan`` here,
        waiting at most ``timeout`` seconds (default MPIFLOW_TIMEOUT) for other ranks.
        With a ``trace`` list, this rank's part is timed into it and the other ranks
        time theirs into their own ``TRACER``."""
        client_step = ClientStep(handles)

        def done(result):
            client_step.result = result

        def failed(exc):
            client_step.error = exc

        with self._lock:
            step = self._next_step
            self._next_step += 1
            self.steps.client[step] = client_step
            client_step.thread = threading.get_ident()
            for rank, handle in handles.items():
                self.peers.check_not_gone(rank, "run a step on")
                self.transport.send(rank, {"k": "run", "c": self.rank, "h": handle, "s": step,
                                           "tr": int(trace is not None)})
            io = StepIO(self.transport, self.rank, step, self.steps.rendezvous)
            local = Step(self.rank, step, None, local_plan.run_steps(feed_values, io, trace),
                         done, failed)
            client_step.local = local
        try:
            with self._lock:
                self.steps.advance(local)
                self.steps.drain()
            self._wait_until(client_step.finished,
                             lambda: client_step.describe(step, self.describe), timeout)
        except BaseException as exc:
            client_step.error = client_step.error or exc
        with self._lock:
            del self.steps.client[step]
            # The local step's callbacks hold ``client_step``: without this the cycle keeps
            # the fetched arrays alive until the garbage collector runs, and the transport's
            # pool, which reuses a receive buffer once nobody references it, never could.
            client_step.local = None
            if client_step.error is not None:
                self._abort(step, handles, local)
                raise client_step.error
        return client_step.result

    def cancel_steps_of_thread(self, thread_ident: int, reason: str) -> None:
        """Make the steps another thread is waiting for end with CancelledError."""
        with self._lock:
            self.steps.fail_client_steps(lambda: errors.CancelledError(reason),
                                         thread=thread_ident)

    def _abort(self, step, handles, local):
        local.gen.close()
        for rank in handles:
            if not self.peers.is_gone(rank):
                self.transport.send(rank, {"k": "abort", "c": self.rank, "s": step})
        self.steps.forget(self.rank, step)

    # -- waiting ---------------------------------------------------------------------------------
    def _wait_until(self, predicate, describe, timeout=None, during_interrupt=False) -> None:
        """Serve (dispatch messages, advance collectives) until ``predicate()``; with
        ``describe``, give up after ``timeout`` (default MPIFLOW_TIMEOUT) with an error
        saying what was waited for. Safe from several threads: whichever thread polls
        dispatches, and each checks its own predicate. Once the job is interrupted, only
        a wait ``during_interrupt`` goes on; any other raises CancelledError."""
        transport = self.transport

        def step():
            with self._lock:
                if predicate():
                    return waiting.DONE
                message = transport.poll()
                if message is not None:
                    self._dispatch(message)
                    self.steps.drain()
                    return waiting.MOVED
                if transport.has_pending_sends():
                    transport.complete_sends()
                if self.env.tracking and self.env.poll():
                    self.steps.drain()
                    return waiting.MOVED
            return waiting.IDLE

        def idle():
            self.peers.check()
            if self.peers.newly_lost:
                self._handle_losses()
            # Interrupted, the rank unwinds (closing sessions, leaving joins) while its
            # peers stop too: a wait for them would last until the exit timer kills this
            # rank mid-cleanup. Only the interrupt's own handshake waits.
            if interrupts.interrupted() and not during_interrupt:
                raise errors.CancelledError(
                    f"Rank {self.rank} stopped waiting for "
                    f"{describe() if describe else 'the other ranks'}: the job is being "
                    "interrupted")

        def busy():
            # A send still in flight (or a payload arriving) moves only while this rank
            # is inside MPI where MPI copies through shared memory in pieces (MPICH
            # without its single-copy CMA transfers): a rank that slept here would pace
            # the copy by its sleeps (1 ps + 2 workers, MLP, CMA off: 8 steps/s
            # sleeping, 90-107 polling and serving others meanwhile; 173-178 with CMA).
            return self.env.tracking or transport.has_pending_sends() or \
                transport.receiving()

        waiting.wait_until(step, describe, timeout or self.timeout,
                           self._new_backoff(), idle=idle, busy=busy,
                           who=f"Rank {self.rank}")

    def _dispatch(self, message) -> None:
        kind = check_message(message.header, len(message.arrays),
                             self.describe(message.source), self.rank, KINDS)
        try:
            KINDS[kind].handler(self, message.source, message.header, message.arrays)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.DataLossError(
                f"Rank {self.rank} got a malformed '{kind}' message from "
                f"{self.describe(message.source)}: {type(exc).__name__}: {exc}") from exc

    # -- handlers ---------------------------------------------------------------------------------
    def _on_tensor(self, source, h, arrays):
        if h.get("d") == 1:         # the last message of the sender's partition
            self._on_done(source, h, ())
        self.steps.deliver(h["c"], h["s"], h["e"], arrays)

    def _on_register(self, source, h, arrays):
        client, handle = h["c"], h["h"]
        try:
            graph = Graph()
            import_graph_def({"node": h["n"]}, name="", graph=graph,
                             known_op_types=set(registered_op_types()))
            plan = Plan.from_order(graph, graph.get_operations(), [], [], self.env)
        except Exception as exc:
            self._send_error(client, None, handle, exc)
            return
        self._partitions[(client, handle)] = plan
        self.transport.send(client, {"k": "reg_ok", "h": handle})

    def _on_register_ok(self, source, h, arrays):
        self._reply(("reg", source, h["h"]))

    def _on_run(self, source, h, arrays):
        client, handle, step = h["c"], h["h"], h["s"]
        plan = self._partitions.get((client, handle))
        if plan is None:
            self._send_error(client, step, handle, errors.NotFoundError(
                f"No partition registered under handle {handle} for {self.describe(client)}"))
            return
        key = (client, step)
        trace = [] if h["tr"] else None

        def done(result):
            if trace is not None:       # a traced step: its events join this TRACER
                tracing.TRACER.extend(trace)
            self.steps.remote.pop(key, None)
            if not io.said_done:
                self.transport.send(client, {"k": "done", "s": step})

        def failed(exc):
            self.steps.remote.pop(key, None)
            self.steps.forget(client, step)
            self._send_error(client, step, handle, exc)

        io = StepIO(self.transport, client, step, self.steps.rendezvous)
        st = Step(client, step, handle, plan.run_steps((), io, trace), done, failed)
        self.steps.remote[key] = st
        self.steps.advance(st)

    def _on_done(self, source, h, arrays):
        client_step = self.steps.client.get(h["s"])
        if client_step is not None:
            client_step.remote_pending.discard(source)

    def _on_error(self, source, h, arrays):
        exc = rebuild_error(h)
        if h.get("s") is None:
            self._reply(("reg", source, h["h"]), exc)
            return
        client_step = self.steps.client.get(h["s"])
        if client_step is not None and client_step.error is None:
            client_step.error = exc

    def _on_abort(self, source, h, arrays):
        self.steps.give_up(h["c"], h["s"])

    def _on_close(self, source, h, arrays):
        self._partitions.pop((h["c"], h["h"]), None)

    def _send_error(self, client, step, handle, exc):
        self.transport.send(client, error_header(exc, step, handle, self.rank,
                                                 self.describe(self.rank), self.host))


# Every kind of message: what it must carry, and the handler that acts on it.
KINDS = {
    "t": Kind({"c": INT, "s": INT, "e": STRS}, "e", RankService._on_tensor),
    "reg": Kind({"c": INT, "h": INT, "n": (list,)}, 0, RankService._on_register),
    "reg_ok": Kind({"h": INT}, 0, RankService._on_register_ok),
    "run": Kind({"c": INT, "h": INT, "s": INT, "tr": INT}, 0, RankService._on_run),
    "done": Kind({"s": INT}, 0, RankService._on_done),
    "err": Kind({"s": OPT_INT, "h": OPT_INT, "cls": STR, "msg": STR, "rank": INT,
                 "who": STR, "host": STR, "tb": STR}, 0, RankService._on_error),
    "abort": Kind({"c": INT, "s": INT}, 0, RankService._on_abort),
    "close": Kind({"c": INT, "h": INT}, 0, RankService._on_close),
    "join": Kind({"n": INT}, 0, RankService._on_join),
    "reset": Kind({"n": INT}, 0, RankService._on_reset),
    "reset_ok": Kind({"n": INT}, 0, RankService._on_reset_ok),
    "bye": Kind({"how": STR}, 0, RankService._on_bye),
    "fatal": Kind({"msg": STR, "who": STR, "host": STR}, 0, RankService._on_fatal),
    "intr": Kind({"sig": INT, "who": STR, "at": INT}, 0, RankService._on_interrupted),
    "stop": Kind({"sig": INT, "who": STR}, 0, RankService._on_stop),
    "gone": Kind({"rank": INT, "how": STR}, 0, RankService._on_gone),
    "chief_moves": Kind({}, 0, RankService._on_chief_moves),
}
