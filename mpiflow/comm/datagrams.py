"""Small notices between ranks over UDP, outside MPI: what the heartbeats travel on.

Heartbeats must keep going to a peer until it is found lost, that is, for seconds after
it died. Over MPI that is a send to a dead process, and some network layers crash on it
(UCX over TCP, once the dead peer's connection was reset: the survivors ended in SIGSEGV
inside a heartbeat send). A datagram to a dead process or a cut-off host is simply lost,
which is exactly what a heartbeat needs, and it costs nothing to the MPI library.

A notice is 17 bytes: a magic, the job's token (so a stray datagram of another job or
program is never taken for a peer's), the sender's rank and a code. Each rank's socket
listens on every interface of its host; a rank learns where a peer is from the peer's own
datagrams, so only the monitor's addresses are handed out (``local_addresses``).
"""

from __future__ import annotations

import fcntl
import socket
import struct

_NOTICE = struct.Struct("!4sQiB")
_MAGIC = b"MFHB"
_SIOCGIFADDR = 0x8915          # Linux: an interface's IPv4 address
LOOPBACK = "127.0.0.1"


def local_addresses() -> list[str]:
    """This host's IPv4 addresses others may reach it at: what its host name resolves to
    first (how clusters name their nodes), then every other up interface's address;
    loopback last, for peers of the same host."""
    found = []
    try:
        found += [info[4][0] for info in socket.getaddrinfo(
            socket.gethostname(), None, socket.AF_INET, socket.SOCK_DGRAM)]
    except OSError:
        pass
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:          # no IPv4 address on that interface
                continue
            found.append(socket.inet_ntoa(reply[20:24]))
    except OSError:
        pass
    finally:
        probe.close()
    outward = [a for a in dict.fromkeys(found) if not a.startswith("127.")]
    return outward + [LOOPBACK]


class Datagrams:
    """A UDP socket of one rank, bound to every interface on a free port; it sends and
    receives notices of one job (``token``). Never blocks, never raises for a peer that
    cannot be reached: a lost notice is what a lost peer looks like."""

    def __init__(self, rank: int):
        self.rank = rank
        self.token = 0
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("", 0))
        self._socket.setblocking(False)
        self.port = self._socket.getsockname()[1]

    def send(self, address: tuple[str, int], code: int) -> None:
        try:
            self._socket.sendto(_NOTICE.pack(_MAGIC, self.token, self.rank, code), address)
        except OSError:             # unreachable network or host, a full buffer: lost
            pass

    def receive(self):
        """Yield ``(rank, code, address)`` for every notice of this job waiting here."""
        while True:
            try:
                data, address = self._socket.recvfrom(64)
            except OSError:         # nothing waiting (or an ICMP error reported late)
                return
            if len(data) != _NOTICE.size:
                continue
            magic, token, rank, code = _NOTICE.unpack(data)
            if magic == _MAGIC and token == self.token:
                yield rank, code, address

    def close(self) -> None:
        self._socket.close()
