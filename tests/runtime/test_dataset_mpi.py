"""tf.data under mpiexec: each worker's iterator runs on that worker (none on the ps), with
its per-element map, and
its end of input stops the worker's MonitoredTrainingSession cleanly, and the job exits."""

import re
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


def test_each_worker_reads_its_mapped_shard_on_its_own_rank_until_the_end_of_input(run_mpi):
    out = run_mpi(3, PROGS / "dataset_workers.py", timeout=120).stdout
    workers = re.findall(r"OK worker (\d): read (\d+) examples of its shard, mapped per element; "
                         r"resources \[([^\]]*)\]", out)
    assert sorted(w[0] for w in workers) == ["0", "1"], out
    assert all(w[1] == "12" and "'iterator'" in w[2] for w in workers), out
    ps = re.search(r"OK ps: resources \[([^\]]*)\]", out)
    assert ps and "iterator" not in ps.group(1), out
