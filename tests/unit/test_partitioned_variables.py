"""Partitioned variables: TensorFlow's slicing, names, slice infos, initial values, reuse,
partitioners and errors."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.framework.tensor_shape import TensorShape

FULL = np.arange(40, dtype=np.float32).reshape(10, 4)


def _run(fetches):
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        return sess.run(fetches)


def test_uneven_split_gives_the_first_parts_one_extra_row():
    pv = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
    assert isinstance(pv, mf.PartitionedVariable)
    assert [v.op.name for v in pv] == ["emb/part_0", "emb/part_1", "emb/part_2"]
    assert [v.shape.as_list() for v in pv] == [[4, 4], [3, 4], [3, 4]]
    assert (pv.name, pv.shape.as_list(), pv.dtype) == ("emb", [10, 4], mf.float32)
    assert len(pv) == 3 and pv.get_partitions() == pv._get_partitions() == [3, 1]
    assert pv.get_variable_list() == pv._get_variable_list() == list(pv)


def test_each_part_records_where_it_sits_in_the_full_variable():
    pv = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
    infos = [v._save_slice_info for v in pv]
    assert all(isinstance(i, mf.Variable.SaveSliceInfo) for i in infos)
    assert [i.full_name for i in infos] == ["emb"] * 3
    assert [i.full_shape for i in infos] == [[10, 4]] * 3
    assert [i.var_offset for i in infos] == [[0, 0], [4, 0], [7, 0]]
    assert [i.var_shape for i in infos] == [[4, 4], [3, 4], [3, 4]]
    assert [i.spec for i in infos] == ["10 4 0,4:0,4", "10 4 4,3:0,4", "10 4 7,3:0,4"]


def test_partitioning_along_axis_one():
    pv = mf.get_variable("w", initializer=np.arange(21.0).reshape(3, 7),
                         partitioner=mf.fixed_size_partitioner(2, axis=1), dtype=mf.float64)
    assert [v.shape.as_list() for v in pv] == [[3, 4], [3, 3]]
    assert [v._save_slice_info.var_offset for v in pv] == [[0, 0], [0, 4]]
    assert pv.get_partitions() == [1, 2]
    np.testing.assert_array_equal(_run(pv.as_tensor()), np.arange(21.0).reshape(3, 7))


@pytest.mark.parametrize("kind", ["constant_initializer", "array", "tensor"])
def test_parts_hold_the_slices_of_the_full_initial_value(kind):
    if kind == "constant_initializer":
        pv = mf.get_variable("emb", [10, 4], initializer=mf.constant_initializer(FULL),
                             partitioner=mf.fixed_size_partitioner(3))
    elif kind == "array":
        pv = mf.get_variable("emb", initializer=FULL, partitioner=mf.fixed_size_partitioner(3))
    else:
        pv = mf.get_variable("emb", initializer=mf.constant(FULL),
                             partitioner=mf.fixed_size_partitioner(3))
    values = _run([v.value() for v in pv] + [pv.as_tensor()])
    np.testing.assert_array_equal(values[0], FULL[0:4])
    np.testing.assert_array_equal(values[1], FULL[4:7])
    np.testing.assert_array_equal(values[2], FULL[7:10])
    np.testing.assert_array_equal(values[3], FULL)


def test_initializers_get_each_parts_partition_info():
    seen = []

    def init(shape, dtype=None, partition_info=None):
        seen.append((list(shape), partition_info))
        return mf.zeros(shape, dtype)
    mf.get_variable("emb", [10, 4], initializer=init, partitioner=mf.fixed_size_partitioner(3))
    assert [s for s, _ in seen] == [[4, 4], [3, 4], [3, 4]]
    assert [i.full_shape for _, i in seen] == [[10, 4]] * 3
    assert [i.var_offset for _, i in seen] == [[0, 0], [4, 0], [7, 0]]
    assert [i.single_offset(s) for s, i in seen] == [0, 4, 7]
    assert [i.single_slice_dim(s) for s, i in seen] == [0, 0, 0]


def test_initializer_without_partition_info_is_called_per_part():
    pv = mf.get_variable("ones", [5, 2], initializer=lambda shape, dtype=None:
                         mf.ones(shape, dtype), partitioner=mf.fixed_size_partitioner(2))
    np.testing.assert_array_equal(_run(pv.as_tensor()), np.ones((5, 2), np.float32))


def test_variance_scaling_scales_parts_by_the_full_shape():
    # fan_avg of the full [1000, 10] is 505: each part must use it, not its own [250, 10].
    pv = mf.get_variable("big", [1000, 10], partitioner=mf.fixed_size_partitioner(4),
                         initializer=mf.glorot_uniform_initializer(seed=1))
    value = _run(pv.as_tensor())
    limit = np.sqrt(3.0 / 505.0)
    assert np.abs(value).max() <= limit
    assert np.abs(value).max() > 0.95 * limit


def test_default_initializer_and_scope_partitioner():
    with mf.variable_scope("s", partitioner=mf.fixed_size_partitioner(2)):
        pv = mf.get_variable("w", [6, 3])
        plain = mf.get_variable("b", [3], partitioner=None)
    assert [v.op.name for v in pv] == ["s/w/part_0", "s/w/part_1"]
    assert isinstance(plain, mf.PartitionedVariable)   # the scope's partitioner applies
    assert _run(pv.as_tensor()).shape == (6, 3)


def test_parts_are_trainable_variables_and_the_whole_is_not_a_collection_item():
    pv = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
    assert mf.trainable_variables() == list(pv)
    assert mf.global_variables() == list(pv)


def test_reuse_returns_the_same_partitioned_variable():
    with mf.variable_scope("s", partitioner=mf.fixed_size_partitioner(3)):
        pv = mf.get_variable("w", [10, 4])
    with mf.variable_scope("s", reuse=True, partitioner=mf.fixed_size_partitioner(3)):
        assert mf.get_variable("w", [10, 4]) is pv
        assert mf.get_variable("w") is pv           # no shape: the stored parts answer
    with mf.variable_scope("s", reuse=mf.AUTO_REUSE,
                           partitioner=mf.fixed_size_partitioner(3)):
        assert mf.get_variable("w", [10, 4]) is pv


def test_reuse_true_finds_a_partitioned_variable_without_its_partitioner():
    # As TF 2.21's tf.compat.v1: an eval tower re-entering the scope by name with
    # reuse=True gets the partitioned variable back.
    with mf.variable_scope("s", partitioner=mf.fixed_size_partitioner(3)):
        pv = mf.get_variable("w", [10, 4])
    with mf.variable_scope("s", reuse=True):
        assert mf.get_variable("w", [10, 4]) is pv
        assert mf.get_variable("w") is pv


def test_a_scopes_partitioner_leaves_scalar_variables_whole():
    # TF 2.21's tf.compat.v1 makes a scalar in a partitioning scope a plain variable.
    with mf.variable_scope("s", partitioner=mf.fixed_size_partitioner(2)):
        scale = mf.get_variable("scale", [], initializer=mf.ones_initializer())
        step = mf.get_variable("step", (), dtype=mf.int64,
                               partitioner=mf.fixed_size_partitioner(2))
    assert isinstance(scale, mf.Variable) and scale.op.name == "s/scale"
    assert isinstance(step, mf.Variable) and step.shape.as_list() == []
    assert _run(scale) == 1.0


def test_reuse_errors_name_the_variable():
    part3 = mf.fixed_size_partitioner(3)
    with mf.variable_scope("s", partitioner=part3):
        mf.get_variable("w", [10, 4])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"reuse partitioned variable s/w, but specified shape \(12, 4\)"):
        with mf.variable_scope("s", reuse=True, partitioner=part3):
            mf.get_variable("w", [12, 4])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"reuse partitioned variable s/w, but specified partitions"):
        with mf.variable_scope("s", reuse=True, partitioner=mf.fixed_size_partitioner(2)):
            mf.get_variable("w", [10, 4])
    with pytest.raises(mf.errors.InvalidArgumentError, match="s/w already exists"):
        with mf.variable_scope("s", partitioner=part3):
            mf.get_variable("w", [10, 4])
    with pytest.raises(mf.errors.InvalidArgumentError, match="s/x does not exist"):
        with mf.variable_scope("s", reuse=True, partitioner=part3):
            mf.get_variable("x", [10, 4])
    with pytest.raises(mf.errors.InvalidArgumentError, match="No partitioner was provided"):
        with mf.variable_scope("s", reuse=mf.AUTO_REUSE):     # reuse=True would find it
            mf.get_variable("w", [10, 4])
    mf.get_variable("plain", [4])
    with pytest.raises(mf.errors.InvalidArgumentError, match="unpartitioned version.*plain"):
        mf.get_variable("plain", [4], partitioner=part3)


@pytest.mark.parametrize("returned,message", [
    ([2, 2], "only be cut along one axis"),
    ([0, 1], "at least one partition"),
    ([3], "does not match the rank"),
    ("abc", "must return a list of ints"),
    ([11, 1], "more parts than rows"),
])
def test_a_partitioner_returning_bad_partitions_is_an_error(returned, message):
    with pytest.raises(mf.errors.InvalidArgumentError, match=f"'w'.*{message}"):
        mf.get_variable("w", [10, 4], partitioner=lambda shape, dtype: returned)


@pytest.mark.parametrize("partitioner", [
    mf.fixed_size_partitioner(2, axis=2), mf.min_max_variable_partitioner(4, axis=2),
    mf.variable_axis_size_partitioner(64, axis=-3)])
def test_partitioning_along_an_axis_that_does_not_exist_is_an_error(partitioner):
    with pytest.raises(mf.errors.InvalidArgumentError, match="no such axis"):
        mf.get_variable("w", [10, 4], partitioner=partitioner)


def test_shape_and_value_must_agree():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"shape \(9, 4\).*\(10, 4\)"):
        mf.get_variable("w", [9, 4], initializer=FULL, partitioner=mf.fixed_size_partitioner(2))
    with pytest.raises(mf.errors.InvalidArgumentError, match="fully defined"):
        mf.get_variable("u", [None, 4], partitioner=mf.fixed_size_partitioner(2))


def test_fixed_size_partitioner_never_makes_more_parts_than_rows():
    p = mf.fixed_size_partitioner(5)
    assert p(shape=TensorShape([3, 2]), dtype=mf.float32) == [3, 1]
    assert p(shape=TensorShape([30, 2]), dtype=mf.float32) == [5, 1]
    assert mf.fixed_size_partitioner(4, axis=-1)(shape=TensorShape([3, 2])) == [1, 2]


def test_min_max_partitioner_follows_tensorflows_rule():
    big = TensorShape([1024, 1024])           # 4 MiB of float32 = 16 slices of 256 KiB
    assert mf.min_max_variable_partitioner(32)(shape=big, dtype=mf.float32) == [16, 1]
    assert mf.min_max_variable_partitioner(16)(shape=big, dtype=mf.float32) == [16, 1]
    assert mf.min_max_variable_partitioner(4)(shape=big, dtype=mf.float32) == [4, 1]
    assert mf.min_max_variable_partitioner(32)(shape=big, dtype=mf.float64) == [32, 1]
    assert mf.min_max_variable_partitioner(8)(shape=TensorShape([10, 4]),
                                              dtype=mf.float32) == [1, 1]
    # ceil(1.2 MB / 256 KiB) = 5 parts are wanted, but axis 0 only has 3 rows.
    assert mf.min_max_variable_partitioner(10)(shape=TensorShape([3, 100000]),
                                               dtype=mf.float32) == [3, 1]
    assert mf.min_max_variable_partitioner(10, axis=1, min_slice_size=100)(
        shape=TensorShape([3, 100]), dtype=mf.float32) == [1, 10]
    assert mf.min_max_variable_partitioner(10, min_slice_size=100)(
        shape=TensorShape([20, 10]), dtype=mf.float32) == [8, 1]


def test_variable_axis_size_partitioner_keeps_shards_under_the_byte_limit():
    shape = TensorShape([100, 10])             # 40 bytes per row of float32
    assert variable_axis(400)(shape=shape, dtype=mf.float32) == [10, 1]
    assert variable_axis(399)(shape=shape, dtype=mf.float32) == [12, 1]
    assert variable_axis(400, max_shards=4)(shape=shape, dtype=mf.float32) == [4, 1]
    assert variable_axis(1)(shape=shape, dtype=mf.float32) == [100, 1]
    assert variable_axis(1 << 20)(shape=shape, dtype=mf.float32) == [1, 1]
    with pytest.raises(mf.errors.InvalidArgumentError, match="max_shard_bytes"):
        variable_axis(0)


def test_zero_max_shards_and_max_partitions_behave_as_in_tensorflow():
    # TF: max_shards=0 is no cap (as None); max_partitions=0 still gives one part.
    shape = TensorShape([10, 3])               # 12 bytes per row of float32
    assert variable_axis(4, max_shards=0)(shape=shape, dtype=mf.float32) == [10, 1]
    assert variable_axis(4, max_shards=None)(shape=shape, dtype=mf.float32) == [10, 1]
    assert mf.min_max_variable_partitioner(max_partitions=0)(
        shape=shape, dtype=mf.float32) == [1, 1]
    assert mf.min_max_variable_partitioner(max_partitions=0, min_slice_size=1)(
        shape=shape, dtype=mf.float32) == [1, 1]
    with pytest.raises(mf.errors.InvalidArgumentError, match="max_shards"):
        variable_axis(4, max_shards=-1)        # TF: "max_shards must be positive"


def variable_axis(max_shard_bytes, **kwargs):
    return mf.variable_axis_size_partitioner(max_shard_bytes, **kwargs)


def test_partitioned_variable_converts_to_the_concatenation():
    pv = mf.get_variable("emb", initializer=FULL, partitioner=mf.fixed_size_partitioner(3))
    t = pv.as_tensor()
    assert t.op.name == "emb/concat" and t.shape.as_list() == [10, 4]
    assert t.op.inputs[0].op.type == "ConcatV2"
    x = np.ones((2, 10), np.float32)
    y = mf.matmul(mf.constant(x), pv)
    assert pv._as_tensor().op.type == "Identity"
    np.testing.assert_allclose(_run(y), x @ FULL)
    np.testing.assert_allclose(_run(mf.convert_to_tensor(pv)), FULL)
    np.testing.assert_allclose(_run(pv * 2.0), FULL * 2)


def test_single_part_partitioned_variable():
    pv = mf.get_variable("one", initializer=FULL, partitioner=mf.fixed_size_partitioner(1))
    assert len(pv) == 1 and [v.op.name for v in pv] == ["one/part_0"]
    np.testing.assert_array_equal(_run(pv.as_tensor()), FULL)


def test_assign_writes_every_part():
    pv = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
    assigns = pv.assign(FULL + 1)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(assigns)
        np.testing.assert_array_equal(sess.run(pv.as_tensor()), FULL + 1)


def test_training_through_the_concatenation_updates_every_part():
    pv = mf.get_variable("w", initializer=FULL, partitioner=mf.fixed_size_partitioner(3))
    x = np.arange(20, dtype=np.float32).reshape(2, 10) / 10
    loss = mf.reduce_sum(mf.matmul(mf.constant(x), pv))
    train = mf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train)
        got = sess.run(pv.as_tensor())
    expected = FULL - 0.5 * x.T @ np.ones((2, 4), np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_create_partitioned_variables_returns_the_parts():
    parts = mf.create_partitioned_variables([10, 4], [3, 1], FULL, name="cp")
    assert [v.op.name for v in parts] == ["cp/part_0", "cp/part_1", "cp/part_2"]
    values = _run([v.value() for v in parts])
    np.testing.assert_array_equal(np.concatenate(values), FULL)
    unnamed = mf.create_partitioned_variables([4], [2], mf.zeros_initializer())
    assert [v.op.name for v in unnamed] == ["PartitionedVariable/part_0",
                                            "PartitionedVariable/part_1"]
    with pytest.raises(mf.errors.InvalidArgumentError, match="same length"):
        mf.create_partitioned_variables([10, 4], [2], FULL)


def test_slots_of_parts_are_parts_of_the_full_slot():
    pv = mf.get_variable("emb", [10, 4], partitioner=mf.fixed_size_partitioner(3))
    loss = mf.reduce_sum(mf.square(pv.as_tensor()))
    opt = mf.train.MomentumOptimizer(0.1, 0.9)
    opt.minimize(loss)
    slots = [opt.get_slot(v, "momentum") for v in pv]
    assert [s.op.name for s in slots] == [f"emb/part_{i}/Momentum" for i in range(3)]
    infos = [s._save_slice_info for s in slots]
    assert [i.full_name for i in infos] == ["emb/Momentum"] * 3
    assert [i.spec for i in infos] == [v._save_slice_info.spec for v in pv]
