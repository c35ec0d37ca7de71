"""Elementwise chains run as one fused kernel: which ops group, and that a fused plan
computes what the unfused plan does.

On a GPU the fuser is ``cupy.fuse``; here, on the host, the tests install the identity
as numpy's fuser, so the grouping, the plan's slots and the fallback run for real while
each group's formula runs as plain numpy calls (the GPU tests check cupy's fusion).
"""

import logging

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.runtime import kernel_fusion
from mpiflow.runtime.executor import KernelContext, Plan, schedule


@pytest.fixture
def host_fusion(monkeypatch):
    """Let plans on the host fuse, with a fuser that keeps the formula as it is."""
    monkeypatch.setattr(kernel_fusion, "fuser", lambda xp: lambda formula: formula)


def _find(fetches, barriers=(), place_of=lambda op: "gpu"):
    order = schedule(fetches[0].graph, fetches, [], set())
    return kernel_fusion.find_groups(order, place_of, set(), set(fetches), barriers)


def _groups(fetches, barriers=()):
    """The op types of each group."""
    return [[op.type for op in g.members] for g in _find(fetches, barriers)]


def test_bias_add_and_relu_after_a_matmul_form_one_group():
    with mf.Graph().as_default():
        x = mf.constant(np.ones((4, 3), np.float32))
        w = mf.constant(np.ones((3, 2), np.float32))
        b = mf.constant(np.ones(2, np.float32))
        out = mf.nn.relu(mf.nn.bias_add(mf.matmul(x, w), b) * 2.0)
        assert _groups([out]) == [["BiasAdd", "Mul", "Relu"]]


def test_a_fetched_intermediate_is_given_out_by_the_group():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x) + 1.0
        out = mf.nn.relu(h)
        [group] = _find([out, h])
        assert [op.type for op in group.members] == ["Exp", "Add", "Relu"]
        assert group.outputs == [h, out]


def test_an_intermediate_read_after_the_group_runs_is_given_out():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x)
        relu = mf.nn.relu(h)
        out = mf.reduce_sum(relu) + mf.reduce_sum(h)
        [group] = _find([out])
        assert [op.type for op in group.members] == ["Exp", "Relu"]
        assert group.outputs == [h, relu]


def test_an_intermediate_read_before_the_group_runs_is_not_fused_into_it():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x)
        total = mf.reduce_sum(h)            # needs exp before the group's root can run
        out = mf.nn.relu(h) * total
        assert _groups([out]) == [["Relu", "Mul"]]


def test_a_diamond_of_elementwise_ops_is_one_group():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x)
        out = mf.square(h) + mf.negative(h)
        assert _groups([out]) == [["Exp", "Square", "Neg", "Add"]]


def test_no_group_spans_a_variable_write():
    with mf.Graph().as_default():
        v = mf.Variable(np.ones(3, np.float32))
        read = mf.exp(v)                    # runs before the write (read-before-write)
        assign = v.assign_add(np.ones(3, np.float32))
        with mf.control_dependencies([assign]):
            later = mf.constant(np.ones(3, np.float32))
        out = read + later                  # runs after the write
        order = schedule(out.graph, [out], [], set())
        writers = [op for op in order if op.type == "AssignAdd"]
        spanning = kernel_fusion.find_groups(order, lambda op: "gpu", set(), {out}, [])
        assert [[op.type for op in g.members] for g in spanning] == [["Exp", "Add"]]
        assert kernel_fusion.find_groups(order, lambda op: "gpu", set(), {out}, writers) == []


def test_an_op_something_waits_for_by_a_control_edge_is_not_grouped():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x)
        with mf.control_dependencies([h]):
            marker = mf.constant(1.0)
        out = mf.nn.relu(h)
        assert _groups([out, marker]) == []


def test_a_fed_intermediate_is_not_computed_in_a_group():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        h = mf.exp(x)
        out = mf.nn.relu(h)
        order = schedule(out.graph, [out], [], set())      # exp in the order, its result fed
        assert kernel_fusion.find_groups(order, lambda op: "gpu", {h}, {out}, []) == []
        assert len(kernel_fusion.find_groups(order, lambda op: "gpu", set(), {out}, [])) == 1


def test_ops_on_the_host_or_on_other_devices_are_not_grouped():
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        out = mf.nn.relu(mf.exp(x))
        assert _find([out], place_of=lambda op: None) == []
        places = {"Exp": 0, "Relu": 1}
        assert _find([out], place_of=lambda op: places.get(op.type)) == []


def _mlp_training(steps):
    """Loss and weights after ``steps`` SGD steps of a small tanh/relu MLP."""
    graph = mf.Graph()
    with graph.as_default():
        rng = np.random.default_rng(0)
        x = mf.constant(rng.standard_normal((16, 5)).astype(np.float32))
        y = mf.constant(rng.integers(0, 3, 16))
        w1 = mf.Variable(rng.standard_normal((5, 8)).astype(np.float32) * 0.5)
        b1 = mf.Variable(np.zeros(8, np.float32))
        w2 = mf.Variable(rng.standard_normal((8, 3)).astype(np.float32) * 0.5)
        h = mf.nn.relu(mf.nn.bias_add(mf.matmul(x, w1), b1))
        h = mf.tanh(h) * 0.5 + mf.sigmoid(h) * 0.5
        loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=mf.matmul(h, w2)))
        train = mf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        with mf.Session(graph=graph) as sess:
            sess.run(mf.global_variables_initializer())
            losses = [sess.run([train, loss])[1] for _ in range(steps)]
            return losses, sess.run([w1, b1, w2])


