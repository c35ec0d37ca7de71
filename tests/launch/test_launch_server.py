"""The launcher's end of the ranks' lines, without MPI: what it tells the survivors."""

import signal
import socket
import threading
import time

from mpiflow.comm.launch_link import LaunchLink
from mpiflow.launch.server import Fault, LaunchServer


def connect(server, rank):
    link = LaunchLink(socket.create_connection(("127.0.0.1", server.port)))
    link.tell("hello", rank=rank, pid=0, host="here")
    return link


def watched_rank(server, number):
    """``(watcher, rank)`` lines of rank ``number`` as a launch makes them: its watching
    parent says hello and that it watches, then starts the rank, which says hello."""
    watcher = unwatched_child(server, number)
    parents = server.ranks[number]
    rank = connect(server, number)
    deadline = time.monotonic() + 5
    while server.ranks[number] is parents and time.monotonic() < deadline:
        time.sleep(0.01)
    return watcher, rank


def test_the_survivors_hear_at_once_of_a_rank_the_elastic_job_goes_on_without():
    server = LaunchServer("127.0.0.1")
    links = [connect(server, rank) for rank in range(3)]
    told = {rank: [] for rank in range(3)}
    for rank, link in enumerate(links):
        link.on_lost = lambda lost, why, rank=rank: told[rank].append((lost, why))
    try:
        deadline = time.monotonic() + 5
        while len(server.ranks) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.announce_loss(Fault("died", "rank 2 (worker:1) on here",
                                   "its process was killed by SIGKILL (signal 9)",
                                   "worker:1", rank=2))
        while not (told[0] and told[1]) and time.monotonic() < deadline:
            time.sleep(0.01)
        why = "its process was killed by SIGKILL (signal 9)"
        assert told == {0: [(2, why)], 1: [(2, why)], 2: []}
    finally:
        for link in links:
            link.close()


def test_ctrl_c_is_handed_to_every_rank_over_its_line_where_the_launcher_does_not():
    # One rank and its watching parent, both in this process: the rank's line signals
    # its own process; a watcher's line is not a rank's and is not told.
    server = LaunchServer("127.0.0.1")
    watcher, rank = watched_rank(server, 0)
    got = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
    try:
        deadline = time.monotonic() + 5
        assert server.interrupt_all(signal.SIGUSR2) == 1
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)
        watcher.close()
        rank.close()


def test_a_rank_that_ended_well_is_not_taken_for_dead_when_its_watcher_speaks_first():
    # The server reads a rank's line and its watcher's in two threads: the watcher's
    # report of the exit can be read before the rank's last words, as here.
    server = LaunchServer("127.0.0.1")
    watcher, rank = watched_rank(server, 1)
    answered = []
    report = threading.Thread(target=lambda: answered.append(
        watcher.ask("child_ended", 3.0, code=0)))
    try:
        report.start()
        time.sleep(0.05)        # the report first (the server waits up to 0.5 s for more)
        rank.tell("bye")
        rank.close()
        report.join(5)
        assert answered and answered[0] is not None
        assert server.faults.empty(), server.faults.get_nowait().describe()
        assert server.ranks[1].ended == "bye"
    finally:
        watcher.close()


def unwatched_child(server, number):
    """The watching parent's line of rank ``number`` whose own process never imports
    mpiflow (a shell command, or a script that fails before its import)."""
    watcher = connect(server, number)
    watcher.tell("watching", pid=0)
    deadline = time.monotonic() + 5
    while (number not in server.ranks or server.ranks[number].watchers < 1) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    return watcher


def test_a_program_without_mpiflow_that_exits_0_ended_well():
    server = LaunchServer("127.0.0.1")
    watcher = unwatched_child(server, 0)
    try:
        assert watcher.ask("child_ended", 3.0, code=0) is not None
        assert server.faults.empty(), server.faults.get_nowait().describe()
        assert server.ranks[0].ended == "bye"
    finally:
        watcher.close()


def test_a_script_that_fails_before_it_imports_mpiflow_is_named_so():
    # A syntax error, a failed import, a missing script: Python printed why, and the
    # launch says where to look (not that the rank called os._exit).
    server = LaunchServer("127.0.0.1")
    watcher = unwatched_child(server, 1)
    try:
        assert watcher.ask("child_ended", 3.0, code=1) is not None
        fault = server.faults.get(timeout=1)
        assert fault.kind == "died" and fault.rank == 1
        assert fault.why == ("its process exited with code 1 before it imported mpiflow "
                             "(an error in the script or its imports, or no such file: see "
                             "its output above)"), fault.why
    finally:
        watcher.close()


def test_a_rank_that_imported_mpiflow_and_vanished_is_still_taken_for_dead():
    server = LaunchServer("127.0.0.1")
    watcher, rank = watched_rank(server, 0)
    try:
        rank.close()            # its line closes without a word: os._exit(0)
        assert watcher.ask("child_ended", 3.0, code=0) is not None
        fault = server.faults.get(timeout=1)
        assert "without a word" in fault.why, fault.why
    finally:
        watcher.close()


def test_a_rank_the_others_guessed_lost_is_named_by_how_its_watcher_saw_it_end():
    # The survivors' liveness check can report a killed worker before its watcher does:
    # the fault the job went on without then takes the watcher's exact cause.
    server = LaunchServer("127.0.0.1")
    watcher, rank = watched_rank(server, 1)
    survivor = connect(server, 0)
    try:
        survivor.tell("gone", rank=1, why="its process 7 on here no longer runs (killed?)")
        fault = server.faults.get(timeout=1)
        assert fault.kind == "gone" and "killed?" in fault.why, fault.why
        rank.close()
        assert watcher.ask("child_ended", 3.0, code=-signal.SIGKILL) is not None
        assert fault.why == "its process was killed by SIGKILL (signal 9)", fault.why
        assert server.faults.empty()
    finally:
        for line in (watcher, survivor):
            line.close()
