"""Ranks writing lines as fast as they can; none may be spliced with another's.
Usage: mpiexec -n 3 python output_lines.py print       (every rank: print() 300 lines)
       mpiexec -n 3 python output_lines.py mf_print    (1 ps + 2 workers: mf.print lines)
"""

import sys

import mpiflow as mf
from mpiflow.logger import launch_rank

LINES = 300
MF_PRINT_STEPS = 50
WORDS = "lorem ipsum " * 15         # long lines: a splice would show


def line(rank, i):
    """Line ``i`` of ``rank``: about 200 characters, told apart from every other line."""
    return f"rank {rank} line {i:03d} " + chr(ord("a") + rank) * 180 + f" end {rank}/{i}"


def print_lines():
    rank = int(launch_rank())
    for i in range(LINES):
        print(line(rank, i))


def mf_print_lines():
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    task = server.task_index
    with mf.device(f"/job:worker/task:{task}"):
        values = mf.constant([task, 1, 2])
        show = mf.print("worker says", task, values, WORDS)
        shown = mf.Print(values, [values], message="first: ", first_n=2)
    with mf.device("/job:ps/task:0"):
        on_ps = mf.print("the ps says", mf.constant(7.5))
    with mf.Session(server.target) as sess:
        for _ in range(MF_PRINT_STEPS):
            sess.run(show)
        passed = [sess.run(shown).tolist() for _ in range(3)]
        if server.is_chief:
            sess.run(on_ps)
    print(f"worker {task} got {passed}", flush=True)
    server.join()


if __name__ == "__main__":
    {"print": print_lines, "mf_print": mf_print_lines}[sys.argv[1]]()
