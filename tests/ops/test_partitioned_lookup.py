"""DynamicPartition, DynamicStitch and embedding_lookup over sharded tables: forward against
numpy, gradients against finite differences, sparse gradients per shard, colocation and
errors that name the op."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.gradients import densify
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(5)
VOCAB, DIM = 10, 3
TABLE = R.uniform(-1.0, 1.0, size=(VOCAB, DIM))


def arr(*shape):
    return R.uniform(-1.0, 1.0, size=shape)


def ints(*values):
    return np.array(values, dtype=np.int32)


def shards(table, n, strategy):
    """Split a full table into the shards ``strategy`` addresses (TF's layout)."""
    if strategy == "mod":
        return [table[p::n] for p in range(n)]
    return np.array_split(table, n)      # the first vocab % n shards get one extra row


GRAD_CASES = [
    GradCase("dynamic_partition", lambda d, p: mf.concat(mf.dynamic_partition(d, p, 3), 0),
             [arr(5, 2), ints(2, 0, 2, 1, 0)]),
    GradCase("dynamic_partition_matrix_partitions",
             lambda d, p: mf.concat(mf.dynamic_partition(d, p, 2), 0) * 1.5,
             [arr(2, 3, 2), np.array([[1, 0, 1], [0, 0, 1]], np.int64)]),
    GradCase("dynamic_partition_one_output_used",
             lambda d, p: mf.dynamic_partition(d, p, 3)[1] * 2.0,
             [arr(4, 3), ints(1, 2, 1, 1)]),
    GradCase("dynamic_stitch", lambda i0, i1, d0, d1: mf.dynamic_stitch([i0, i1], [d0, d1]),
             [ints(0, 4, 2), ints(3, 1), arr(3, 2), arr(2, 2)]),
    GradCase("dynamic_stitch_matrix_indices",
             lambda i0, i1, d0, d1: mf.dynamic_stitch([i0, i1], [d0, d1]),
             [np.array([[5, 2], [0, 3]], np.int32), ints(4, 1), arr(2, 2, 3), arr(2, 3)]),
    GradCase("embedding_lookup_three_shards_div",
             lambda p0, p1, p2, i: mf.nn.embedding_lookup([p0, p1, p2], i,
                                                          partition_strategy="div"),
             [arr(4, 2), arr(3, 2), arr(3, 2), ints(9, 0, 4, 4, 6)]),
    GradCase("embedding_lookup_two_shards_mod_matrix_ids",
             lambda p0, p1, i: mf.nn.embedding_lookup([p0, p1], i),
             [arr(3, 2), arr(2, 2), np.array([[1, 4], [0, 1]], np.int64)]),
    # Rows of norm 0.5 (kept) and ~2.7 and ~4.3 (scaled down to 1.5), an id looked up twice.
    GradCase("embedding_lookup_max_norm_one_table",
             lambda p, i: mf.nn.embedding_lookup(p, i, max_norm=1.5),
             [np.array([[0.3, -0.4], [2.0, 1.8], [-3.0, 3.1]]),
              np.array([[2, 0], [1, 2]], np.int64)]),
    GradCase("embedding_lookup_max_norm_two_shards_mod",
             lambda p0, p1, i: mf.nn.embedding_lookup([p0, p1], i, max_norm=1.5),
             [np.array([[0.3, -0.4], [-3.0, 3.1]]), np.array([[2.0, 1.8]]),
              ints(2, 1, 0, 1)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# -- DynamicPartition / DynamicStitch forward -------------------------------------------------

def test_dynamic_partition_keeps_order_within_each_partition():
    data = np.array([10, 20, 30, 40, 50], np.float32)
    with mf.Session() as sess:
        outs = sess.run(mf.dynamic_partition(data, ints(0, 0, 1, 1, 0), 2))
    np.testing.assert_array_equal(outs[0], [10, 20, 50])
    np.testing.assert_array_equal(outs[1], [30, 40])


def test_dynamic_partition_with_matrix_partitions_and_an_empty_partition():
    data = np.arange(12, dtype=np.float64).reshape(2, 3, 2)
    parts = np.array([[2, 0, 2], [0, 0, 2]], np.int32)
    outs = mf.dynamic_partition(data, parts, 3)
    assert [o.shape.as_list() for o in outs] == [[None, 2]] * 3
    with mf.Session() as sess:
        got = sess.run(outs)
    for i in range(3):
        np.testing.assert_array_equal(got[i], data[parts == i])
    assert got[1].shape == (0, 2)


def test_dynamic_stitch_matches_tensorflows_example():
    indices = [np.asarray(6, np.int32), ints(4, 1), np.array([[5, 2], [0, 3]], np.int32)]
    data = [np.array([61, 62]), np.array([[41, 42], [11, 12]]),
            np.array([[[51, 52], [21, 22]], [[1, 2], [31, 32]]])]
    expected = [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]]
    check_forward(lambda *xs: mf.dynamic_stitch(xs[:3], xs[3:]), indices + data,
                  np.array(expected))
    merged = mf.dynamic_stitch([mf.constant(i) for i in indices], data)
    assert merged.shape.as_list() == [7, 2]      # constant indices: the row count is known


def test_dynamic_stitch_later_entries_win_where_indices_repeat():
    with mf.Session() as sess:
        got = sess.run(mf.dynamic_stitch([ints(0, 1), ints(1, 2)],
                                         [np.array([1., 2.]), np.array([3., 4.])]))
    np.testing.assert_array_equal(got, [1., 3., 4.])


def test_partition_then_stitch_restores_the_data():
    data = arr(7, 2)
    parts = ints(2, 0, 1, 2, 2, 0, 1)
    positions = mf.range(7)
    restored = mf.dynamic_stitch(mf.dynamic_partition(positions, parts, 3),
                                 mf.dynamic_partition(data, parts, 3))
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(restored), data)


def test_range_counts_like_numpy():
    assert mf.range(5).shape.as_list() == [5]
    n = mf.placeholder(mf.int32, [])
    dynamic = mf.range(1, n, 2)
    assert dynamic.shape.as_list() == [None]
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(mf.range(5)), np.arange(5))
        np.testing.assert_array_equal(sess.run(mf.range(2, 9, 3)), [2, 5, 8])
        np.testing.assert_array_equal(sess.run(dynamic, {n: 8}), [1, 3, 5, 7])
        np.testing.assert_allclose(sess.run(mf.range(0.0, 1.0, 0.25)), [0, .25, .5, .75])


def test_dynamic_partition_errors_name_the_op():
    with pytest.raises(mf.errors.InvalidArgumentError, match="prefix of the data shape"):
        mf.dynamic_partition(np.zeros((3, 2)), ints(0, 1), 2)
    with pytest.raises(mf.errors.InvalidArgumentError, match="num_partitions"):
        mf.dynamic_partition(np.zeros(3), ints(0, 1, 0), 0)
    p = mf.placeholder(mf.int32, [3])
    out = mf.dynamic_partition(np.zeros(3), p, 2, name="split_rows")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Partition index out of range in op 'split_rows'.*got 2"):
            sess.run(out, {p: [0, 2, 1]})


def test_dynamic_stitch_errors():
    with pytest.raises(mf.errors.InvalidArgumentError, match="as many index tensors"):
        mf.dynamic_stitch([ints(0)], [])
    with pytest.raises(mf.errors.InvalidArgumentError, match="must agree"):
        mf.dynamic_stitch([ints(0), ints(1)], [np.zeros((1, 2)), np.zeros((1, 3))])
    i = mf.placeholder(mf.int32, [2])
    out = mf.dynamic_stitch([i], [np.zeros((2, 2))], name="merge")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="'merge'.*>= 0"):
            sess.run(out, {i: [0, -1]})


