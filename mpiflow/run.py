"""``python -m mpiflow.run``: run a TF1 ps/worker script, unmodified, on every MPI rank.

    mpiexec -n 4 python -m mpiflow.run --ps 1 --as-tensorflow train.py --train_steps 1000
    srun --mpi=pmi2 python -m mpiflow.run --ps 2 --policy spread train.py

TF1 distributed scripts expect to be started by hand on every machine with
``--ps_hosts``, ``--worker_hosts``, ``--job_name`` and ``--task_index`` (or a
``TF_CONFIG`` variable). Here one launch starts them all: each rank works out its role
from the launch layout (the ps count and policy of ``ClusterSpec.from_mpi``), and the
script gets those four flags (replacing any it was given) and ``TF_CONFIG``. The
addresses read ``host:port`` with a port per rank on its host; nothing listens on them,
the ranks talk over MPI, and a ClusterSpec built from them runs each task on the rank
the launch gave it. With ``--as-tensorflow``, ``import tensorflow as tf`` and
``import tensorflow.compat.v1 as tf`` in the script give mpiflow (only in this process).

The script runs in a child process that a small parent watches (``mpiflow.supervise``):
a rank killed by a signal (kill -9, the OOM killer) is then named with its role before
the launcher ends the job, which MPI launchers do not do.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time

from mpiflow.cli import add_version_argument
from mpiflow.info import add_layout_arguments
from mpiflow.logger import launch_rank
from mpiflow.supervise import STATUS_VARIABLE as _STATUS_FD

BASE_PORT = 2222
_SAY_ONCE_S = 1.0       # how long the other ranks wait for the first to print an error
_CLUSTER_FLAGS = ("ps_hosts", "worker_hosts", "job_name", "task_index")


def _say_once(text: str, code: int):
    """Print ``text`` on the launch's first rank alone and exit with ``code`` (every rank
    reaches the same verdict and would print the same lines)."""
    if launch_rank() in (None, "0"):
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()
    else:
        # The others give it time to (the launcher ends the job when one rank exits).
        time.sleep(_SAY_ONCE_S)
    sys.exit(code)


class _SaidOnceParser(argparse.ArgumentParser):
    """An argument parser whose errors the launch's first rank alone prints: every rank
    parses the same command line and would print the same usage and error."""

    def error(self, message):
        _say_once(f"{self.format_usage()}{self.prog}: error: {message}\n", 2)


def _check_syntax(script: str) -> None:
    """Stop on a script that does not compile, said once and before MPI starts: every
    rank would otherwise print the same SyntaxError with its traceback, once MPI runs."""
    with open(script, "rb") as f:
        source = f.read()
    try:
        compile(source, script, "exec")
    except SyntaxError as exc:
        import traceback
        _say_once("".join(traceback.format_exception_only(type(exc), exc)), 1)


def _parse(argv):
    parser = _SaidOnceParser(
        prog="python -m mpiflow.run", usage="%(prog)s [options] script [args ...]",
        description="Run a TF1 ps/worker training script on every rank of an MPI launch.")
    add_layout_arguments(parser)
    add_version_argument(parser)
    parser.add_argument("--as-tensorflow", action="store_true",
                        help="make 'import tensorflow' in the script import mpiflow")
    parser.add_argument("--no-supervise", dest="supervise", action="store_false",
                        help="run the script in this process, without a watching parent "
                             "(then a rank killed by a signal is not named)")
    # Optional to argparse, which would otherwise call the script's arguments required.
    parser.add_argument("script", nargs="?", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args(argv)
    if args.script is None:
        parser.error("the training script is required")
    if not os.path.isfile(args.script):     # one line, not a traceback from every rank
        parser.error(f"no such script: {args.script}")
    _check_syntax(args.script)
    return args


def strip_flags(args: list[str], names=_CLUSTER_FLAGS) -> tuple[list[str], dict[str, str]]:
    """Remove ``--name=value`` / ``--name value`` (also ``-name``) of ``names`` from
    ``args``; return the rest and the values found."""
    rest, found, i = [], {}, 0
    while i < len(args):
        arg = args[i]
        key = arg.lstrip("-")
        name, eq, value = key.partition("=")
        if arg.startswith("-") and name in names:
            if not eq and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            found[name] = value
        else:
            rest.append(arg)
        i += 1
    return rest, found


def launch_addresses(cluster) -> dict[str, list[str]]:
    """The ``host:port`` of every task, a port per rank of its host."""
    layout = cluster.layout
    return {job: [f"{layout.hosts[cluster.rank_of(job, t)]}:"
                  f"{BASE_PORT + layout.local_ranks[cluster.rank_of(job, t)]}"
                  for t in cluster.task_indices(job)]
            for job in cluster.jobs}


def check_given_flags(given: dict[str, str], addresses: dict[str, list[str]]) -> None:
    """Refuse host lists the script was given that the launch contradicts."""
    from mpiflow import errors
    for job in ("ps", "worker"):
        value = given.get(f"{job}_hosts")
        if value is None:
            continue
        hosts = [h for h in value.split(",") if h]
        launched = addresses.get(job, [])
        if len(hosts) != len(launched):
            raise errors.InvalidArgumentError(
                f"--{job}_hosts names {len(hosts)} {job} task(s) ({value}) but the launch has "
                f"{len(launched)} ({','.join(launched) or 'none'}; layout "
                f"{ {j: len(a) for j, a in addresses.items()} }). Launch with "
                f"mpiflow.run --ps and mpiexec -n to match, or drop the flag: mpiflow.run "
                f"passes --ps_hosts/--worker_hosts itself")


def alias_tensorflow() -> None:
    """Make ``tensorflow``, ``tensorflow.compat`` and ``tensorflow.compat.v1`` mpiflow.

    Its namespaces are registered under both names too (``tensorflow.layers``,
    ``tensorflow.compat.v1.losses``, ...): ``import tensorflow.compat.v1.layers`` would
    otherwise load mpiflow's module a second time, with classes and per-graph state of
    its own.
    """
    import types

    import mpiflow
    import mpiflow.compat
    sys.modules["tensorflow"] = mpiflow
    sys.modules["tensorflow.compat"] = mpiflow.compat
    sys.modules["tensorflow.compat.v1"] = mpiflow
    for name, value in vars(mpiflow).items():
        if isinstance(value, types.ModuleType) and not name.startswith("_") and \
                value.__name__.startswith("mpiflow."):
            for prefix in ("tensorflow", "tensorflow.compat.v1"):
                sys.modules.setdefault(f"{prefix}.{name}", value)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse(argv)
    if args.supervise and _STATUS_FD not in os.environ:
        from mpiflow import supervise
        return supervise.main([sys.executable, "-m", "mpiflow.run", *argv])
    from mpiflow import errors
    from mpiflow.runtime.process import start_mpi
    from mpiflow.train.cluster_spec import ClusterSpec, set_launch_cluster

    MPI = start_mpi()

    world = MPI.COMM_WORLD
    try:
        cluster = ClusterSpec.from_mpi(args.ps, args.policy, comm=world)
        addresses = launch_addresses(cluster)
        script_args, given = strip_flags(args.args)
        check_given_flags(given, addresses)
    except errors.MpiflowError as exc:
        # Every rank reaches the same verdict: each says it, and none leaves before all
        # have (the launcher would end the others mid-sentence).
        sys.stderr.write(f"[rank {world.Get_rank()}] mpiflow.run: {exc}\n")
        sys.stderr.flush()
        world.Barrier()
        return 2
    # The rank service now, not at the script's first Server: an error anywhere in the
    # script then ends the whole job at once, printed with its rank and role.
    from mpiflow.runtime.process import rank_service
    from mpiflow.train.server import name_roles
    service = rank_service()
    name_roles(service, cluster)        # also tells the watching parent who this rank is
    job, task = cluster.task_of_rank(world.Get_rank())
    set_launch_cluster(cluster)
    flags = [f"--ps_hosts={','.join(addresses.get('ps', []))}",
             f"--worker_hosts={','.join(addresses.get('worker', []))}",
             f"--job_name={job}", f"--task_index={task}"]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": addresses,
                                          "task": {"type": job, "index": task}})
    if args.as_tensorflow:
        alias_tensorflow()
    sys.argv = [args.script] + script_args + flags
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    runpy.run_path(args.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
