"""Tensors that a partition sends one after the other to the same rank leave as one
message, and a partition that ends by sending to its client says in that message that it
is done: a ps answering a pull of many variables sends one message, not one per tensor
plus a separate 'done'."""

import numpy as np

import mpiflow as mf
from mpiflow.comm.rendezvous import Rendezvous
from mpiflow.framework.graph import Graph
from mpiflow.framework.graph_def import import_graph_def
from mpiflow.ops.registry import registered_op_types
from mpiflow.runtime.executor import Plan, schedule
from mpiflow.runtime.kernel_env import LocalEnv
from mpiflow.runtime.partition import partition
from mpiflow.runtime.plan_compiler import RECV, SEND
from mpiflow.runtime.resources import ResourceStore
from mpiflow.runtime.transfers import HOLD_MAX_BYTES, SendGroup, StepIO

PS, WORKER = ("ps", 0), ("worker", 0)
RANKS = {PS: 0, WORKER: 1}


def _pieces(fetches, targets=()):
    graph = mf.get_default_graph()
    order = schedule(graph, list(fetches), list(targets), set())
    return partition(order, lambda op: PS if "/job:ps" in op.device else WORKER, [],
                     list(fetches), WORKER, RANKS.__getitem__)


def _plan(nodes):
    graph = Graph()
    import_graph_def({"node": nodes}, name="", graph=graph,
                     known_op_types=set(registered_op_types()))
    return Plan.from_order(graph, graph.get_operations(), [], [],
                           LocalEnv(ResourceStore()))


def _send_groups(plan):
    return [step.fn for step in plan._steps if step.kind == SEND]


def _pull_of_three():
    with mf.device("/job:ps/task:0"):
        variables = [mf.get_variable(f"v{i}", [4]) for i in range(3)]
    return _pieces([v.value() for v in variables]).nodes[PS]


def test_a_pull_of_several_variables_leaves_the_ps_as_one_message_that_ends_its_piece():
    groups = _send_groups(_plan(_pull_of_three()))
    assert len(groups) == 1, groups
    (group,) = groups
    assert isinstance(group, SendGroup) and group.peer == RANKS[WORKER]
    assert len(group.edges) == 3 and len(set(group.edges)) == 3
    assert group.guards == tuple(s.variable for s in group.sends) and all(group.guards)
    assert group.last


class _Recorder:
    rank = 0

    def __init__(self):
        self.sent = []
        self.to_gpu = []

    def send(self, dest, header, arrays, guards=(), to_gpu=False):
        self.sent.append((dest, header, list(arrays), guards))
        self.to_gpu.append(to_gpu)


def test_the_last_message_to_the_client_says_done_and_no_other_does():
    group = _send_groups(_plan(_pull_of_three()))[0]
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=7)
    io.send(group._replace(last=False), [1, 2, 3])
    io.send(group, [1, 2, 3])
    (_, first, _, _), (dest, last, arrays, guards) = transport.sent
    assert "d" not in first and last["d"] == 1 and io.said_done
    assert dest == RANKS[WORKER] and last["e"] == group.edges and arrays == [1, 2, 3]
    assert guards == group.guards


def test_a_message_to_another_rank_than_the_client_does_not_say_done():
    group = _send_groups(_plan(_pull_of_three()))[0]
    transport = _Recorder()
    io = StepIO(transport, client=5, step=0)
    io.send(group, [1, 2, 3])
    assert "d" not in transport.sent[0][1] and not io.said_done


def test_sends_split_by_a_kernel_between_them_stay_apart():
    # Backward pass on a worker: each gradient leaves as soon as it exists, not held back
    # for the next one, so its transfer overlaps the worker computing the others.
    _, train = _mlp_like()
    groups = _send_groups(_plan(_pieces([], [train]).nodes[WORKER]))
    assert [len(g.edges) for g in groups] == [1, 1], groups


def _kinds(plan):
    return [step.kind for step in plan._steps]


def _mlp_like():
    """A worker computing with two variables of the ps, read through their snapshots."""
    with mf.device("/job:ps/task:0"):
        w0, w1 = mf.get_variable("w0", [3, 3]), mf.get_variable("w1", [3, 3])
    with mf.device("/job:worker/task:0"):
        x = mf.constant([[1.0, 2.0, 3.0]])
        loss = mf.reduce_sum(mf.matmul(mf.nn.relu(mf.matmul(x, w0)), w1))
        train = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
    return loss, train


def test_variables_read_through_their_snapshots_leave_the_ps_as_one_message():
    # The ps reads each variable and sends it: read, send, read, send. The reads cost
    # nothing, so they run first and the sends leave together; sent one by one, a large
    # one would move only when the worker, busy computing with the first, next looks.
    loss, _ = _mlp_like()
    groups = _send_groups(_plan(_pieces([loss]).nodes[PS]))
    assert [len(g.edges) for g in groups] == [2], groups
    assert all(groups[0].guards)      # still sent from the variables' own buffers