# -- embedding_lookup over shards ----------------------------------------------------------

IDS = {
    "scalar": np.asarray(7, np.int64),
    "vector": np.array([9, 0, 3, 3, 5, 1], np.int64),
    "matrix": np.array([[2, 8, 4], [6, 0, 9]], np.int32),
}


@pytest.mark.parametrize("ids_kind", sorted(IDS))
@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_sharded_lookup_equals_take_on_the_full_table(n, strategy, ids_kind):
    ids = IDS[ids_kind]
    parts = shards(TABLE, n, strategy)
    check_forward(lambda *xs: mf.nn.embedding_lookup(list(xs[:-1]), xs[-1],
                                                     partition_strategy=strategy),
                  parts + [ids], np.take(TABLE, ids, axis=0))


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_sharded_lookup_with_shapes_known_only_at_run_time(strategy):
    parts = shards(TABLE, 3, strategy)
    phs = [mf.placeholder(mf.float64, [None, DIM]) for _ in parts]
    unknown = [mf.placeholder(mf.float64, None) for _ in parts]
    ids = mf.placeholder(mf.int64, None)
    out = mf.nn.embedding_lookup(phs, ids, partition_strategy=strategy)
    out_unknown = mf.nn.embedding_lookup(unknown, ids, partition_strategy=strategy)
    assert out.shape.ndims is None
    feed = {ids: IDS["matrix"], **dict(zip(phs, parts)), **dict(zip(unknown, parts))}
    with mf.Session() as sess:
        got, got_unknown = sess.run([out, out_unknown], feed)
    np.testing.assert_array_equal(got, np.take(TABLE, IDS["matrix"], axis=0))
    np.testing.assert_array_equal(got_unknown, np.take(TABLE, IDS["matrix"], axis=0))


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_lookup_in_a_partitioned_variable(strategy):
    pv = mf.get_variable("emb", initializer=TABLE, dtype=mf.float64,
                         partitioner=mf.fixed_size_partitioner(3))
    ids = IDS["vector"]
    out = mf.nn.embedding_lookup(pv, ids, partition_strategy=strategy)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        got = sess.run(out)
    # "div" addresses the rows of the full value; "mod" (TensorFlow's default) reads
    # row id // 3 of part id % 3: another, equally learnable, layout of the same parts.
    parts = np.array_split(TABLE, 3)
    expected = np.take(TABLE, ids, axis=0) if strategy == "div" else \
        np.stack([parts[i % 3][i // 3] for i in ids])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_gradients_per_shard_are_sparse_slices_of_the_full_gradient(n, strategy):
    ids = IDS["matrix"]
    weights = R.standard_normal(ids.shape + (DIM,))
    parts = [mf.Variable(p, name=f"shard_{i}") for i, p in enumerate(
        shards(TABLE, n, strategy))]
    full = mf.Variable(TABLE, name="full")
    sharded_loss = mf.reduce_sum(
        mf.nn.embedding_lookup(parts, ids, partition_strategy=strategy) * weights)
    full_loss = mf.reduce_sum(mf.nn.embedding_lookup(full, ids) * weights)
    grads = mf.gradients(sharded_loss, parts)
    full_grad = mf.gradients(full_loss, full)[0]
    assert all(isinstance(g, mf.IndexedSlices) for g in grads), grads
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        got = sess.run([densify(g) for g in grads])
        expected = sess.run(densify(full_grad))
        rows = sess.run([g.values for g in grads])
    for p, (g, want) in enumerate(zip(got, shards(expected, n, strategy))):
        np.testing.assert_allclose(g, want, rtol=1e-12, err_msg=f"shard {p}")
    # Only the rows looked up travel: one per id that landed on the shard.
    assert sum(len(r) for r in rows) == ids.size


def test_each_shard_is_read_by_a_gather_colocated_with_it():
    parts = []
    for task, part in enumerate(shards(TABLE, 3, "div")):
        with mf.device(f"/job:ps/task:{task}"):
            parts.append(mf.Variable(part, name=f"shard_{task}"))
    with mf.device("/job:worker/task:0"):
        out = mf.nn.embedding_lookup(parts, IDS["vector"], partition_strategy="div")
    graph = mf.get_default_graph()
    gathers = [op for op in graph.get_operations() if op.type == "GatherV2"]
    assert [g.device for g in gathers] == [p.device for p in parts]
    assert [g.colocation_groups() for g in gathers] == [[f"loc:@shard_{i}"] for i in range(3)]
    stitch = next(op for op in graph.get_operations() if op.type == "DynamicStitch")
    assert stitch.name == "embedding_lookup" and stitch.device == "/job:worker/task:0"
    assert out.device == "/job:worker/task:0"


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("bad_id", [10, -1, 2 ** 40])
def test_out_of_range_ids_fail_at_run_time_naming_the_callers_id(strategy, bad_id):
    # The id as the caller gave it, not the row of a shard it would have turned into.
    ids = mf.placeholder(mf.int64, [None])
    out = mf.nn.embedding_lookup([mf.constant(p) for p in shards(TABLE, 3, strategy)], ids,
                                 partition_strategy=strategy)
    with mf.Session() as sess, pytest.raises(
            mf.errors.InvalidArgumentError,
            match=rf"Id {bad_id} \(at position 1 of the ids\) is not a row of table .*10 "
                  rf"rows in 3 parts.* in op 'embedding_lookup/check_ids' \(CheckTableIds\)"):
        sess.run(out, {ids: [0, bad_id]})


def test_an_id_out_of_a_partitioned_variable_names_the_variable():
    table = mf.get_variable("emb", [10, 2], partitioner=mf.fixed_size_partitioner(2))
    ids = mf.placeholder(mf.int64, [None])
    out = mf.nn.embedding_lookup(table, ids)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Id 27 .* not a row of table 'emb' \(10 rows in 2 parts\)"):
            sess.run(out, {ids: [3, 27]})


def clipped_rows(table, ids, max_norm):
    rows = np.take(table, ids, axis=0)
    norms = np.sqrt((rows * rows).sum(axis=-1, keepdims=True))
    return rows * np.minimum(1.0, max_norm / norms)


@pytest.mark.parametrize("ids_kind", sorted(IDS))
@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 3])
def test_max_norm_scales_each_looked_up_row_down_to_it(n, strategy, ids_kind):
    # TABLE's rows have norms from 0.72 to 1.45: those above 1 come back scaled to norm 1,
    # the others unchanged, whatever the ids' shape and the table's sharding.
    ids = IDS[ids_kind]
    parts = shards(TABLE, n, strategy)
    check_forward(lambda *xs: mf.nn.embedding_lookup(list(xs[:-1]), xs[-1],
                                                     partition_strategy=strategy,
                                                     max_norm=1.0),
                  parts + [ids], clipped_rows(TABLE, ids, 1.0))


def test_max_norm_leaves_the_table_and_its_sparse_gradient_in_place():
    table = mf.Variable(TABLE, name="table")
    rows = mf.nn.embedding_lookup(table, IDS["vector"], max_norm=0.5)
    grad = mf.gradients(mf.reduce_sum(rows), table)[0]
    assert isinstance(grad, mf.IndexedSlices)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        got, after = sess.run([rows, table])
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1),
                               np.minimum(np.linalg.norm(TABLE[IDS["vector"]], axis=-1), 0.5))
    np.testing.assert_array_equal(after, TABLE)


