"""Graph building: names, scopes, devices, control dependencies, collections, seeds."""

import pytest

import mpiflow as mf


def test_names_are_unique_and_scoped():
    a = mf.constant(1.0, name="c")
    b = mf.constant(2.0, name="c")
    with mf.name_scope("layer") as scope:
        c = mf.constant(3.0, name="c")
        assert scope == "layer/"
    with mf.name_scope("layer") as scope2:
        d = mf.constant(4.0)
    assert [a.op.name, b.op.name, c.op.name, d.op.name] == ["c", "c_1", "layer/c",
                                                            "layer_1/Const"]
    assert scope2 == "layer_1/"
    assert a.name == "c:0"


def test_name_scope_with_trailing_slash_reenters_exactly():
    with mf.name_scope("outer") as outer:
        pass
    with mf.name_scope(outer):
        x = mf.constant(1.0, name="x")
    assert x.op.name == "outer/x"


def test_invalid_op_name_is_rejected():
    with pytest.raises(mf.errors.InvalidArgumentError, match="not a valid op name"):
        mf.constant(1.0, name="bad name!")


def test_device_strings_merge_inner_over_outer():
    with mf.device("/job:worker/task:1"):
        with mf.device("/device:GPU:0"):
            a = mf.constant(1.0)
        with mf.device("/job:ps"):
            b = mf.constant(1.0)
        with mf.device(None):
            c = mf.constant(1.0)
    assert a.device == "/job:worker/task:1/device:GPU:0"
    assert b.device == "/job:ps/task:1"
    assert c.device == ""


def test_empty_device_scope_keeps_the_enclosing_placement_as_tensorflow():
    # TF: tf.device("") (or an empty DeviceSpec) merges nothing; only None clears. Under
    # replica_device_setter the variable still goes to the ps, next in the round robin.
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
        with mf.device(""):
            v = mf.Variable(1.0, name="v")
        with mf.device(mf.DeviceSpec()):
            w = mf.Variable(1.0, name="w")
        u = mf.Variable(1.0, name="u")
    assert [x.device for x in (v, w, u)] == ["/job:ps/task:0", "/job:ps/task:1",
                                             "/job:ps/task:0"]
    with mf.device("/job:worker/task:2"), mf.device(""):
        c = mf.constant(1.0)
    assert c.device == "/job:worker/task:2"


def test_colocate_with_none_resets_device_scopes_too_as_tensorflow():
    # TF: "If op is None then ignore_existing must be True and the new scope resets all
    # colocation and device constraints"; scopes opened inside apply again.
    a = mf.constant(1.0, name="a")
    with mf.device("/job:ps/task:0"), mf.colocate_with(a):
        kept = mf.identity(a, name="kept")
        with mf.colocate_with(None, ignore_existing=True):
            reset = mf.identity(a, name="reset")
            with mf.device("/job:worker/task:1"):
                inner = mf.identity(a, name="inner")
    assert kept.op.colocation_groups() == ["loc:@a"]
    assert (reset.device, reset.op.colocation_groups()) == ("", ["loc:@reset"])
    assert inner.device == "/job:worker/task:1"
    with pytest.raises(mf.errors.InvalidArgumentError, match="ignore_existing=True"), \
            mf.colocate_with(None):
        pass


def test_device_scopes_apply_innermost_first_like_tensorflow():
    def to_ps(op):
        return "/job:ps/task:3" if op.type == "VariableV2" else op.device

    with mf.device(to_ps):
        with mf.device("/job:foo"):
            v = mf.Variable(1.0, name="v_foo")
    with mf.device("/job:ps/task:2"):
        with mf.device(lambda op: "/job:ps/task:0"):
            c = mf.constant(1.0)
    assert v.device == "/job:ps/task:3"     # the outer function saw /job:foo, chose ps
    assert c.device == "/job:ps/task:0"


def test_device_function_sees_the_op_and_its_device_so_far():
    seen = []

    def by_type(op):
        seen.append((op.type, op.device))
        return "/job:ps/task:0" if op.type == "VariableV2" else op.device

    with mf.device("/job:worker/task:0"):
        with mf.device(by_type):
            v = mf.Variable(1.0, name="v")
            y = v * 2.0
    assert v.device == "/job:ps/task:0"
    assert y.device == "/job:worker/task:0"
    assert ("VariableV2", "") in seen      # inner scopes apply first, as in TensorFlow


def test_bad_device_string_is_an_error_naming_it():
    with pytest.raises(mf.errors.InvalidArgumentError, match="job:ps/tusk:0"):
        with mf.device("/job:ps/tusk:0"):
            pass


