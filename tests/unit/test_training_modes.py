"""TrainingMode decides each variable's treatment from how it is used (built without MPI:
the placement and the optimizer's ops are the specification, the matrix in tests/parity
runs them)."""

import re

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

CLUSTER = mf.train.ClusterSpec({"ps": ["p:1", "p:2"], "worker": ["w:1", "w:2"]})


def build(mode, optimizer=mf.train.AdamOptimizer, **options):
    """An embedding table (gathered), a dense weight as tall as the table (matmul), and a
    bias; returns ({name: variable}, mode)."""
    mode = mf.train.TrainingMode(mode, CLUSTER, 1, shard_rows=8, **options)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        x = mf.placeholder(mf.float32, [None, 10])
        table = mf.get_variable("emb", [16, 10])
        dense = mf.get_variable("w_big", [10, 10])
        bias = mf.get_variable("w_bias", [10])
        h = mf.matmul(x + mf.nn.embedding_lookup(table, ids), dense) + bias
        loss = mf.reduce_sum(h)
        step = mf.train.get_or_create_global_step()
        mode.optimizer(optimizer(0.1)).minimize(loss, global_step=step)
    return {"emb": table, "w_big": dense, "w_bias": bias}, mode


def jobs(var):
    parts = list(var) if hasattr(var, "get_variable_list") else [var]
    return {mf.DeviceSpec.from_string(p.device).job for p in parts}


def test_hybrid_puts_only_what_is_gathered_on_the_ps_whatever_its_shape():
    variables, _ = build("hybrid")
    assert jobs(variables["emb"]) == {"ps"}
    assert jobs(variables["w_big"]) == {"worker"}      # as many rows as a table: a matmul
    assert jobs(variables["w_bias"]) == {"worker"}


def test_a_split_table_puts_one_part_on_each_ps():
    variables, _ = build("hybrid")
    parts = list(variables["emb"])
    assert [p.device for p in parts] == ["/job:ps/task:0", "/job:ps/task:1"]


def test_the_user_forces_either_way_by_name():
    variables, _ = build("hybrid", tables=["w_b*"], replicated=["emb"])
    assert jobs(variables["emb"]) == {"worker"}
    assert jobs(variables["w_big"]) == {"ps"} and jobs(variables["w_bias"]) == {"ps"}
    assert not hasattr(variables["emb"], "get_variable_list")      # replicated: never split


def test_a_name_that_matches_no_variable_is_an_error():
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"'embedding' names no variable of the model"):
        build("hybrid", tables=["embedding"])
    with pytest.raises(errors.InvalidArgumentError, match="both in tables= and in replicated="):
        build("hybrid", tables=["emb"], replicated=["emb"])


def test_describe_says_what_became_of_each_variable_and_why():
    _, mode = build("hybrid")
    text = mode.describe()
    assert re.search(r"emb +\[16, 10\]  table in 2 parts on ps:0, ps:1", text), text
    assert "its gradient is sparse" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("w_big"))
    assert "replicated on every worker, gradient allreduced; its gradient is dense" in line
    assert "split in 2 parts" in line and "replicated=" in line
    with mf.Graph().as_default():
        _, ps_mode = build("ps")
    assert "w_bias" in ps_mode.describe() and "updated there" in ps_mode.describe()


def test_describe_says_a_variable_no_optimizer_trains_is_replicated_untrained():
    # A frozen table next to a trained one: it has no gradient, so it stays on the
    # workers; describe() said "gradient allreduced (decided at minimize())" after minimize.
    mode = mf.train.TrainingMode("hybrid", CLUSTER, 1)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        frozen = mf.get_variable("frozen", [16, 4], trainable=False)
        table = mf.get_variable("emb", [16, 4])
        loss = mf.reduce_sum(mf.nn.embedding_lookup(table, ids) *
                             mf.nn.embedding_lookup(frozen, ids))
        mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(loss)
    line = next(x for x in mode.describe().splitlines() if x.strip().startswith("frozen"))
    assert line.endswith("replicated on every worker, not trained here (no optimizer of "
                         "this mode trains it): every copy takes worker 0's values"), line
    assert jobs(frozen) == {"worker"} and jobs(table) == {"ps"}


def _state_read_by(update):
    """The variables an update op reads through reads and casts (its optimizer state)."""
    found, stack = set(), list(update.inputs[1:])
    while stack:
        op = stack.pop().op
        if op.type == "VariableV2":
            found.add(op)
        elif op.type in ("Identity", "Cast"):
            stack.extend(op.inputs)
    return found


