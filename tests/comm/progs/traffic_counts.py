"""The traffic counters count what moved: each collective as the bandwidth-optimal
algorithm moves it per rank, and every point-to-point message with its header.
Usage: mpiexec -n 2|3 python traffic_counts.py"""

import json

import numpy as np
from mpi4py import MPI

from mpiflow.comm import collectives
from mpiflow.comm.traffic import TRAFFIC, between
from mpiflow.comm.transport import Transport

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
seen = {}

for algorithm in ("mpi", "ring"):
    strategy = collectives.get_collective(algorithm, world, np.ones(3000, np.float32))
    before = TRAFFIC.totals()
    strategy.allreduce(np.ones(3000, np.float32))           # 12000 bytes
    seen[f"allreduce_{algorithm}"] = between(before, TRAFFIC.totals())["sent"]["allreduce"]
    before = TRAFFIC.totals()
    strategy.allreduce(np.ones(3000, np.float16))           # summed in float32
    seen[f"allreduce_half_{algorithm}"] = between(before, TRAFFIC.totals())["sent"][
        "allreduce"]
    before = TRAFFIC.totals()
    # Half floats on the wire (compressed gradients): 2048, 1 and 2 on ranks 0-2.
    moved = strategy.allreduce(np.full(3000, [2048.0, 1.0, 2.0][rank], np.float16),
                               op="average", half_on_wire=True)
    seen[f"allreduce_wire_{algorithm}"] = between(before, TRAFFIC.totals())["sent"][
        "allreduce"]
    seen[f"average_wire_{algorithm}"] = sorted(set(moved.astype(float).tolist()))

before = TRAFFIC.totals()
collectives.MpiCollective(world).allgather(np.ones((rank + 1, 10), np.float64))
seen["allgather_received"] = between(before, TRAFFIC.totals())["received"]["allgather"]
before = TRAFFIC.totals()
collectives.MpiCollective(world).broadcast(np.ones(500, np.int32), root=0)
moved = between(before, TRAFFIC.totals())
seen["broadcast"] = [moved["sent"]["broadcast"], moved["received"]["broadcast"]]

transport = Transport(world.Dup())
before = TRAFFIC.totals()
if rank == 0:
    transport.send(1, {"k": "x"}, [np.ones(1000, np.float32), np.ones(10, np.int64)])
    transport.flush()
elif rank == 1:
    while transport.poll() is None:
        pass
moved = between(before, TRAFFIC.totals())
seen["p2p"] = [moved["sent"]["p2p"], moved["received"]["p2p"]]
world.Barrier()
print(json.dumps({"rank": rank, "size": size, **seen}), flush=True)
