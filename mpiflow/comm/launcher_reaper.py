"""Make the MPI launcher end once this rank knows the job has failed.

MPICH's ``mpiexec`` ends the job when a rank exits non-zero, but then waits for every
proxy to confirm; a proxy on a host that lost power or its link never does, and the
user's command hangs although every rank has ended. A rank that ends the job for a
failure therefore leaves a small detached watcher behind: if the launcher that started
this rank (found among its ancestors, so only on the launcher's own host) still runs
``END_GRACE_S`` later, it gets SIGTERM, and SIGKILL ``KILL_AFTER_S`` after that. A job
that ends normally never waits that long, so the watcher finds nothing to do.

Under ``mpiflow launch`` the launch does this itself (and knows more); under ``srun``
Slurm ends the step.
"""

from __future__ import annotations

import os
import subprocess

from mpiflow.comm.launch_link import ADDRESS_VARIABLE

# From a rank's failure to SIGTERM to its launcher, and from SIGTERM to SIGKILL.
END_GRACE_S = 5.0
KILL_AFTER_S = 2.0
LAUNCHER_NAMES = ("mpiexec", "mpiexec.hydra", "mpirun", "orterun", "prterun")
_MAX_ANCESTORS = 8


def launcher_pid() -> int | None:
    """The process id of the MPI launcher this rank descends from, if it runs here."""
    return ancestor_named(LAUNCHER_NAMES)


def ancestor_named(names) -> int | None:
    """The process id of the nearest ancestor of this process whose name is one of
    ``names`` (within a few generations: a launcher, its proxy), or None."""
    pid = os.getpid()
    for _ in range(_MAX_ANCESTORS):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                text = stat.read()
        except OSError:
            return None
        name = text[text.index("(") + 1:text.rindex(")")]
        if pid != os.getpid() and name in names:
            return pid
        pid = int(text.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return None
    return None


def end_launcher_later() -> None:
    """Leave a detached watcher that ends this rank's launcher if it outlives the job."""
    if os.environ.get(ADDRESS_VARIABLE):
        return              # mpiflow launch watches the job
    pid = launcher_pid()
    if pid is None:
        return
    script = (f"sleep {END_GRACE_S:g}; kill -TERM {pid} 2>/dev/null || exit 0; "
              f"sleep {KILL_AFTER_S:g}; kill -KILL {pid} 2>/dev/null; exit 0")
    try:
        subprocess.Popen(["sh", "-c", script], start_new_session=True, close_fds=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    except OSError:
        pass                # no shell: the launcher may wait, as it would without this
