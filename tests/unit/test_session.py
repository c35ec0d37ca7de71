"""Session.run: nested fetches, feeds and their validation, plan reuse, lifetime."""

import collections
import re

import numpy as np
import pytest

import mpiflow as mf


@pytest.fixture
def graph_xy():
    x = mf.placeholder(mf.float32, [None, 2], name="x")
    y = mf.reduce_sum(x * 2.0, axis=1, name="y")
    return x, y


def test_nested_fetch_structures_come_back_in_shape(graph_xy):
    x, y = graph_xy
    Pair = collections.namedtuple("Pair", "a b")
    feed = {x: [[1.0, 2.0], [3.0, 4.0]]}
    with mf.Session() as sess:
        out = sess.run({"list": [y, (y, x)], "pair": Pair(y, "y:0"), "op": y.op}, feed)
    np.testing.assert_allclose(out["list"][0], [6.0, 14.0])
    assert isinstance(out["list"][1], tuple)
    assert isinstance(out["pair"], Pair)
    np.testing.assert_allclose(out["pair"].b, [6.0, 14.0])
    assert out["op"] is None


def test_feeding_by_name_and_feeding_any_tensor(graph_xy):
    x, y = graph_xy
    doubled = x * 2.0
    z = mf.reduce_sum(doubled)
    with mf.Session() as sess:
        assert sess.run(z, {"x:0": [[1.0, 1.0]]}) == 4.0
        assert sess.run(z, {doubled: [[5.0, 5.0]]}) == 10.0


def test_unfed_placeholder_names_it(graph_xy):
    _, y = graph_xy
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"must feed a value for placeholder tensor 'x' with dtype "
                                 r"float32 and shape \(\?, 2\)"):
            sess.run(y)


def test_feed_of_wrong_shape_names_the_tensor(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Cannot feed value of shape \(2, 3\) for Tensor 'x:0'"):
            sess.run(y, {x: np.zeros((2, 3))})


def test_feed_of_wrong_dtype_names_the_tensor():
    labels = mf.placeholder(mf.int64, [None], name="labels")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"dtype float64 for Tensor 'labels:0'.*int64"):
            sess.run(labels + 1, {labels: np.array([0.5, 1.5])})
        assert list(sess.run(labels + 1, {labels: np.array([1, 2], np.int32)})) == [2, 3]


def test_float64_feed_is_narrowed_to_float32(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess:
        out = sess.run(y, {x: np.ones((1, 2), np.float64)})
    assert out.dtype == np.float32


def test_fetching_a_tensor_of_another_graph_is_rejected():
    other = mf.Graph()
    with other.as_default():
        foreign = mf.constant(1.0, name="foreign")
    mf.constant(2.0)
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="foreign.*not an element"):
            sess.run(foreign)


def test_fetching_none_or_garbage_is_rejected():
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="None"):
            sess.run(None)
        with pytest.raises(mf.errors.InvalidArgumentError, match="cannot be interpreted"):
            sess.run(3.5)


def test_closed_session_refuses_to_run(graph_xy):
    _, y = graph_xy
    sess = mf.Session()
    sess.close()
    with pytest.raises(mf.errors.FailedPreconditionError, match="closed Session"):
        sess.run(y, {"x:0": [[1.0, 1.0]]})


def test_eval_and_run_use_the_default_session(graph_xy):
    x, y = graph_xy
    v = mf.Variable(3.0, name="v")
    with mf.Session() as sess:
        v.initializer.run()
        assert v.eval() == 3.0
        np.testing.assert_allclose(y.eval({x: [[1.0, 1.0]]}), [4.0])
        assert mf.get_default_session() is sess
    with pytest.raises(mf.errors.FailedPreconditionError, match="needs a session"):
        y.eval({x: [[1.0, 1.0]]})


