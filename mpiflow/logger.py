"""mpiflow's loggers: children of the "mpiflow" logger, at MPIFLOW_LOG_LEVEL, tagged by rank.

Until the application configures logging itself (the root logger has a handler, e.g. after
``logging.basicConfig``), records at MPIFLOW_LOG_LEVEL and above go to stderr prefixed with
the MPI rank, as TensorFlow prints its INFO lines; afterwards they reach only the
application's handlers, so each record is printed once. Imports nothing of mpiflow but
``config``.
"""

from __future__ import annotations

import logging
import os
import sys

from mpiflow import config

_ROOT_NAME = "mpiflow"
# Launchers' rank variables (MPICH/Hydra, Open MPI, PMIx, Slurm), read without starting MPI.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


class _FallbackHandler(logging.StreamHandler):
    """Print to stderr only while the application has installed no handler of its own."""

    def emit(self, record):
        if not logging.getLogger().handlers:
            super().emit(record)


def launch_rank() -> str | None:
    """This process's rank as the launcher's variables give it, without starting MPI."""
    return next((os.environ[v] for v in _RANK_VARIABLES if os.environ.get(v)), None)


# The tag of every line: "[r3] " from the launcher's rank variable, "[worker:1 r3] " once
# the rank has a role (set_role, called when its Server is made).
_TAG = [f"[r{launch_rank()}] " if launch_rank() is not None else ""]


def set_role(job: str, task: int, rank: int) -> None:
    """Tag this process's log lines with its role, e.g. ``[worker:1 r3]``."""
    _TAG[0] = f"[{job}:{task} r{rank}] "


def line_tag() -> str:
    """The tag this process's lines start with (empty outside a launch)."""
    return _TAG[0]


def whole_lines() -> None:
    """Make stdout and stderr write whole lines, each with one system call, even under
    ``python -u``: a launcher forwards each rank's output as it comes, and a line written
    in pieces gets spliced with another rank's."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError, OSError):
            pass        # replaced by the application (a capture, a notebook): leave it


def stderr_reaches_terminal() -> bool:
    """Whether what this process writes to stderr ends on a terminal, directly or through
    the processes that forward it (an MPI launcher's proxy, ``mpiflow.run``'s parent).

    Follows the pipe up the parent processes (Linux ``/proc``) while each holds it and
    writes its own stderr to another pipe; a file, a socket, or a parent not holding the
    pipe means no terminal.
    """
    try:
        if os.isatty(2):
            return True
        target = os.readlink("/proc/self/fd/2")
        pid = os.getppid()
        for _ in range(_MAX_FORWARDERS):
            if not target.startswith("pipe:") or pid <= 1 or not _holds(pid, target):
                return False
            target = os.readlink(f"/proc/{pid}/fd/2")
            if target.startswith(("/dev/pts/", "/dev/tty")):
                return True
            pid = _parent_of(pid)
    except (OSError, ValueError):
        pass
    return False


_MAX_FORWARDERS = 6


def _holds(pid: int, target: str) -> bool:
    directory = f"/proc/{pid}/fd"
    return any(os.readlink(os.path.join(directory, fd)) == target
               for fd in os.listdir(directory))


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        return int(stat.read().rsplit(")", 1)[1].split()[1])


class _TaggedFormatter(logging.Formatter):
    def format(self, record):
        return _TAG[0] + super().format(record)


def get_logger(name: str) -> logging.Logger:
    """Return the logger ``name`` (under "mpiflow"), setting up the "mpiflow" logger once."""
    root = logging.getLogger(_ROOT_NAME)
    if not any(isinstance(h, _FallbackHandler) for h in root.handlers):
        handler = _FallbackHandler(sys.stderr)
        handler.setFormatter(_TaggedFormatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(config.get("MPIFLOW_LOG_LEVEL"))
    return logging.getLogger(name)
