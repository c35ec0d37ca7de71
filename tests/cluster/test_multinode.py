"""Jobs across simulated hosts: layout, training and collectives as between real nodes."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.cluster.conftest import PROGS
from tests.comm.test_cluster_mpi import records
from tests.conftest import REPO_ROOT

RUNTIME_PROGS = REPO_ROOT / "tests" / "runtime" / "progs"
COMM_PROGS = REPO_ROOT / "tests" / "comm" / "progs"
INFO = REPO_ROOT / "mpiflow" / "info.py"

pytestmark = [pytest.mark.mpi, pytest.mark.multinode]


def test_info_shows_every_rank_on_its_host_with_spread_ps_one_per_host(run_on_hosts):
    out = run_on_hosts(INFO, "--ps", 3, "--policy", "spread").stdout
    rows = re.findall(r"^\s*(\d+)\s+(node\d)\s+(\d+)\s+(\d+)\s+(\w+:\d+)", out, re.M)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("0", "node0", "0"), ("1", "node0", "1"), ("2", "node1", "0"),
        ("3", "node1", "1"), ("4", "node2", "0"), ("5", "node2", "1")], out
    roles = {r[4]: r[1] for r in rows}
    assert [roles[f"ps:{t}"] for t in range(3)] == ["node0", "node1", "node2"], out
    assert "nodes: 3; ps policy spread" in out


def test_cluster_spec_from_mpi_spreads_ps_over_hosts(run_on_hosts):
    job = run_on_hosts(COMM_PROGS / "cluster_layout.py", "--env-only",
                       env={"MPIFLOW_PS": "3", "MPIFLOW_PS_POLICY": "spread"})
    found = records(job.stdout, "CLUSTER")
    ps_hosts = sorted(r["host"] for r in found if r["job"] == "ps")
    assert ps_hosts == ["node0", "node1", "node2"], job.stdout
    assert sorted(r["local_rank"] for r in found) == [0, 0, 0, 1, 1, 1]


def test_traffic_between_ranks_on_different_hosts_crosses_the_network(hosts, run_on_hosts):
    before = hosts.bytes_sent("node1")
    job = run_on_hosts(PROGS / "allreduce_vs_mpi.py", ranks_per_host=1,
                       on=["node0", "node1"])
    # Four dtypes x ~1.2 MiB, reduced four ways (MPI and three algorithms): well over 4 MiB
    # must have left node1 through its link, not through shared memory.
    assert hosts.bytes_sent("node1") - before > 4 << 20, job.stdout


def test_every_allreduce_algorithm_across_hosts_equals_mpi(run_on_hosts):
    job = run_on_hosts(PROGS / "allreduce_vs_mpi.py")
    found = records(job.stdout, "ALLREDUCE")
    assert sorted(r["rank"] for r in found) == list(range(6)), job.stdout
    assert all(r["checked"] == 48 and r["failures"] == [] for r in found), found


def test_async_training_with_ps_on_other_hosts_equals_one_process(run_on_hosts):
    job = run_on_hosts(RUNTIME_PROGS / "ps_parity.py", "adam", 6, ranks_per_host=1,
                       env={"MPIFLOW_PS": "2"})
    assert "OK parity adam: 6 steps" in job.stdout, job.report()


def test_async_workers_on_three_hosts_have_every_push_applied_once(run_on_hosts):
    job = run_on_hosts(RUNTIME_PROGS / "ps_counting.py", 100)
    reports = re.findall(r"OK worker (\d): 100 updates applied once each", job.stdout)
    assert sorted(reports) == ["0", "1", "2", "3", "4"], job.report()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sync_training_across_hosts_equals_one_process(run_on_hosts, optimizer):
    job = run_on_hosts(RUNTIME_PROGS / "sync_parity.py", optimizer, 6, on=["node0", "node1"],
                       env={"MPIFLOW_PS": "2", "MPIFLOW_PS_POLICY": "spread"})
    found = re.findall(rf"OK sync {optimizer}: worker (\d) of 2, 2 ps, 6 steps", job.stdout)
    assert sorted(found) == ["0", "1"], job.report()


def test_the_multinode_benchmark_measures_both_parts_across_hosts(run_on_hosts, tmp_path):
    # Nothing else runs this benchmark: it had hung (its raw baseline, probing for any
    # tag on the ps, took a worker's start-up message) and then called a changed helper
    # with too few arguments, unseen. Here it runs end to end on three hosts.
    results = tmp_path / "multinode.json"
    run_on_hosts(REPO_ROOT / "benchmarks" / "multinode.py", "--sizes-mib", 1, "--rounds", 1,
                 "--seconds", 0.05, "--budget", 0.1, "--json", results, ranks_per_host=1)
    found = json.loads(results.read_text())
    assert found["layout"].startswith("3 ranks on 3 nodes"), found
    [ps_row] = found["ps"]
    assert ps_row["MiB"] == 1 and all(np.min(v) > 0 for v in ps_row.values()), found
    assert [row["bytes"] for row in found["allreduce"]] == [64 << 10, 1 << 20, 4 << 20,
                                                            16 << 20], found
    assert all(min(row["bus_MiBps"].values()) > 0 for row in found["allreduce"]), found


def test_the_hybrid_benchmark_runs_each_rank_on_a_host_of_its_own_and_its_bytes_fit_the_model(
        hosts):
    # Its own simulated hosts (one per rank, links capped) beside this module's: the bags
    # of ids (--pool) and the capped links run end to end, and what each worker and the
    # ps moved per step equals what the cost model predicts for that model.
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "hybrid_cost.py"), "--simulate",
         "--link-mbit", "200", "--workers", "2", "--modes", "hybrid", "allreduce",
         "--rows", "5000", "--dim", "8", "--fields", "4", "--pool", "3", "--batch", "16",
         "--hidden", "32", "--steps", "3", "--warmup", "1", "--json"],
        capture_output=True, text=True, timeout=240, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["shape"]["ids_per_step"] == 16 * 4 * 3
    assert [run["measured"]["mode"] for run in found["runs"]] == ["hybrid", "allreduce"]
    for run in found["runs"]:
        measured, predicted = run["measured"], run["predicted"]
        assert measured["hosts"] == measured["workers"] + measured["ps"], measured
        for key in ("worker_sent", "worker_received"):      # counted after the warm-up
            assert measured[key] == pytest.approx(predicted[key], rel=0.02, abs=64), (key, run)
