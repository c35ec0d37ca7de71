"""Variables, variable scopes and sharing with reuse, initializers."""

import re

import numpy as np
import pytest

import mpiflow as mf


def test_variable_ops_and_names():
    v = mf.Variable(np.ones((2, 3), np.float32), name="w")
    assert v.name == "w:0" and v.op.type == "VariableV2"
    assert v.value().op.name == "w/read"
    assert v.initializer.name == "w/Assign"
    assert v.shape.as_list() == [2, 3] and v.dtype is mf.float32


def test_get_variable_under_scopes_and_reuse():
    with mf.variable_scope("layer"):
        w = mf.get_variable("w", [3, 2])
    with mf.variable_scope("layer", reuse=True):
        w2 = mf.get_variable("w")
    with mf.variable_scope("layer", reuse=mf.AUTO_REUSE):
        w3 = mf.get_variable("w", [3, 2])
        b = mf.get_variable("b", [2], initializer=mf.zeros_initializer())
    assert w is w2 is w3
    assert w.op.name == "layer/w" and b.op.name == "layer/b"


def test_reusing_a_name_without_reuse_is_an_error_naming_it():
    with mf.variable_scope("enc"):
        mf.get_variable("w", [2])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="Variable enc/w already exists, disallowed.*reuse=True"):
        with mf.variable_scope("enc"):
            mf.get_variable("w", [2])


def test_reuse_of_a_missing_variable_is_an_error():
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="Variable dec/w does not exist"):
        with mf.variable_scope("dec", reuse=True):
            mf.get_variable("w", [2])


def test_sharing_with_a_different_shape_is_an_error():
    with mf.variable_scope("s"):
        mf.get_variable("w", [2])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"share variable s/w.*\(3,\)"):
        with mf.variable_scope("s", reuse=True):
            mf.get_variable("w", [3])


def test_tf1_variable_arguments_that_change_nothing_here_are_accepted():
    v = mf.Variable(np.ones(2), name="v", caching_device="/cpu:0", use_resource=True)
    w = mf.get_variable("w", [2], caching_device="/cpu:0", use_resource=False)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(v), [1, 1])
        assert sess.run(w).shape == (2,)


def test_variable_scope_takes_tf1_caching_device_and_use_resource():
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)), mf.variable_scope(
            "s", caching_device="/job:worker/task:0", use_resource=False):
        w = mf.get_variable("w", [2])
    assert (w.op.name, w.device) == ("s/w", "/job:ps/task:0")


def _nonneg(v):
    return mf.maximum(v, 0.0)


def test_a_variable_keeps_its_constraint_as_tf1s_variables_do():
    # The optimizers apply it after each update (tests/unit/test_optimizers.py).
    assert mf.Variable(np.ones(2), name="v", constraint=_nonneg).constraint is _nonneg
    assert mf.Variable(np.ones(2), name="u").constraint is None
    assert mf.get_variable("w", [2], constraint=_nonneg).constraint is _nonneg
    with mf.variable_scope("scope", constraint=_nonneg):
        assert mf.get_variable("by_scope", [2]).constraint is _nonneg
        with mf.variable_scope("inner"):
            assert mf.get_variable("inherited", [2]).constraint is _nonneg
        own = mf.get_variable("own", [2], constraint=abs)
        assert own.constraint is abs
    parts = mf.get_variable("p", [4, 2], partitioner=mf.fixed_size_partitioner(2),
                            constraint=_nonneg)
    assert [part.constraint for part in parts] == [_nonneg, _nonneg]


@pytest.mark.parametrize("make", [
    lambda c: mf.Variable(np.ones(2), name="v", constraint=c),
    lambda c: mf.get_variable("w", [2], constraint=c),
])
def test_a_constraint_that_is_not_callable_is_refused(make):
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"'(v|w)'.*constraint must be None or a callable.*got str "
                             r"'non_neg'"):
        make("non_neg")


def test_reuse_is_inherited_by_inner_scopes():
    with mf.variable_scope("outer"):
        with mf.variable_scope("inner"):
            a = mf.get_variable("a", [1])
    with mf.variable_scope("outer", reuse=True):
        with mf.variable_scope("inner"):
            assert mf.get_variable("a", [1]) is a


