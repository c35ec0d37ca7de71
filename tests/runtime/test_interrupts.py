"""Ctrl-C and SIGTERM end a job as interrupted, not failed: one line per rank at most, no
tracebacks, no rank blaming another, every process gone within seconds, temporary
directories removed, and the shell's exit code for the signal."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "interruptible.py"
# The requirement is 2 s; the bound leaves room for a loaded CI machine.
GONE_WITHIN_S = 4.0

pytestmark = pytest.mark.mpi


def _wait_ready(proc, ranks=3, timeout=90):
    """The pids of the ranks, once every rank printed READY."""
    pids, deadline = {}, time.monotonic() + timeout
    while len(pids) < ranks:
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, \
            f"the job ended or stalled before every rank was ready: {proc.stderr.read()}"
        found = re.match(r"READY (\d+) (\d+)", line)
        if found:
            pids[int(found.group(1))] = int(found.group(2))
    return pids


def _interrupt(proc, send):
    """Send the signal, wait for the launch to end; return (stdout, stderr, seconds)."""
    sent = time.monotonic()
    send()
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 30 s after the signal:\n{err}")
    return out, err, time.monotonic() - sent


def _rank_lines(err):
    return [line for line in err.splitlines() if line.startswith("[rank ")]


def _assert_clean_interrupt(err, tmp):
    assert "Traceback" not in err and "failed" not in err and "aborted" not in err, err
    lines = _rank_lines(err)
    assert len(lines) == len(set(lines)), err                 # no line twice
    if tmp is not None:
        assert not list(tmp.iterdir()), list(tmp.iterdir())   # temp dirs removed
    return lines


def _with_default_ctrl_c():
    """Start a child with SIGINT at its default, as a terminal does: a test run from a
    background job or under nohup inherits SIGINT ignored, which mpiflow leaves alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pids):
    """The pids still running GONE_WITHIN_S after the launcher ended (a rank may be a
    moment slower than the launcher that reported its end)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.fixture
def tmp(tmp_path):
    directory = tmp_path / "tmp"
    directory.mkdir()
    return directory


@pytest.mark.mpich_only        # a signal to the launch: Open MPI's kills the ranks
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_whole_launch_ends_every_rank_with_one_line(start_mpi, tmp, signum):
    # A terminal's Ctrl-C reaches every process of the foreground group: the launcher
    # (which forwards it again) and every rank.
    # SIGTERM interrupts a loop of its own (a MonitoredTrainingSession stops gracefully
    # instead: test_graceful_stop.py).
    proc = start_mpi(3, PROG, "--plain-session", env={"TMPDIR": str(tmp)})
    pids = _wait_ready(proc)
    _, err, took = _interrupt(proc, lambda: os.killpg(proc.pid, signum))
    lines = _assert_clean_interrupt(err, tmp)
    name = signal.Signals(signum).name
    # One line per rank, naming the signal; every rank got it, but a peer's word can
    # reach a rank before its own signal is handled (a busy core), and it says so.
    said = {line.split("] ", 1)[0] + "]": line.split("] ", 1)[1] for line in lines}
    host = lines[0].split(" on ")[1].split("]")[0]
    assert sorted(said) == [f"[rank {r} ({role}) on {host}]" for r, role in
                            ((0, "ps:0"), (1, "worker:0"), (2, "worker:1"))], err
    for rank, text in said.items():
        assert re.fullmatch(rf"interrupted(?: \({name}\)|: rank \d \(\S+\) on \S+ got {name})",
                            text) and rank[1:-1] not in text, err
    assert proc.returncode == 128 + signum, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


@pytest.mark.mpich_only        # MPICH's mpiexec forwards the signal
def test_the_launcher_forwarding_ctrl_c_ends_the_job_the_same_way(start_mpi, tmp):
    proc = start_mpi(3, PROG, env={"TMPDIR": str(tmp)})
    pids = _wait_ready(proc)
    _, err, took = _interrupt(proc, lambda: proc.send_signal(signal.SIGINT))
    lines = _assert_clean_interrupt(err, tmp)
    assert len(lines) == 3 and all(line.endswith("interrupted (SIGINT)") for line in lines), err
    assert proc.returncode == 130, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


@pytest.mark.mpich_only        # MPICH's mpiexec forwards the signal
def test_ctrl_c_reaching_a_rank_that_waits_at_exit_for_the_others_ends_it_the_same_way(
        start_mpi, tmp):
    # Worker 1 is done and waits at exit (atexit) for the others to leave; Ctrl-C there
    # must not print a traceback ("Exception ignored in atexit callback") and go on into
    # MPI_Finalize, which waits for the ranks that left, so the launch never ends.
    proc = start_mpi(3, PROG, "--worker-1-ends", env={"TMPDIR": str(tmp)})
    pids = _wait_ready(proc)
    time.sleep(1.0)                     # worker 1 is past its script, in its exit
    _, err, took = _interrupt(proc, lambda: proc.send_signal(signal.SIGINT))
    lines = _assert_clean_interrupt(err, tmp)
    assert "Exception ignored" not in err, err
    assert len(lines) == 3 and all(line.endswith("interrupted (SIGINT)") for line in lines), err
    assert proc.returncode == 130, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


@pytest.mark.mpich_only        # MPICH's launcher kills the others when one rank crashes
@pytest.mark.parametrize("watched", [False, True], ids=["mpiexec", "mpiflow.run"])
def test_a_rank_leaving_late_is_not_killed_by_those_that_left(start_mpi, tmp, watched):
    # With more ranks than cores, ranks leave the agreed moment milliseconds apart; the
    # first out must not look like a crash to the launcher, which would kill the late one
    # before it is done (and at times end the job with 9, "Killed", instead of 130).
    command = ("-m", "mpiflow.run", "--ps", 1, PROG) if watched else (PROG,)
    proc = start_mpi(3, *command, env={"TMPDIR": str(tmp), "INTERRUPTIBLE_LATE_RANK": "1"})
    pids = _wait_ready(proc)
    out, err, took = _interrupt(proc, lambda: proc.send_signal(signal.SIGINT))
    assert "LEAVING LATE 1" in out, (out, err)
    lines = _assert_clean_interrupt(err, tmp)
    assert len(lines) == 3 and all(line.endswith("interrupted (SIGINT)") for line in lines), err
    assert "Killed" not in err and "BAD TERMINATION" not in err, err
    assert proc.returncode == 130, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


def test_one_interrupted_rank_stops_the_others_naming_it_not_blaming_it(start_mpi, tmp):
    proc = start_mpi(3, PROG, env={"TMPDIR": str(tmp)})
    pids = _wait_ready(proc)
    _, err, took = _interrupt(proc, lambda: os.kill(pids[2], signal.SIGINT))
    lines = _assert_clean_interrupt(err, tmp)
    assert len(lines) == 3, err
    own = [line for line in lines if line.startswith("[rank 2 (worker:1)")]
    assert own and own[0].endswith("interrupted (SIGINT)"), err
    for line in lines:
        if line not in own:
            assert re.search(r"interrupted: rank 2 \(worker:1\) on \S+ got SIGINT$", line), err
    assert proc.returncode == 130, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


@pytest.mark.mpich_only        # a signal to the launch: Open MPI's kills the ranks
def test_ctrl_c_under_mpiflow_run_names_no_killed_rank(start_mpi, tmp):
    # The watching parent of mpiflow.run forwards the signal; the child is not "killed".
    proc = start_mpi(3, "-m", "mpiflow.run", "--ps", 1, PROG, env={"TMPDIR": str(tmp)})
    pids = _wait_ready(proc)
    _, err, took = _interrupt(proc, lambda: os.killpg(proc.pid, signal.SIGINT))
    lines = _assert_clean_interrupt(err, tmp)
    assert len(lines) == 3 and all("interrupted (SIGINT)" in line for line in lines), err
    assert "was killed by" not in err, err
    assert proc.returncode == 130, err
    assert took < GONE_WITHIN_S, took
    assert not _alive(pids.values())


def test_a_single_process_keeps_pythons_own_ctrl_c(tmp_path):
    # Outside a launch nothing is replaced: an interactive session's Ctrl-C stays its own.
    code = ("import signal, mpiflow as mf\n"
            "s = mf.Session()\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, preexec_fn=_with_default_ctrl_c).stdout
    assert out.strip() == "True"


def test_a_second_signal_inside_the_first_ones_handler_does_not_deadlock(tmp_path):
    # The terminal, the launcher and mpiflow.run's parent each deliver Ctrl-C: a second
    # handler can run inside the first, in the main thread, while that one holds the
    # interrupt state's lock. It once waited for that lock forever, and the rank was
    # then killed mid-cleanup by the launcher.
    code = ("import os, signal, time\n"
            "from mpiflow.runtime import interrupts\n"
            "interrupts.install()\n"
            "try:\n"
            "    with interrupts._STATE.lock:\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('unwinding', flush=True)\n"
            "time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, preexec_fn=_with_default_ctrl_c)
    assert done.stdout == "unwinding\n", done.stderr
    # ... and the exit timer still ends the process, with the shell's code for SIGINT.
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "interrupted (SIGINT)", done.stderr