def test_a_pushs_applies_owe_the_worker_one_token_sent_after_every_receive():
    # A push: the ps receives the gradients and applies each; the worker's train op waits
    # for all the applies, so the ps owes it one token (however many applies), sent when
    # the last apply has run and after the last receive (a send never waits behind a
    # receive it did not wait behind before).
    _, train = _mlp_like()
    plan = _plan(_pieces([], [train]).nodes[PS])
    groups = _send_groups(plan)
    kinds = _kinds(plan)
    pull, tokens = groups
    assert len(pull.edges) == 2 and len(tokens.edges) == 1 and tokens.last
    assert kinds.index(SEND) < kinds.index(RECV)
    assert len(kinds) - 1 - kinds[::-1].index(RECV) < len(kinds) - 1 - kinds[::-1].index(SEND)


def test_an_op_waiting_on_several_ops_of_another_task_gets_one_token_sent_after_the_last():
    # Control inputs on ps 0 (two) and ps 1 (one): one token per task, each depending on
    # all of that task's ops, so the worker's op still waits for every one of them.
    with mf.device("/job:ps/task:0"):
        a = mf.get_variable("a", [2]).assign([1.0, 1.0]).op
        b = mf.get_variable("b", [2]).assign([2.0, 2.0]).op
    with mf.device("/job:ps/task:1"):
        c = mf.get_variable("c", [2]).assign([3.0, 3.0]).op
    with mf.device("/job:worker/task:0"), mf.control_dependencies([a, b, c]):
        done = mf.no_op(name="done")
    order = schedule(mf.get_default_graph(), [], [done], set())
    pieces = partition(order, lambda op: next(
        (("ps", i) for i in (0, 1) if f"/job:ps/task:{i}" in op.device), WORKER),
        [], [], WORKER, {PS: 0, ("ps", 1): 2, WORKER: 1}.__getitem__).nodes
    for task, waited in ((PS, {"^" + a.name, "^" + b.name}), (("ps", 1), {"^" + c.name})):
        piece = pieces[task]
        (token,) = [n for n in piece if n["op"] == "Const" and "token" in n["name"]]
        assert set(token["input"]) == waited
        names = [n["name"] for n in piece]
        assert all(names.index(w[1:]) < names.index(token["name"]) for w in waited)
    (worker_done,) = [n for n in pieces[WORKER] if n["name"] == "done"]
    assert len(worker_done["input"]) == 2 and all(i.startswith("^") for i in worker_done["input"])


def test_a_variable_sent_before_a_write_of_it_leaves_before_the_write():
    # A send of a variable's buffer held back past a write of that variable would carry
    # the written value: a writer of a variable a held send reads lets the sends go first.
    with mf.device("/job:ps/task:0"):
        v = mf.get_variable("v", [2], initializer=mf.zeros_initializer())
        w = mf.get_variable("w", [2], initializer=mf.zeros_initializer())
        with mf.control_dependencies([v.value()]):
            bump = v.assign_add([1.0, 1.0])
    with mf.device("/job:worker/task:0"):
        seen = mf.identity(v.value()) + mf.identity(w.value())
    plan = _plan(_pieces([seen], [bump.op]).nodes[PS])
    names = [op.name for op in plan.ops]
    kinds = _kinds(plan)
    write = next(i for i, op in enumerate(plan.ops) if op.type == "AssignAdd")
    first_send = kinds.index(SEND)
    assert first_send < write, names


# -- small tensors held back ----------------------------------------------------------------
def _gradient_groups():
    _, train = _mlp_like()
    return _send_groups(_plan(_pieces([], [train]).nodes[WORKER]))


def test_small_tensors_sent_apart_are_held_and_leave_together_on_flush():
    # Each gradient is its own group (sent as the backward pass makes it); small ones wait
    # for each other: one message per ps where one per gradient cost both ranks far more.
    first, second = _gradient_groups()
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=3)
    grads = [np.full((3, 3), 1.0, np.float32), np.full((3, 3), 2.0, np.float32)]
    assert io.send(first, grads[:1]) and io.send(second, grads[1:])
    assert transport.sent == []
    io.flush()
    ((dest, header, arrays, guards),) = transport.sent
    assert dest == RANKS[PS] and header["e"] == first.edges + second.edges
    assert arrays[0] is grads[0] and arrays[1] is grads[1]      # referenced, not copied
    assert guards == () and header["s"] == 3 and "d" not in header
    io.flush()
    assert len(transport.sent) == 1                             # nothing held twice