def test_plan_is_cached_per_fetch_and_feed_signature(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess:
        sess.run(y, {x: [[1.0, 1.0]]})
        sess.run(y, {x: [[2.0, 2.0]]})
        assert len(sess._plans) == 1
        sess.run([y, x], {x: [[2.0, 2.0]]})
        assert len(sess._plans) == 2


def test_pruning_runs_only_what_the_fetch_needs():
    v = mf.Variable(0.0, name="v")
    bump = mf.assign_add(v, 1.0)
    unrelated = mf.constant(5.0) * 2.0
    with mf.Session() as sess:
        sess.run(v.initializer)
        sess.run(unrelated)
        assert sess.run(v) == 0.0
        sess.run(bump)
        assert sess.run(v) == 1.0


def test_uninitialized_variable_names_it():
    v = mf.Variable([1.0], name="weights")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.FailedPreconditionError,
                           match="uninitialized value weights"):
            sess.run(v * 2.0)


def test_fetched_variable_value_is_a_copy():
    v = mf.Variable([1.0, 2.0], name="v")
    with mf.Session() as sess:
        sess.run(v.initializer)
        got = sess.run(v)
        got[0] = 99.0
        np.testing.assert_allclose(sess.run(v), [1.0, 2.0])


def test_constant_fetch_cannot_corrupt_the_graph():
    c = mf.constant([1.0, 2.0])
    with mf.Session() as sess:
        got = sess.run(c)
        got[0] = 99.0
        np.testing.assert_allclose(sess.run(c), [1.0, 2.0])


def test_reads_in_a_step_see_the_value_before_that_steps_update():
    v = mf.Variable(1.0, name="v")
    doubled = v * 2.0
    update = mf.assign_add(v, 10.0)
    with mf.Session() as sess:
        sess.run(v.initializer)
        before, _ = sess.run([doubled, update])
        assert before == 2.0
        assert sess.run(v) == 11.0


def test_make_callable_runs_the_same_plan(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess:
        f = sess.make_callable(y, [x])
        np.testing.assert_allclose(f([[1.0, 2.0]]), [6.0])
        with pytest.raises(mf.errors.InvalidArgumentError, match="expects 1 feed"):
            f()


def test_config_proto_rejects_unknown_options():
    with pytest.raises(mf.errors.InvalidArgumentError, match="no option 'log_placement'"):
        mf.ConfigProto(log_placement=True)


def test_log_device_placement_prints_each_op(capsys):
    with mf.device("/cpu:0"):
        y = mf.constant(1.0, name="one") + 1.0
    with mf.Session(config=mf.ConfigProto(log_device_placement=True)) as sess:
        sess.run(y)
    err = capsys.readouterr().err
    assert "one: (Const): /device:CPU:0" in err


def test_check_numerics_names_the_op_and_message():
    x = mf.placeholder(mf.float32, [2])
    y = mf.check_numerics(mf.log(x), "log of inputs", name="guard")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="log of inputs.*guard"):
            sess.run(y, {x: [0.0, -1.0]})


def test_fetched_read_shows_the_value_the_step_read_not_its_update():
    v = mf.Variable(1.0, name="v")
    update = mf.assign_add(v, 10.0)
    with mf.Session() as sess:
        sess.run(v.initializer)
        read, _ = sess.run([v, update])
        assert read == 1.0
        assert sess.run(v) == 11.0


def test_fetched_view_of_a_feed_is_a_copy():
    x = mf.placeholder(mf.float32, [4], name="x")
    view = mf.reshape(x, [2, 2])
    data = np.arange(4, dtype=np.float32)
    with mf.Session() as sess:
        got = sess.run(view, {x: data})
    got[0, 0] = 99.0
    assert data[0] == 0.0


