"""Several simulated hosts on this one machine, for multi-node MPI tests.

Each host is a network namespace with its own address on a private test subnet, joined to
the others through a bridge that lives in a namespace of its own (nothing is added to the
machine's own network), and every process started "on" a host also gets its own host name
(a UTS namespace) and an /etc/hosts that knows the other hosts. MPICH's launcher reaches
the hosts through its ssh mode, pointed at a small script that runs the launcher's proxy
inside the target host's namespaces. Ranks on different hosts see different host names, so
MPI talks between them over the veth network (UCX's TCP transport), as between real nodes.

Faults are made for real: ``kill_host`` kills every process of a host (its kernel lives on,
so sockets close), ``cut_link`` takes its network down (nothing is closed: what a power
loss or a partition looks like to the others), and ``power_off`` does both, link first.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBNET = "10.213.7"

_ON_HOST = """#!/bin/sh
# Run a command on a simulated host: on_host HOST CMD... (also MPICH's "ssh": [-x] HOST CMD)
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
exec ip netns exec "{prefix}$host" unshare --uts -- sh -c \\
  'hostname "$0" && mount --bind "{hosts_file}" /etc/hosts && exec sh -c "$*"' "$host" "$@"
"""


def unavailable_reason() -> str | None:
    """Why simulated hosts cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "simulated hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "simulated hosts need root (ip netns, unshare --uts); CI runs as root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"simulated hosts need '{tool}' (Debian: iproute2, util-linux)"
    probe = f"mfprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class VirtualHosts:
    """``count`` simulated hosts named node0, node1, ...; use as a context manager."""

    def __init__(self, count: int):
        self.count = count
        self.names = [f"node{i}" for i in range(count)]
        self.addresses = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(self.names)}
        self.prefix = f"mf{os.getpid()}-"
        self.switch = f"{self.prefix}switch"
        self.workdir = Path(tempfile.mkdtemp(prefix="mpiflow-hosts-"))
        self.on_host = self.workdir / "on_host"

    # -- building and tearing down ----------------------------------------------------------
    def __enter__(self) -> "VirtualHosts":
        _remove_stale_namespaces()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _build(self):
        hosts_file = self.workdir / "hosts"
        hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
            f"{address} {name}\n" for name, address in self.addresses.items()))
        self.on_host.write_text(_ON_HOST.format(prefix=self.prefix, hosts_file=hosts_file))
        self.on_host.chmod(0o755)
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            ns = self.prefix + name
            _ip("netns", "add", ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"port{i}",
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", f"port{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"port{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def close(self):
        """Kill whatever still runs on the hosts and remove every namespace."""
        for name in self.names:
            self.kill_host(name)
            _ip("netns", "del", self.prefix + name, check=False)
        _ip("netns", "del", self.switch, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- running -------------------------------------------------------------------------------
    def command(self, host: str, argv: list[str]) -> list[str]:
        """Return the argv that runs ``argv`` on ``host`` (through the on_host script)."""
        import shlex
        return [str(self.on_host), host, shlex.join(argv)]

    def mpiexec_argv(self, mpiexec: str, ranks_per_host: int, hosts=None) -> list[str]:
        """MPICH's launcher, started on the first host, spanning ``hosts``."""
        hosts = hosts or self.names
        return [mpiexec, "-launcher", "ssh", "-launcher-exec", str(self.on_host),
                "-hosts", ",".join(f"{h}:{ranks_per_host}" for h in hosts),
                "-n", str(ranks_per_host * len(hosts)),
                # Ranks on different hosts talk over the veth network, as real nodes would.
                "-genv", "UCX_TLS", "tcp,self", "-genv", "UCX_NET_DEVICES", "eth0"]

    def limit_links(self, mbit: float) -> None:
        """Cap every host's link at ``mbit`` megabits per second each way (a token bucket
        on both ends of its veth), as a cluster's network caps what a node sends and
        receives: traffic that crosses one node's link (a ps's) then takes its time."""
        burst = f"{max(int(mbit * 1e6 / 8 / 250), 32 << 10)}b"   # 4 ms at the rate
        for i, name in enumerate(self.names):
            for ns, dev in ((self.prefix + name, "eth0"), (self.switch, f"port{i}")):
                subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
                                "rate", f"{mbit}mbit", "burst", burst, "latency", "100ms"],
                               capture_output=True, text=True, check=True)

    # -- faults ------------------------------------------------------------------------------
    def pids(self, host: str) -> list[int]:
        out = _ip("netns", "pids", self.prefix + host, check=False).stdout
        return [int(p) for p in out.split()]

    def kill_host(self, host: str) -> None:
        """SIGKILL every process of ``host`` (its kernel stays up, so sockets close)."""
        for _ in range(5):       # a process may fork while the first ones die
            pids = self.pids(host)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def cut_link(self, host: str) -> None:
        _ip("-n", self.prefix + host, "link", "set", "eth0", "down")

    def restore_link(self, host: str) -> None:
        _ip("-n", self.prefix + host, "link", "set", "eth0", "up")

    def power_off(self, host: str) -> None:
        """The host vanishes without a word: link down first, then every process dies."""
        self.cut_link(host)
        self.kill_host(host)

    def bytes_sent(self, host: str) -> int:
        """Bytes ``host`` has sent over its network link so far."""
        path = "/sys/class/net/eth0/statistics/tx_bytes"
        out = subprocess.run(["ip", "netns", "exec", self.prefix + host, "cat", path],
                             capture_output=True, text=True, check=True).stdout
        return int(out)


def _remove_stale_namespaces():
    """Drop namespaces left by a test run that was killed (its pid no longer runs)."""
    out = _ip("netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith("mf") or "-" not in name:
            continue
        owner = name[2:].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            for pid in _ip("netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", name, check=False)