def test_colocation_follows_the_variable():
    with mf.device("/job:ps/task:3"):
        v = mf.Variable([1.0, 2.0], name="v")
    assert v.value().device == "/job:ps/task:3"
    assert v.value().op.colocation_groups() == ["loc:@v"]
    with mf.device("/job:worker/task:0"):
        with mf.colocate_with(v.op):
            z = mf.identity(v)
    assert z.device == "/job:ps/task:3"


def test_control_dependencies_are_recorded_and_nested_and_cleared():
    a = mf.constant(1.0, name="a")
    b = mf.constant(2.0, name="b")
    with mf.control_dependencies([a]):
        c = mf.constant(3.0, name="c")
        with mf.control_dependencies([b]):
            d = mf.constant(4.0, name="d")
        with mf.control_dependencies(None):
            e = mf.constant(5.0, name="e")
    assert c.op.control_inputs == [a.op]
    assert set(d.op.control_inputs) == {a.op, b.op}
    assert e.op.control_inputs == []


def test_control_dependency_runs_first():
    v = mf.Variable(0.0, name="counter")
    inc = mf.assign_add(v, 1.0)
    with mf.control_dependencies([inc]):
        read = mf.identity(v)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        assert sess.run(read) == 1.0
        assert sess.run(read) == 2.0


def test_collections_and_lookup():
    v = mf.Variable(1.0, name="v")
    w = mf.Variable(1.0, name="w", trainable=False)
    assert mf.global_variables() == [v, w]
    assert mf.trainable_variables() == [v]
    g = mf.get_default_graph()
    assert g.get_tensor_by_name("v:0").op is v.op
    assert g.get_operation_by_name("w") is w.op
    with pytest.raises(mf.errors.NotFoundError, match="no operation named 'nope'"):
        g.get_operation_by_name("nope")
    with pytest.raises(mf.errors.NotFoundError, match="has 1 outputs"):
        g.get_tensor_by_name("v:3")


def test_a_name_not_in_the_graph_suggests_the_closest_ones():
    mf.reduce_mean(mf.ones([2]), name="loss")
    g = mf.get_default_graph()
    with pytest.raises(mf.errors.NotFoundError,
                       match=r"no operation named 'los' \(did you mean 'loss'\?\)$"):
        g.get_tensor_by_name("los:0")
    with pytest.raises(mf.errors.NotFoundError, match=r"no operation named 'zzz'$"):
        g.get_operation_by_name("zzz")


def test_graph_as_default_and_reset():
    g = mf.Graph()
    with g.as_default():
        c = mf.constant(1.0)
        assert mf.get_default_graph() is g
    assert c.graph is g
    assert mf.get_default_graph() is not g
    with g.as_default():
        with pytest.raises(mf.errors.FailedPreconditionError, match="reset_default_graph"):
            mf.reset_default_graph()


def test_inputs_from_another_graph_are_rejected():
    g = mf.Graph()
    with g.as_default():
        a = mf.constant(1.0, name="foreign")
    with pytest.raises(mf.errors.InvalidArgumentError, match="foreign.*same graph"):
        mf.identity(a)


def test_finalized_graph_refuses_new_ops():
    g = mf.Graph()
    with g.as_default():
        mf.constant(1.0)
        g.finalize()
        with pytest.raises(mf.errors.FailedPreconditionError, match="finalized"):
            mf.constant(2.0)


def test_tensor_is_not_a_python_bool():
    x = mf.constant(1.0, name="flag")
    with pytest.raises(mf.errors.InvalidArgumentError, match="flag:0.*bool"):
        if x:
            pass


def test_random_ops_are_deterministic_under_a_graph_seed():
    def draw():
        g = mf.Graph()
        with g.as_default():
            mf.set_random_seed(42)
            a = mf.random_normal([3])
            b = mf.truncated_normal([3])
            with mf.Session() as sess:
                return sess.run([a, b])

    first, second = draw(), draw()
    for x, y in zip(first, second):
        assert (x == y).all()
    assert not (first[0] == first[1]).all()


def test_unknown_attr_is_rejected_naming_the_op():
    from mpiflow.ops.registry import apply_op
    a = mf.constant([[1.0]])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Unknown attr 'transpose_c' for op 'MatMul' \(MatMul\)"):
        apply_op("MatMul", [a, a], {"transpose_c": True})


def test_unknown_op_type_suggests_close_names():
    from mpiflow.ops.registry import get_op_def
    with pytest.raises(mf.errors.NotFoundError, match="did you mean MatMul"):
        get_op_def("MatMull")


def test_add_to_collections_adds_once_to_each_named_collection():
    mf.add_to_collections(["a", "b", "a"], 1)
    mf.add_to_collections("c", 2)
    mf.get_default_graph().add_to_collections(("b",), 3)
    assert [mf.get_collection(k) for k in "abc"] == [[1], [1, 3], [2]]
