"""The TF1 surface that ps/worker scripts use: mpiflow.run's flags, clusters built from
host lists, tf.app / tf.flags / tf.logging, Supervisor and the sync-replicas helpers."""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors
from mpiflow.comm.cluster import Layout
from mpiflow.run import check_given_flags, launch_addresses, strip_flags
from mpiflow.train.cluster_spec import set_launch_cluster
from tests.conftest import REPO_ROOT


# -- python -m mpiflow.run --------------------------------------------------------------------

def test_run_replaces_every_spelling_of_the_cluster_flags():
    rest, found = strip_flags(["--ps_hosts=a:1", "--job_name", "ps", "-task_index=3",
                               "--lr", "0.1", "--worker_hosts", "b:1,c:1", "data.txt"])
    assert rest == ["--lr", "0.1", "data.txt"]
    assert found == {"ps_hosts": "a:1", "job_name": "ps", "task_index": "3",
                     "worker_hosts": "b:1,c:1"}


@pytest.fixture
def launched():
    """A launch of 4 ranks on hosts x, x, y, y with 2 ps spread one per host."""
    cluster = mf.train.ClusterSpec.from_layout(Layout(["x", "x", "y", "y"]), ps=2,
                                               policy="spread")
    set_launch_cluster(cluster)
    yield cluster
    set_launch_cluster(None)


def test_run_gives_each_task_a_host_port_of_its_rank(launched):
    assert launch_addresses(launched) == {"ps": ["x:2222", "y:2222"],
                                          "worker": ["x:2223", "y:2223"]}


def test_host_lists_that_contradict_the_launch_are_refused_naming_both(launched):
    with pytest.raises(errors.InvalidArgumentError) as info:
        check_given_flags({"ps_hosts": "a:1,b:1,c:1"}, launch_addresses(launched))
    message = str(info.value)
    assert "--ps_hosts names 3 ps task(s) (a:1,b:1,c:1) but the launch has 2" in message
    assert "x:2222,y:2222" in message


def test_a_cluster_built_from_host_lists_runs_tasks_on_the_launched_ranks(launched):
    cluster = mf.train.ClusterSpec({"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1"]})
    # The spread policy put ps:1 on rank 2 (host y), not on rank 1 as job order would.
    assert [cluster.rank_of("ps", t) for t in (0, 1)] == [0, 2]
    assert [cluster.rank_of("worker", t) for t in (0, 1)] == [1, 3]


def test_a_hard_coded_cluster_of_another_shape_names_both_layouts(launched):
    with pytest.raises(errors.InvalidArgumentError) as info:
        mf.train.ClusterSpec({"ps": ["p0:1"], "worker": ["w0:1", "w1:1", "w2:1"]})
    message = str(info.value)
    assert "the script has 1 ps, 3 worker" in message
    assert "mpiflow.run launched 2 ps, 2 worker" in message


def test_clusters_of_other_jobs_are_not_mapped_onto_the_launch(launched):
    local = mf.train.ClusterSpec({"localhost": ["here:0"]})
    assert local.rank_of("localhost", 0) == 0