@pytest.mark.parametrize("dtype,fed,bad", [
    (mf.int32, np.array([1, 2 ** 40 + 5], np.int64), "1099511627781"),
    (mf.int32, [7, -2 ** 33], "-8589934592"),
    (mf.uint8, np.array([3, 300], np.uint16), "300"),
    (mf.int64, np.array([5, 2 ** 63 + 1], np.uint64), "9223372036854775809"),
    (mf.float32, np.array([1.0, 1e300]), "1e+300"),
])
def test_a_feed_that_does_not_fit_is_refused_not_wrapped(dtype, fed, bad):
    x = mf.placeholder(dtype, [None], name="ids")
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match=rf"value {re.escape(bad)} for Tensor "
                                                   r"'ids:0'.*does not fit"):
        sess.run(mf.identity(x), {x: fed})


def test_feeds_that_fit_are_converted_and_inf_and_nan_pass():
    ids = mf.placeholder(mf.int32, [None])
    x = mf.placeholder(mf.float32, [None])
    with mf.Session() as sess:
        got_ids, got_x = sess.run([mf.identity(ids), mf.identity(x)],
                                  {ids: np.array([0, 2 ** 31 - 1], np.int64),
                                   x: np.array([np.inf, np.nan, 1e30])})
    assert got_ids.dtype == np.int32 and got_ids.tolist() == [0, 2 ** 31 - 1]
    assert np.isinf(got_x[0]) and np.isnan(got_x[1]) and got_x[2] == np.float32(1e30)


def test_a_ragged_feed_names_the_tensor():
    x = mf.placeholder(mf.float32, [None, None], name="rows")
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match="ragged value for Tensor 'rows:0'"):
        sess.run(mf.identity(x), {x: [[1.0, 2.0], [3.0]]})


@pytest.mark.parametrize("dtype,fed,want", [
    (mf.uint8, [1, 2, 255], [1, 2, 255]),               # Python ints arrive as int64
    (mf.uint8, np.array([0, 7], np.int32), [0, 7]),
    (mf.bool, [1, 0], [True, False]),
    (mf.int32, [], []),                                 # an empty list is float64
    (mf.bool, np.zeros(0), []),
])
def test_integer_and_empty_feeds_take_the_tensors_dtype_where_their_values_fit(dtype, fed,
                                                                               want):
    x = mf.placeholder(dtype, [None], name="x")
    with mf.Session() as sess:
        got = sess.run(mf.identity(x), {x: fed})
    assert got.dtype == dtype.np_dtype and got.tolist() == want


@pytest.mark.parametrize("dtype,fed,text", [
    (mf.uint8, [3, -1], r"value -1 for Tensor 'x:0'.*does not fit"),
    (mf.bool, [1, 2], r"value 2 for Tensor 'x:0', which has dtype bool: only 0 and 1"),
    (mf.int32, [1.5], r"Cannot feed value of dtype float64 for Tensor 'x:0'"),
    (mf.bool, [0.0], r"Cannot feed value of dtype float64 for Tensor 'x:0'"),
])
def test_integer_feeds_that_would_change_meaning_are_refused(dtype, fed, text):
    x = mf.placeholder(dtype, [None], name="x")
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError, match=text):
        sess.run(mf.identity(x), {x: fed})


def test_a_feed_dict_that_is_not_a_dict_is_refused():
    x = mf.placeholder(mf.float32, [1], name="x")
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match="feed_dict must be a dict.*got list"):
        sess.run(mf.identity(x), [(x, [1.0])])


def test_make_callable_refuses_a_feed_list_naming_a_tensor_twice(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match="feed_list names Tensor 'x:0' twice"):
        sess.make_callable(y, [x, "x:0"])


def test_a_fetched_gradient_passed_through_never_shares_a_variables_memory():
    # The gradient of a broadcasting add with shapes known only partly passes the
    # upstream gradient through (SumToShape); here that is the variable itself.
    x = mf.placeholder(mf.float32, [None, 3])
    upstream = mf.Variable(np.ones((2, 3), np.float32))
    grad = mf.gradients(x + mf.zeros([3]), [x], grad_ys=upstream)[0]
    with mf.Session() as sess:
        sess.run(upstream.initializer)
        got = sess.run(grad, {x: np.zeros((2, 3), np.float32)})
        got[...] = 42.0
        assert sess.run(upstream).tolist() == [[1.0] * 3] * 2