def test_max_norm_clips_a_one_dimensional_table_by_absolute_value():
    # A 1-D table's rows are numbers: each is clipped to [-max_norm, max_norm], as TF does.
    out = mf.nn.embedding_lookup(np.array([-3.0, 0.5, 2.0]), [[0, 1], [2, 2]], max_norm=1.0)
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(out), [[-1.0, 0.5], [1.0, 1.0]])


def test_max_norm_refuses_a_table_of_unknown_rank():
    table = mf.placeholder(mf.float64, None, name="unknown_table")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="max_norm needs the table's rank.*'unknown_table:0'"):
        mf.nn.embedding_lookup(table, [0], max_norm=1.0)


def test_embedding_lookup_argument_errors():
    with pytest.raises(mf.errors.InvalidArgumentError, match="partition_strategy"):
        mf.nn.embedding_lookup([TABLE, TABLE], [0], partition_strategy="hash")
    with pytest.raises(mf.errors.InvalidArgumentError, match="at least one param"):
        mf.nn.embedding_lookup([], [0])
    with pytest.raises(mf.errors.InvalidArgumentError, match="at least one row per shard"):
        mf.nn.embedding_lookup([np.zeros((1, 2)), np.zeros((0, 2)), np.zeros((0, 2))], [0],
                               partition_strategy="div")
    with pytest.raises(mf.errors.InvalidArgumentError, match="same row shape"):
        mf.nn.embedding_lookup([np.zeros((2, 2)), np.zeros((2, 3))], [0])