def test_as_tensorflow_makes_both_tensorflow_imports_give_mpiflow():
    code = ("from mpiflow.run import alias_tensorflow; alias_tensorflow()\n"
            "import tensorflow as tf\nimport tensorflow.compat.v1 as v1\nimport mpiflow\n"
            "assert tf is mpiflow and v1 is mpiflow and tf.compat.v1 is mpiflow\n"
            "v1.disable_v2_behavior(); v1.disable_eager_execution()\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# -- tf.app, tf.flags, tf.logging -------------------------------------------------------------

def test_app_run_parses_known_flags_and_passes_the_rest_to_main():
    mf.app.flags.DEFINE_integer("mf_test_steps", 1, "steps")
    seen = []

    def main(argv):
        seen.append((list(argv), mf.app.flags.FLAGS.mf_test_steps))
        return 3

    with pytest.raises(SystemExit) as info:
        mf.app.run(main, ["prog", "--mf_test_steps=7", "--not_a_flag=1", "file"])
    assert info.value.code == 3
    assert seen == [(["prog", "--not_a_flag=1", "file"], 7)]
    assert mf.flags is mf.app.flags


def test_tf_logging_writes_through_mpiflows_logger(caplog):
    before = mf.logging.get_verbosity()
    try:
        mf.logging.set_verbosity(mf.logging.INFO)
        with caplog.at_level("INFO", logger="mpiflow"):
            mf.logging.info("step %d", 7)
            for _ in range(5):
                mf.logging.log_first_n(mf.logging.WARN, "only twice", 2)
        assert "step 7" in caplog.text
        assert caplog.text.count("only twice") == 2
    finally:
        mf.logging.set_verbosity(before)


def test_log_every_n_and_log_first_n_count_per_line_not_per_message(caplog):
    # TF1 scripts format the message themselves: each call's text differs, the count is
    # of the line's calls.
    before = mf.logging.get_verbosity()
    try:
        mf.logging.set_verbosity(mf.logging.INFO)
        with caplog.at_level("INFO", logger="mpiflow"):
            for step in range(7):
                mf.logging.log_every_n(mf.logging.INFO, "every3 %d" % step, 3)
                mf.logging.log_first_n(mf.logging.INFO, f"first2 {step}", 2)
        said = [r.getMessage() for r in caplog.records if r.name == "mpiflow.script"]
        assert said == ["every3 0", "first2 0", "first2 1", "every3 3", "every3 6"]
    finally:
        mf.logging.set_verbosity(before)


# -- Supervisor -------------------------------------------------------------------------------

def _regression():
    mf.set_random_seed(0)
    x = mf.placeholder(mf.float32, [None, 3])
    w = mf.Variable(mf.zeros([3, 1]), name="w")
    loss = mf.reduce_mean(mf.square(mf.matmul(x, w) - 1.0))
    step = mf.train.get_or_create_global_step()
    train = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return x, train, step


def test_managed_session_trains_checkpoints_and_resumes_from_its_logdir(tmp_path):
    x, train, step = _regression()
    sv = mf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0.05, summary_op=None)
    assert mf.get_default_graph().finalized
    with sv.managed_session() as sess:
        while sess.run(step) < 30:
            sess.run(train, {x: np.ones((4, 3), np.float32)})
        sv.saver.save(sess, sv.save_path, global_step=step)
    assert mf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-30")
    assert list(tmp_path.glob("events.out.tfevents.*")), "no summary events written"
    # As TensorFlow's checkpoint thread: SessionLog(CHECKPOINT) at each of its saves.
    logs = [event.session_log for path in tmp_path.glob("events.out.tfevents.*")
            for event in mf.summary.summary_iterator(str(path))
            if event.HasField("session_log")]
    saves = [log for log in logs if log.status == mf.SessionLog.CHECKPOINT]
    assert saves and {log.checkpoint_path for log in saves} == {sv.save_path}

    with mf.Graph().as_default():
        _, _, step = _regression()
        again = mf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0)
        with again.managed_session() as sess:
            assert sess.run(step) == 30      # restored, not initialized


def test_the_supervisors_periodic_jobs_run_once_at_the_start_as_tensorflows(tmp_path):
    # A job shorter than save_model_secs still leaves its first checkpoint, and a loop's
    # function is called at once, then every period.
    _, train, step = _regression()
    sv = mf.train.Supervisor(logdir=str(tmp_path), save_model_secs=60, summary_op=None)
    calls = []
    with sv.managed_session() as sess:
        sv.loop(60, lambda: calls.append(sess.run(step)))
        deadline = time.monotonic() + 10
        while not (calls and mf.train.latest_checkpoint(str(tmp_path))):
            assert time.monotonic() < deadline, (calls, sorted(tmp_path.iterdir()))
            time.sleep(0.01)
    assert calls == [0]
    assert mf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")


def test_managed_session_ends_cleanly_on_out_of_range_and_reraises_other_errors():
    _regression()
    sv = mf.train.Supervisor(logdir=None)
    with sv.managed_session():
        raise errors.OutOfRangeError("input exhausted")
    assert sv.should_stop()
    with pytest.raises(ValueError, match="bad batch"):
        with sv.managed_session():
            raise ValueError("bad batch")