def test_a_fetched_broadcast_is_an_array_of_its_own_that_later_runs_leave_alone():
    # Sum's gradient and broadcast_to return read-only views of their input (strides of
    # 0); the fetch must not follow the feed or variable under them, and must be writable.
    x = mf.placeholder(mf.float32, [2, 3])
    upstream = mf.placeholder(mf.float32, [2])
    v = mf.Variable(np.array([1.0, 2.0], np.float32))
    from_feed = mf.gradients(mf.reduce_sum(x, axis=1), [x], grad_ys=upstream)[0]
    from_variable = mf.gradients(mf.reduce_sum(x, axis=1), [x], grad_ys=v)[0]
    spread = mf.broadcast_to(mf.reshape(v, [2, 1]), [2, 3])
    bump = v.assign_add([100.0, 100.0])
    with mf.Session() as sess:
        sess.run(v.initializer)
        fed = np.array([1.0, 2.0], np.float32)
        got = sess.run(from_feed, {x: np.ones((2, 3), np.float32), upstream: fed})
        fed[:] = -5.0
        assert got.tolist() == [[1.0] * 3, [2.0] * 3]
        got_v, got_spread = sess.run([from_variable, spread], {x: np.ones((2, 3), np.float32)})
        sess.run(bump)
        assert got_v.tolist() == got_spread.tolist() == [[1.0] * 3, [2.0] * 3]
        for array in (got, got_v, got_spread):
            array[0, 0] = 9.0                           # the caller owns what it fetched


@pytest.mark.parametrize("shape", [[2.5, 3], [True, 3], ["2", 3]])
def test_a_shape_that_is_not_whole_numbers_is_refused(shape):
    with pytest.raises(mf.errors.InvalidArgumentError, match="Invalid shape"):
        mf.get_variable("w", shape)


def test_closing_a_session_while_another_thread_runs_a_step_frees_nothing_under_it(
        monkeypatch):
    import threading

    from mpiflow.ops.registry import get_op_def

    inside, release = threading.Event(), threading.Event()

    def held(self, xp, ctx, x):
        inside.set()
        release.wait(5)
        return -x
    monkeypatch.setattr(type(get_op_def("Neg")), "forward", held)
    v = mf.Variable(np.ones(3, np.float32), name="v")
    y = mf.negative(v.value())
    w = mf.Variable(np.full(3, 5.0, np.float32), name="w")     # read after the held kernel
    z = y + w.value()
    sess = mf.Session()
    sess.run([v.initializer, w.initializer])
    result = {}

    def step():
        try:
            result["value"] = sess.run(z)
        except Exception as exc:  # noqa: BLE001  (the test looks at what it was)
            result["error"] = exc
    thread = threading.Thread(target=step)
    thread.start()
    assert inside.wait(5)
    sess.close()                      # while the step is inside a kernel
    release.set()
    thread.join(5)
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(result["value"], 4.0)
    with pytest.raises(mf.errors.FailedPreconditionError, match="closed Session"):
        sess.run(z)


def test_a_variable_given_a_new_shape_on_purpose_reads_back():
    v = mf.Variable(np.zeros(3, np.float32), name="v")
    grow = mf.assign(v, np.ones(5, np.float32), validate_shape=False)
    with mf.Session() as sess:
        sess.run(v.initializer)
        sess.run(grow)
        np.testing.assert_array_equal(sess.run(v), np.ones(5))


