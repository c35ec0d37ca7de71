"""A ps's piece of a step receives everything its client sends it that does not depend
on the ps's own results before its first change of state: a client lost in the middle
of a step (its process killed, its host gone) then leaves nothing half applied there."""

import mpiflow as mf
from mpiflow.ops.registry import get_op_def
from mpiflow.runtime.executor import schedule
from mpiflow.runtime.partition import partition

PS, WORKER = ("ps", 0), ("worker", 0)


def _ps_piece(train, extra_fetches=()):
    graph = mf.get_default_graph()
    order = schedule(graph, list(extra_fetches), [train], set())
    pieces = partition(order, lambda op: PS if "/job:ps" in op.device else WORKER, [],
                       list(extra_fetches), WORKER, {PS: 0, WORKER: 1}.__getitem__)
    return pieces.nodes[PS]


def _changes_state(node):
    op_def = get_op_def(node["op"])
    return bool(op_def.ref_inputs) and node["op"] != "IsVariableInitialized" or \
        op_def.changes_shared_state


def _worker_graph():
    with mf.device("/job:ps/task:0"):
        v = mf.get_variable("v", [3], initializer=mf.zeros_initializer())
        step = mf.train.get_or_create_global_step()
    with mf.device("/job:worker/task:0"):
        loss = mf.reduce_sum(mf.square(v - 1.0))
    return v, step, loss


def test_every_receive_of_a_ps_piece_comes_before_its_first_change_of_state():
    v, step, loss = _worker_graph()
    with mf.device("/job:worker/task:0"):
        train = mf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
    piece = _ps_piece(train, [step.value()])
    kinds = [node["op"] for node in piece]
    first_change = next(i for i, node in enumerate(piece) if _changes_state(node))
    assert "_Recv" in kinds
    assert all(i < first_change for i, k in enumerate(kinds) if k == "_Recv"), kinds


def test_the_update_and_the_global_step_increment_need_nothing_from_the_worker_between():
    # The group of updates sits with the global step: no token goes through the worker.
    v, step, loss = _worker_graph()
    with mf.device("/job:worker/task:0"):
        train = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    kinds = [node["op"] for node in _ps_piece(train)]
    apply_at, increment_at = kinds.index("ApplyGradientDescent"), kinds.index("AssignAdd")
    assert "_Recv" not in kinds[apply_at:increment_at], kinds


def test_the_sync_step_of_the_chief_runs_whole_on_the_ps():
    v, step, loss = _worker_graph()
    with mf.device("/job:worker/task:0"):
        opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1), 1, 1)
        opt.minimize(loss, global_step=step)
    kinds = [node["op"] for node in _ps_piece(opt.sync_op)]
    take_at = kinds.index("AccumulatorTakeGradient")
    assert "_Recv" not in kinds[take_at:], kinds
    assert kinds.index("ApplyGradientDescent") > take_at
    assert kinds.index("SyncTokenRelease") > kinds.index("AssignAdd")


def test_ops_that_change_state_run_after_everything_else_that_is_ready():
    a = mf.get_variable("a", [2], initializer=mf.zeros_initializer())
    update = mf.assign_add(a, [1.0, 1.0]).op
    late = mf.constant([2.0, 2.0]) * 3.0            # made after the update, needs none
    order = schedule(mf.get_default_graph(), [late], [update], set())
    position = {op: i for i, op in enumerate(order)}
    assert position[late.op] < position[update]