def test_a_replica_supervisor_wants_every_variable_placed_with_tf1s_own_words():
    mf.Variable(1.0, name="unplaced")
    with pytest.raises(ValueError) as info:
        mf.train.Supervisor(is_chief=False)
    message = str(info.value)
    assert message.startswith("When using replicas, all Variables must have their device set")
    assert "replica_device_setter" in message and "unplaced" in message


def _sync_replicas_model():
    """(x, global step, optimizer, train op) of a one-replica synchronous linear model."""
    x = mf.placeholder(mf.float32, [None, 3])
    w = mf.Variable(mf.zeros([3, 1]), name="w")
    loss = mf.reduce_mean(mf.square(mf.matmul(x, w) - 1.0))
    step = mf.train.get_or_create_global_step()
    opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                         replicas_to_aggregate=1)
    train = opt.minimize(loss, global_step=step)
    return x, step, opt, train


def test_sync_replicas_tf1_helpers_run_under_a_supervisor():
    x, step, opt, train = _sync_replicas_model()
    runner, tokens = opt.get_chief_queue_runner(), opt.get_init_tokens_op()
    sv = mf.train.Supervisor(is_chief=True, local_init_op=opt.chief_init_op,
                             ready_for_local_init_op=opt.ready_for_local_init_op,
                             recovery_wait_secs=1, global_step=step, stop_grace_secs=10)
    sess = sv.prepare_or_wait_for_session("")
    sess.run(tokens)
    threads = sv.start_queue_runners(sess, [runner])
    assert threads and all(isinstance(t, threading.Thread) for t in threads)
    for _ in range(5):
        sess.run(train, {x: np.ones((2, 3), np.float32)})
    assert sess.run(step) == 5
    sv.stop()
    assert not any(t.is_alive() for t in threads)
    sess.close()


def test_supervisor_stop_inside_managed_session_ends_cleanly(tmp_path):
    # TF1 scripts call sv.stop() at the end of their loop, also inside managed_session,
    # whose exit stops again: the second stop has no writer left to write to, and
    # TensorFlow's passes over it.
    step = mf.train.get_or_create_global_step()
    inc = mf.assign_add(step, 1)
    sv = mf.train.Supervisor(logdir=str(tmp_path), global_step=step, save_model_secs=0)
    with sv.managed_session() as sess:
        for _ in range(3):
            sess.run(inc)
        sv.stop()
    sv.stop()
    (events,) = tmp_path.glob("events.out.tfevents.*")
    stops = [e for e in mf.summary.summary_iterator(str(events))
             if e.HasField("session_log") and e.session_log.status == e.session_log.STOP]
    assert len(stops) == 1


def test_supervisor_writes_the_graph_and_a_second_session_writes_a_new_event_file(tmp_path):
    # As TensorFlow's chief: the graph goes to the event file once the session is made
    # (TensorBoard's graph tab), a session after one that stopped reopens the writer, and
    # the step rate is tagged with the global step's op name.
    step = mf.Variable(0, name="iterations", trainable=False)
    inc = mf.assign_add(step, 1)
    sv = mf.train.Supervisor(logdir=str(tmp_path), global_step=step, save_model_secs=0,
                             save_summaries_secs=0.05)
    for _ in range(2):
        with sv.managed_session() as sess:
            for _ in range(3):
                sess.run(inc)
                time.sleep(0.06)
    files = sorted(tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 2
    for path in files:
        events = list(mf.summary.summary_iterator(str(path)))
        kinds = [e.WhichOneof("what") for e in events]
        assert kinds[:3] == ["file_version", "graph_def", "session_log"], kinds
        assert kinds.count("graph_def") == 1
    tags = {v.tag for path in files for e in mf.summary.summary_iterator(str(path))
            for v in e.summary.value}
    assert tags == {"iterations/sec"}


def test_a_sync_step_nobody_releases_in_process_times_out_saying_what_it_waits_for():
    x, step, opt, train = _sync_replicas_model()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(opt.local_step_init_op)
        with pytest.raises(mf.errors.DeadlineExceededError,
                           match="nothing in this process signalled it .a sync-replicas "
                                 "step needs its chief's sync loop running."):
            sess.run(train, {x: np.ones((2, 3), np.float32)},
                     options=mf.RunOptions(timeout_in_ms=300))
