"""How many threads a rank's kernels run on, and when a node is crowded: from the processors
the job's ranks of a machine may run on (their affinities), not the machine's count."""

import os

import pytest

from mpiflow import backend
from mpiflow.comm.cluster import Layout, cpu_list_text, cpu_share, parse_cpu_list


@pytest.mark.parametrize("cpus, text", [
    ({0}, "0"), ({0, 1, 2, 3}, "0-3"), ({0, 1, 2, 3, 8}, "0-3,8"),
    ({5, 7, 9, 10, 11}, "5,7,9-11"), (set(), ""),
])
def test_a_processor_list_travels_as_ranges_and_reads_back(cpus, text):
    assert cpu_list_text(cpus) == text
    assert parse_cpu_list(text) == frozenset(cpus)


def cpus(first, count):
    return frozenset(range(first, first + count))


@pytest.mark.parametrize("mine, node, threads, node_cpus", [
    # unbound ranks of a whole 64-core node: the cores divided among them
    (cpus(0, 64), [cpus(0, 64)] * 4, 16, 64),
    # unbound ranks of a job given 8 processors of a bigger node (Slurm's cgroup)
    (cpus(8, 8), [cpus(8, 8)] * 4, 2, 8),
    # ranks bound to 2 processors each (srun --cpu-bind): each has its own
    (cpus(2, 2), [cpus(0, 2), cpus(2, 2), cpus(4, 2), cpus(6, 2)], 2, 8),
    # bound to a core each (Open MPI's default, hydra's -bind-to core)
    (cpus(1, 1), [cpus(0, 1), cpus(1, 1)], 1, 2),
    # uneven bindings: each rank takes what it was given
    (cpus(0, 6), [cpus(0, 6), cpus(6, 2)], 6, 8),
    # more ranks than processors: one thread each, and the node is crowded
    (cpus(0, 1), [cpus(0, 1)] * 3, 1, 1),
])
def test_a_rank_shares_its_processors_with_the_ranks_whose_affinity_overlaps_it(
        mine, node, threads, node_cpus):
    assert cpu_share(mine, node) == (threads, node_cpus)


def test_a_layout_built_from_host_names_alone_divides_the_machine(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    layout = Layout(["a", "a", "a", "b"], rank=1)
    assert (layout.cpu_threads, layout.node_cpus) == (2, 8)
    assert (Layout(["a"], cpus=(3, 4)).cpu_threads, Layout(["a"], cpus=(3, 4)).node_cpus) \
        == (3, 4)


@pytest.mark.parametrize("ranks, node_cpus, crowded", [(3, 4, False), (3, 2, True)])
def test_a_node_is_crowded_by_the_processors_its_ranks_may_use_not_the_machines(
        monkeypatch, ranks, node_cpus, crowded):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(backend, "_local_rank", [0, None])
    monkeypatch.setattr(backend, "_node_cpus", [None])
    backend.set_local_rank(0, ranks, node_cpus)
    assert backend.node_cpus() == node_cpus
    assert backend.node_crowded() is crowded


def test_the_thread_limit_is_the_layouts_share_unless_the_user_chose(monkeypatch):
    limits = []
    monkeypatch.setattr(backend, "limit_blas_threads", limits.append)
    for name in ("MPIFLOW_CPU_THREADS", *backend._THREAD_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    assert backend.share_cpu_cores(3) == 3 and limits == [3]
    monkeypatch.setenv("MPIFLOW_CPU_THREADS", "5")
    assert backend.share_cpu_cores(3) == 5 and limits == [3, 5]
    monkeypatch.delenv("MPIFLOW_CPU_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert backend.share_cpu_cores(3) == 0 and limits == [3, 5]
