"""replica_device_setter and its strategies reproduce TensorFlow's documented placements."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.train.device_setter import STANDARD_PS_OPS, _RoundRobinStrategy


def _var(*shape, dtype=np.float32, name=None):
    return mf.Variable(np.zeros(shape, dtype), name=name)


class _FakeOp:
    """What a device function reads of an op: its type, name and device so far."""

    def __init__(self, op_type, device="", name="op"):
        self.type = op_type
        self.device = device
        self.name = name


class _DuckClusterSpec:
    """Anything with ``jobs`` and ``num_tasks(job)`` is accepted as a cluster."""

    def __init__(self, layout):
        self._layout = layout

    @property
    def jobs(self):
        return sorted(self._layout)

    def num_tasks(self, job):
        return len(self._layout[job])


def test_seed_example_places_variables_round_robin_and_the_rest_on_the_worker():
    with mf.device(mf.train.replica_device_setter(ps_tasks=3)):
        w_0 = _var(784, 10, name="w_0")
        b_0 = _var(10, name="b_0")
        w_1 = _var(10, 10, name="w_1")
        b_1 = _var(10, name="b_1")
        input_data = mf.placeholder(mf.float32, [None, 784])
        layer_0 = mf.matmul(input_data, w_0) + b_0
        layer_1 = mf.matmul(layer_0, w_1) + b_1
    assert [v.device for v in (w_0, b_0, w_1, b_1)] == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0"]
    assert input_data.device == "/job:worker"
    assert layer_0.device == layer_0.op.inputs[0].device == "/job:worker"
    assert layer_1.device == "/job:worker"
    # A variable's own ops (its read and its initializer) stay with it.
    assert w_1.value().device == w_1.initializer.device == "/job:ps/task:2"


def test_no_ps_tasks_gives_no_device_function():
    assert mf.train.replica_device_setter() is None
    assert mf.train.replica_device_setter(ps_tasks=0) is None
    assert mf.train.replica_device_setter(cluster={"worker": ["w0", "w1"]}) is None
    with mf.device(mf.train.replica_device_setter()):
        v = _var(2)
    assert v.device == ""


def test_cluster_dict_sets_ps_tasks_as_in_tensorflows_docstring():
    cluster = {"ps": ["ps0:2222", "ps1:2222"],
               "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]}
    # ps_tasks is ignored when a cluster is given.
    with mf.device(mf.train.replica_device_setter(ps_tasks=7, cluster=cluster)):
        v1, v2, v3 = _var(1), _var(1), _var(1)
    assert [v.device for v in (v1, v2, v3)] == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]


def test_cluster_spec_gives_the_ps_task_count():
    cluster = mf.train.ClusterSpec({"ps": ["ps0:1", "ps1:1", "ps2:1"], "worker": ["w0:1"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        devices = [_var(1).device for _ in range(4)]
    assert devices == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2",
                       "/job:ps/task:0"]
    no_ps = mf.train.ClusterSpec({"worker": ["w0:1", "w1:1"]})
    assert mf.train.replica_device_setter(ps_tasks=2, cluster=no_ps) is None


def test_cluster_spec_object_and_a_custom_ps_job_name():
    cluster = _DuckClusterSpec({"param": ["a", "b", "c"], "worker": ["w"]})
    setter = mf.train.replica_device_setter(cluster=cluster, ps_device="/job:param")
    with mf.device(setter):
        devices = [_var(1).device for _ in range(4)]
        y = mf.add(mf.constant(1.0), 2.0)
    assert devices == ["/job:param/task:0", "/job:param/task:1", "/job:param/task:2",
                       "/job:param/task:0"]
    assert y.device == "/job:worker"
    assert mf.train.replica_device_setter(cluster=cluster) is None   # no "ps" job


def test_ps_ops_override_chooses_which_op_types_go_to_the_ps():
    with mf.device(mf.train.replica_device_setter(ps_tasks=2, ps_ops=["Placeholder"])):
        v = _var(3)
        x = mf.placeholder(mf.float32, [3])
        z = mf.placeholder(mf.float32, [3])
    assert v.device == "/job:worker"
    assert (x.device, z.device) == ("/job:ps/task:0", "/job:ps/task:1")
    assert {"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "MutableHashTable",
            "MutableHashTableV2", "MutableHashTableOfTensors",
            "MutableDenseHashTable"} <= set(STANDARD_PS_OPS)


def test_inner_explicit_ps_task_is_kept_while_the_round_robin_advances():
    with mf.device(mf.train.replica_device_setter(ps_tasks=3)):
        with mf.device("/job:ps/task:1"):
            pinned = _var(2)
        after = [_var(2).device for _ in range(2)]
    assert pinned.device == "/job:ps/task:1"
    assert after == ["/job:ps/task:1", "/job:ps/task:2"]


def test_device_fields_set_by_an_outer_scope_merge_onto_the_chosen_job():
    with mf.device("/device:GPU:0"):
        with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
            v = _var(2, 2)
            y = mf.matmul(mf.placeholder(mf.float32, [1, 2]), v)
    assert y.device == "/job:worker/device:GPU:0"
    assert v.device == "/job:ps/task:0/device:GPU:0"


def test_inner_device_type_merges_onto_the_worker():
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
        with mf.device("/gpu:1"):
            y = mf.multiply(mf.constant(2.0), 3.0)
    assert y.device == "/job:worker/device:GPU:1"


def test_worker_device_with_a_task_index():
    setter = mf.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:3")
    with mf.device(setter):
        w = _var(4, 2)
        y = mf.matmul(mf.placeholder(mf.float32, [None, 4]), w)
    assert w.device == "/job:ps/task:0"
    assert y.device == "/job:worker/task:3"


def test_device_function_gives_no_ps_task_to_an_op_pinned_to_another_job():
    fn = mf.train.replica_device_setter(ps_tasks=3)
    assert fn(_FakeOp("VariableV2", "/job:foo")) == "/job:foo"
    assert fn(_FakeOp("VariableV2", "/job:ps")) == "/job:ps/task:0"   # the foo op took none
    assert fn(_FakeOp("VariableV2", "/job:ps/task:2")) == "/job:ps/task:2"
    assert fn(_FakeOp("VariableV2")) == "/job:ps/task:2"
    assert fn(_FakeOp("MatMul", "/job:foo/task:1")) == "/job:foo/task:1"


def test_merge_devices_false_leaves_ops_that_have_a_device_alone():
    fn = mf.train.replica_device_setter(ps_tasks=2, merge_devices=False)
    assert fn(_FakeOp("VariableV2", "/device:GPU:0")) == "/device:GPU:0"
    assert fn(_FakeOp("MatMul", "/task:2")) == "/task:2"
    assert fn(_FakeOp("VariableV2")) == "/job:ps/task:0"   # nothing set: placed as usual
    assert fn(_FakeOp("MatMul")) == "/job:worker"


def test_greedy_strategy_balances_bytes_instead_of_counts():
    sizes = [1000, 10, 10, 10, 500]       # float32 elements: one large, then small ones
    strategy = mf.train.GreedyLoadBalancingStrategy(2, mf.train.byte_size_load_fn)
    with mf.device(mf.train.replica_device_setter(ps_tasks=2, ps_strategy=strategy)):
        greedy = [_var(n).device for n in sizes]
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
        round_robin = [_var(n).device for n in sizes]
    assert greedy == ["/job:ps/task:0"] + ["/job:ps/task:1"] * 4
    assert round_robin == ["/job:ps/task:0", "/job:ps/task:1"] * 2 + ["/job:ps/task:0"]


def test_greedy_strategy_breaks_ties_by_lowest_task():
    strategy = mf.train.GreedyLoadBalancingStrategy(3, lambda op: 1)
    assert [strategy(_FakeOp("VariableV2")) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_byte_size_load_fn_counts_bytes_of_the_first_output():
    assert mf.train.byte_size_load_fn(_var(3, 4).op) == 3 * 4 * 4
    assert mf.train.byte_size_load_fn(_var(5, dtype=np.float64).op) == 40
    assert mf.train.byte_size_load_fn(_var(dtype=np.float32).op) == 4     # a scalar


def test_byte_size_load_fn_rejects_unknown_shapes_and_several_outputs():
    x = mf.placeholder(mf.float32, [None, 3], name="batch")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"'batch' \(Placeholder\).*"
                                                             r"not fully defined"):
        mf.train.byte_size_load_fn(x.op)
    parts = mf.split(mf.zeros([4, 2]), 2, name="halves")
    with pytest.raises(mf.errors.InvalidArgumentError, match="'halves'.*single output"):
        mf.train.byte_size_load_fn(parts[0].op)


def test_slot_variables_sit_with_their_variable_and_advance_the_round_robin():
    with mf.device(mf.train.replica_device_setter(ps_tasks=3)):
        w = mf.Variable(np.ones((2, 3), np.float32), name="w")      # ps 0
        b = mf.Variable(np.ones(3, np.float32), name="b")           # ps 1
        x = mf.placeholder(mf.float32, [None, 2])
        loss = mf.reduce_sum(mf.square(mf.matmul(x, w) + b))
        opt = mf.train.MomentumOptimizer(0.1, 0.9)
        train_op = opt.minimize(loss)
        # As in TensorFlow, the slots' VariableV2 ops took tasks 2 and 0 from the
        # round-robin before colocation moved them next to w and b.
        later = mf.Variable(np.ones(1, np.float32), name="later")
    for var in (w, b):
        slot = opt.get_slot(var, "momentum")
        assert slot.device == var.device
        assert slot.initializer.device == var.device
    assert (w.device, b.device, later.device) == (
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:1")
    applies = [op for op in mf.get_default_graph().get_operations()
               if op.type == "ApplyMomentum"]
    assert sorted(op.device for op in applies) == ["/job:ps/task:0", "/job:ps/task:1"]
    assert train_op.device == "/job:worker"


def test_partitioned_variable_parts_spread_over_ps_and_lookups_run_next_to_them():
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
        table = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
        rows = mf.nn.embedding_lookup(table, mf.placeholder(mf.int64, [None]),
                                      partition_strategy="div")
    parts = list(table)
    assert [p.device for p in parts] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    gathers = [op for op in mf.get_default_graph().get_operations() if op.type == "GatherV2"]
    assert [g.device for g in gathers] == [p.device for p in parts]
    assert rows.device == "/job:worker"


@pytest.mark.parametrize("kwargs,message", [
    ({"ps_tasks": -1}, "ps_tasks must be an int >= 0"),
    ({"ps_tasks": 2.5}, "ps_tasks must be an int >= 0"),
    ({"ps_tasks": "3"}, "ps_tasks must be an int >= 0"),
    ({"ps_tasks": 2, "ps_strategy": 5}, "ps_strategy must be callable"),
    ({"ps_tasks": 2, "ps_ops": "VariableV2"}, "ps_ops must be a list of op type names"),
    ({"cluster": 42}, "cluster must be a ClusterSpec or a dict"),
    ({"cluster": {"ps": "host:1"}}, r"cluster\['ps'\] must be a list of tasks"),
    ({"ps_tasks": 1, "worker_device": "/job:worker/bogus:1"}, "Invalid device"),
])
def test_invalid_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(mf.errors.InvalidArgumentError, match=message):
        mf.train.replica_device_setter(**kwargs)


def test_strategy_returning_a_bad_task_is_an_error_naming_the_op():
    setter = mf.train.replica_device_setter(ps_tasks=2, ps_strategy=lambda op: 2)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"returned 2 for op 'v' \(VariableV2\).*\[0, 2\)"):
        with mf.device(setter):
            _var(1, name="v")


def test_strategy_constructors_validate_their_arguments():
    with pytest.raises(mf.errors.InvalidArgumentError, match="num_tasks must be"):
        mf.train.GreedyLoadBalancingStrategy(0, mf.train.byte_size_load_fn)
    with pytest.raises(mf.errors.InvalidArgumentError, match="load_fn must be callable"):
        mf.train.GreedyLoadBalancingStrategy(2, None)
    with pytest.raises(mf.errors.InvalidArgumentError, match="num_tasks must be"):
        _RoundRobinStrategy(0)


def test_a_variables_initializer_runs_where_the_variable_lives():
    from mpiflow.runtime.placement import Placer

    cluster = mf.train.ClusterSpec({"ps": ["p:1", "p:2"], "worker": ["w:1"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        mf.get_variable("first", [2])
        table = mf.get_variable("table", [1000, 8],
                                initializer=mf.random_normal_initializer(0.0, 1.0))
    placer = Placer(mf.get_default_graph(), cluster, "worker", 0)
    made = [op for op in mf.get_default_graph().get_operations()
            if op.name.startswith("table/Initializer/")]
    assert {op.type for op in made} >= {"RandomStandardNormal"}
    assert {placer.device_of(op).to_string() for op in made} == \
        {"/job:ps/replica:0/task:1/device:CPU:0"} == {placer.device_of(table.op).to_string()}


def test_placement_in_a_sparse_job_uses_the_tasks_it_lists():
    # TF: ClusterSpec({"ps": {0: ..., 2: ...}}) has ps tasks 0 and 2 (no task 1).
    from mpiflow.runtime.placement import Placer

    cluster = mf.train.ClusterSpec({"ps": {0: "p:0", 2: "p:2"}, "worker": ["w:0"]})
    with mf.device("/job:ps/task:2"):
        on_two = mf.Variable(1.0, name="on_two")
    with mf.device("/job:ps/task:1"):
        on_one = mf.Variable(1.0, name="on_one")
    placer = Placer(mf.get_default_graph(), cluster, "worker", 0)
    assert placer.device_of(on_two.op).to_string() == "/job:ps/replica:0/task:2/device:CPU:0"
    with pytest.raises(mf.errors.PlacementError, match=r"/job:ps/task:1 but job 'ps' has 2 "
                                                       r"task\(s\), \[0, 2\]"):
        placer.device_of(on_one.op)


def test_a_job_without_a_task_goes_to_the_lowest_task_the_sparse_job_lists():
    from mpiflow.runtime.placement import Placer

    cluster = mf.train.ClusterSpec({"ps": {1: "p:1", 3: "p:3"}, "worker": ["w:0"]})
    with mf.device("/job:ps"):
        v = mf.Variable(1.0, name="v")
    placer = Placer(mf.get_default_graph(), cluster, "worker", 0)
    assert placer.device_of(v.op).to_string() == "/job:ps/replica:0/task:1/device:CPU:0"


def test_cluster_given_as_a_cluster_def_spreads_the_variables_over_its_ps():
    # TF's replica_device_setter takes a ClusterDef; mpiflow's is the as_cluster_def() dict.
    cluster = mf.train.ClusterSpec({"ps": ["p:0", "p:1"], "worker": ["w:0"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster.as_cluster_def())):
        v = mf.Variable(1.0, name="v")
        w = mf.Variable(1.0, name="w")
    assert [v.device, w.device] == ["/job:ps/task:0", "/job:ps/task:1"]
