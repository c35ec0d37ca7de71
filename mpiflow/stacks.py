"""``python -m mpiflow.stacks`` (``mpiflow stacks``): where every rank of a running job is.

    mpiflow stacks              # the one job mpiflow launch runs for this user here
    mpiflow stacks --pid 4242   # the launch whose process id is 4242

Asks the running ``mpiflow launch`` (found through the address it notes in
``launch.registry_dir()``), which asks every rank over its line; each rank answers from a
thread of its own, so a rank stuck in a deadlock, an MPI call or a sleep still answers.
The report is merged and ordered by rank: each rank's name, what it waits for and for how
long, how many steps it ran, and its main thread's Python stack.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import sys

from mpiflow.cli import add_version_argument
from mpiflow.launch import registry_dir

_ANSWER_TIMEOUT_S = 15.0


def running_launches() -> dict[int, dict]:
    """``{pid: what it noted}`` for every launch of this user still running here."""
    found = {}
    for path in glob.glob(os.path.join(registry_dir(), "*.json")):
        pid = int(os.path.basename(path).split(".")[0])
        try:
            os.kill(pid, 0)
            with open(path) as f:
                found[pid] = json.load(f)
        except (ProcessLookupError, ValueError, OSError):
            continue        # ended without cleaning up (killed): not running
    return found


def report(address: str) -> str:
    """The merged stacks report of the launch listening at ``address`` (host:port)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=_ANSWER_TIMEOUT_S) as sock:
        sock.sendall(b'{"k": "report"}\n')
        with sock.makefile("rb") as reply:
            line = reply.readline()
    if not line:
        raise ConnectionError(f"the launch at {address} closed the connection")
    return json.loads(line)["text"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="mpiflow stacks",
        description="Print where every rank of a job started with mpiflow launch is: its "
                    "main thread's stack, what it waits for, and its steps.")
    parser.add_argument("--pid", type=int, help="the process id of the mpiflow launch")
    add_version_argument(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    launches = running_launches()
    if args.pid is not None:
        launches = {pid: v for pid, v in launches.items() if pid == args.pid}
    if len(launches) != 1:
        listed = "".join(f"\n  --pid {pid}: {' '.join(v['command'])}"
                         for pid, v in sorted(launches.items()))
        sys.stderr.write(
            "mpiflow stacks: " + ("no running mpiflow launch found" + (
                f" with pid {args.pid}" if args.pid is not None else "") +
                " (jobs started with plain mpiexec: send SIGUSR1 to it instead)"
                if not launches else f"{len(launches)} launches run; choose one:{listed}") +
            "\n")
        return 1
    (pid, noted), = launches.items()
    sys.stdout.write(report(noted["address"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