def test_a_variables_buffer_a_gpu_tensor_and_a_large_tensor_leave_at_once():
    pull = _send_groups(_plan(_pull_of_three()))[0]._replace(last=False)
    gradient = _gradient_groups()[0]
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=0)
    assert not io.send(pull, [np.zeros(4, np.float32)] * 3)       # guarded: never held
    assert not io.send(gradient._replace(to_gpu=True), [np.zeros((3, 3), np.float32)])
    large = np.zeros(HOLD_MAX_BYTES // 4 + 1, np.float32)
    assert not io.send(gradient, [large])
    assert [len(arrays) for _, _, arrays, _ in transport.sent] == [3, 1, 1]


def test_held_tensors_leave_first_with_the_next_message_to_their_rank():
    first, second = _gradient_groups()
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=0)
    small = np.ones((3, 3), np.float32)
    assert io.send(first, [small])
    assert not io.send(second, [np.zeros(HOLD_MAX_BYTES // 4, np.float32)])   # too much
    ((_, header, arrays, guards),) = transport.sent
    assert header["e"] == first.edges + second.edges and arrays[0] is small
    assert guards == (None, None)


def test_held_host_tensors_leave_before_a_message_for_a_gpu_not_in_it():
    first, second = _gradient_groups()
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=0)
    assert io.send(first, [np.ones((3, 3), np.float32)])
    assert not io.send(second._replace(to_gpu=True), [np.zeros((3, 3), np.float32)])
    assert [h["e"] for _, h, _, _ in transport.sent] == [first.edges, second.edges]
    assert transport.to_gpu == [False, True]


def test_the_last_message_takes_what_is_held_for_its_rank_after_the_others_left():
    first, _ = _gradient_groups()
    to_ps = first
    to_other = first._replace(peer=4, edges=["other"])
    done = first._replace(peer=RANKS[WORKER], edges=["last"], last=True)
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=0)
    assert io.send(to_ps, [np.ones(1, np.float32)])
    assert io.send(to_other, [np.ones(1, np.float32)])
    assert io.send(done._replace(last=False, edges=["held"]), [np.ones(1, np.float32)])
    transport.rank = RANKS[PS]        # the partition runs on the ps for the worker
    assert not io.send(done, [np.ones(1, np.float32)])
    assert [(dest, h["e"], h.get("d")) for dest, h, _, _ in transport.sent] == [
        (RANKS[PS], first.edges, None), (4, ["other"], None),
        (RANKS[WORKER], ["held", "last"], 1)]
    assert io.said_done


def _no_deadline(monkeypatch):
    """Held tensors leave at waits and at the end only (a slow machine would otherwise
    pass ``HOLD_S`` between two kernels and send them apart)."""
    from mpiflow.runtime import transfers
    monkeypatch.setattr(transfers, "HOLD_S", 3600.0)


def test_the_executor_sends_held_tensors_before_it_waits_and_holds_them_no_longer(
        monkeypatch):
    # The worker's part of a training step: receive the variables, compute both
    # gradients, send them (held), then wait for the ps's token. Before that wait the
    # gradients must have left: the ps sends the token only once it has them.
    _no_deadline(monkeypatch)
    _, train = _mlp_like()
    plan = _plan(_pieces([], [train]).nodes[WORKER])
    transport = _Recorder()
    transport.rank = RANKS[WORKER]
    io = StepIO(transport, client=RANKS[WORKER], step=0)
    steps = plan.run_steps((), io)
    next(steps)                                             # the first variable's Recv
    while True:
        if not transport.sent:
            value = np.ones((3, 3), np.float32)
        else:
            ((_, header, arrays, _),) = transport.sent     # both gradients, one message
            assert len(header["e"]) == 2 and len(arrays) == 2
            value = np.zeros((), np.int32)
        try:
            steps.send(value)
        except StopIteration:
            break
    assert len(transport.sent) == 1


def _worker_step_with_its_variables_arrived():
    """The worker's part of a training step, run with every variable delivered before it
    starts (a pull's one message): what the step waits for first, the token's Recv, the
    table of delivered tensors and the transport it sent through."""
    _, train = _mlp_like()
    plan = _plan(_pieces([], [train]).nodes[WORKER])
    *variables, token = [step.fn for step in plan._steps if step.kind == RECV]
    arrived = Rendezvous()
    for recv in variables:
        arrived.put((RANKS[WORKER], 0, recv.edge), np.ones((3, 3), np.float32))
    transport = _Recorder()
    io = StepIO(transport, client=RANKS[WORKER], step=0, rendezvous=arrived)
    return next(plan.run_steps((), io)), token, arrived, transport


def test_a_recv_whose_tensor_came_with_an_earlier_one_does_not_park_its_step(monkeypatch):
    # A pull's message brings every variable at once: the step takes each as it reaches
    # its Recv, parking only where a tensor has not come (here the ps's token).
    _no_deadline(monkeypatch)
    wanted, token, arrived, transport = _worker_step_with_its_variables_arrived()
    assert wanted.edge == token.edge and len(arrived) == 0
    assert len(transport.sent) == 1             # the gradients left before it parked


def test_a_held_tensor_leaves_at_the_first_kernel_past_its_deadline(monkeypatch):
    # With no time to wait, each gradient leaves after the kernel that follows its send:
    # two messages, both before the step waits for the token.
    from mpiflow.runtime import transfers
    monkeypatch.setattr(transfers, "HOLD_S", 0.0)
    wanted, token, _, transport = _worker_step_with_its_variables_arrived()
    assert wanted.edge == token.edge
    assert [len(h["e"]) for _, h, _, _ in transport.sent] == [1, 1]
