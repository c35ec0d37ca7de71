"""The launcher's end of the ranks' lines, without MPI: what it tells the survivors."""

import socket
import time

from mpiflow.comm.launch_link import LaunchLink
from mpiflow.launch.server import Fault, LaunchServer


def connect(server, rank):
    link = LaunchLink(socket.create_connection(("127.0.0.1", server.port)))
    link.tell("hello", rank=rank, pid=0, host="here")
    return link


def test_the_survivors_hear_at_once_of_a_rank_the_elastic_job_goes_on_without():
    server = LaunchServer("127.0.0.1")
    links = [connect(server, rank) for rank in range(3)]
    told = {rank: [] for rank in range(3)}
    for rank, link in enumerate(links):
        link.on_lost = lambda lost, why, rank=rank: told[rank].append((lost, why))
    try:
        deadline = time.monotonic() + 5
        while len(server.ranks) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.announce_loss(Fault("died", "rank 2 (worker:1) on here",
                                   "its process was killed by SIGKILL (signal 9)",
                                   "worker:1", rank=2))
        while not (told[0] and told[1]) and time.monotonic() < deadline:
            time.sleep(0.01)
        why = "its process was killed by SIGKILL (signal 9)"
        assert told == {0: [(2, why)], 1: [(2, why)], 2: []}
    finally:
        for link in links:
            link.close()
