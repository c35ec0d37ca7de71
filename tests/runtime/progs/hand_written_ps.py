"""The hand-written ps that benchmarks/ps_throughput.py measures mpiflow's ps path
against does the same math as one process: 1 ps + 1 worker take STEPS steps through it,
and the ps's variables must equal, bit for bit, those of the same numpy step run STEPS
times in one process on the same batch. A baseline that skipped work would flatter
itself; this says it does not. Prints "OK hand_written_ps: STEPS steps".
Usage: mpiexec -n 2 python hand_written_ps.py STEPS
"""

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ps_throughput import hand_written_ps, mlp_batch
from step_overhead import NumpyStep, init_params

STEPS = int(sys.argv[1])
LR = 0.05

_, pushed = hand_written_ps(MPI.COMM_WORLD, batch=32, lr=LR, steps=STEPS)
if MPI.COMM_WORLD.Get_rank() == 0:
    params = init_params()
    step = NumpyStep(params, 32)
    x, y = mlp_batch(0, 32)
    for _ in range(STEPS):
        step(x, y, np.float32(LR))
    for i, (mine, theirs) in enumerate(zip(params, pushed)):
        assert np.array_equal(mine, theirs), f"variable {i} differs"
    assert not np.array_equal(params[0], init_params()[0]), "nothing was trained"
    print(f"OK hand_written_ps: {STEPS} steps", flush=True)
