"""Elastic ps training (MPIFLOW_ELASTIC, ``mpiflow launch --elastic``): a lost non-chief
worker is left behind and the others train to the end; nothing of its last step is half
applied; the job ends 0 naming who was lost. The chief, a ps, or a job not launched
elastic still ends at once."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import launch_env, _require_mpiexec

PROG = Path(__file__).parent / "progs" / "elastic_training.py"
LAST_STEP = 80

pytestmark = pytest.mark.mpi


def launch(tmp_path, *args, ranks=4, elastic=True, env=None):
    _require_mpiexec()
    cmd = [sys.executable, "-m", "mpiflow", "launch", "-n", str(ranks),
           *(["--elastic"] if elastic else []), str(PROG), str(tmp_path / "ckpt"),
           str(LAST_STEP), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=launch_env(env))


def final_values(out):
    found = re.search(r"final v=(\d+) step=(\d+)", out)
    assert found, out
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("mode", ["async", "sync", "ssp"])
@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_lost_worker_is_left_behind_and_the_others_train_to_the_end(tmp_path, fault, mode):
    # sync: SyncReplicasOptimizer with one backup worker (2 of 3 replicas aggregated);
    # ssp: bounded staleness (k=1), where the lost worker must stop holding the others.
    done = launch(tmp_path, fault, 2, mode)
    assert done.returncode == 0, done.stderr
    v, step = final_values(done.stdout)
    assert step >= LAST_STEP and v == step, (v, step)     # no step half applied
    last = done.stderr.strip().splitlines()[-1]
    assert re.match(r"mpiflow\.launch: the job ended after [\d.]+ s; it went on without: "
                    r"rank 3 \(worker:2\) on \S+: ", last), done.stderr
    why = "RuntimeError: worker 2 failed on purpose" if fault == "raise" else \
        "its process was killed by SIGKILL (signal 9)"
    assert why in last, done.stderr
    # The survivors say it once: the rank that found the loss, and rank 0's summary.
    assert len(re.findall(r"rank 3 \(worker:2\) on \S+ is lost", done.stderr)) <= 1
    assert re.search(r"the job went on without 1 rank\(s\): rank 3 \(worker:2\)", done.stderr) \
        or fault == "raise", done.stderr


@pytest.mark.parametrize("attempt", range(3))
def test_a_worker_killed_with_messages_of_megabytes_in_flight_is_left_behind(tmp_path,
                                                                             attempt):
    # A pull, push or save of 8 MB is on the wire when the worker dies (a random moment):
    # the ps gives up what it sent to it and what it was receiving from it, instead of
    # waiting for them without end or failing on MPI's error for them.
    done = launch(tmp_path, "kill-in-flight", 2)
    assert done.returncode == 0, done.stderr
    v, step = final_values(done.stdout)
    assert step >= LAST_STEP and v == step, (v, step)
    assert len(re.findall(r"^\[rank \d \(worker:[01]\) on \S+\] done \d+$", done.stdout,
                          re.M)) == 2, done.stdout
    assert re.search(r"it went on without: rank 3 \(worker:2\) on \S+: ",
                     done.stderr.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_survivor_takes_over_the_lost_chiefs_duties(tmp_path, fault, mode):
    # sync: the successor also runs the sync loop (averaging on the ps, releasing the
    # workers); 2 of 3 replicas aggregated, so the 2 survivors go on.
    done = launch(tmp_path, fault, 0, mode)
    assert done.returncode == 0, done.stderr
    v, step = final_values(done.stdout)
    assert step >= LAST_STEP and v == step, (v, step)
    assert re.search(r"^\[worker:1 r2\] WARNING mpiflow\.elastic: this worker takes over the "
                     r"chief's duties", done.stderr, re.M), done.stderr
    # The successor writes the checkpoints now, the last one as it ends. In sync that is the
    # last step; async, the other survivor may still apply its own last step after it.
    saved = [int(s) for s in re.findall(r"^\[worker:1 r2\] INFO mpiflow\.train: Saving "
                                        r"checkpoints for (\d+)", done.stderr, re.M)]
    assert saved, done.stderr
    if mode == "sync":
        assert saved[-1] == step, done.stderr
    else:
        assert LAST_STEP <= saved[-1] <= step, (saved, step, done.stderr)
    state = (tmp_path / "ckpt" / "checkpoint").read_text()
    assert f'model_checkpoint_path: "model.ckpt-{saved[-1]}"' in state
    assert "it went on without: rank 1 (worker:0)" in done.stderr.strip().splitlines()[-1]
    # Event files from the chief and its successor only: the chief's hooks asleep on the
    # third worker opened none.
    assert len(list((tmp_path / "ckpt").glob("events.*"))) == 2, \
        sorted(p.name for p in (tmp_path / "ckpt").iterdir())


def test_sync_training_without_backups_fails_when_a_worker_is_lost_and_says_so(tmp_path):
    # Every step needs every worker: the others fail, naming the lost one, and the job's
    # summary does not claim it went on.
    done = launch(tmp_path, "kill", 2, "sync", 0)
    assert done.returncode != 0
    assert "A synchronous step needs 3 worker(s), but only 2 of 3 are left" in done.stderr
    assert "the job went on without" not in done.stderr, done.stderr
    assert "the job failed" in done.stderr.strip().splitlines()[-1], done.stderr


def test_without_elastic_a_lost_worker_ends_the_job(tmp_path):
    done = launch(tmp_path, "raise", 2, elastic=False)
    assert done.returncode != 0
    assert "the job failed" in done.stderr.strip().splitlines()[-1], done.stderr


def test_plain_mpiexec_keeps_the_others_with_its_flag_and_the_watching_parent(tmp_path):
    mpiexec = _require_mpiexec()
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    # MPICH's flag, or Open MPI's (the suite runs under either, whichever is installed).
    keep_others = "-disable-auto-cleanup" if "HYDRA" in version else "--enable-recovery"
    cmd = [mpiexec, keep_others, "-n", "4", sys.executable, "-m",
           "mpiflow.supervise", sys.executable, str(PROG), str(tmp_path / "ckpt"),
           str(LAST_STEP), "kill", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=launch_env({"MPIFLOW_ELASTIC": "1"}))
    v, step = final_values(done.stdout)
    assert step >= LAST_STEP and v == step, done.stderr
    assert re.search(r"rank 3 \(worker:2\) on \S+ is lost: .*training goes on without it",
                     done.stderr), done.stderr
    # mpiexec's own exit code still counts the lost rank's (128 + SIGKILL).
    assert done.returncode == 137, done.stderr