def test_nested_scopes_custom_getters_compose_inner_first_as_in_tensorflow():
    calls = []

    def getter_named(tag):
        def getter(next_getter, name, *args, **kwargs):
            calls.append((tag, name))
            return next_getter(name, *args, **kwargs)
        return getter

    def to_float64(next_getter, name, *args, **kwargs):
        kwargs["dtype"] = mf.float64
        return next_getter(name, *args, **kwargs)

    with mf.variable_scope("model", custom_getter=getter_named("outer")):
        with mf.variable_scope("layer", custom_getter=getter_named("inner")):
            w = mf.get_variable("w", [2])
        with mf.variable_scope("cast", custom_getter=to_float64):
            c = mf.get_variable("c", [2])
    # TF 2.21's tf.compat.v1 calls the inner getter, then the outer one, for one variable.
    assert calls == [("inner", "model/layer/w"), ("outer", "model/layer/w"),
                     ("outer", "model/cast/c")]
    assert w.op.name == "model/layer/w" and c.dtype is mf.float64


def test_initialized_value_chains_one_variables_initial_value_into_anothers():
    mf.set_random_seed(5)
    w = mf.Variable(mf.random_normal([3]), name="w")
    v = mf.Variable(w.initialized_value() * 2.0, name="v")
    u = mf.Variable(mf.constant([1.0, 2.0]), name="u")
    twice_u = mf.Variable(u.initialized_value() * 2.0, name="twice_u")
    with mf.Session() as sess:
        # u is not initialized yet: its initial value stands in, as in TF1.
        sess.run(twice_u.initializer)
        np.testing.assert_array_equal(sess.run(twice_u), [2.0, 4.0])
        sess.run(mf.global_variables_initializer())
        w_value, v_value = sess.run([w, v])
        np.testing.assert_array_equal(v_value, 2.0 * w_value)
        # Once initialized, the variable's own value (changed since) is taken.
        sess.run(u.assign([5.0, 7.0]))
        sess.run(twice_u.initializer)
        np.testing.assert_array_equal(sess.run(twice_u), [10.0, 14.0])


def test_reentering_a_scope_object_opens_a_new_name_scope_as_tensorflow_does():
    # Names recorded from TF 2.21's tf.compat.v1.
    with mf.variable_scope("a/b") as ab:
        pass
    with mf.variable_scope(ab) as again:
        assert mf.constant(0.0, name="c").name == "b/c:0"
        assert mf.get_variable("v", [1]).name == "a/b/v:0"
        assert again.original_name_scope == "a/b/"
        with mf.variable_scope("in") as inner:
            assert inner.original_name_scope == "b/in/"
    with mf.variable_scope(ab):
        assert mf.constant(0.0, name="c").name == "b_1/c:0"
    with mf.variable_scope("outer"):
        with mf.variable_scope(ab):
            assert mf.constant(0.0, name="c").name == "outer/b/c:0"
    with mf.variable_scope(ab, auxiliary_name_scope=False) as kept:
        assert mf.constant(0.0, name="d").name == "d:0"
        assert kept.original_name_scope == "a/b/"
    root = mf.get_variable_scope()
    with mf.name_scope("foo"), mf.variable_scope(root):
        assert mf.constant(0.0, name="c").name == "foo/c:0"


def test_a_scope_object_lists_its_own_variables_as_tf1s_does():
    with mf.variable_scope("d") as d:
        w = mf.get_variable("w", [1])
        frozen = mf.get_variable("frozen", [1], trainable=False)
        counter = mf.get_local_variable("counter", [1])
    with mf.variable_scope("d2"):
        mf.get_variable("w", [1])
    assert d.global_variables() == [w, frozen]       # not d2's
    assert d.trainable_variables() == [w]
    assert d.local_variables() == [counter]
    assert d.get_collection(mf.GraphKeys.GLOBAL_VARIABLES) == [w, frozen]
    d.set_dtype(mf.float64)
    d.set_regularizer(lambda v: mf.reduce_sum(v))
    with mf.variable_scope(d):
        later = mf.get_variable("later", [1])
    assert later.dtype is mf.float64
    assert len(mf.get_collection(mf.GraphKeys.REGULARIZATION_LOSSES)) == 1


