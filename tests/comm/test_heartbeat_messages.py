"""What a heartbeat's loss message says, for the two ways a rank can fall silent."""

import pytest
from mpi4py import MPI

from mpiflow.comm.liveness import Heartbeat


@pytest.fixture
def heartbeat_seen_from_the_monitor():
    """``make(hosts, heard)``: the monitor's heartbeat of a job on ``hosts`` that heard
    from ``heard`` so far (built on this process alone, then given the job's shape: no
    peer is needed to say what it would report). Never started; closed after the test."""
    made = []

    def make(hosts, heard):
        beat = Heartbeat(MPI.COMM_SELF, hosts[:1], lambda r: f"rank {r}", 1.0, 3.0)
        beat.size, beat.hosts, beat._heard = len(hosts), list(hosts), set(heard)
        made.append(beat)
        return beat
    yield make
    for beat in made:
        beat._datagrams.close()


def test_a_rank_heard_before_is_reported_silent_without_blaming_udp(
        heartbeat_seen_from_the_monitor):
    beat = heartbeat_seen_from_the_monitor(["a", "b", "c"], heard={1, 2})
    text = beat.explain([2])
    assert text.startswith("lost contact with rank 2 on host c: no heartbeat for more than "
                           "3 s (MPIFLOW_PEER_TIMEOUT)")
    assert "ever arrived" not in text


def test_ranks_never_heard_from_are_named_with_the_udp_hint(heartbeat_seen_from_the_monitor):
    beat = heartbeat_seen_from_the_monitor(["a", "b", "c", "c"], heard={1})
    text = beat.explain([1, 2, 3])
    assert "; no heartbeat of ranks 2-3 ever arrived: heartbeats are UDP datagrams, which "\
           "a firewall between the hosts may drop" in text
    assert "host c (all its ranks: rank 2, rank 3)" in text
