"""TF1 ps/worker scripts run unmodified under one mpiexec, through python -m mpiflow.run.

Each script in examples/tf1_scripts/ is written the TF1 way (flags, ClusterSpec from host
lists, Server, replica_device_setter, Supervisor or MonitoredTrainingSession) and imports
``tensorflow.compat.v1``. The accuracies beside them are TensorFlow's own on the same
data, from ``python examples/tf1_scripts/run_with_tensorflow.py SCRIPT`` (tensorflow-cpu
2.21.0 with tf_keras 2.21.0 and TF_USE_LEGACY_KERAS=1, tf.compat.v1, 1 ps + 2 workers over
gRPC on 127.0.0.1, 2026-11-26).
"""

import re

import pytest

from tests.conftest import REPO_ROOT

SCRIPTS = REPO_ROOT / "examples" / "tf1_scripts"
TENSORFLOW_ACCURACY = {
    "between_graph_async.py": 0.8365,        # asynchronous: varies by a point run to run
    # TensorFlow's chief then hung waiting for a token after training, as TF1's sync
    # replicas are known to (killed after 120 s); mpiflow's chief releases every worker.
    "replica_supervisor_sync.py": 0.8390,
    # Worker 0's figure; TensorFlow's worker 1 did not exit within 120 s (killed).
    "supervisor_managed_async.py": 0.7950,
    # tf.layers CNN (conv2d, batch_normalization and its update ops, pooling, dropout):
    # the lowest of 3 TensorFlow runs (0.6660, 0.6660, 0.6195); its features have no
    # spatial layout, so pooling loses signal and asynchronous runs spread widely (here
    # 0.54-0.64 in the runs made; with one worker the libraries agree: 0.66-0.67 against
    # 0.64-0.68 over 4 seeds).
    "layers_cnn.py": 0.6195,
    # tf.losses with a kernel regularizer and get_total_loss, clip_by_global_norm,
    # exponential_decay, tf.metrics accuracy and mean: the lowest of 8 TensorFlow runs
    # (0.7990, 0.7960, 0.7885, 0.7910, 0.7755, 0.7830, 0.7875, 0.7990; asynchronous, so
    # they spread; mpiflow's runs spread alike: 0.7655-0.8075 over 16, 6 of them
    # interleaved with 6 of TensorFlow's on 2026-11-26).
    "losses_metrics.py": 0.7755,
    # tf.data: shard, shuffle, repeat, batch, one-shot and initializable iterators up to
    # OutOfRangeError (TensorFlow: 0.8135, 0.8330, 0.8135 for worker 0).
    "dataset_input.py": 0.8135,
}
# Asynchronous updates interleave differently in every run, under TensorFlow as here.
TOLERANCE = {"layers_cnn.py": 0.1}
DEFAULT_TOLERANCE = 0.02

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("script", sorted(TENSORFLOW_ACCURACY))
def test_tf1_script_runs_unmodified_and_matches_tensorflow(run_mpi, script, tmp_path):
    proc = run_mpi(3, "-m", "mpiflow.run", "--ps", 1, "--as-tensorflow", SCRIPTS / script,
                   timeout=240)
    out = proc.stdout
    accuracies = [float(a) for a in re.findall(r"worker \d: test accuracy (\d\.\d+)", out)]
    assert len(accuracies) == 2, out                      # both workers finished
    assert min(accuracies) >= TENSORFLOW_ACCURACY[script] - TOLERANCE.get(
        script, DEFAULT_TOLERANCE), out


def test_script_flags_that_contradict_the_launch_fail_fast_on_every_rank(run_mpi):
    proc = run_mpi(3, "-m", "mpiflow.run", "--ps", 1, "--as-tensorflow",
                   SCRIPTS / "between_graph_async.py", "--ps_hosts=h0:2222,h1:2222",
                   timeout=60, check=False)
    assert proc.returncode != 0
    lines = re.findall(r"\[rank (\d)\] mpiflow.run: --ps_hosts names 2 ps task\(s\) "
                       r"\(h0:2222,h1:2222\) but the launch has 1 \(\S+:2222; layout "
                       r"\{'ps': 1, 'worker': 2\}\)", proc.stderr)
    assert sorted(lines) == ["0", "1", "2"], proc.stderr


def test_a_script_that_hard_codes_another_cluster_is_stopped_naming_both(run_mpi, tmp_path):
    script = tmp_path / "hard_coded.py"
    script.write_text(
        "import tensorflow as tf\n"
        "cluster = tf.train.ClusterSpec({'ps': ['a:1', 'b:1'], 'worker': ['c:1']})\n"
        "server = tf.train.Server(cluster, job_name='worker', task_index=0)\n")
    proc = run_mpi(3, "-m", "mpiflow.run", "--ps", 1, "--as-tensorflow", script,
                   timeout=60, check=False)
    assert proc.returncode != 0
    assert "the script has 2 ps, 1 worker" in proc.stderr, proc.stderr
    assert "mpiflow.run launched 1 ps, 2 worker" in proc.stderr


def test_script_log_lines_are_tagged_with_role_and_rank(run_mpi):
    proc = run_mpi(3, "-m", "mpiflow.run", "--ps", 1, "--as-tensorflow",
                   SCRIPTS / "supervisor_managed_async.py", "--train_steps", 200, timeout=120)
    for task, rank in ((0, 1), (1, 2)):       # under --ps 1, worker t is rank t + 1
        assert re.search(rf"^\[worker:{task} r{rank}\] INFO mpiflow.script: worker {task} "
                         r"stopped training at global step \d+$", proc.stderr, re.M), \
            proc.stderr