def test_a_fused_training_run_equals_the_unfused_run(monkeypatch):
    unfused_losses, unfused_weights = _mlp_training(5)
    monkeypatch.setattr(kernel_fusion, "fuser", lambda xp: lambda formula: formula)
    built = []
    real_init = kernel_fusion.FusedGroup.__init__

    def record(self, group, contexts, fuse):
        built.append([op.type for op in group.members])
        real_init(self, group, contexts, fuse)
    monkeypatch.setattr(kernel_fusion.FusedGroup, "__init__", record)
    fused_losses, fused_weights = _mlp_training(5)
    # The whole forward chain after the matmul is one kernel (giving out relu, tanh and
    # sigmoid for the backward pass), and so is the backward chain before the next matmul.
    assert ["BiasAdd", "Relu", "Tanh", "Mul", "Sigmoid", "Mul", "Add"] in built, built
    assert ["Mul", "Mul", "TanhGrad", "SigmoidGrad", "AddN", "ReluGrad"] in built, built
    np.testing.assert_array_equal(fused_losses, unfused_losses)
    for fused, unfused in zip(fused_weights, unfused_weights):
        np.testing.assert_array_equal(fused, unfused)


def test_a_traced_step_names_the_fused_group(host_fusion):
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float32, [3])
        out = mf.nn.relu(mf.exp(x) - 1.0)
        metadata = mf.RunMetadata()
        with mf.Session() as sess:
            value = sess.run(out, {x: np.zeros(3, np.float32)},
                             options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE),
                             run_metadata=metadata)
    np.testing.assert_array_equal(value, np.zeros(3, np.float32))
    types = [e["args"]["type"] for e in metadata.step_stats]
    assert "Fused(Exp+Sub+Relu)" in types, types


def _group(fuse):
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float32, [3])
        out = mf.nn.relu(mf.exp(x) - 1.0)
        order = schedule(out.graph, [out], [], {x})
        members = [op for op in order if op.type in ("Exp", "Sub", "Relu")]
        consts = [op for op in order if op.type == "Const"]
        contexts = [_Context(op) for op in members]
        group = kernel_fusion.FusedGroup(kernel_fusion.Group(members, [out]), contexts, fuse)
        values = {t: t.op.get_attr("value") for c in consts for t in c.outputs}
        return group, [values.get(t) for t in group.inputs], group.inputs.index(x)


class _Context(KernelContext):
    def __init__(self, op):
        super().__init__(op, np, None)
        self.state = None


def test_a_formula_the_fuser_cannot_compile_runs_unfused_and_says_so(caplog):
    def refuse(formula):
        def fused(*inputs):
            raise TypeError("unsupported in fusion")
        return fused
    group, inputs, at = _group(refuse)
    inputs[at] = np.array([0.0, 1.0, -1.0], np.float32)
    with caplog.at_level(logging.INFO, logger="mpiflow"):
        first = group(*inputs)
        second = group(*inputs)
    expected = np.maximum(np.exp(inputs[at]) - 1, 0)
    np.testing.assert_allclose(first, expected, rtol=1e-6)
    np.testing.assert_allclose(second, expected, rtol=1e-6)
    logged = [r.getMessage() for r in caplog.records if "unfused" in r.getMessage()]
    assert len(logged) == 1 and "Exp+Sub+Relu" in logged[0] and "unsupported" in logged[0]


def test_a_fused_formula_that_computes_other_values_is_not_trusted():
    def wrong(formula):
        return lambda *inputs: formula(*inputs) + 1
    group, inputs, at = _group(wrong)
    inputs[at] = np.array([0.5, 2.0, -1.0], np.float32)
    expected = np.maximum(np.exp(inputs[at]) - 1, 0)
    for _ in range(2):
        np.testing.assert_allclose(group(*inputs), expected, rtol=1e-6)


def test_fusion_can_be_turned_off(monkeypatch):
    class WithFuse:
        @staticmethod
        def fuse(formula):
            return formula
    assert kernel_fusion.fuser(WithFuse) is WithFuse.fuse
    monkeypatch.setenv("MPIFLOW_FUSE_ELEMENTWISE", "0")
    assert kernel_fusion.fuser(WithFuse) is None
    assert kernel_fusion.fuser(np) is None        # numpy has nothing to fuse with


def test_plans_on_the_host_do_not_fuse_by_default():
    with mf.Graph().as_default() as graph:
        x = mf.constant(np.ones(3, np.float32))
        out = mf.nn.relu(mf.exp(x))
        plan = Plan(graph, [out], [], [], None)
        assert not any(isinstance(step[0], kernel_fusion.FusedGroup) for step in plan._steps)


def test_bfloat16_chains_are_not_fused():       # cupy.fuse has no bfloat16
    with mf.Graph().as_default():
        x = mf.constant(np.ones(3, np.float32))
        out = mf.nn.relu(mf.exp(mf.cast(x, mf.bfloat16)) - 1.0)
        assert _groups([out]) == []


def test_an_error_in_a_fused_kernel_names_the_op_that_failed(host_fusion):
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float32, [None])
        y = mf.placeholder(mf.float32, [None])
        out = mf.nn.relu(mf.exp(mf.add(x, y, name="the_add")))
        with mf.Session() as sess:
            with pytest.raises(mf.errors.InvalidArgumentError, match="'the_add'"):
                sess.run(out, {x: np.ones(3, np.float32), y: np.ones(4, np.float32)})


def test_a_group_is_checked_once_per_dtype_and_rank_not_per_shape():
    checks = []

    def counting(formula):
        def fused(*inputs):
            checks.append(inputs[0].shape)
            return formula(*inputs)
        return fused
    group, inputs, at = _group(counting)
    for n in (3, 5, 7):
        inputs[at] = np.zeros(n, np.float32)
        assert group(*inputs).shape == (n,)
    assert len(group._checked) == 1 and len(checks) == 3    # fused every time
