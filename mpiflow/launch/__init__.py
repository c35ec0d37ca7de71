"""``python -m mpiflow.launch`` (``mpiflow launch``): start an MPI job, watch it, end it.

    mpiflow launch -n 4 --ps 1 train.py --steps 1000
    mpiflow launch -n 8 --hosts node1:4,node2:4 --max-restarts 3 train.py
    salloc -N 2 --ntasks-per-node 4 mpiflow launch train.py     # srun in the allocation

A thin layer over the MPI library's own launcher (MPICH's or Open MPI's ``mpiexec``, or
``srun`` in a Slurm allocation), in the spirit of ``horovodrun`` and ``torchrun``:

- every rank keeps a line to it (``comm.launch_link``), so a failure is reported once,
  naming the culprit rank, its role and host, and the exit code is non-zero;
- a job the MPI launcher would wait out (a host that vanished, a cut link) is ended
  within ``MPIFLOW_PEER_TIMEOUT`` + ``job.END_GRACE_S`` of the fault;
- ``--max-restarts K`` starts the job again after a failure (not after Ctrl-C), with
  ``MPIFLOW_RESTART`` counting; a script with a checkpoint directory resumes from it;
- output lines carry the rank they came from (the launcher's own tagging, turned into
  mpiflow's ``[rank 2 (worker:1) on node3]``; lines mpiflow tagged already keep theirs);
- ``mpiflow stacks`` asks every rank of a running launch where it is.

A command whose first word ends in ``.py`` runs with this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
import tempfile
import time

from mpiflow.cli import add_version_argument
from mpiflow.launch import job as job_lib
from mpiflow.launch.launchers import LAUNCHERS, find
from mpiflow.launch.server import LaunchServer


def _parse(argv):
    parser = argparse.ArgumentParser(
        prog="mpiflow launch",
        description="Start an MPI job of mpiflow ranks, watch it, and end it when a fault "
                    "would leave it hanging; restart it from its checkpoints on failure.")
    parser.add_argument("-n", "-np", dest="ranks", type=int,
                        help="number of ranks (default: the launcher's, e.g. the allocation)")
    parser.add_argument("--hosts", help="hosts and slots, e.g. node1:4,node2:4 (passed to "
                                        "the launcher's own host option)")
    parser.add_argument("--ps", type=int, help="number of ps ranks (sets MPIFLOW_PS)")
    parser.add_argument("--policy", choices=("block", "spread"),
                        help="which ranks become ps (sets MPIFLOW_PS_POLICY)")
    parser.add_argument("--elastic", action="store_true",
                        help="ps training goes on when a non-chief worker is lost (sets "
                             "MPIFLOW_ELASTIC and the launcher's flag that keeps the other "
                             "ranks: -disable-auto-cleanup, --enable-recovery, --no-kill)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="start the job again up to this many times after a failure")
    parser.add_argument("--launcher", default="auto",
                        choices=("auto", "mpiexec", *LAUNCHERS),
                        help="the MPI launcher to drive (auto: srun inside a Slurm "
                             "allocation, else mpiexec)")
    parser.add_argument("--launcher-args", default="",
                        help="more arguments for the MPI launcher, as one string")
    parser.add_argument("--address",
                        help="the host name or address ranks reach this process at "
                             "(default: 127.0.0.1 for a one-host launch, else this host's "
                             "name)")
    add_version_argument(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program every rank runs (script.py args, or any command)")
    args = parser.parse_args(_launcher_args_joined(argv, parser))
    if not args.command:
        parser.error("give the program to run, e.g. mpiflow launch -n 4 train.py")
    if args.ranks is not None and args.ranks < 1:
        # MPICH's mpiexec starts one rank for -n 0 or -n -2 and the job "succeeds".
        parser.error(f"-n must be >= 1, got {args.ranks}")
    if args.ps is not None and args.ps < 0:
        parser.error(f"--ps must be >= 0, got {args.ps}")
    if args.max_restarts < 0:
        parser.error("--max-restarts must be >= 0")
    return args


def _launcher_args_joined(argv, parser) -> list[str]:
    """``argv`` with ``--launcher-args VALUE`` written ``--launcher-args=VALUE``: argparse
    takes a value that starts with a dash for an option of its own (``-hostfile hosts``
    for ``-h``, ``--hostfile=hosts`` for an unknown option), and the MPI launcher's
    arguments all do. Only this launch's own options are looked at: the first word that
    is none of them starts the program, whose arguments are its own."""
    takes_value = {option for action in parser._actions if action.nargs is None
                   for option in action.option_strings}
    joined, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--launcher-args" and i + 1 < len(argv):
            joined.append(f"--launcher-args={argv[i + 1]}")
            i += 2
        elif word in takes_value:
            joined += argv[i:i + 2]
            i += 2
        elif word.startswith("-") and word != "--":
            joined.append(word)
            i += 1
        else:
            return joined + list(argv[i:])
    return joined


class _Say:
    """The launcher's own lines, tagged as its own."""

    def __call__(self, text: str) -> None:
        sys.stderr.write(f"mpiflow.launch: {text}\n")
        sys.stderr.flush()


# The MPI launchers' options that put ranks on other hosts (MPICH's hydra, Open MPI's
# mpirun), also written --option=value.
_HOST_OPTIONS = frozenset((
    "-f", "-hostfile", "--hostfile", "-machinefile", "--machinefile", "-host", "--host",
    "-hosts", "--hosts", "-H", "--default-hostfile", "-rankfile", "--rankfile"))
# Host lists a launcher reads from its environment: hydra's host file, Open MPI's and
# PRRTE's default host file, and the batch systems whose allocations both use (a Slurm
# allocation of several nodes; PBS, LSF and Grid Engine host lists).
_HOST_VARIABLES = ("HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile",
                   "PRTE_MCA_prte_default_hostfile", "PBS_NODEFILE", "LSB_MCPU_HOSTS",
                   "PE_HOSTFILE")


