"""A message's payload is received without blocking: a sender lost between its header
and its payload (killed during a push) makes the receiver drop that message, not wait
for it forever; the transport goes on with the next message. Meanwhile the receiver
serves the messages of other senders, and those of one sender come out in the order
sent. A writer waiting for a guarded send to a receiver lost meanwhile gives it up."""

import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from mpiflow.comm import transport as transport_lib
from mpiflow.comm.transport import HEADER_TAG

MPI = pytest.importorskip("mpi4py.MPI")
PROGS = Path(__file__).parent / "progs"


def _header_without_its_payload(link, nbytes):
    """What a sender killed right after its header leaves: the header of a payload of
    ``nbytes`` that never comes."""
    header = msgpack.packb({"k": "t", "_buf": [["float32", [nbytes // 4]]]},
                           use_bin_type=True)
    return header, link.comm.Isend([header, MPI.BYTE], 0, HEADER_TAG)


def _poll(link, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        message = link.poll()
        if message is not None:
            return message
    return None


# A receive that blocked would hang inside MPI, where no signal reaches Python: the
# timeout's thread ends the test run instead.
@pytest.mark.timeout(30, method="thread")
@pytest.mark.parametrize("nbytes", [64, 8 << 20])      # eager and rendezvous sizes
def test_a_payload_whose_sender_is_lost_is_dropped_instead_of_awaited(link, nbytes):
    asked = []
    lost_after = time.monotonic() + 0.3

    def peer_lost(rank):
        asked.append(rank)
        return time.monotonic() > lost_after

    link.peer_lost = peer_lost
    in_flight = _header_without_its_payload(link, nbytes)
    start = time.monotonic()
    while not asked or link.receiving():
        assert link.poll() is None
        assert time.monotonic() - start < 0.3 + 2 * transport_lib.PEER_CHECK_S + 1.0
    assert time.monotonic() - start >= 0.3
    assert set(asked) == {0}
    in_flight[1].Wait()
    # The next message arrives whole: nothing of the dropped one is left in the way.
    sent = np.arange(1 << 20, dtype=np.float32)
    link.send(0, {"k": "t", "n": 2}, [sent])
    message = _poll(link)
    assert message.header["n"] == 2 and np.array_equal(message.arrays[0], sent)
    link.flush()


def test_a_payload_that_comes_never_asks_whether_its_sender_lives(link):
    link.peer_lost = lambda rank: pytest.fail("asked about a sender whose data came")
    sent = [np.full(3, 7, np.int64), np.ones((512, 1024), np.float32)]
    link.send(0, {"k": "t"}, sent)
    message = _poll(link)
    assert all(np.array_equal(a, b) for a, b in zip(message.arrays, sent))
    link.flush()


@pytest.mark.timeout(30, method="thread")
def test_a_senders_messages_come_out_in_the_order_sent_while_a_payload_is_on_the_way(link):
    in_flight = _header_without_its_payload(link, 8 << 20)
    link.send(0, {"k": "t", "n": 2}, [np.arange(4, dtype=np.float32)])     # inline
    for _ in range(100):        # the second is here whole, the first is not: neither
        assert link.poll() is None
    assert link.receiving()
    payload = np.full(2 << 20, 3, np.float32)
    link.comm.Send([payload, MPI.BYTE], 0, transport_lib.PAYLOAD_TAG)
    first, second = _poll(link), _poll(link)
    assert np.array_equal(first.arrays[0], payload) and "n" not in first.header
    assert second.header["n"] == 2 and np.array_equal(second.arrays[0], np.arange(4))
    assert not link.receiving()
    in_flight[1].Wait()
    link.flush()


@pytest.mark.mpi
def test_a_payload_on_the_way_does_not_hold_back_another_senders_message(run_mpi):
    out = run_mpi(3, PROGS / "arrivals.py", timeout=60).stdout
    assert "OK arrivals: rank 2's message came while rank 1's payload was on the way; " \
           "then rank 1's, whole" in out, out


@pytest.mark.timeout(30, method="thread")
def test_a_guarded_send_to_a_receiver_found_lost_is_given_up_by_its_writer(link):
    # 8 MB: a rendezvous send, never done while nobody receives it (a worker killed
    # during its pull); the ps about to update the variable stops waiting once the
    # receiver is found lost.
    lost_after = time.monotonic() + 0.3
    link.peer_lost = lambda rank: time.monotonic() > lost_after
    variable = np.ones(2 << 20, dtype=np.float32)
    link.send(0, {"k": "t"}, [variable], guards=["v"])
    start = time.monotonic()
    link.wait_guard("v")
    assert 0.3 <= time.monotonic() - start < 0.3 + 2 * transport_lib.PEER_CHECK_S + 1.0
    assert not link.has_pending_sends()         # given up, kept alive while MPI may read
    message = _poll(link)                       # (received here after all: MPI is done)
    assert np.array_equal(message.arrays[0], variable)
