"""The MPI launchers ``mpiflow.launch`` drives, one entry each: how to start N ranks, how
each tags its output lines with the rank, and how to pass environment variables.

MPICH's hydra ``mpiexec`` (``-prepend-pattern``: a marker before every piece of
output), Open MPI's ``mpirun`` (``--tag-output``: ``[1,3]<stdout>: text``) and Slurm's
``srun`` inside an allocation (``--label``: ``3: text``). Which one is used is found from
the environment (an allocation with ``srun``), or from what ``mpiexec --version`` says.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from mpiflow import errors


@dataclass(frozen=True)
class Launcher:
    """One launcher: its name, the flags it takes and the tag it puts on lines."""

    name: str
    count_flag: str
    hosts_flag: str | None
    tag_flags: tuple[str, ...]
    tag: re.Pattern            # group 1: the rank; the match is the whole tag
    # Set where the launcher tags every piece of output as it reads it, not every line
    # (MPICH's hydra): the marker it writes before each piece, group 1 the rank, so that
    # pieces of several ranks' lines, interleaved, are put back together per rank.
    piece_marker: re.Pattern | None = None
    export: Callable[[list[str]], list[str]] = lambda names: []
    # What keeps the other ranks running when one dies (MPIFLOW_ELASTIC).
    elastic_flags: tuple[str, ...] = ()
    # Whether Ctrl-C / SIGTERM sent to it reach the ranks as they are. Open MPI's kills
    # the ranks instead, and srun's first Ctrl-C only prints the job's state: there,
    # mpiflow.launch hands the signal to every rank over its line.
    forwards_interrupts: bool = True

    def argv(self, program: str, ranks: int | None, hosts: str | None, extra: list[str],
             command: list[str], exported: list[str], elastic: bool = False) -> list[str]:
        argv = [program, *self.tag_flags, *(self.elastic_flags if elastic else ())]
        if ranks is not None:
            argv += [self.count_flag, str(ranks)]
        if hosts:
            if self.hosts_flag is None:
                raise errors.InvalidArgumentError(
                    f"mpiflow.launch: --hosts does not apply to {self.name} (the allocation "
                    "gives the hosts)")
            argv += [self.hosts_flag, hosts]
        return argv + self.export(exported) + extra + command

    def split_tag(self, line: str) -> tuple[int | None, str]:
        """The rank a line of output came from (None: untagged) and its text."""
        found = self.tag.match(line)
        if found is None:
            return None, line
        return int(found.group(1)), line[found.end():]


def _srun_export(names: list[str]) -> list[str]:
    """srun gives the tasks its whole environment, unless told to give less: by
    ``SLURM_EXPORT_ENV``, which ``sbatch --export=NONE`` (or a list of variables) sets for
    the steps of its script. Then ``names`` (the launch's own variables) are added to
    what it gives, or the ranks would never reach the launch and run without its
    ``--ps``/``--policy``."""
    policy = os.environ.get("SLURM_EXPORT_ENV", "")
    if not policy or policy.split(",")[0] == "ALL":
        return []
    given = [] if policy in ("NONE", "NIL") else policy.split(",")
    return ["--export=" + ",".join(given + [n for n in names if n not in given])]


LAUNCHERS = {
    # hydra writes its pattern before each piece of a line as it reads it from a rank
    # ("[0] first[1] first[0]  last"): markers no output holds (STX rank ETX) tell the
    # pieces apart, whoever wrote them.
    "mpich": Launcher("mpich", "-n", "-hosts", ("-prepend-pattern", "\x02%r\x03"),
                      re.compile("\x02(\\d+)\x03"),
                      piece_marker=re.compile(b"\x02(\\d+)\x03"),
                      elastic_flags=("-disable-auto-cleanup",)),
    "openmpi": Launcher("openmpi", "-n", "--host", ("--tag-output",),
                        re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>: ?"),
                        export=lambda names: [a for n in names for a in ("-x", n)],
                        elastic_flags=("--enable-recovery",), forwards_interrupts=False),
    "srun": Launcher("srun", "-n", None, ("--label",), re.compile(r" *(\d+): "),
                     export=_srun_export,
                     elastic_flags=("--no-kill", "--kill-on-bad-exit=0"),
                     forwards_interrupts=False),
}


def find(choice: str = "auto") -> tuple[Launcher, str]:
    """The launcher to use and its program: ``choice`` is a name of ``LAUNCHERS``,
    ``mpiexec`` (whichever MPI it belongs to) or ``auto`` (srun inside a Slurm allocation,
    else mpiexec)."""
    if choice == "auto":
        choice = "srun" if os.environ.get("SLURM_JOB_ID") and shutil.which("srun") else \
            "mpiexec"
    if choice == "srun":
        program = shutil.which("srun")
        if program is None:
            raise errors.NotFoundError("mpiflow.launch: no srun on PATH")
        return LAUNCHERS["srun"], program
    program = _mpiexec()
    kind, version = mpiexec_kind(program)
    if kind is None or choice not in ("mpiexec", kind):
        raise errors.InvalidArgumentError(
            f"mpiflow.launch: {program} is {kind or 'an MPI launcher it does not know'}, "
            f"not {choice}; it drives MPICH's and Open MPI's mpiexec and srun "
            f"({program} --version says: {version.strip().splitlines()[:1]})")
    return LAUNCHERS[kind], program


def mpiexec_kind(program: str) -> tuple[str | None, str]:
    """Whose ``program`` (an mpiexec) is: "mpich", "openmpi" or None (another), and what
    its ``--version`` says."""
    version = subprocess.run([program, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    kind = "mpich" if "HYDRA" in version else \
        "openmpi" if ("Open MPI" in version or "OpenRTE" in version or "prte" in version)\
        else None
    return kind, version


def _mpiexec() -> str:
    """The mpiexec next to this Python (a venv with an MPI wheel), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise errors.NotFoundError(
            "mpiflow.launch: no mpiexec found next to this Python or on PATH; install one "
            "with pip install 'mpiflow[mpich]' (or load your site's MPI module)")
    return found