def test_initializers_produce_their_values():
    mf.set_random_seed(3)
    specs = {
        "zeros": (mf.zeros_initializer(), lambda v: np.all(v == 0)),
        "ones": (mf.ones_initializer(), lambda v: np.all(v == 1)),
        "const": (mf.constant_initializer(2.5), lambda v: np.all(v == 2.5)),
        "normal": (mf.random_normal_initializer(0.0, 0.1),
                   lambda v: abs(v.mean()) < 0.02 and 0.08 < v.std() < 0.12),
        "trunc": (mf.truncated_normal_initializer(0.0, 1.0), lambda v: np.abs(v).max() <= 2),
        "glorot": (mf.glorot_uniform_initializer(),
                   lambda v: np.abs(v).max() <= np.sqrt(6 / (100 + 200))),
    }
    vars_ = {k: mf.get_variable(k, [100, 200], initializer=i) for k, (i, _) in specs.items()}
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for k, (_, ok) in specs.items():
            assert ok(sess.run(vars_[k])), k


def test_same_seed_same_initial_values_in_two_graphs():
    def init_values():
        g = mf.Graph()
        with g.as_default():
            mf.set_random_seed(11)
            w = mf.get_variable("w", [4, 4])
            with mf.Session() as sess:
                sess.run(mf.global_variables_initializer())
                return sess.run(w)
    np.testing.assert_array_equal(init_values(), init_values())


def test_assign_ops_and_scatter():
    v = mf.Variable(np.zeros((4, 2), np.float32), name="table")
    rows = mf.scatter_add(v, [1, 1, 3], np.ones((3, 2), np.float32))
    with mf.Session() as sess:
        sess.run(v.initializer)
        sess.run(rows)
        np.testing.assert_allclose(sess.run(v)[:, 0], [0, 2, 0, 1])
        sess.run(mf.scatter_update(v, [0], [[5.0, 5.0]]))
        sess.run(mf.assign_sub(v, np.ones((4, 2), np.float32)))
        np.testing.assert_allclose(sess.run(v)[:, 1], [4, 1, -1, 0])
        sess.run(v.assign(np.full((4, 2), 7.0, np.float32)))
        assert sess.run(v).sum() == 56.0


def test_updates_with_read_value_false_are_ops_as_in_tf1():
    v = mf.Variable(1.0, name="v")
    updates = [v.assign(4.0, read_value=False), v.assign_add(2.0, read_value=False),
               v.assign_sub(1.0, read_value=False)]
    assert all(isinstance(u, mf.Operation) for u in updates)
    with mf.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(updates[0]) is None and sess.run(updates[1]) is None
        assert sess.run(v) == 6.0


def test_assign_with_a_wrong_shape_is_a_build_error():
    v = mf.Variable(np.zeros(3, np.float32), name="vec")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'Assign.*\(3,\).*\(4,\)"):
        mf.assign(v, np.zeros(4, np.float32))


def test_writing_a_non_variable_is_rejected():
    c = mf.constant([1.0])
    with pytest.raises(mf.errors.InvalidArgumentError, match="must be a variable"):
        mf.assign_add(c, [1.0])


def test_scatter_out_of_range_names_the_op():
    v = mf.Variable(np.zeros((2, 2), np.float32), name="small")
    up = mf.scatter_add(v, [5], np.ones((1, 2), np.float32), name="bad_scatter")
    with mf.Session() as sess:
        sess.run(v.initializer)
        with pytest.raises(mf.errors.InvalidArgumentError, match="bad_scatter.*got 5"):
            sess.run(up)


@pytest.mark.parametrize("scatter", [mf.scatter_update, mf.scatter_add, mf.scatter_sub],
                         ids=["update", "add", "sub"])
