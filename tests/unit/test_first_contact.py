"""What a user meets first: an example started without mpiexec says how to launch it; a
job resumed at its last step trains nothing and re-saves nothing; allreduce mode on a
launch with ps ranks says how to launch it; a long example run needs no more memory
than a short one."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.comm.cluster import Layout
from tests.conftest import REPO_ROOT
from tests.unit.monitored_helpers import counter_model, regression_model, train_until_stop

EXAMPLES = REPO_ROOT / "examples"
_LAUNCH_VARIABLES = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPIFLOW_")


@pytest.fixture(autouse=True)
def _no_cached_writers():
    yield
    mf.summary.FileWriterCache.clear()


# -- (a) an example started alone says how to launch it -------------------------------------

@pytest.mark.parametrize("example", ["mnist_ps.py", "mnist_sync.py", "in_graph.py",
                                     "embedding_hybrid.py"])
def test_an_example_started_without_mpiexec_says_how_to_launch_it(example):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_VARIABLES)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run([sys.executable, f"examples/{example}", "--seed", "3"]
                          if example.startswith("mnist") else
                          [sys.executable, f"examples/{example}"],
                          check=False, capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    args = " --seed 3" if example.startswith("mnist") else ""
    assert f"\n    mpiexec -n 3 python examples/{example}{args}\n" in proc.stderr, \
        proc.stderr
    assert proc.stderr.startswith(f"examples/{example} trains on several MPI ranks, but "
                                  "this job has 1: ")
    assert "Traceback" not in proc.stderr


# -- (b) StopAtStepHook at or past its last step -------------------------------------------

class CountingHook(mf.train.SessionRunHook):
    """Counts the steps run."""

    def __init__(self):
        self.runs = 0

    def before_run(self, run_context):
        self.runs += 1


def test_a_fresh_session_already_at_last_step_runs_no_step():
    m = counter_model()
    counting = CountingHook()
    with mf.train.SingularMonitoredSession(
            hooks=[mf.train.StopAtStepHook(last_step=0), counting]) as sess:
        assert sess.should_stop()               # before any step
        assert train_until_stop(sess, m.train_op) == 0
        assert sess._tf_sess().run(m.step) == 0
    assert counting.runs == 0


@pytest.mark.parametrize("last_step", [3, 2], ids=["at", "past"])
def test_a_session_restored_at_or_past_last_step_runs_no_step(tmp_path, last_step):
    m = regression_model()
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        assert train_until_stop(sess, m.train_op, m.feed) == 3
    counting = CountingHook()
    final = mf.train.FinalOpsHook({"step": m.step})
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=last_step), counting, final]) as sess:
        assert sess.should_stop()
        assert train_until_stop(sess, m.train_op, m.feed) == 0
    assert counting.runs == 0
    assert final.final_ops_values == {"step": 3}


def test_a_session_restored_before_last_step_trains_up_to_it(tmp_path):
    m = regression_model()
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=5)]) as sess:
        assert not sess.should_stop()
        assert train_until_stop(sess, m.train_op, m.feed) == 2


# -- (c) CheckpointSaverHook does not re-save what it restored -----------------------------

OLD_NS = 1_000_000_000 * 10 ** 9        # 2001: a file written again gets a newer time


def _checkpoint_files(directory):
    """{name: (inode, mtime_ns)} of the checkpoint files (not the event files)."""
    return {name: (os.stat(directory / name).st_ino, os.stat(directory / name).st_mtime_ns)
            for name in sorted(os.listdir(directory))
            if name.startswith("model.ckpt") or name == "checkpoint"}


def _age(directory):
    for name in _checkpoint_files(directory):
        os.utime(directory / name, ns=(OLD_NS, OLD_NS))


def _saves(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "mpiflow.train" and r.getMessage().startswith("Saving checkpoints")]


def test_a_fresh_directory_gets_a_checkpoint_of_step_0_before_any_step(tmp_path, caplog):
    m = regression_model()
    with caplog.at_level(logging.INFO, logger="mpiflow.train"), \
            mf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                              progress_bar=False) as sess:
        assert mf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")
        sess.run(m.train_op, m.feed)
    assert _saves(caplog) == [f"Saving checkpoints for 0 into {tmp_path}/model.ckpt.",
                              f"Saving checkpoints for 1 into {tmp_path}/model.ckpt."]


def test_a_resume_that_runs_no_step_writes_no_checkpoint(tmp_path, caplog):
    m = regression_model()
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    assert mf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    _age(tmp_path)
    before = _checkpoint_files(tmp_path)
    assert before
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mpiflow.train"), \
            mf.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), progress_bar=False,
                hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        assert sess._tf_sess().run(m.step) == 3         # restored
    assert _saves(caplog) == []
    assert _checkpoint_files(tmp_path) == before


def test_a_resume_that_trains_saves_at_the_end_but_not_at_the_start(tmp_path, caplog):
    m = regression_model()
    with mf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), progress_bar=False,
            hooks=[mf.train.StopAtStepHook(last_step=3)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    _age(tmp_path)
    restored_from = {k: v for k, v in _checkpoint_files(tmp_path).items()
                     if k.startswith("model.ckpt-3")}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mpiflow.train"), \
            mf.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), progress_bar=False,
                hooks=[mf.train.StopAtStepHook(num_steps=2)]) as sess:
        train_until_stop(sess, m.train_op, m.feed)
    assert _saves(caplog) == [f"Saving checkpoints for 5 into {tmp_path}/model.ckpt."]
    assert mf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-5")
    now = _checkpoint_files(tmp_path)
    assert {k: now[k] for k in restored_from} == restored_from


# -- (d) allreduce mode on a launch with ps ranks ------------------------------------------

def _cluster(ps):
    return mf.train.ClusterSpec.from_layout(Layout(["h0", "h0", "h1", "h1"]), ps=ps)


def _mode_warnings(caplog, mode, cluster, task_index):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mpiflow.train"):
        mf.train.TrainingMode(mode, cluster, task_index)
    return [r for r in caplog.records if r.name == "mpiflow.train"]


def test_allreduce_mode_with_ps_ranks_warns_once_how_to_launch(caplog):
    records = _mode_warnings(caplog, "allreduce", _cluster(ps=2), 0)
    assert [r.levelno for r in records] == [logging.WARNING]
    assert records[0].getMessage() == (
        "Training mode 'allreduce' keeps every variable on the workers, but the launch made "
        "2 ps task(s) (rank(s) 0, 1), which will only wait: launch with --ps 0 (or "
        "MPIFLOW_PS=0) to make them workers")


def test_only_the_first_worker_warns_and_only_of_ps_ranks_that_exist(caplog):
    assert _mode_warnings(caplog, "allreduce", _cluster(ps=1), 1) == []   # not worker 0
    assert _mode_warnings(caplog, "allreduce", _cluster(ps=0), 0) == []   # no ps ranks
    assert _mode_warnings(caplog, "ps", _cluster(ps=1), 0) == []          # ps: used
    assert _mode_warnings(caplog, "hybrid", _cluster(ps=1), 0) == []


# -- (e) embedding_hybrid's data -----------------------------------------------------------

@pytest.fixture
def embedding_hybrid(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import embedding_hybrid
    return embedding_hybrid


def test_click_batches_keep_a_bounded_pool_whatever_the_steps(embedding_hybrid):
    pool = embedding_hybrid.ClickBatches.POOL
    for steps, kept in ((5, 5), (pool, pool), (100 * pool, pool)):
        data = embedding_hybrid.ClickBatches(steps, 4, 50, 3, seed=0)
        assert data.count == kept
        assert data.ids.shape == (kept * 4, 3) and data.labels.shape == (kept * 4,)
    ids, labels = data.batch(0)
    assert ids.shape == (4, 3) and labels.shape == (4,)
    again_ids, again_labels = data.batch(pool)          # the pool comes round again
    assert np.array_equal(ids, again_ids) and np.array_equal(labels, again_labels)
    assert not np.array_equal(data.batch(1)[0], ids)