def test_adam_keeps_one_pair_of_powers_per_domain_next_to_the_updates_it_serves():
    build("hybrid")
    graph = mf.get_default_graph()
    powers = {op.name: op.device for op in graph.get_operations()
              if op.type == "VariableV2" and "_power" in op.name}
    assert powers == {"beta1_power": "/job:ps/task:0", "beta2_power": "/job:ps/task:0",
                      "beta1_power_worker": "/job:worker/task:1",
                      "beta2_power_worker": "/job:worker/task:1"}
    for op in graph.get_operations():
        if op.type in ("ApplyAdam", "SparseApplyAdam"):
            own_job = op.inputs[0].op.device.split("/")[1]
            assert {v.device.split("/")[1] for v in _state_read_by(op)} == {own_job}, op.name


def test_allreduce_and_hybrid_record_the_replicas_and_their_broadcast():
    build("hybrid")
    graph = mf.get_default_graph()
    replicated = {v.op.name for v in graph.get_collection(mf.GraphKeys.REPLICATED_VARIABLES)}
    assert {"w_big/part_0", "w_big/part_1", "w_bias", "global_step",
            "beta1_power_worker"} <= replicated
    assert not any(name.startswith("emb") for name in replicated)
    assert len(graph.get_collection(mf.GraphKeys.REPLICA_BROADCAST_OPS)) == 1


@pytest.mark.parametrize("mode_name", ["allreduce", "hybrid"])
def test_gradients_applied_by_the_wrapped_optimizer_still_have_their_replicas_broadcast(
        mode_name):
    # compute_gradients of the mode's optimizer, apply_gradients of the optimizer it wraps:
    # nothing recorded the replicas, so no session broadcast them, and a worker other than
    # the chief waited for the chief to initialize its own copies, then timed out blaming
    # the chief and replica_device_setter.
    opt, pairs = _gradients(mode_name)
    step = mf.train.get_or_create_global_step()
    opt._opt.apply_gradients(pairs, global_step=step)
    graph = mf.get_default_graph()
    mf.train.session_manager.register_replicas(graph)      # as a session is made
    replicated = {v.op.name for v in graph.get_collection(mf.GraphKeys.REPLICATED_VARIABLES)}
    replicated = {name.split("/")[0] for name in replicated}    # a split w's parts too
    assert {"w", "global_step"} <= replicated
    assert ("emb" in replicated) == (mode_name == "allreduce")
    assert len(graph.get_collection(mf.GraphKeys.REPLICA_BROADCAST_OPS)) == 1


def test_split_tables_are_looked_up_by_range_so_checkpoints_reshard():
    variables, _ = build("ps")
    assert variables["emb"].lookup_strategy == "div"
    assert {p._save_slice_info.lookup for p in variables["emb"]} == {"div"}


def test_a_second_minimize_leaves_the_tables_where_the_first_put_them():
    mode = mf.train.TrainingMode("hybrid", CLUSTER, 0, shard_rows=10 ** 6)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        tables = [mf.get_variable(f"emb{i}", [5, 2]) for i in range(3)]
        loss = mf.reduce_sum(sum(mf.nn.embedding_lookup(t, ids) for t in tables))
        opt = mode.optimizer(mf.train.GradientDescentOptimizer(0.1))
        opt.minimize(loss)
        first = [t.device for t in tables]
        opt.minimize(loss * 2.0)
    assert first == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert [t.device for t in tables] == first


def _table_under_a_dense_layer():
    """``(table, w, loss)``: an embedding table looked up under a dense layer ``w``, built
    in the current scope (a mode's, to place them)."""
    ids = mf.placeholder(mf.int64, [None])
    table = mf.get_variable("emb", [6, 2])
    w = mf.get_variable("w", [2, 1])
    return table, w, mf.reduce_sum(mf.matmul(mf.nn.embedding_lookup(table, ids), w))


def test_names_may_match_variables_another_optimizer_trains():
    mode = mf.train.TrainingMode("hybrid", CLUSTER, 0, tables=["emb"])
    with mode.scope():
        table, w, loss = _table_under_a_dense_layer()
        mode.optimizer(mf.train.AdagradOptimizer(0.1)).minimize(loss, var_list=list(table))
        mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(loss, var_list=[w])
    assert [p.device for p in table] == ["/job:ps/task:0", "/job:ps/task:1"]
    assert w.device == "/job:worker/task:0"