def test_a_read_after_a_write_that_replaces_the_buffer_sees_the_new_value():
    # TF1's reads of a ref variable read it when they run: a read that a control
    # dependency puts after an assign that changes the shape sees the new buffer; a read
    # that may run first still sees the old one, in the same step.
    v = mf.Variable(np.zeros(2, np.float32), validate_shape=False, name="v")
    before = v * 1.0
    grow = mf.assign(v, np.arange(3, dtype=np.float32), validate_shape=False)
    with mf.control_dependencies([grow]):
        after = v.read_value()
        scaled = v.read_value() * 2.0 + 1.0
    with mf.Session() as sess:
        sess.run(v.initializer)
        got_before, got_after, got_scaled = sess.run([before, after, scaled])
    np.testing.assert_array_equal(got_before, [0.0, 0.0])
    np.testing.assert_array_equal(got_after, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(got_scaled, [1.0, 3.0, 5.0])


def test_a_read_after_the_initializer_in_the_same_step_sees_the_initial_value():
    w = mf.Variable(np.full(2, 5.0, np.float32), name="w")
    with mf.control_dependencies([w.initializer]):
        read = w.read_value()
        plus_one = mf.identity(w) + 1.0
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(read), [5.0, 5.0])
        sess.run(mf.assign(w, [7.0, 7.0]))
        np.testing.assert_array_equal(sess.run(plus_one), [6.0, 6.0])   # initialized again
    with mf.Session() as sess:      # a read that may run first still needs a value
        with pytest.raises(mf.errors.FailedPreconditionError, match="uninitialized value w"):
            sess.run(w * 1.0)


def test_closing_while_another_thread_makes_a_plan_leaves_no_plan_behind(monkeypatch):
    import threading

    from mpiflow.runtime import session as session_module

    x = mf.constant(2.0) * 3.0
    sess = mf.Session()
    inside, go_on = threading.Event(), threading.Event()
    real_new_plan = session_module.BaseSession._new_plan

    def slow_new_plan(self, *args):
        inside.set()
        go_on.wait(5)
        return real_new_plan(self, *args)
    monkeypatch.setattr(session_module.BaseSession, "_new_plan", slow_new_plan)
    errors_seen = []

    def step():
        try:
            sess.run(x)
        except mf.errors.OpError as exc:
            errors_seen.append(exc)
    thread = threading.Thread(target=step)
    thread.start()
    assert inside.wait(5)
    sess.close()
    go_on.set()
    thread.join(5)
    assert not sess._plans
    assert not errors_seen or isinstance(errors_seen[0], mf.errors.CancelledError)


def test_make_callable_accepts_options_and_run_metadata_when_asked(graph_xy):
    x, y = graph_xy
    with mf.Session() as sess:
        f = sess.make_callable(y, feed_list=[x], accept_options=True)
        metadata = mf.RunMetadata()
        out = f([[1.0, 2.0]], options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE),
                run_metadata=metadata)
        np.testing.assert_allclose(out, [6.0])
        assert metadata.step_stats, "the traced step left no step stats"
        np.testing.assert_allclose(f([[1.0, 1.0]]), [4.0])
        with pytest.raises(mf.errors.InvalidArgumentError, match="options must be an "
                           "mf.RunOptions"):
            f([[1.0, 1.0]], options="fast")
        plain = sess.make_callable(y, feed_list=[x])
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match="unexpected keyword argument 'options'.*accept_options=True"):
            plain([[1.0, 1.0]], options=mf.RunOptions())


def test_feeding_a_tensor_as_a_value_names_both(graph_xy):
    x, y = graph_xy
    value = mf.constant([[1.0, 2.0]], name="value")
    with mf.Session() as sess, pytest.raises(
            mf.errors.InvalidArgumentError,
            match="value fed for Tensor 'x:0' is a graph element, 'value:0'"):
        sess.run(y, {x: value})


def test_a_feed_dict_feeding_a_tensor_by_two_keys_is_refused_naming_it_and_both_keys(
        graph_xy):
    x, y = graph_xy
    with mf.Session() as sess, pytest.raises(
            mf.errors.InvalidArgumentError,
            match=r"feeds Tensor 'x:0' twice, by the keys the Tensor 'x:0' and 'x:0'"):
        sess.run(y, {x: [[1.0, 2.0]], "x:0": [[3.0, 4.0]]})
