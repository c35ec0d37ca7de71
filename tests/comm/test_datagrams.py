"""Heartbeat notices travel as UDP datagrams, outside MPI, and only a job's own count."""

import time

from mpiflow.comm.datagrams import LOOPBACK, Datagrams, local_addresses


def receive_within(datagrams, seconds=2.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = list(datagrams.receive())
        if found:
            return found
        time.sleep(0.005)
    return []


def pair(token=1234):
    a, b = Datagrams(rank=0), Datagrams(rank=3)
    a.token = b.token = token
    return a, b


def test_a_notice_arrives_with_its_senders_rank_code_and_address():
    a, b = pair()
    try:
        b.send((LOOPBACK, a.port), 2)
        [(rank, code, address)] = receive_within(a)
        assert (rank, code) == (3, 2)
        # The answer goes back where the notice came from.
        a.send(address, 1)
        assert [(r, c) for r, c, _ in receive_within(b)] == [(0, 1)]
    finally:
        a.close()
        b.close()


def test_a_notice_of_another_job_or_a_stray_datagram_is_ignored():
    a, b = pair()
    b.token = 99
    try:
        b.send((LOOPBACK, a.port), 0)
        b._socket.sendto(b"hello", (LOOPBACK, a.port))
        assert receive_within(a, 0.3) == []
    finally:
        a.close()
        b.close()


def test_a_notice_to_a_port_nobody_listens_on_is_lost_without_an_error():
    a, _ = pair()
    a.close()
    b = Datagrams(rank=1)
    try:
        for _ in range(3):                      # an ICMP error may follow the first
            b.send((LOOPBACK, a.port), 0)       # nobody listens there any more
            assert list(b.receive()) == []
    finally:
        b.close()


def test_this_hosts_addresses_end_with_loopback_for_peers_on_the_same_host():
    found = local_addresses()
    assert found[-1] == LOOPBACK
    assert all(not a.startswith("127.") for a in found[:-1])