@pytest.mark.parametrize("table,dense", [("emb", "w_dense"), ("z_emb", "a_dense")])
def test_which_copy_keeps_tensorflows_name_does_not_depend_on_variable_names(table, dense):
    cluster = mf.train.ClusterSpec({"ps": ["p:1"], "worker": ["w:1"]})
    mode = mf.train.TrainingMode("hybrid", cluster, 0)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        t = mf.get_variable(table, [6, 2])
        w = mf.get_variable(dense, [2, 1])
        loss = mf.reduce_sum(mf.matmul(mf.nn.embedding_lookup(t, ids), w))
        mode.optimizer(mf.train.AdamOptimizer(0.1)).minimize(loss)
    powers = {op.name: op.device for op in mf.get_default_graph().get_operations()
              if op.type == "VariableV2" and "_power" in op.name}
    assert powers == {"beta1_power": "/job:ps/task:0", "beta2_power": "/job:ps/task:0",
                      "beta1_power_worker": "/job:worker/task:0",
                      "beta2_power_worker": "/job:worker/task:0"}


# -- auto: the mode chosen at minimize() ------------------------------------------------------

def _jobs_of_every_variable():
    """{variable name, its parts as one: {jobs}}, and the names of the replicated ones."""
    def whole(name):
        return re.sub(r"/part_\d+", "", name)
    jobs = {}
    for v in mf.global_variables():
        jobs.setdefault(whole(v.op.name), set()).add(mf.DeviceSpec.from_string(v.device).job)
    replicas = {whole(v.op.name) for v in mf.get_default_graph().get_collection(
        mf.GraphKeys.REPLICATED_VARIABLES)}
    return jobs, replicas


@pytest.mark.parametrize("chosen", ["ps", "allreduce", "hybrid"])
def test_auto_places_the_model_as_the_mode_it_chooses_would(chosen):
    """Variable by variable, on the same jobs and replicated alike. (Auto splits the big
    ones over the ps before it knows the mode: chosen allreduce replicates the parts.)"""
    with mf.Graph().as_default():
        build(chosen)
        fixed = _jobs_of_every_variable()
    with mf.Graph().as_default():
        _, mode = build("auto", candidates=[chosen])
        auto = _jobs_of_every_variable()
        tasks = {mf.DeviceSpec.from_string(v.device).task for v in mf.global_variables()}
    assert mode.mode == chosen and mode.requested == "auto"
    assert auto == fixed
    if chosen == "ps":      # spread over both ps tasks
        assert tasks == {0, 1}


def test_auto_says_what_it_chose_and_why():
    _, mode = build("auto")
    text = mode.describe()
    assert text.startswith(f"TrainingMode {mode.mode!r}")
    assert "chosen by auto: " + mode.choice.reason in text
    assert mode.choice.reason.startswith(f"{mode.mode} adds the least to a step")
    assert set(mode.choice.predictions) == {"ps", "allreduce", "hybrid"}


def test_auto_chooses_once_for_every_optimizer_of_the_model(monkeypatch):
    decisions = []
    measure = mf.train.mode_choice.measure
    monkeypatch.setattr(mf.train.mode_choice, "measure",
                        lambda *a, **k: decisions.append(1) or measure(*a, **k))
    mode = mf.train.TrainingMode("auto", CLUSTER, 0, candidates=["hybrid"])
    with mode.scope():
        table, w, loss = _table_under_a_dense_layer()
        tables = mode.optimizer(mf.train.AdagradOptimizer(0.1))
        dense = mode.optimizer(mf.train.GradientDescentOptimizer(0.1))
        tables.minimize(loss, var_list=[table])
        dense.minimize(loss, var_list=[w])
    assert decisions == [1] and mode.mode == "hybrid"
    assert table.device.startswith("/job:ps") and w.device == "/job:worker/task:0"


def test_auto_without_a_ps_task_can_only_allreduce():
    cluster = mf.train.ClusterSpec({"worker": ["w:1", "w:2"]})
    mode = mf.train.TrainingMode("auto", cluster, 0)
    with mode.scope():
        w = mf.get_variable("w", [3, 1])
        loss = mf.reduce_sum(mf.matmul(mf.ones([2, 3]), w))
        mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(loss)
    assert mode.mode == "allreduce" and "the launch made no ps task" in mode.choice.reason


def test_auto_rejects_what_it_cannot_choose_from():
    with pytest.raises(errors.InvalidArgumentError, match=r"candidates=\('sync',\)"):
        mf.train.TrainingMode("auto", CLUSTER, 0, candidates=["sync"])
    mode = mf.train.TrainingMode("auto", CLUSTER, 0)
    with pytest.raises(errors.FailedPreconditionError, match="the mode is chosen from the "
                                                              "gradients"):
        mode.optimizer(mf.train.GradientDescentOptimizer(0.1)).apply_gradients([])


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, "8192"])
def test_auto_takes_ids_per_step_as_a_positive_integer(bad):
    with pytest.raises(mf.errors.InvalidArgumentError, match="ids_per_step"):
        mf.train.TrainingMode("auto", CLUSTER, 0, ids_per_step=bad)
    mode = mf.train.TrainingMode("auto", CLUSTER, 0, ids_per_step=np.int64(8192))
    assert mode.ids_per_step == 8192 and type(mode.ids_per_step) is int


