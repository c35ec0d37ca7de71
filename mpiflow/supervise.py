"""A parent process that watches one rank and names it if a signal kills it.

MPI launchers end the whole job when a rank dies by a signal, at once and with every
other rank, so no rank can say which one it was; MPICH's says only "Killed (signal 9)".
``python -m mpiflow.run`` therefore runs the script in a child and waits: the child tells
the parent who it is (rank, role, host) through a pipe once it knows, and if the child
dies by a signal the parent, which no signal touched, prints that before it exits with
the shell's code for it (128 + signal). The parent never starts MPI: the child is the
rank (it inherits the launcher's environment), and it dies with the parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

from mpiflow import config
from mpiflow.logger import launch_rank

_LEAVING = "leaving-at"
# The parent leaves this long after the moment the ranks agreed to leave: its child has
# left by then, and every parent leaves at about the same moment.
_AFTER_CHILD_S = 0.1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1
_LAUNCH_ANSWER_S = 2.0      # how long a watcher waits for mpiflow launch to note its child


def on_parent_death(signum: int):
    """A ``preexec_fn`` that makes the child get ``signum`` when this process dies (Linux;
    elsewhere None). prctl is looked up here, before the fork, so the child only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signum)


def supervise(command: list[str], status_variable: str, link=None) -> int:
    """Run ``command`` as a child and return its exit code; name it if a signal kills it.

    The child finds in ``status_variable`` the descriptor it writes its name to. ``link``
    (the rank's line to ``mpiflow launch``, kept as its watcher) is told how the child
    ended before this process exits: until then the MPI launcher sees nothing end.
    """
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    env = dict(os.environ, **{status_variable: str(write_end)})
    try:
        # Every descriptor is inherited: the launcher's own (MPICH's PMI_FD) belong to the
        # rank.
        child = subprocess.Popen(command, env=env, close_fds=False,
                                 preexec_fn=on_parent_death(signal.SIGKILL))
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        code = _not_started(command[0], exc)
        if link is not None:
            link.ask("child_ended", _LAUNCH_ANSWER_S, code=code)
        return code
    os.close(write_end)
    forwarded = []

    def forward(signum, frame):
        forwarded.append(signum)
        child.send_signal(signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    code = child.wait()
    if link is not None:
        link.ask("child_ended", _LAUNCH_ANSWER_S, code=code)
    said = _lines(read_end)
    if forwarded:
        # The job is being stopped: leave when the ranks agreed to, all together (the
        # launcher kills whoever still runs when the first rank exits: "killed", code 9).
        leave_at = next((float(line.split()[1]) for line in reversed(said)
                         if line.startswith(_LEAVING)), 0.0)
        time.sleep(max(0.0, min(leave_at + _AFTER_CHILD_S - time.time(), 1.0)))
        sys.stderr.flush()
        os._exit(128 - code if code < 0 else code)
    name = next((line for line in reversed(said) if not line.startswith(_LEAVING)), None)
    if code < 0:
        signum = -code
        if signum not in forwarded:     # not the launcher stopping the job: say who died
            rank = launch_rank()      # who we are, until the child told us more
            who = name or (f"rank {rank}" if rank is not None else "this rank")
            ending = "the others go on if they can (MPIFLOW_ELASTIC)" if \
                config.get("MPIFLOW_ELASTIC") else "the job ends"
            sys.stderr.write(f"[{who}] was killed by {signal.Signals(signum).name} (signal "
                             f"{signum}); {ending}\n")
            sys.stderr.flush()
        return 128 + signum
    return code


# What a shell exits with when it cannot run a command: 127 when there is no such command,
# 126 when there is one but it cannot be executed (no permission, not a program).
_NOT_FOUND_CODE = 127
_NOT_EXECUTABLE_CODE = 126


def _not_started(program: str, exc: OSError) -> int:
    """Say in one line why ``program`` could not be started, and return the code a shell
    would exit with: a user who mistypes the command given to ``mpiflow launch`` sees
    which command it was on every rank, not a Python traceback of this watcher."""
    if isinstance(exc, FileNotFoundError):
        why, code = "command not found", _NOT_FOUND_CODE
    else:
        why, code = f"cannot execute it ({exc.strerror or exc})", _NOT_EXECUTABLE_CODE
    rank = launch_rank()
    where = f"[rank {rank}] " if rank is not None else ""
    sys.stderr.write(f"{where}mpiflow.supervise: {program!r}: {why}\n")
    sys.stderr.flush()
    return code


def tell_parent(descriptor: str, name: str) -> None:
    """In the child: tell the watching parent this rank's name (e.g. "rank 2 (worker:1)
    on node3"), through the descriptor it passed; later, when an interrupted job's ranks
    leave (``interrupts.LEAVING_LISTENERS``), the moment they agreed on."""
    try:
        fd = int(descriptor)
        os.write(fd, (name + "\n").encode())
    except (ValueError, OSError):
        return            # no parent listening: nothing to tell

    def leaving(moment):
        os.write(fd, f"{_LEAVING} {moment!r}\n".encode())

    from mpiflow.runtime import interrupts  # noqa: PLC0415  (the child's side only)
    interrupts.LEAVING_LISTENERS.append(leaving)


def _lines(fd: int) -> list[str]:
    chunks = []
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return [line for line in b"".join(chunks).decode(errors="replace").split("\n")
            if line.strip()]


STATUS_VARIABLE = "_MPIFLOW_RUN_STATUS_FD"     # in the watched child: where to say who it is


def main(argv=None) -> int:
    """``python -m mpiflow.supervise COMMAND...``: run COMMAND as this rank, watched.

    What ``mpiflow launch`` runs on every rank. The watching parent names a child killed
    by a signal to the launch before anything else can end (the MPI launcher kills every
    other rank only once it sees this process end). And MPICH's launcher ends the whole
    job when a rank dies by a signal, even with ``-disable-auto-cleanup``, but not when it
    exits: the parent turns the child's death by a signal into an exit (with the shell's
    code for it), so in an elastic job the other ranks live on.
    """
    from mpiflow.comm import launch_link  # noqa: PLC0415  (the parent is not the rank)

    command = sys.argv[1:] if argv is None else list(argv)
    if not command:
        sys.stderr.write("usage: python -m mpiflow.supervise COMMAND [ARGS...]\n")
        return 2
    link = launch_link.watch()      # the child is the rank; this line is its watcher's
    return supervise(command, STATUS_VARIABLE, link)


if __name__ == "__main__":
    sys.exit(main())