def _may_span_hosts(args, launcher_name: str, environ=None) -> bool:
    """Whether the launch may put ranks on other hosts than this one."""
    environ = os.environ if environ is None else environ
    if args.hosts or launcher_name == "srun":
        return True
    if any(word.split("=", 1)[0] in _HOST_OPTIONS
           for word in shlex.split(args.launcher_args)):
        return True
    if any(environ.get(name) for name in _HOST_VARIABLES):
        return True
    try:
        return int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or
                   1) > 1
    except ValueError:
        return True


def _advertised(args, launcher_name: str, environ=None) -> tuple[str, str]:
    """(where ranks connect, where to listen): loopback when every rank is on this host."""
    if args.address:
        return args.address, "0.0.0.0"
    if _may_span_hosts(args, launcher_name, environ):
        return socket.gethostname(), "0.0.0.0"
    return "127.0.0.1", "127.0.0.1"


def registry_dir() -> str:
    """Where running launches note their address, for ``mpiflow stacks``."""
    return os.path.join(tempfile.gettempdir(), f"mpiflow-launch-{os.getuid()}")


def _register(address: str, command: list[str]) -> str:
    directory = registry_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"address": address, "command": command, "started": time.time()}, f)
    return path


def _started_as_a_rank() -> str | None:
    """Why this launch runs as one of several processes a launcher started (``srun -n 8
    mpiflow launch``, ``mpiexec -n 4 mpiflow launch``): each would start the whole job,
    and nested srun steps wait for the resources the outer step holds; None if not."""
    from mpiflow.comm.cluster import launched_size

    launched = launched_size()
    if launched is None or launched[2] <= 1:
        return None
    rank_variable, size_variable, size = launched
    return (f"this is one of {size} processes a launcher started ({rank_variable}="
            f"{os.environ[rank_variable]}, {size_variable}={size}), and each would start the "
            "whole job: run mpiflow launch once, in the batch script or the shell of salloc "
            "(it starts srun or mpiexec, which start the ranks)")


def main(argv=None) -> int:
    args = _parse(sys.argv[1:] if argv is None else list(argv))
    say = _Say()
    nested = _started_as_a_rank()
    if nested is not None:
        say(nested)
        return 2
    try:
        launcher, program = find(args.launcher)
        command = list(args.command)
        if command[0] == "--":
            command = command[1:]
        if command and command[0].endswith(".py"):
            command = [sys.executable, *command]
        # Each rank runs under a watching parent: a rank killed by a signal is named by it
        # before the MPI launcher kills the others, and such a death becomes an exit
        # (MPICH ends the job when a rank dies by a signal, whatever its flags).
        command = [sys.executable, "-m", "mpiflow.supervise", *command]
        connect_host, bind_host = _advertised(args, launcher.name)
        server = LaunchServer(bind_host)
        address = f"{connect_host}:{server.port}"
        variables = {"MPIFLOW_LAUNCH_ADDRESS": address}
        if args.ps is not None:
            variables["MPIFLOW_PS"] = str(args.ps)
        if args.policy:
            variables["MPIFLOW_PS_POLICY"] = args.policy
        if args.elastic:
            variables["MPIFLOW_ELASTIC"] = "1"
        argv = launcher.argv(program, args.ranks, args.hosts, shlex.split(args.launcher_args),
                             command, [*variables, "MPIFLOW_RESTART"], args.elastic)
    except Exception as exc:       # an mpiflow error: the message says it all
        say(str(getattr(exc, "message", exc)))
        return 2
    registered = _register(address, command)
    try:
        return _run_with_restarts(args, launcher, argv, variables, server, say)
    finally:
        try:
            os.unlink(registered)
        except OSError:
            pass


def _run_with_restarts(args, launcher, argv, variables, server, say) -> int:
    for attempt in range(args.max_restarts + 1):
        server.reset()
        env = dict(os.environ, **variables, MPIFLOW_RESTART=str(attempt))
        outcome = job_lib.Job(launcher, argv, env, server, say, args.elastic).run()
        if outcome.interrupted is not None:
            if outcome.code == 0 and outcome.fault is None:
                # SIGTERM to training in a MonitoredTrainingSession: a graceful stop,
                # checkpointed, that the job's own exit code says went well.
                say(f"stopped ({_signal_name(outcome.interrupted)}) after "
                    f"{outcome.seconds:.1f} s: the job ended cleanly")
                return 0
            say(f"interrupted ({_signal_name(outcome.interrupted)})")
            return 128 + outcome.interrupted
        if outcome.fault is None and (outcome.code == 0 or outcome.lost):
            if outcome.lost:
                # The MPI launcher's own code counts the lost ranks' ends: not a failure.
                say(f"the job ended after {outcome.seconds:.1f} s; it went on without: " +
                    "; ".join(f.describe() for f in outcome.lost))
            return 0
        code = outcome.code if outcome.code > 0 else 1
        culprit = outcome.fault.describe() if outcome.fault is not None else \
            "no rank reported a fault (see the output above)"
        how = "ended by mpiflow.launch" if outcome.ended_by_launch else f"exit code {code}"
        if attempt < args.max_restarts:
            say(f"the job failed ({how}) after {outcome.seconds:.1f} s: {culprit}; restart "
                f"{attempt + 1} of {args.max_restarts}")
            continue
        say(f"the job failed ({how}) after {outcome.seconds:.1f} s: {culprit}")
        return code
    return 1


def _signal_name(signum: int) -> str:
    import signal
    return signal.Signals(signum).name
