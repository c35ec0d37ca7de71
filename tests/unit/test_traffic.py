"""The traffic counters: what a process sent and received, by road."""

import threading

import numpy as np

from mpiflow.comm.traffic import ROADS, Traffic, between


def test_totals_are_python_ints_whatever_integers_were_added():
    traffic = Traffic()
    traffic.add("p2p", sent=np.int64(3), received=5)
    traffic.add("allreduce", sent=7, received=np.uint32(11))
    totals = traffic.totals()
    assert totals["sent"] == {"p2p": 3, "allreduce": 7, "allgather": 0, "broadcast": 0}
    assert totals["received"]["allreduce"] == 11
    assert all(type(n) is int for side in ("sent", "received") for n in totals[side].values())


def test_adds_from_many_threads_are_all_counted():
    traffic = Traffic()

    def count():
        for _ in range(20_000):
            traffic.add("p2p", sent=1, received=2)
    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert traffic.totals()["sent"]["p2p"] == 80_000
    assert traffic.totals()["received"]["p2p"] == 160_000


def test_between_subtracts_and_sums_the_roads():
    traffic = Traffic()
    before = traffic.totals()
    for road in ROADS:
        traffic.add(road, sent=1, received=2)
    diff = between(before, traffic.totals())
    assert diff["sent_total"] == len(ROADS) and diff["received_total"] == 2 * len(ROADS)