@pytest.mark.parametrize("indices,shape", [
    ([0, 2], [1, 3]), ([0, 2], [3]), ([0, 2], [2, 1]), (1, [1, 3]), ([[0, 1], [2, 3]], [2, 3]),
])
def test_scatter_updates_known_only_at_run_time_must_fit_the_rows(scatter, indices, shape):
    # numpy broadcast these into the rows indexed (a silently different update); TF's
    # kernel wants updates.shape == indices.shape + ref.shape[1:], or a scalar.
    v = mf.Variable(np.zeros((4, 3), np.float32), name="table")
    i = mf.placeholder(mf.int32, None)
    u = mf.placeholder(mf.float32, None)
    rows = scatter(v, i, u, name="rows")
    want = list(np.shape(indices)) + [3]
    with mf.Session() as sess:
        sess.run(v.initializer)
        with pytest.raises(mf.errors.InvalidArgumentError, match=re.escape(
                f"Scatter updates have the wrong shape in op 'rows' ({rows.op.type}): "
                f"expected updates.shape = indices.shape + ref.shape[1:] = {want} "
                f"(indices.shape {list(np.shape(indices))}, ref.shape [4, 3]), or a scalar, "
                f"got updates.shape {shape}")):
            sess.run(rows, {i: indices, u: np.ones(shape, np.float32)})
        np.testing.assert_array_equal(sess.run(v), np.zeros((4, 3)))


def test_a_scalar_scatter_update_goes_to_every_row_indexed_as_in_tensorflow():
    v = mf.Variable(np.zeros((4, 2), np.float32), name="table")
    u = mf.placeholder(mf.float32, None)
    with mf.Session() as sess:
        sess.run(v.initializer)
        sess.run(mf.scatter_update(v, [0, 2], 5.0))       # refused when built, before
        sess.run(mf.scatter_add(v, [[1, 1], [2, 3]], u), {u: 1.0})
        sess.run(mf.scatter_sub(v, 3, u), {u: 2.0})
        np.testing.assert_array_equal(sess.run(v), [[5, 5], [2, 2], [6, 6], [-1, -1]])


def test_scatter_into_a_scalar_variable_is_refused_naming_the_op():
    v = mf.Variable(1.0, name="scalar")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Scatter into a scalar in op 'bad' \(ScatterUpdate\): expected "
                             r"a ref of rank >= 1"):
        mf.scatter_update(v, 0, 2.0, name="bad")


def test_variable_load_and_is_initialized():
    v = mf.Variable([1.0, 2.0], name="v")
    ready = mf.is_variable_initialized(v)
    with mf.Session() as sess:
        assert not sess.run(ready)
        v.load([3.0, 4.0], sess)
        assert sess.run(ready)
        np.testing.assert_allclose(sess.run(v), [3.0, 4.0])


@pytest.mark.parametrize("value, dtype", [
    (0, mf.int32), (False, mf.bool), (0.5, mf.float32), (np.arange(3), mf.int64),
    (np.zeros(2), mf.float64), (np.zeros(2, np.float16), mf.float16), ([1, 2], mf.int32),
])
def test_a_value_initializer_gives_get_variable_its_own_dtype_as_in_tensorflow(value, dtype):
    """``get_variable("step", initializer=0)`` is an int32 variable in TensorFlow, whatever
    the scope's dtype: it was float32 here (a float global step, a float64 array narrowed)."""
    with mf.variable_scope("half", dtype=mf.float16):
        v = mf.get_variable("v", initializer=value)
    assert v.dtype is dtype
    with mf.Session() as sess:
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(v), np.asarray(value))
    assert mf.get_variable("c", initializer=mf.constant(3)).dtype is mf.int32


@pytest.mark.parametrize("value, dtype", [(0, mf.float32), (0.5, mf.float64),
                                          (np.zeros(2), mf.float32)])
def test_a_value_initializer_of_another_dtype_than_the_explicit_one_is_refused(value, dtype):
    with pytest.raises(mf.errors.InvalidArgumentError, match="don't match"):
        mf.get_variable("v", initializer=value, dtype=dtype)


def test_a_function_initializer_still_takes_the_scopes_dtype():
    with mf.variable_scope("half", dtype=mf.float16):
        assert mf.get_variable("v", [2]).dtype is mf.float16


@pytest.mark.parametrize("value,dtype", [(1.5, mf.int32), (2.0, mf.float64), (2, mf.float32)])
def test_a_tensor_initial_value_of_another_dtype_is_refused_as_in_tensorflow(value, dtype):
    # TensorFlow raises ValueError ("Tensor conversion requested dtype int32 for Tensor with
    # dtype float32"); a silent cast made 1.5 an int32 variable holding 1.
    with mf.Graph().as_default():
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=rf"initial_value 'Const:0' is \w+, but dtype={dtype.name}"):
            mf.Variable(mf.constant(value), dtype=dtype)
        assert mf.Variable(mf.constant(value), dtype=mf.constant(value).dtype) is not None
