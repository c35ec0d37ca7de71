"""SIGTERM while training in a MonitoredTrainingSession (Slurm's time limit, scancel) is
a graceful stop: every worker stops after its current step, the chief writes a checkpoint
of the last global step, the ps serve until the workers are done, every rank says so in
one line, and the job exits 0; a restart resumes from that checkpoint. SIGUSR1 prints
where every rank is."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import mpiflow as mf

PROG = Path(__file__).parent.parent / "launch" / "progs" / "launched_training.py"
SYNC_PROG = Path(__file__).parent / "progs" / "sync_graceful.py"

pytestmark = pytest.mark.mpi


def wait_for_training(proc, checkpoint_dir, step=20):
    """Wait until a checkpoint past ``step`` exists (the chief is saving)."""
    deadline = time.monotonic() + 90
    while last_checkpoint(checkpoint_dir) < step:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def last_checkpoint(checkpoint_dir) -> int:
    state = Path(checkpoint_dir) / "checkpoint"
    if not state.exists():
        return -1
    found = re.search(r'^model_checkpoint_path: "model\.ckpt-(\d+)"', state.read_text(), re.M)
    return int(found.group(1)) if found else -1


def finish(proc, timeout=60):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout} s after SIGTERM\n{out}\n{err}")


def pid_of_rank(rank, checkpoint_dir) -> int:
    """The pid of MPI rank ``rank`` of the job training into ``checkpoint_dir``."""
    pids = subprocess.run(["pgrep", "-f", f"{PROG.name} {checkpoint_dir}"],
                          capture_output=True, text=True).stdout.split()
    for pid in pids:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if f"PMI_RANK={rank}".encode() in f.read().split(b"\0"):
                return int(pid)
    raise AssertionError(f"no rank {rank} among {pids}")


def rank_lines(err):
    return [line for line in err.splitlines() if line.startswith("[rank ")]


@pytest.mark.mpich_only        # a signal to the launch: Open MPI's kills the ranks
def test_sigterm_to_every_rank_stops_after_a_checkpoint_of_the_last_step(start_mpi, run_mpi,
                                                                         tmp_path):
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_mpi(3, PROG, checkpoint_dir, 10**6)
    wait_for_training(proc, checkpoint_dir)
    os.killpg(proc.pid, signal.SIGTERM)        # as Slurm signals every task
    out, err = finish(proc)
    assert proc.returncode == 0, err
    # One line per rank; a rank may hear of a peer's SIGTERM before its own, and say so.
    said = {line.split("] ", 1)[0]: line.split("] ", 1)[1] for line in rank_lines(err)}
    assert len(said) == len(rank_lines(err)) == 3, err
    stopping = r"(?: \(SIGTERM\): after the current step|: rank \d \(\S+\) on \S+ got SIGTERM)"
    for rank, text in said.items():
        if "(ps:0)" in rank:
            assert text == "stopped (SIGTERM): served until the workers were done", err
        else:
            assert re.fullmatch("stopping" + stopping, text), err
    done = [int(s) for s in re.findall(r"^done (\d+)$", out, re.M)]
    assert len(done) == 2, out
    # The chief's last save is of the step training ended at (no step after it is lost).
    saved = last_checkpoint(checkpoint_dir)
    assert saved >= max(done), (saved, done, err)
    resumed = run_mpi(3, PROG, checkpoint_dir, saved + 5)
    starts = [int(s) for s in re.findall(r"^start (\d+)$", resumed.stdout, re.M)]
    assert min(starts) >= saved, resumed.stdout


@pytest.mark.mpich_only        # ranks found by MPICH's PMI_RANK
def test_sigterm_to_the_chief_alone_stops_every_rank_naming_it(start_mpi, tmp_path):
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_mpi(3, PROG, checkpoint_dir, 10**6)
    wait_for_training(proc, checkpoint_dir)
    os.kill(pid_of_rank(1, checkpoint_dir), signal.SIGTERM)     # worker:0, the chief
    out, err = finish(proc)
    assert proc.returncode == 0, err
    lines = {line.split("] ")[0] + "]": line.split("] ", 1)[1] for line in rank_lines(err)}
    chief_name = next(name for name in lines if "(worker:0)" in name)
    assert lines[chief_name] == "stopping (SIGTERM): after the current step", err
    who = chief_name.strip("[]")
    others = [text for name, text in lines.items() if name != chief_name]
    assert sorted(others) == sorted([f"stopping: {who} got SIGTERM",
                                     f"stopped: {who} got SIGTERM"]), err
    assert last_checkpoint(checkpoint_dir) >= max(
        int(s) for s in re.findall(r"^done (\d+)$", out, re.M))


def test_sigterm_while_a_session_is_being_created_stops_once_it_exists(start_mpi, tmp_path):
    # A signal to the whole job reaches a worker still waiting for the chief as often as
    # one already training: it stops gracefully too (its session's should_stop() is True
    # at once), instead of being interrupted and taking the job's exit code with it.
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_mpi(3, PROG, checkpoint_dir, 10**6, "term_at_start")
    out, err = finish(proc)
    assert proc.returncode == 0, err
    lines = {line.split("] ")[0] + "]": line.split("] ", 1)[1] for line in rank_lines(err)}
    (signalled,) = [name for name in lines if "(worker:1)" in name]
    assert lines[signalled] == "stopping (SIGTERM): after the current step", err
    assert all(text.endswith(f"{signalled.strip('[]')} got SIGTERM")
               for name, text in lines.items() if name != signalled), err
    done = [int(s) for s in re.findall(r"^done (\d+)$", out, re.M)]
    assert len(done) == 2, out
    assert last_checkpoint(checkpoint_dir) >= max(done), err


@pytest.mark.mpich_only        # a signal to the launch: Open MPI's kills the ranks
@pytest.mark.parametrize("attempt", range(2))
def test_sigterm_to_sync_training_with_a_backup_worker_stops_at_once(start_mpi, tmp_path,
                                                                      attempt):
    # A fast worker may already wait for a step the others, stopping after their own, will
    # never join: let go, it ends with them, instead of after the chief's wait for it
    # (half of MPIFLOW_STOP_GRACE_S) or with "a synchronous step needs 2 worker(s)".
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_mpi(4, SYNC_PROG, checkpoint_dir)
    wait_for_training(proc, checkpoint_dir, step=40)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = finish(proc)
    took = time.monotonic() - start
    assert proc.returncode == 0, err
    assert sorted(re.findall(r"^done (\d)$", out, re.M)) == ["0", "1", "2"], out
    assert took < 6, (took, err)
    saved = last_checkpoint(checkpoint_dir)
    reader = mf.train.NewCheckpointReader(str(checkpoint_dir / f"model.ckpt-{saved}"))
    assert reader.get_tensor("v") == reader.get_tensor("global_step") == saved


def test_sigusr1_prints_where_every_rank_is_once(start_mpi, tmp_path):
    checkpoint_dir = tmp_path / "ckpt"
    proc = start_mpi(3, PROG, checkpoint_dir, 10**6, "hang")
    for line in proc.stdout:
        if line.strip() == "HANGING":
            break
    time.sleep(0.5)
    mpiexec = proc.pid
    os.kill(mpiexec, signal.SIGUSR1)            # MPICH's mpiexec forwards it to every rank
    deadline = time.monotonic() + 20
    report = ""
    while "=== rank 2" not in report or "lock.acquire()" not in report:
        assert time.monotonic() < deadline, report
        time.sleep(0.2)
        report += _read_available(proc.stderr)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert report.count("mpiflow: where every rank is (3 ranks)") == 1, report
    body = report.split("mpiflow: where every rank is (3 ranks)")[1]
    assert [h.split(" (")[0] for h in re.findall(r"^=== (rank \d+ \(\S+\))$", body, re.M)] \
        == ["rank 0", "rank 1", "rank 2"], report
    assert "in deadlocked_in_user_code" in body.split("=== rank 2")[1], report


@pytest.mark.mpich_only        # MPICH's mpiexec forwards SIGUSR1
def test_sigusr1_before_the_server_exists_reports_each_rank_and_kills_nothing(start_mpi):
    # SIGUSR1's default action ends the process (and the launcher ends the job): before
    # the rank service exists, each rank reports where it is by itself instead.
    proc = start_mpi(2, Path(__file__).parent / "progs" / "early_sigusr1.py")
    ready = 0
    for line in proc.stdout:
        ready += line.strip() == "READY"
        if ready == 2:
            break
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGUSR1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.count("BUILT") == 2, out + err
    for rank in (0, 1):
        assert f"mpiflow: where rank {rank} is (its Server does not exist yet" in err, err
        block = err.split(f"=== rank {rank}\n")[1]
        assert "in loading_data_before_the_cluster" in block.split("=== rank")[0], err


def _read_available(stream) -> str:
    os.set_blocking(stream.fileno(), False)
    try:
        return stream.read() or ""
    except (BlockingIOError, TypeError):
        return ""
