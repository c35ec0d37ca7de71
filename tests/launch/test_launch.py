"""``mpiflow launch``: the job's culprit named once with a non-zero exit code, a killed
rank noticed, restarts that resume from the last checkpoint, output tagged once per line,
Ctrl-C that stops without a restart, and every rank's stack on demand."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import launch_env, _require_mpiexec

PROG = Path(__file__).parent / "progs" / "launched_training.py"

pytestmark = pytest.mark.mpi


@pytest.fixture
def start_launch(tmp_path):
    """Return ``start(*launch_args, prog_args...)``: the running ``mpiflow launch`` (text
    pipes); whatever still runs when the test ends is stopped."""
    _require_mpiexec()
    started = []

    def start(*args):
        proc = subprocess.Popen([sys.executable, "-m", "mpiflow", "launch", *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=launch_env({"TMPDIR": str(tmp_path)}), cwd=tmp_path,
                                start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)    # the MPI launcher gets SIGTERM from it
            proc.communicate()


def finish(proc, timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpiflow launch still ran after {timeout} s\n{out}\n{err}")
    return out, err


def launch_lines(err):
    return [line for line in err.splitlines() if line.startswith("mpiflow.launch: ")]


def test_a_failing_rank_is_named_once_as_the_culprit_with_a_non_zero_exit(start_launch,
                                                                         tmp_path):
    proc = start_launch("-n", 3, PROG, tmp_path / "ckpt", 10**6, "raise")
    _, err = finish(proc)
    assert proc.returncode == 1, err
    assert launch_lines(err) == [launch_lines(err)[0]], err
    assert re.fullmatch(r"mpiflow\.launch: the job failed \(exit code 1\) after [\d.]+ s: "
                        r"rank 2 \(worker:1\) on \S+: RuntimeError: worker 1 failed on "
                        r"purpose", launch_lines(err)[0]), err


def test_a_rank_killed_by_a_signal_is_named(start_launch, tmp_path):
    proc = start_launch("-n", 3, PROG, tmp_path / "ckpt", 10**6, "kill")
    _, err = finish(proc)
    assert proc.returncode != 0, err
    assert re.search(r"the job failed .*: rank 2 \(worker:1\) on \S+: its process was "
                     r"killed by SIGKILL \(signal 9\)$", err, re.M), err
    # The watching parent's own line names the rank by its role too (a plain script,
    # not only one under mpiflow.run).
    assert re.search(r"^\[rank 2 \(worker:1\) on \S+\] was killed by SIGKILL \(signal 9\); "
                     r"the job ends$", err, re.M), err


def test_a_process_a_rank_starts_is_not_taken_for_the_rank(start_launch, tmp_path):
    # A helper that imports mpiflow inherits the rank's variables: it said hello as the
    # rank, its exit ended the rank for the launch, and the rank's own death went unnamed
    # ("no rank reported a fault").
    proc = start_launch("-n", 3, PROG, tmp_path / "ckpt", 10**6, "kill_after_helper")
    _, err = finish(proc)
    assert proc.returncode != 0, err
    assert re.search(r"the job failed .*: rank 2 \(worker:1\) on \S+: its process was "
                     r"killed by SIGKILL \(signal 9\)$", err, re.M), err


def test_a_failed_job_restarts_and_resumes_from_its_last_checkpoint(start_launch, tmp_path):
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_launch("-n", 3, "--max-restarts", 2, PROG, checkpoint_dir, 60, "raise")
    out, err = finish(proc)
    assert proc.returncode == 0, err
    restarts = [line for line in launch_lines(err) if "restart" in line]
    assert len(restarts) == 1 and restarts[0].endswith("restart 1 of 2"), err
    assert "RuntimeError: worker 1 failed on purpose" in restarts[0]
    restored = re.search(r"Restoring parameters from \S+model\.ckpt-(\d+)", err)
    assert restored and int(restored.group(1)) >= 20, err
    starts = [int(s) for s in re.findall(r"\] start (\d+)$", out, re.M)]
    # Two workers started twice: near 0 (asynchronous: one may have stepped already),
    # then from the checkpoint the restart restored.
    saved = int(restored.group(1))
    assert len(starts) == 4 and max(starts[:2]) < saved <= min(starts[2:]), out
    done = [int(s) for s in re.findall(r"\] done (\d+)$", out, re.M)]
    assert len(done) == 2 and max(done) >= 60, out


def test_a_job_that_succeeds_is_not_restarted_and_exits_0(start_launch, tmp_path):
    proc = start_launch("-n", 3, "--max-restarts", 2, PROG, tmp_path / "ckpt", 15)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert launch_lines(err) == [], err
    assert len(re.findall(r"\] start \d+$", out, re.M)) == 2, out   # one start each


def test_a_program_that_never_imports_mpiflow_succeeds_or_fails_by_its_exit_code(
        start_launch, tmp_path):
    # Each rank's watching parent is all the launch hears of it: an exit code of 0 is a
    # success (not restarted), and a script that fails before its import (here a syntax
    # error) is named as such.
    proc = start_launch("-n", 2, "--max-restarts", 1, sys.executable, "-c", "print('hi')")
    out, err = finish(proc, timeout=60)
    assert proc.returncode == 0, err
    assert launch_lines(err) == [], err
    assert out.count("hi") == 2, out
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    proc = start_launch("-n", 2, tmp_path / "broken.py")
    _, err = finish(proc, timeout=60)
    assert proc.returncode == 1, err
    assert "SyntaxError" in err, err
    assert re.fullmatch(r"mpiflow\.launch: the job failed \(exit code 1\) after [\d.]+ s: "
                        r"rank \d on \S+: its process exited with code 1 before it imported "
                        r"mpiflow \(an error in the script or its imports, or no such file: "
                        r"see its output above\)", launch_lines(err)[-1]), err


def test_every_output_line_carries_its_rank_once(start_launch, tmp_path):
    proc = start_launch("-n", 3, PROG, tmp_path / "ckpt", 12, "print")
    out, err = finish(proc)
    assert proc.returncode == 0, err
    for rank, role in ((0, "ps:0"), (1, "worker:0"), (2, "worker:1")):
        assert re.search(rf"^\[rank {rank} \({role}\) on \S+\] plain line from {role}$", out,
                         re.M), out
    # Lines mpiflow tags itself (its logger's) keep their one tag.
    saving = [line for line in err.splitlines() if "Saving checkpoints" in line]
    assert saving and all(line.startswith("[worker:0 r1] INFO") for line in saving), err


PIECES = """import os, sys, time
rank = os.environ.get("PMI_RANK") or os.environ["OMPI_COMM_WORLD_RANK"]
for piece in (f"first {rank}", " and", f" last {rank}\\n"):
    sys.stdout.write(piece)
    sys.stdout.flush()
    time.sleep(0.2)
