"""How long a waiting rank polls before it sleeps: long where the node has a core for
each rank (nobody else wants that core, and a sleep ends late), short where ranks share
cores (a polling rank holds one another rank may need); MPIFLOW_POLL_SPIN_US decides
where it is set."""

import os

import pytest

from mpiflow import backend
from mpiflow.runtime import rank_service


@pytest.mark.parametrize("ranks, expected", [
    (2, rank_service.OWN_CORE_SPIN_US),
    (3, rank_service.CROWDED_SPIN_US),
])
def test_unset_the_polling_follows_whether_the_node_has_a_core_per_rank(
        monkeypatch, ranks, expected):
    monkeypatch.delenv("MPIFLOW_POLL_SPIN_US", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(backend, "_local_rank", [0, ranks])
    assert rank_service.poll_spin_us() == expected


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpiflow_poll_spin_us_has_the_last_word(monkeypatch, ranks):
    monkeypatch.setenv("MPIFLOW_POLL_SPIN_US", "0")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(backend, "_local_rank", [0, ranks])
    assert rank_service.poll_spin_us() == 0
