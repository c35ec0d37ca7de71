"""A kernel may write its result into an input it owns outright, the way a numpy user
writes ``z += b`` and ``g *= lr; w -= g``: a host array that another kernel of the step
just made, that this op is the only reader of, neither fed nor fetched. The values are
the same, bit for bit, as when it allocates; nothing anyone else holds changes."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.runtime.executor import Plan


def _donations(fetches, targets=(), feeds=()):
    """{op name: donated input indices} of the plan a session compiles."""
    graph = mf.get_default_graph()
    plan = Plan(graph, list(fetches), list(targets), list(feeds),
                mf.Session(graph=graph)._env)
    return {op.name: sorted(inputs) for op, inputs in plan.donated.items()}


def _matmul_and_bias(width=4):
    x = mf.placeholder(mf.float32, [None, 3], name="x")
    w = mf.Variable(np.ones((3, width), np.float32), name="w")
    b = mf.Variable(np.ones(width, np.float32), name="b")
    z = mf.matmul(x, w, name="z")
    return x, w, b, z, mf.add(z, b, name="biased")


def test_a_fresh_result_read_once_is_given_to_its_reader():
    x, w, b, z, biased = _matmul_and_bias()
    relu = mf.nn.relu(biased, name="relu")
    assert _donations([relu], feeds=[x]) == {"biased": [0], "relu": [0]}


def test_a_result_read_twice_or_fetched_is_given_to_nobody():
    x, w, b, z, biased = _matmul_and_bias()
    also = mf.multiply(z, 2.0, name="also")            # a second reader of z
    assert "biased" not in _donations([biased, also], feeds=[x])
    assert "biased" not in _donations([biased, z], feeds=[x])        # z fetched too


def test_a_fed_value_a_variable_and_a_constant_are_never_written():
    x = mf.placeholder(mf.float32, [None, 4], name="x")
    v = mf.Variable(np.ones(4, np.float32), name="v")
    c = mf.constant(np.ones(4, np.float32), name="c")
    total = mf.add(mf.add(x, v, name="xv"), c, name="total")
    found = _donations([total], feeds=[x])
    assert "xv" not in found                       # x is fed, v is the variable's buffer
    assert found.get("total") == [0]               # xv is the step's own, read once


def test_a_shape_reader_does_not_keep_a_value_from_its_one_real_reader():
    x, w, b, z, biased = _matmul_and_bias()
    shape = mf.shape(z, name="z_shape")           # dynamic batch: a Shape op reads z
    assert _donations([biased, shape], feeds=[x]).get("biased") == [0]


def test_the_gradient_step_scales_its_own_gradients_in_place_with_the_same_result():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((16, 3)).astype(np.float32)
    results = []
    for fetch_gradient in (False, True):            # fetched: not donated
        mf.reset_default_graph()
        x, w, b, z, biased = _matmul_and_bias(width=2048)     # a 24 KiB gradient
        loss = mf.reduce_sum(mf.square(mf.nn.relu(biased)))
        (grad_w,) = mf.gradients(loss, [w])
        train = mf.train.GradientDescentOptimizer(0.01).apply_gradients([(grad_w, w)])
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            fetches = [train, grad_w] if fetch_gradient else [train]
            for _ in range(3):
                sess.run(fetches, {x: xs})
            results.append(sess.run(w))
        found = _donations([], [train], [x])
        assert any(name.endswith("ApplyGradientDescent") for name in found) or \
            fetch_gradient
    np.testing.assert_array_equal(results[0], results[1])


def test_a_value_known_to_be_small_is_not_worth_donating():
    a = mf.placeholder(mf.float32, [None], name="a")
    small = mf.multiply(mf.constant(np.ones(4, np.float32)), 2.0, name="small")   # [4]
    big = mf.multiply(mf.add(a, 1.0, name="grown"), 2.0, name="big")          # [None]
    found = _donations([mf.add(small, 1.0, name="small_out"), big], feeds=[a])
    assert "small_out" not in found and found.get("big") == [0]


def test_a_donated_input_too_small_for_the_result_is_left_alone():
    # [1, 8192] broadcast against [4, 8192]: only an input of the result's shape can hold it.
    a = mf.placeholder(mf.float32, [None, None], name="a")
    row = mf.placeholder(mf.float32, [None, None], name="row")
    small = mf.multiply(row, 1.0, name="small")          # fresh, read once: donated
    out = mf.add(small, a, name="out")
    assert _donations([out], feeds=[a, row]).get("out") == [0]
    a_value = np.arange(4 * 8192, dtype=np.float32).reshape(4, 8192)
    row_value = np.full((1, 8192), 0.5, np.float32)
    with mf.Session() as sess:
        got = sess.run(out, {a: a_value, row: row_value})
    np.testing.assert_array_equal(got, a_value + 0.5)


def _table(rows=8192, cols=1024, name="table"):
    """A 32 MiB variable initialized the way an embedding table is: a seeded uniform draw,
    scaled and shifted (RandomUniform -> Mul -> Add -> Assign)."""
    return mf.Variable(mf.random_uniform([rows, cols], -0.1, 0.1, seed=7), name=name)


@pytest.mark.parametrize("initializer", [
    mf.random_uniform_initializer(-0.1, 0.1, seed=7),
    mf.random_normal_initializer(0.0, 0.05, seed=3), mf.truncated_normal_initializer(seed=3),
    mf.glorot_uniform_initializer(seed=3), mf.zeros_initializer(),
    mf.constant_initializer(0.1)],                       # an Adagrad accumulator's start
    ids=["uniform", "normal", "truncated", "glorot", "zeros", "constant"])
def test_every_large_initializer_is_made_once(monkeypatch, initializer):
    table = mf.get_variable("t", [8192, 1024], initializer=initializer)      # 32 MiB
    with mf.Session() as sess:
        made = _buffers_made_during(monkeypatch, lambda: sess.run(table.initializer))
        kept = sess.run(table)
    mf.reset_default_graph()
    table = mf.get_variable("t", [8192, 1024], initializer=initializer)
    with mf.Session() as sess:            # fetched too: copied into a buffer of its own
        drawn, _ = sess.run([table.initial_value, table.initializer])
        copied = sess.run(table)
    assert made == []
    np.testing.assert_array_equal(kept, copied)
    np.testing.assert_array_equal(drawn, copied)


def _buffers_made_during(monkeypatch, run):
    """The shapes of the variable buffers ``run()`` allocated (``StateRef.set``'s copies)."""
    from mpiflow.runtime import resources
    made = []
    real = resources.backend.lasting_host_empty

    def counting(shape, dtype):
        made.append(tuple(shape))
        return real(shape, dtype)

    monkeypatch.setattr(resources.backend, "lasting_host_empty", counting)
    run()
    monkeypatch.setattr(resources.backend, "lasting_host_empty", real)
    return made


def test_an_initializers_draw_is_handed_from_op_to_op_into_the_variable():
    # The scale and shift write into the draw, and the Assign keeps it (the values of
    # either way, bit for bit: test_every_large_initializer_is_made_once).
    table = _table()
    assert _donations([], [table.initializer]) == {
        "table/Assign": [1], "Add": [0], "Mul": [0]}
    # The value fetched too: the Assign copies it, as before.
    assert _donations([table.initial_value], [table.initializer]).get(
        "table/Assign") is None


def test_a_smaller_value_is_drawn_warm_from_the_heap_and_copied(monkeypatch):
    # A kernel that draws or fills 2 MiB every step (dropout) would pay a fresh mapping
    # each time: below backend.FRESHLY_MAPPED_BYTES the draw comes from the heap, and a
    # variable it initializes gets a buffer of its own as before.
    table = _table(rows=512)
    with mf.Session() as sess:
        made = _buffers_made_during(monkeypatch, lambda: sess.run(table.initializer))
    assert made == [(512, 1024)]


def test_a_value_anyone_else_holds_never_becomes_a_variables_buffer():
    table = _table()
    with mf.Session() as sess:
        drawn, _ = sess.run([table.initial_value, table.initializer])
        before = drawn.copy()
        sess.run(table.assign_add(mf.ones_like(table)))
        np.testing.assert_array_equal(drawn, before)       # the fetched draw is untouched
        np.testing.assert_array_equal(sess.run(table), before + 1)


def test_a_variable_initialized_again_keeps_its_buffer_where_it_is():
    # Pulls send from a variable's buffer and sessions hold views of it: a second run of
    # the initializer writes the new draw into it instead of swapping it for the draw.
    from mpiflow.runtime.resources import StateRef
    table = _table()
    with mf.Session() as sess:
        ref = StateRef(sess._env.store, table.op)
        sess.run(table.initializer)
        first = ref.read()
        sess.run(table.initializer)
        assert ref.read() is first