"""


def test_a_line_written_in_pieces_is_one_line_with_one_tag(start_launch, tmp_path):
    # Unbuffered output (python -u, a program without mpiflow, lines before its import)
    # reaches the MPI launcher a piece at a time, and MPICH's tags every piece: the lines
    # of two ranks came out spliced, "[rank 0] first 0[1] first 1[0]  and...".
    (tmp_path / "pieces.py").write_text(PIECES)
    proc = start_launch("-n", 2, sys.executable, "-u", tmp_path / "pieces.py")
    out, err = finish(proc, timeout=60)
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == ["[rank 0] first 0 and last 0",
                                        "[rank 1] first 1 and last 1"], out


def test_ctrl_c_stops_the_job_without_a_restart(start_launch, tmp_path):
    proc = start_launch("-n", 3, "--max-restarts", 2, PROG, tmp_path / "ckpt", 10**6)
    for line in proc.stdout:
        if line.rstrip().endswith("start 0"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc, timeout=30)
    assert proc.returncode == 130, err
    assert launch_lines(err) == ["mpiflow.launch: interrupted (SIGINT)"], err
    assert len([line for line in err.splitlines()
                if line.endswith("interrupted (SIGINT)") and line.startswith("[rank ")]) == 3


def test_sigterm_stops_training_gracefully_with_exit_code_0_and_no_restart(start_launch,
                                                                           tmp_path):
    # Slurm's time limit reaching a job started with mpiflow launch: the ranks stop after
    # their step, the chief checkpoints it, and the launch says the job ended cleanly.
    # Both workers are training (a rank still building its graph when the signal comes
    # is interrupted instead, and the job's exit code says so).
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_launch("-n", 3, "--max-restarts", 2, PROG, checkpoint_dir, 10**6)
    started = []
    for line in proc.stdout:
        started += re.findall(r"\] start \d+$", line.rstrip())
        if len(started) == 2:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc, timeout=60)
    assert proc.returncode == 0, err
    (last,) = launch_lines(err)
    assert re.fullmatch(r"mpiflow\.launch: stopped \(SIGTERM\) after [\d.]+ s: the job ended "
                        r"cleanly", last), err
    done = [int(s) for s in re.findall(r"\] done (\d+)$", out, re.M)]
    assert len(done) == 2, out
    saved = re.search(r'^model_checkpoint_path: "model\.ckpt-(\d+)"',
                      (checkpoint_dir / "checkpoint").read_text(), re.M)
    assert int(saved.group(1)) >= max(done), (saved.group(0), done)


def test_stacks_shows_where_each_rank_is_and_the_function_a_hung_rank_is_stuck_in(
        start_launch, tmp_path):
    proc = start_launch("-n", 3, PROG, tmp_path / "ckpt", 10**6, "hang")
    for line in proc.stdout:
        if line.rstrip().endswith("HANGING"):
            break
    time.sleep(0.5)
    env = launch_env({"TMPDIR": str(tmp_path)})
    shown = subprocess.run([sys.executable, "-m", "mpiflow", "stacks", "--pid", str(proc.pid)],
                           capture_output=True, text=True, env=env, timeout=60)
    proc.send_signal(signal.SIGINT)
    finish(proc, timeout=30)
    assert shown.returncode == 0, shown.stderr
    report = shown.stdout
    headers = re.findall(r"^=== (rank \d+ \(\S+\) on \S+)$", report, re.M)
    assert [h.split(" (")[0] for h in headers] == ["rank 0", "rank 1", "rank 2"], report
    stuck = report.split("=== rank 2 (worker:1)")[1]
    assert "in deadlocked_in_user_code" in stuck and "lock.acquire()" in stuck, report
    assert re.search(r"steps run: [1-9]", stuck), report
    # The ps waits in its server loop.
    assert "in join" in report.split("=== rank 1")[0], report


def test_stacks_without_a_running_launch_says_so(tmp_path):
    env = launch_env({"TMPDIR": str(tmp_path)})
    shown = subprocess.run([sys.executable, "-m", "mpiflow", "stacks"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert shown.returncode == 1
    assert "no running mpiflow launch found" in shown.stderr


def test_a_killed_launch_takes_the_job_with_it(start_launch, tmp_path):
    checkpoint_dir = tmp_path / "ckpt-killed-launch"
    proc = start_launch("-n", 3, PROG, checkpoint_dir, 10**6)
    for line in proc.stdout:
        if line.rstrip().endswith("start 0") or " start " in line:
            break
    ranks = subprocess.run(["pgrep", "-f", str(checkpoint_dir)], capture_output=True,
                           text=True).stdout.split()
    assert len(ranks) >= 3, ranks       # the MPI launcher's command line names it too
    os.kill(proc.pid, signal.SIGKILL)   # the launch alone, not its process group
    proc.communicate()
    deadline = time.monotonic() + 15
    while subprocess.run(["pgrep", "-f", str(checkpoint_dir)], capture_output=True).stdout:
        assert time.monotonic() < deadline, "the job outlived its launch by 15 s"
        time.sleep(0.1)