@pytest.mark.parametrize("make_opt", [
    lambda: mf.train.GradientDescentOptimizer(0.5),
    lambda: mf.train.AdagradOptimizer(0.5)], ids=["sgd", "adagrad"])
def test_training_a_partitioned_table_matches_the_unpartitioned_one(make_opt):
    ids = IDS["matrix"]
    weights = R.standard_normal(ids.shape + (DIM,))
    results = []
    for partitioner in (None, mf.fixed_size_partitioner(3)):
        graph = mf.Graph()
        with graph.as_default():
            table = mf.get_variable("emb", initializer=TABLE, dtype=mf.float64,
                                    partitioner=partitioner)
            rows = mf.nn.embedding_lookup(table, ids, partition_strategy="div")
            loss = mf.reduce_sum(mf.square(rows - weights))
            opt = make_opt()
            grads_and_vars = opt.compute_gradients(loss)
            assert all(isinstance(g, mf.IndexedSlices) for g, _ in grads_and_vars)
            train = opt.apply_gradients(grads_and_vars)
            full = table.as_tensor() if partitioner else table.value()
            with mf.Session() as sess:
                sess.run(mf.global_variables_initializer())
                for _ in range(3):
                    sess.run(train)
                results.append(sess.run(full))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)
    assert not np.allclose(results[0], TABLE)
