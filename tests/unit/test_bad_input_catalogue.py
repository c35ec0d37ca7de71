"""A catalogue of user mistakes across the API: each raises an mpiflow error of the right
class whose message names the culprit (an op, a tensor, a variable, a file, a variable of
the environment, a layout). Multi-rank mistakes (mismatched collectives, placement on a
missing job) are in tests/comm and tests/runtime."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import config, errors
from mpiflow.comm import cluster as cluster_lib
from mpiflow.ops.registry import apply_op, get_op_def


def _session_run(fetch, feed=None):
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        return sess.run(fetch, feed)


def matmul_shapes():
    mf.matmul(mf.placeholder(mf.float32, [3, 4]), mf.placeholder(mf.float32, [5, 6]))


def add_dtypes():
    mf.add(mf.placeholder(mf.float32, [2]), mf.placeholder(mf.int32, [2]), name="mixed")


def broadcast_shapes():
    mf.multiply(mf.ones([3, 4]), mf.ones([5]), name="scale")


def broadcast_shapes_at_run_time():
    # Shapes that meet only when fed: said as TensorFlow says it, not in numpy's words.
    a, b = mf.placeholder(mf.float32, [None, 1]), mf.placeholder(mf.float32, [None, 1])
    _session_run(mf.subtract(a, b, name="residual"),
                 {a: np.ones((5, 1), np.float32), b: np.ones((4, 1), np.float32)})


def reshape_size():
    mf.reshape(mf.ones([12]), [5, -1], name="flat")


def transpose_perm():
    mf.transpose(mf.ones([2, 3]), perm=[0, 0], name="swap")


def concat_ranks():
    mf.concat([mf.ones([2, 2]), mf.ones([2])], 0, name="join")


def split_uneven():
    mf.split(mf.ones([7, 2]), 3, axis=0, name="thirds")


def squeeze_non_one():
    mf.squeeze(mf.ones([2, 3]), axis=[0], name="squash")


def reduce_axis():
    mf.reduce_sum(mf.ones([2, 3]), axis=5, name="total")


def unknown_attr():
    apply_op("MatMul", [mf.ones([1, 1]), mf.ones([1, 1])], {"transpose_c": True},
             name="bad_attr")


def unknown_op_type():
    get_op_def("MatMull")


def bad_op_name():
    mf.constant(1.0, name="has space")


def bad_device_string():
    with mf.device("/job:ps/tusk:0"):
        pass


def other_graph_input():
    g = mf.Graph()
    with g.as_default():
        alien = mf.constant(1.0, name="alien")
    mf.identity(alien)


def variable_reuse_without_flag():
    mf.get_variable("dup", [2])
    mf.get_variable("dup", [2])


def variable_reuse_missing():
    with mf.variable_scope("nothing", reuse=True):
        mf.get_variable("here", [2])


def variable_shape_on_reuse():
    with mf.variable_scope("layer"):
        mf.get_variable("kernel", [2, 2])
    with mf.variable_scope("layer", reuse=True):
        mf.get_variable("kernel", [3, 3])


def variable_without_shape():
    mf.get_variable("shapeless", initializer=mf.zeros_initializer())


def assign_shape():
    v = mf.Variable(np.zeros(3, np.float32), name="vec3")
    mf.assign(v, np.zeros(4, np.float32))


def write_to_constant():
    mf.assign_add(mf.constant([1.0], name="frozen"), [1.0])


def broadcast_a_constant_as_a_variable():
    from mpiflow.ops import collective_ops
    collective_ops.broadcast_variable(mf.constant([1.0], name="settled"))


def unfed_placeholder():
    x = mf.placeholder(mf.float32, [None, 2], name="features")
    _session_run(x * 2.0)


def feed_shape():
    x = mf.placeholder(mf.float32, [None, 2], name="pixels")
    _session_run(x * 2.0, {x: np.zeros((1, 3))})


def feed_dtype():
    y = mf.placeholder(mf.int64, [None], name="classes")
    _session_run(y + 1, {y: np.array([0.5])})


def fetch_other_graph():
    g = mf.Graph()
    with g.as_default():
        elsewhere = mf.constant(1.0, name="elsewhere")
    mf.constant(0.0)
    _session_run(elsewhere)


def fetch_none():
    _session_run(None)


def uninitialized_variable():
    v = mf.Variable([1.0], name="cold")
    with mf.Session() as sess:
        sess.run(v * 1.0)


def runtime_shape_clash():
    a = mf.placeholder(mf.float32, [None, 2])
    b = mf.placeholder(mf.float32, [None, 2])
    _session_run(mf.add(a, b, name="late_sum"), {a: np.ones((2, 2)), b: np.ones((3, 2))})


def gather_out_of_range():
    table = mf.Variable(np.zeros((4, 2), np.float32), name="rows4")
    _session_run(mf.gather(table, [7], name="pick"))


def nan_in_checked_tensor():
    x = mf.placeholder(mf.float32, [2])
    _session_run(mf.check_numerics(mf.log(x), "log input", name="guard"), {x: [0.0, -1.0]})


def closed_session():
    sess = mf.Session()
    sess.close()
    sess.run(mf.constant(1.0))


def config_proto_option():
    mf.ConfigProto(log_placement=True)


def optimizer_int_loss():
    mf.get_variable("w_int", [2])
    mf.train.GradientDescentOptimizer(0.1).minimize(mf.constant(3, name="count"))


def optimizer_vector_loss():
    w = mf.get_variable("w_vec", [2])
    mf.train.GradientDescentOptimizer(0.1).minimize(w * 2.0)


def optimizer_no_gradients():
    mf.get_variable("unused_w", [2])
    mf.train.GradientDescentOptimizer(0.1).minimize(mf.reduce_sum(mf.ones([2])) * 1.0)


def sync_replicas_without_step():
    w = mf.get_variable("w_sync", [2])
    opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1), 2)
    opt.minimize(mf.reduce_sum(w))


def sync_replicas_too_few_replicas():
    mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1), 3,
                                   total_num_replicas=2)


def restore_missing_checkpoint(tmp_path):
    mf.get_variable("saved", [2])
    saver = mf.train.Saver()
    with mf.Session() as sess:
        saver.restore(sess, str(tmp_path / "never-saved"))


def truncated_checkpoint_shard(tmp_path):
    v = mf.get_variable("kept", [64])
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(v.initializer)
        prefix = saver.save(sess, str(tmp_path / "model"))
    shard = next(tmp_path.glob("model*.npz"))
    shard.write_bytes(shard.read_bytes()[:40])
    with mf.Session() as sess:
        saver.restore(sess, prefix)


def env_variable_type():
    config.Config(env={"MPIFLOW_TIMEOUT": "soon"}).get("MPIFLOW_TIMEOUT")


def env_variable_choice():
    config.Config(env={"MPIFLOW_PS_POLICY": "random"}).get("MPIFLOW_PS_POLICY")


def unknown_config_name():
    config.get("MPIFLOW_TIMEOUTS")


def more_ps_than_ranks():
    cluster_lib.roles_for(["a", "a", "a"], 3)


def unknown_placement_policy():
    cluster_lib.roles_for(["a", "b"], 1, policy="scatter")


def cluster_unknown_job():
    mf.train.ClusterSpec({"ps": ["a:1"], "worker": ["b:1"]}).num_tasks("chief")


def cluster_task_out_of_range():
    mf.train.ClusterSpec({"worker": ["b:1"]}).task_address("worker", 4)


def device_setter_bad_strategy():
    mf.train.replica_device_setter(ps_tasks=2, ps_strategy=3)


def hook_both_schedules():
    mf.train.CheckpointSaverHook("ckpt", save_secs=10, save_steps=10)


def training_mode_unknown():
    mf.train.TrainingMode("federated", mf.train.ClusterSpec({"worker": ["a:1"]}), 0)


def training_mode_needs_ps():
    mf.train.TrainingMode("hybrid", mf.train.ClusterSpec({"worker": ["a:1"]}), 0)


def malformed_graph_def():
    mf.import_graph_def({"node": [{"name": "n"}]})


def graph_def_unknown_op():
    mf.import_graph_def({"node": [{"name": "n", "op": "Frobnicate", "input": [],
                                   "device": "", "attr": {}, "output": []}]})


def variable_beyond_memory():
    # 256 TiB: more than any address space gives, whatever the machine's memory.
    mf.get_variable("huge", [2 ** 23, 2 ** 23])
    _session_run(mf.constant(0))


CATALOGUE = [
    (matmul_shapes, errors.InvalidArgumentError, r"op 'MatMul' \(MatMul\).*4 vs 5"),
    (add_dtypes, errors.InvalidArgumentError, r"op 'mixed' \(Add\).*float32.*int32"),
    (broadcast_shapes, errors.InvalidArgumentError, r"op 'scale' \(Mul\).*\(3, 4\) and \(5,\)"),
    (broadcast_shapes_at_run_time, errors.InvalidArgumentError,
     r"^Incompatible shapes: \[5,1\] vs\. \[4,1\] in op 'residual' \(Sub\)"),
    (reshape_size, errors.InvalidArgumentError, r"op 'flat' \(Reshape\)"),
    (transpose_perm, errors.InvalidArgumentError, r"op 'swap' \(Transpose\)"),
    (concat_ranks, errors.InvalidArgumentError, r"op 'join' \(ConcatV2\)"),
    (split_uneven, errors.InvalidArgumentError, r"op 'thirds'"),
    (squeeze_non_one, errors.InvalidArgumentError, r"op 'squash' \(Squeeze\)"),
    (reduce_axis, errors.InvalidArgumentError, r"op 'total' \(Sum\).*5"),
    (unknown_attr, errors.InvalidArgumentError, r"Unknown attr 'transpose_c'.*'bad_attr'"),
    (unknown_op_type, errors.NotFoundError, r"'MatMull'.*did you mean MatMul"),
    (bad_op_name, errors.InvalidArgumentError, r"'has space' is not a valid op name"),
    (bad_device_string, errors.InvalidArgumentError, r"/job:ps/tusk:0"),
    (other_graph_input, errors.InvalidArgumentError, r"alien.*same graph"),
    (variable_reuse_without_flag, errors.InvalidArgumentError, r"Variable dup already exists"),
    (variable_reuse_missing, errors.InvalidArgumentError, r"Variable nothing/here does not"),
    (variable_shape_on_reuse, errors.InvalidArgumentError, r"layer/kernel.*\(3, 3\)"),
    (variable_without_shape, errors.InvalidArgumentError, r"shapeless.*shape is needed"),
    (assign_shape, errors.InvalidArgumentError, r"op 'Assign.*\(3,\).*\(4,\)"),
    (write_to_constant, errors.InvalidArgumentError, r"must be a variable.*frozen"),
    (broadcast_a_constant_as_a_variable, errors.InvalidArgumentError,
     r"\(variable\) must be a variable in op .CollectiveBroadcastVariable.*.settled:0."),
    (unfed_placeholder, errors.InvalidArgumentError, r"placeholder tensor 'features'"),
    (feed_shape, errors.InvalidArgumentError, r"shape \(1, 3\) for Tensor 'pixels:0'"),
    (feed_dtype, errors.InvalidArgumentError, r"dtype float64 for Tensor 'classes:0'"),
    (fetch_other_graph, errors.InvalidArgumentError, r"elsewhere.*not an element"),
    (fetch_none, errors.InvalidArgumentError, r"Fetch argument None"),
    (uninitialized_variable, errors.FailedPreconditionError, r"uninitialized value cold"),
    (runtime_shape_clash, errors.InvalidArgumentError, r"op 'late_sum' \(Add\)"),
    (gather_out_of_range, errors.InvalidArgumentError, r"op 'pick' \(GatherV2\).*got 7"),
    (nan_in_checked_tensor, errors.InvalidArgumentError, r"log input.*op 'guard'"),
    (closed_session, errors.FailedPreconditionError, r"closed Session"),
    (variable_beyond_memory, errors.ResourceExhaustedError,
     (r"^Out of memory \(Unable to allocate 256 TiB for an array with shape \(8388608, "
      r"8388608\) and data type float32\) in op 'huge/Initializer/RandomUniform'")),
    (config_proto_option, errors.InvalidArgumentError, r"no option 'log_placement'"),
    (optimizer_int_loss, errors.InvalidArgumentError, r"int32 for loss 'count:0'"),
    (optimizer_vector_loss, errors.InvalidArgumentError, r"loss '.*' must be a scalar"),
    (optimizer_no_gradients, errors.InvalidArgumentError, r"No gradients provided.*unused_w"),
    (sync_replicas_without_step, errors.InvalidArgumentError, r"needs global_step"),
    (sync_replicas_too_few_replicas, errors.InvalidArgumentError,
     r"total_num_replicas \(2\) must be >= replicas_to_aggregate \(3\)"),
    (restore_missing_checkpoint, errors.MpiflowError, r"never-saved"),
    (truncated_checkpoint_shard, errors.DataLossError, r"model.*\.npz"),
    (env_variable_type, errors.InvalidArgumentError, r"MPIFLOW_TIMEOUT.*'soon'"),
    (env_variable_choice, errors.InvalidArgumentError, r"MPIFLOW_PS_POLICY.*'random'"),
    (unknown_config_name, errors.InvalidArgumentError, r"MPIFLOW_TIMEOUTS"),
    (more_ps_than_ranks, errors.InvalidArgumentError, r"no worker left: 3 ranks, 3 ps"),
    (unknown_placement_policy, errors.InvalidArgumentError, r"scatter"),
    (cluster_unknown_job, errors.MpiflowError, r"chief"),
    (cluster_task_out_of_range, errors.MpiflowError, r"worker.*4"),
    (device_setter_bad_strategy, errors.InvalidArgumentError, r"ps_strategy"),
    (hook_both_schedules, errors.InvalidArgumentError, r"CheckpointSaverHook.*save_secs"),
    (training_mode_unknown, errors.InvalidArgumentError, r"'federated'"),
    (training_mode_needs_ps, errors.InvalidArgumentError, r"'hybrid' needs ps tasks"),
    (malformed_graph_def, errors.InvalidArgumentError, r"Malformed GraphDef node 'n'"),
    (graph_def_unknown_op, errors.NotFoundError, r"op type 'Frobnicate'"),
]


def test_the_catalogue_has_at_least_40_distinct_mistakes():
    assert len({case[0].__name__ for case in CATALOGUE}) >= 40


@pytest.mark.parametrize("make_mistake,error,message", CATALOGUE,
                         ids=[case[0].__name__ for case in CATALOGUE])
def test_mistake_raises_a_clear_error_naming_the_culprit(make_mistake, error, message,
                                                         tmp_path):
    takes_path = "tmp_path" in make_mistake.__code__.co_varnames[
        :make_mistake.__code__.co_argcount]
    with pytest.raises(error, match=message):
        make_mistake(tmp_path) if takes_path else make_mistake()
