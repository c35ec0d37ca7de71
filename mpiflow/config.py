"""Every environment knob of mpiflow, declared once, read through one accessor.

Owns the option table (name, type, default, doc) and ``Config``, the object that reads it
from an environment. ``config.get("MPIFLOW_TIMEOUT")`` reads the process environment; tests
build their own ``Config(env={...})`` (or ``config.default().replace(...)``) and hand it to
the code they test instead of switching module-global state. Imports nothing of mpiflow but
``errors``.
"""

from __future__ import annotations

import difflib
import os
from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mpiflow import errors


@dataclass(frozen=True)
class Option:
    """One knob: its variable name, type, default (already parsed) and documentation."""

    name: str
    type: str
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    above_minimum: bool = False     # the minimum itself is not allowed (> rather than >=)
    maximum: float | None = None

    def expected(self) -> str:
        """Return the description of a valid value, used in error messages."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        text = {"int": "an int", "float": "a float", "str": "a string",
                "bool": "1/0, true/false, yes/no or on/off"}[self.type]
        if self.minimum is not None:
            text += f" {'>' if self.above_minimum else '>='} {self.minimum:g}"
        if self.maximum is not None:
            text += f"{' and' if self.minimum is not None else ''} <= {self.maximum:g}"
        return text

    def parse(self, raw: str) -> Any:
        """Return ``raw`` (the variable's text) converted to this option's type.

        Raises:
            InvalidArgumentError: naming the variable, the expected type and the bad text.
        """
        text = raw.strip()
        if self.choices:
            # Choices are matched case-insensitively and kept in their declared spelling.
            value = next((c for c in self.choices if c.lower() == text.lower()), None)
        else:
            try:
                value = _PARSERS[self.type](text)
            except ValueError:
                value = None
        if value is None or value != value or (  # value != value: NaN
                self.minimum is not None and (value < self.minimum or (
                    self.above_minimum and value == self.minimum))) or (
                self.maximum is not None and value > self.maximum):
            raise errors.op_error(
                errors.InvalidArgumentError, f"Bad value for environment variable {self.name}",
                expected=f"{self.expected()} ({self.doc})", got=repr(raw))
        return value


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str,
                                              "bool": _parse_bool}

OPTIONS: dict[str, Option] = {}

# The most MPIFLOW_CHECK_CARRY_BYTES may be: a rank's check messages are then at most this
# plus a header, so every rank receives them into a buffer that long, whatever its own
# setting or call (a receive never meets a longer message: Open MPI writes one past the
# buffer's end).
CHECK_CARRY_MAX_BYTES = 64 << 10

# A peer is taken for lost only after this many heartbeat intervals without a word: one
# late beat (a busy node, a slow network) must not end a healthy job.
HEARTBEATS_PER_PEER_TIMEOUT = 3


def _declare(*options: Option) -> None:
    for option in options:
        if option.name in OPTIONS:
            raise errors.AlreadyExistsError(f"Option {option.name} is declared twice")
        if option.type not in _PARSERS:
            raise errors.InvalidArgumentError(
                f"Option {option.name} has type {option.type!r}, expected one of "
                f"{sorted(_PARSERS)}")
        OPTIONS[option.name] = option


_declare(
    Option("MPIFLOW_PS", "int", None, minimum=0,
           doc="number of ps tasks ClusterSpec.from_mpi makes when its ps argument is None; "
               "unset: 1 ps when the job has 2 or more ranks, else 0"),
    Option("MPIFLOW_PS_POLICY", "str", "block", choices=("block", "spread"),
           doc="which ranks become ps: 'block' = ranks 0..N-1; 'spread' = one per node "
               "first (lowest rank of each node), then the next rank of each node"),
    Option("MPIFLOW_TIMEOUT", "float", 300.0, minimum=0, above_minimum=True,
           doc="seconds any wait (receive, collective, layout gather) may take before it "
               "raises DeadlineExceededError"),
    Option("MPIFLOW_HEARTBEAT_S", "float", 1.0, minimum=0,
           doc="seconds between the heartbeats every rank exchanges with rank 0, which "
               "notice a host that died or dropped off the network; 0 = no heartbeats"),
    Option("MPIFLOW_PEER_TIMEOUT", "float", 30.0, minimum=0, above_minimum=True,
           doc="seconds without a heartbeat after which a rank counts as lost: the job "
               "ends with an error naming its host and ranks; at least "
               f"{HEARTBEATS_PER_PEER_TIMEOUT} heartbeat intervals (MPIFLOW_HEARTBEAT_S)"),
    Option("MPIFLOW_PROGRESS", "str", "auto", choices=("auto", "bar", "lines", "off"),
           doc="progress of training on the chief: 'bar' = a live tqdm bar, 'lines' = a "
               "line every MPIFLOW_PROGRESS_INTERVAL_S (step, steps/s, loss, ETA) that reads "
               "well in a log file, 'auto' = the bar when the rank's stderr reaches a "
               "terminal (also through the MPI launcher), else lines"),
    Option("MPIFLOW_PROGRESS_INTERVAL_S", "float", 10.0, minimum=0, above_minimum=True,
           doc="seconds between progress lines (MPIFLOW_PROGRESS=lines)"),
    Option("MPIFLOW_TRACE_MAX_EVENTS", "int", 200_000, minimum=1,
           doc="traced events (RunOptions(trace_level=FULL_TRACE)) each process keeps for "
               "mf.timeline.write_chrome_trace, which writes and clears them; past this the "
               "oldest are dropped (a script that traces now and then for a per-step "
               "Timeline and never writes the job's trace would otherwise keep them all)"),
    Option("MPIFLOW_ELASTIC", "bool", False,
           doc="a non-chief worker lost in ps training (its exception, kill -9, its host) "
               "is left behind and the others train on, instead of ending the job; needs a "
               "launcher that keeps the other ranks (mpiflow launch --elastic, mpiexec "
               "-disable-auto-cleanup, srun --no-kill)"),
    Option("MPIFLOW_STOP_GRACE_S", "float", 25.0, minimum=0, above_minimum=True,
           doc="seconds a graceful stop may take (SIGTERM while training: the current step, "
               "the chief's checkpoint); then the rank ends as interrupted. Slurm waits 30 s "
               "(KillWait) between SIGTERM and SIGKILL unless --signal asks earlier"),
    Option("MPIFLOW_LAUNCH_ADDRESS", "str", None,
           doc="set by mpiflow launch for its ranks: host:port of its line to them (who "
               "each rank is, how it ended, its stack on demand)"),
    Option("MPIFLOW_RESTART", "int", 0, minimum=0,
           doc="set by mpiflow launch for its ranks: how many times it has started the job "
               "again after a failure (0 on the first start)"),
    Option("MPIFLOW_LOG_LEVEL", "str", "INFO",
           choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
           doc="level of mpiflow's logger"),
    Option("MPIFLOW_POLL_MAX_SLEEP_US", "int", 200, minimum=0,
           doc="cap, in microseconds, of the sleep a waiting rank backs off to between polls"),
    Option("MPIFLOW_POLL_SPIN_US", "int", None, minimum=0,
           doc="microseconds a waiting rank keeps polling (yielding the CPU to any rank "
               "that needs it) before it starts to sleep; unset: 20000 where each rank "
               "of the node has a processor, 2000 where the node runs more ranks than "
               "the processors they may run on"),
    Option("MPIFLOW_CPU_THREADS", "int", 0, minimum=0,
           doc="threads each rank's numpy (BLAS) kernels may use; 0 = the processors "
               "the rank may run on (its affinity: a Slurm allocation, a binding) "
               "divided by the job's ranks that share them, unless OMP_NUM_THREADS or "
               "a BLAS variable is set"),
    Option("MPIFLOW_HOST_MEMORY_CACHE", "bool", True,
           doc="keep freed large host buffers in the process (glibc mallopt) instead of "
               "returning them to the OS, so each step does not pay page faults anew"),
    Option("MPIFLOW_RING_CHUNK_BYTES", "int", 1 << 20, minimum=1,
           doc="bytes per message of mpiflow's ring allreduce: each of the ring's segments "
               "moves in chunks of at most this size, so the reduction of one chunk "
               "overlaps the transfer of the next"),
    Option("MPIFLOW_RING_WINDOW", "int", 4, minimum=1,
           doc="chunks of the ring allreduce in flight per rank (receives posted ahead, "
               "each with a scratch buffer of MPIFLOW_RING_CHUNK_BYTES)"),
    Option("MPIFLOW_RING_MIN_BYTES", "int", None, minimum=0,
           doc="algorithm='auto' uses mpiflow's ring for host arrays of at least this many "
               "bytes and MPI's Iallreduce below; 0 = never the ring; unset: 512 KiB "
               "between 2 ranks, 4 MiB among more (the measurements behind it are in "
               "mpiflow/comm/collectives/__init__.py)"),
    Option("MPIFLOW_CHECK_CARRY_BYTES", "int", 32 << 10, minimum=0,
           maximum=CHECK_CARRY_MAX_BYTES,
           doc="a checked allreduce of MPI's strategy of at most this many bytes moves in "
               "the cross-rank check's own messages (a recursive-doubling exchange, one "
               "latency for check and data) instead of the check followed by MPI's "
               "Iallreduce; 0 = never; at most 64 KiB (every rank receives the check's "
               "messages into a buffer that long). Every rank must use the same value"),
    Option("MPIFLOW_COLLECTIVE_SPIN_US", "int", 2000, minimum=0,
           doc="microseconds a rank waiting in a collective keeps polling (yielding the "
               "CPU) before it starts to sleep; longer than the server loop's spin even on "
               "a crowded node, because every rank of a collective is active at once and a "
               "sleeping rank stalls the others (4 ranks on 2 cores: 1 MiB allreduce 2.5x "
               "slower with 50)"),
    Option("MPIFLOW_GPU", "int", None, minimum=0,
           doc="the GPU (of those the process sees) that this rank binds as its "
               "/device:GPU:0; unset = the rank's local rank (from the node split of the "
               "job) modulo the GPUs the node shows"),
    Option("MPIFLOW_CUDA_AWARE_MPI", "str", "auto", choices=("auto", "0", "1"),
           doc="whether MPI takes GPU buffers directly: auto = ask the MPI library "
               "(MPIX_Query_cuda_support), 1 = yes, 0 = no (GPU tensors go through pinned "
               "host buffers)"),
    Option("MPIFLOW_FUSE_ELEMENTWISE", "bool", True,
           doc="run chains of elementwise ops on a GPU as one fused kernel (cupy.fuse); "
               "0 = one kernel per op"),
    Option("MPIFLOW_CHECK_KERNEL_WRITES", "bool", False,
           doc="hand every kernel its inputs read-only (numpy: read-only views; GPU: "
               "compared with a copy after the kernel), so a kernel that writes an array it "
               "does not own (a variable's buffer, a fed array) fails at once naming its op; "
               "for tests and debugging (the GPU check copies every input)"),
    Option("MPIFLOW_FUSION_THRESHOLD_BYTES", "int", 64 << 20, minimum=0,
           doc="size of the fusion buffers that FusedAllreduce packs small tensors into "
               "(one allreduce per buffer); a tensor larger than this is its own bucket; "
               "0 = no fusion"),
)


def option(name: str) -> Option:
    """Return the declaration of ``name``.

    Raises:
        InvalidArgumentError: ``name`` is not declared; the message lists the known names.
    """
    try:
        return OPTIONS[name]
    except KeyError:
        raise errors.op_error(errors.InvalidArgumentError, f"Unknown mpiflow option {name!r}",
                              expected="one of " + ", ".join(sorted(OPTIONS)),
                              got=repr(name)) from None


class Config:
    """The values of every option, read from an environment mapping.

    Args:
        env: the variables to read; None reads ``os.environ`` live at each ``get``, so a
            changed environment is seen without a reload. An empty string counts as unset.
    """

    def __init__(self, env: Mapping[str, str | None] | None = None):
        self._env = os.environ if env is None else env

    def get(self, name: str) -> Any:
        """Return the value of option ``name``: its variable parsed, or its default.

        Raises:
            InvalidArgumentError: ``name`` is unknown, or its variable is malformed.
        """
        decl = option(name)
        raw = self._env.get(name)
        if raw is None or raw.strip() == "":
            return decl.default
        return decl.parse(raw)

    def is_set(self, name: str) -> bool:
        """Return whether option ``name`` comes from the environment (not its default)."""
        option(name)
        raw = self._env.get(name)
        return raw is not None and raw.strip() != ""

    def replace(self, **values: Any) -> Config:
        """Return a new Config with ``values`` over this one; None unsets a variable.

        Values are given as they would be written in the environment or as Python values
        (``replace(MPIFLOW_PS=2)``); they are checked when read, as the environment is.
        """
        for name in values:
            option(name)
        layer = {k: None if v is None else str(v) for k, v in values.items()}
        return Config(ChainMap(layer, self._env))

    def as_dict(self) -> dict[str, Any]:
        """Return ``{name: value}`` for every declared option."""
        return {name: self.get(name) for name in sorted(OPTIONS)}

    def unknown_variables(self) -> list[str]:
        """Return the ``MPIFLOW_*`` variables in the environment that no option declares.

        A typo (``MPIFLOW_TIMEOUTS=10``) is otherwise silently ignored.
        """
        return sorted(k for k in self._env if k.startswith("MPIFLOW_") and k not in OPTIONS)

    def unknown_with_hints(self) -> list[str]:
        """Return each unknown ``MPIFLOW_*`` variable with the option it may mean."""
        hints = []
        for name in self.unknown_variables():
            close = difflib.get_close_matches(name, OPTIONS, n=1, cutoff=0.75)
            hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
        return hints

    def bad_values(self) -> list[str]:
        """Return one message per option whose variable is set to a value it refuses."""
        found = []
        for name in sorted(OPTIONS):
            try:
                self.get(name)
            except errors.InvalidArgumentError as exc:
                found.append(str(exc))
        return found

    def __repr__(self) -> str:
        source = "os.environ" if self._env is os.environ else "env"
        return f"Config({source})"


_DEFAULT = Config()


def default() -> Config:
    """Return the Config that reads the process environment."""
    return _DEFAULT


def get(name: str) -> Any:
    """Return the value of option ``name`` from the process environment."""
    return _DEFAULT.get(name)


def heartbeat_settings(config: Config | None = None) -> tuple[float, float]:
    """Return (MPIFLOW_HEARTBEAT_S, MPIFLOW_PEER_TIMEOUT) after checking they agree.

    Raises:
        InvalidArgumentError: the peer timeout is shorter than
            ``HEARTBEATS_PER_PEER_TIMEOUT`` heartbeat intervals (every healthy peer would
            be taken for lost); the message names both variables.
    """
    config = config or _DEFAULT
    interval = config.get("MPIFLOW_HEARTBEAT_S")
    timeout = config.get("MPIFLOW_PEER_TIMEOUT")
    if interval > 0 and timeout < HEARTBEATS_PER_PEER_TIMEOUT * interval:
        raise errors.InvalidArgumentError(
            f"MPIFLOW_PEER_TIMEOUT={timeout:g} s is shorter than "
            f"{HEARTBEATS_PER_PEER_TIMEOUT} heartbeats (MPIFLOW_HEARTBEAT_S={interval:g} s): "
            "every healthy rank would be taken for lost between two heartbeats; raise "
            f"MPIFLOW_PEER_TIMEOUT to at least {HEARTBEATS_PER_PEER_TIMEOUT * interval:g} s or "
            "lower MPIFLOW_HEARTBEAT_S")
    return interval, timeout


def describe() -> str:
    """Return one line per option: name, type, default and documentation."""
    return "\n".join(
        f"{o.name} ({o.expected()}, default {o.default!r}): {o.doc}"
        for o in sorted(OPTIONS.values(), key=lambda o: o.name))
