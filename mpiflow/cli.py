"""``mpiflow`` (and ``python -m mpiflow``): one command for mpiflow's tools.

    mpiflow info [--ps N] [--policy block|spread] [--settings]   # alone or under mpiexec
    mpiexec -n 4 mpiflow run --ps 1 --as-tensorflow train.py      # a TF1 script on every rank
    mpiflow launch -n 4 --ps 1 --max-restarts 2 train.py          # start, watch, restart
    mpiflow stacks                                                 # where its ranks are
    mpiflow version                                                # or: mpiflow --version

Each subcommand is the module of the same name (``python -m mpiflow.info`` and
``python -m mpiflow.run`` stay valid); this front only dispatches, so their arguments and
help are theirs.
"""

from __future__ import annotations

import sys

import mpiflow

# subcommand -> (module, what it does): the modules are imported only when chosen (``run``
# and ``info`` start MPI).
SUBCOMMANDS = {
    "info": ("mpiflow.info", "the layout a launch gives, versions and settings"),
    "run": ("mpiflow.run", "run a TF1 ps/worker script on every rank of an MPI launch"),
    "launch": ("mpiflow.launch", "start an MPI job, watch it, end it on a fault, restart it"),
    "stacks": ("mpiflow.stacks", "where every rank of a running launch is (its stack)"),
    "version": ("mpiflow.cli", "print mpiflow's version"),
}


def version_line() -> str:
    return f"mpiflow {mpiflow.__version__}"


def add_version_argument(parser) -> None:
    """``--version``, which every mpiflow command takes."""
    parser.add_argument("--version", action="version", version=version_line())


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in SUBCOMMANDS.items()]
    return ("usage: mpiflow [--version] <command> [args...]\n\ncommands:\n" +
            "\n".join(lines) + "\n\n'mpiflow <command> --help' describes a command.\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in ("--version", "version"):
        print(version_line())
        return 0
    if command not in SUBCOMMANDS:
        sys.stderr.write(f"mpiflow: unknown command {command!r}\n\n{_usage()}")
        return 2
    import importlib
    module = importlib.import_module(SUBCOMMANDS[command][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