def _gates(graph) -> dict:
    """{op name: the op feeding the predicate its state change waits on}, for every op
    made under ``state_changes_only_if``."""
    gates = {}
    for op in graph.get_operations():
        if op.attrs.get("_gate"):
            gates[op.name] = op.inputs[-1].op.inputs[0].op
    return gates


def test_joinable_hybrid_changes_the_tables_only_in_steps_its_worker_contributes_to():
    # A joined worker's steps push no rows; an empty push would still move every row of an
    # Adam table (and its powers on the ps), so those wait on this worker's contribution,
    # the replicas' updates on the step's count of contributors.
    graph = mf.Graph()
    with graph.as_default():
        build("hybrid", joinable=True)
    gates = _gates(graph)
    on_ps = {name for name in gates if graph.get_operation_by_name(name).device
             .startswith("/job:ps")}
    assert {n for n in on_ps if n.endswith("SparseApplyAdam")} == \
        {"Adam/update_emb/part_0/SparseApplyAdam", "Adam/update_emb/part_1/SparseApplyAdam"}
    assert len(on_ps) == 4      # and the ps's beta1_power and beta2_power advances
    assert {gates[n].name for n in on_ps} == {"Allreduce/contributes"}
    on_workers = set(gates) - on_ps
    assert len(on_workers) == 6 and all(gates[n].type != "PlaceholderWithDefault"
                                        for n in on_workers)


def test_joinable_is_for_the_modes_whose_steps_run_collectives():
    with pytest.raises(errors.InvalidArgumentError, match="ps training joins without it"):
        mf.train.TrainingMode("ps", CLUSTER, 0, joinable=True)
    for mode in ("allreduce", "hybrid", "auto"):
        assert mf.train.TrainingMode(mode, CLUSTER, 0, joinable=True).joinable


def _gradients(mode_name, **options):
    """The hybrid model of ``build``: (its mode's optimizer, its gradients)."""
    mode = mf.train.TrainingMode(mode_name, CLUSTER, 1, shard_rows=8, **options)
    with mode.scope():
        ids = mf.placeholder(mf.int64, [None])
        x = mf.placeholder(mf.float32, [None, 10])
        table = mf.get_variable("emb", [16, 10])
        h = mf.matmul(x + mf.nn.embedding_lookup(table, ids), mf.get_variable("w", [10, 10]))
        opt = mode.optimizer(mf.train.GradientDescentOptimizer(0.1))
        return opt, opt.compute_gradients(mf.reduce_sum(h))


def test_a_replicated_gradient_computed_from_a_tables_own_gradient_is_refused():
    # Hybrid's table gradients are each worker's own (pushed to the ps unaveraged): one
    # global norm over them and the averaged dense gradients scaled each worker's replica
    # of 'w' by its own factor, and the replicas drifted apart (0.003 against 0.006 from
    # one process after 4 steps, with 2 workers), silently.
    opt, pairs = _gradients("hybrid")
    clipped, _ = mf.clip_by_global_norm([g for g, _ in pairs], 0.3)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"gradient given for 'w', replicated on every worker, was "
                             r"computed from the gradient of 'emb', which lives on the ps.*"
                             r"replicas would drift apart"):
        opt.apply_gradients(zip(clipped, [v for _, v in pairs]))


@pytest.mark.parametrize("mode_name,options", [("hybrid", {}), ("allreduce", {}),
                                               ("hybrid", {"replicated": ["emb"]})])
def test_gradients_transformed_where_every_worker_computes_the_same_are_applied(mode_name,
                                                                                options):
    # Each kind clipped on its own in hybrid mode, or every gradient averaged (allreduce
    # mode, or the table named replicated): every worker computes the same value.
    opt, pairs = _gradients(mode_name, **options)
    table = [p for p in pairs if p[1].op.name.startswith("emb")]
    groups = [table, [p for p in pairs if p not in table]] if mode_name == "hybrid" and \
        not options else [pairs]
    clipped = []
    for group in groups:
        grads, _ = mf.clip_by_global_norm([g for g, _ in group], 0.3)
        clipped += zip(grads, [v for _, v in group])
    opt.apply_gradients(clipped)
