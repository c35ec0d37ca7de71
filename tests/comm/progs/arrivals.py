"""Rank 1 sends rank 0 a message whose 8 MiB payload it holds back until told; rank 2
sends a message of its own. Rank 0 must get rank 2's while rank 1's payload is on the
way, then rank 1's, whole. Usage: mpiexec -n 3 python arrivals.py"""

import time

import msgpack
import numpy as np
from mpi4py import MPI

from mpiflow.comm.transport import HEADER_TAG, PAYLOAD_TAG, Transport

GO = 99
ELEMENTS = 2 << 20


def next_message(link, within=20.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        message = link.poll()
        if message is not None:
            return message
    raise SystemExit(f"no message within {within} s")


def main():
    world = MPI.COMM_WORLD
    link = Transport(world.Dup())
    rank = world.Get_rank()
    payload = np.arange(ELEMENTS, dtype=np.float32)
    if rank == 1:       # the header now, the payload once rank 0 says so
        header = msgpack.packb({"k": "t", "n": 1, "_buf": [["float32", [ELEMENTS]]]},
                               use_bin_type=True)
        link.comm.Send([header, MPI.BYTE], 0, HEADER_TAG)
        world.Barrier()
        world.recv(source=0, tag=GO)
        link.comm.Send([payload, MPI.BYTE], 0, PAYLOAD_TAG)
    elif rank == 2:
        world.Barrier()                 # after rank 0 holds rank 1's header
        link.send(0, {"k": "t", "n": 2}, [np.ones(3, np.float32)])
    else:
        while not link.receiving():     # rank 1's header came, its payload has not
            assert link.poll() is None, "a message without its payload came out"
        world.Barrier()
        first = next_message(link)
        assert first.source == 2 and first.header["n"] == 2, first
        assert link.receiving()
        world.send(None, dest=1, tag=GO)
        second = next_message(link)
        assert second.source == 1 and np.array_equal(second.arrays[0], payload), second
        print("OK arrivals: rank 2's message came while rank 1's payload was on the way; "
              "then rank 1's, whole", flush=True)
    link.flush()
    world.Barrier()


if __name__ == "__main__":
    main()
