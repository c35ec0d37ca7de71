"""Tell MPICH's launcher that this rank is leaving on purpose, so that its exit does not
end the job's other ranks as a crash would.

MPICH's process manager (hydra) keeps a PMI connection to every rank (``PMI_FD``). When a
connection closes before its rank said ``finalize``, the rank's proxy takes it for a
crash and sends SIGKILL to every other rank of the job, and ``mpiexec`` returns the OR
of the exit statuses, the 9 of a killed rank among them. An interrupted job's ranks leave
at one agreed moment without MPI_Finalize (which could wait for a stuck peer), but with
more ranks than cores "one moment" is a few milliseconds wide: the first rank out then
killed the others, and a Ctrl-C ended as "Killed (signal 9)" instead of 130.

Saying PMI's ``finalize`` alone is what MPI_Finalize says last: the proxy answers at once
and waits for nobody, and MPI itself is left as it is (the process ends right after).
Only under hydra: other launchers keep no such connection (Open MPI's and Slurm's
``srun`` hold theirs through PMIx or their own agents), and there nothing is said.
"""

from __future__ import annotations

import os
import select

from mpiflow.comm.launcher_reaper import ancestor_named

PROXY_NAMES = ("hydra_pmi_proxy",)
# How long the proxy may take to answer; it answers within a millisecond.
ANSWER_WITHIN_S = 0.5
_FINALIZE = b"cmd=finalize\n"
_ACK = b"cmd=finalize_ack"


def release_from_launcher() -> bool:
    """Say PMI's ``finalize`` to the hydra proxy that started this rank, just before the
    rank exits; return whether the proxy acknowledged it (nothing to do, or no answer,
    is False, and the rank leaves as it would have)."""
    descriptor = os.environ.get("PMI_FD", "")
    if not descriptor.isdigit() or ancestor_named(PROXY_NAMES) is None:
        return False
    fd = int(descriptor)
    try:
        os.write(fd, _FINALIZE)
        ready, _, _ = select.select([fd], [], [], ANSWER_WITHIN_S)
        return bool(ready) and os.read(fd, 256).startswith(_ACK)
    except OSError:             # not a PMI connection after all: leave as before
        return False
