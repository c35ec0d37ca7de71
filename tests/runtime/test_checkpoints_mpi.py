"""Checkpoints under mpiexec: each ps writes its own shard; a checkpoint restores into
another number of ps, another partitioning and one process; a job SIGKILLed while it
saves leaves its last completed checkpoint restorable."""

import importlib.util
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import mpiflow as mf
from tests.conftest import find_mpiexec, launch_env

PROGS = Path(__file__).parent / "progs"

pytestmark = pytest.mark.mpi


def _load_prog(name):
    spec = importlib.util.spec_from_file_location(name, PROGS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def saved_on_two_ps(run_mpi, tmp_path):
    """Train and save on 2 ps (embedding cut in 2); return (dir, prefix, ps pids)."""
    out = run_mpi(3, PROGS / "checkpoint_reshard.py", "save", tmp_path, 2, timeout=120,
                  env={"MPIFLOW_PS": "2"}).stdout
    saved = re.search(r"OK saved (\S+) from 2 ps", out)
    assert saved, out
    pids = {int(task): int(pid) for task, pid in re.findall(r"ps (\d) pid (\d+)", out)}
    assert sorted(pids) == [0, 1], out
    return tmp_path, saved.group(1), pids


def test_each_of_two_ps_writes_its_own_shard(saved_on_two_ps):
    directory, prefix, ps_pids = saved_on_two_ps
    index = json.loads((directory / "model-3.index.json").read_text())
    shards = sorted(directory.glob("model-3.shard-*.npz"))
    assert [s.name for s in shards] == [
        f"model-3.shard-0000{i}-of-00002.{index['save_id']}.npz" for i in range(2)]
    writers = []
    for shard in shards:
        with np.load(shard, allow_pickle=False) as npz:
            writers.append(json.loads(npz["manifest"].tobytes())["writer"]["pid"])
    assert sorted(writers) == sorted(ps_pids.values())
    assert index["num_shards"] == 2
    emb_files = {p["file"] for p in index["tensors"]["model/emb"]}
    assert len(emb_files) == 2          # one part on each ps
    assert mf.train.latest_checkpoint(str(directory)) == prefix


@pytest.mark.parametrize("ranks,num_ps,parts", [(2, 1, 1), (4, 3, 3), (2, 1, 0)],
                         ids=["1ps_1part", "3ps_3parts", "1ps_unpartitioned"])
def test_checkpoint_of_two_ps_restores_on_another_number_of_ps(run_mpi, saved_on_two_ps,
                                                               ranks, num_ps, parts):
    directory, _, _ = saved_on_two_ps
    out = run_mpi(ranks, PROGS / "checkpoint_reshard.py", "restore", directory, parts,
                  timeout=120, env={"MPIFLOW_PS": str(num_ps)}).stdout
    assert f"OK restored {parts} parts on {num_ps} ps" in out, out


@pytest.mark.parametrize("parts", [0, 3])
def test_checkpoint_of_two_ps_restores_in_one_process(saved_on_two_ps, parts):
    directory, prefix, _ = saved_on_two_ps
    prog = _load_prog("checkpoint_reshard")
    model = prog.build(parts)
    saver = mf.train.Saver()
    assert mf.train.latest_checkpoint(str(directory)) == prefix
    with mf.Session() as sess:
        saver.restore(sess, prefix)
        prog.check_equal(prog.full_values(sess, model), str(directory / "expected.npz"))


def _check_restores_as_saved(directory, at_least):
    """The latest checkpoint restores in this process and holds save ``step``'s values."""
    prefix = mf.train.latest_checkpoint(str(directory))
    assert prefix is not None, sorted(os.listdir(directory))
    prog = _load_prog("checkpoint_sigkill")
    w, step, _, _ = prog.build()
    saver = mf.train.Saver()
    with mf.Session() as sess:
        saver.restore(sess, prefix)
        w_value, step_value = sess.run([w, step])
    assert prefix.endswith(f"model-{step_value}")
    assert step_value >= at_least
    np.testing.assert_array_equal(w_value, prog.base() * np.float32(step_value))
    return step_value


def test_ps_killed_before_renaming_its_shard_leaves_the_last_checkpoint(run_mpi, tmp_path):
    proc = run_mpi(2, PROGS / "checkpoint_sigkill.py", tmp_path, "self", timeout=120,
                   check=False)
    assert proc.returncode != 0 and "NOT KILLED" not in proc.stdout, proc.stdout
    assert "saved 3" in proc.stdout and "saved 4" not in proc.stdout, proc.stdout
    assert not mf.train.checkpoint_exists(str(tmp_path / "model-4"))
    assert list(tmp_path.glob("model-4.shard-*.tmp-*"))      # the write it was killed in
    assert _check_restores_as_saved(tmp_path, at_least=3) == 3
    # The next save clears what the killed one left (a 100 MB temporary file, say).
    os.utime(next(tmp_path.glob("model-4.shard-*.tmp-*")), (0, 0))
    with mf.Graph().as_default():
        mf.Variable(1.0, name="other")
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            mf.train.Saver().save(sess, str(tmp_path / "again"))
    assert not list(tmp_path.glob("*.tmp-*")), sorted(os.listdir(tmp_path))
    assert mf.train.checkpoint_management.verify_checkpoint(str(tmp_path / "model-3")) is None


def test_job_sigkilled_while_saving_in_a_loop_leaves_a_restorable_checkpoint(tmp_path):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = launch_env({})
    cmd = [mpiexec, "-n", "2", sys.executable, str(PROGS / "checkpoint_sigkill.py"),
           str(tmp_path), "external"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                              daemon=True)
    reader.start()
    seen, last_saved = [], 0
    deadline = time.monotonic() + 120
    try:
        while last_saved < 20:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(line)
            m = re.match(r"saved (\d+)", line)
            last_saved = int(m.group(1)) if m else last_saved
        # Mid-loop, where nearly all the time goes into saving.
        time.sleep(0.003 * (os.getpid() % 7))
    except queue.Empty:
        pytest.fail(f"no 20 saves within 120 s:\n{''.join(seen)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
    _check_restores_as_saved(tmp_path, at_least=last_saved)
    state = mf.train.get_checkpoint_state(str(tmp_path))
    assert all(mf.train.checkpoint_exists(p) for p in state.all_model_checkpoint_paths)
