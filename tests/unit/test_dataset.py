"""tf.data.Dataset over in-memory arrays: what each get_next returns, with which dtypes and
static shapes; end of input; shuffling (seeded, buffered, reshuffled per epoch); one-shot,
initializable and reinitializable iterators; where the iterator's state lives and runs."""

import collections
import operator

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.framework.graph_def import as_graph_def, import_graph_def
from mpiflow.ops import dataset_streams
from mpiflow.runtime.placement import Placer

X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10, dtype=np.int64) * 10


def drain(fetch, sess=None, feed=None, limit=1000):
    """Run ``fetch`` until OutOfRangeError; return the values it gave."""
    own = sess is None
    sess = sess or mf.Session()
    out = []
    try:
        for _ in range(limit):
            out.append(sess.run(fetch, feed))
        raise AssertionError(f"no end of input after {limit} runs")
    except mf.errors.OutOfRangeError:
        return out
    finally:
        if own:
            sess.close()


def labels(batches):
    return [list(np.atleast_1d(b[1] // 10)) for b in batches]


# -- elements, structure, dtypes and static shapes ---------------------------------------------

def test_slices_come_out_in_order_then_the_input_ends():
    x, y = mf.data.Dataset.from_tensor_slices((X, Y)).make_one_shot_iterator().get_next()
    assert (x.dtype, y.dtype) == (mf.float32, mf.int64)
    assert (x.shape.as_list(), y.shape.as_list()) == ([2], [])
    with mf.Session() as sess:
        got = drain((x, y), sess)
        with pytest.raises(mf.errors.OutOfRangeError, match="End of sequence"):
            sess.run(x)                     # it stays at the end
    np.testing.assert_array_equal(np.stack([g[0] for g in got]), X)
    np.testing.assert_array_equal([g[1] for g in got], Y)


def test_elements_keep_the_nesting_of_dicts_namedtuples_and_tuples():
    Pair = collections.namedtuple("Pair", "image label")
    ds = mf.data.Dataset.from_tensor_slices({"b": Pair(X, Y), "a": (Y, {"c": X})})
    assert ds.output_types == {"a": (mf.int64, {"c": mf.float32}),
                               "b": Pair(mf.float32, mf.int64)}
    element = ds.make_one_shot_iterator().get_next()
    assert isinstance(element["b"], Pair)
    with mf.Session() as sess:
        first = sess.run(element)
    np.testing.assert_array_equal(first["b"].image, X[0])
    assert first["a"][0] == 0 and first["b"].label == 0
    np.testing.assert_array_equal(first["a"][1]["c"], X[0])


def test_a_list_is_one_tensor_with_tensorflows_python_dtypes():
    ds = mf.data.Dataset.from_tensor_slices([[1, 2], [3, 4], [5, 6]])
    assert ds.output_types == mf.int32 and ds.output_shapes.as_list() == [2]
    assert [v.tolist() for v in drain(ds.make_one_shot_iterator().get_next())] == \
        [[1, 2], [3, 4], [5, 6]]


def test_from_tensors_is_one_element_of_the_whole_arrays():
    ds = mf.data.Dataset.from_tensors((X, Y))
    assert ds.output_shapes[0].as_list() == [10, 2]
    (x, y), = drain(ds.make_one_shot_iterator().get_next())
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(y, Y)


def test_range_counts_like_pythons_range():
    assert drain(mf.data.Dataset.range(2, 11, 3).make_one_shot_iterator().get_next()) == \
        [2, 5, 8]


def test_zip_puts_sources_side_by_side_and_stops_at_the_shortest():
    Pair = collections.namedtuple("Pair", "x n")
    ds = mf.data.Dataset.zip(Pair(mf.data.Dataset.from_tensor_slices({"x": X}),
                                  mf.data.Dataset.range(7))).batch(3)
    assert ds.output_types == Pair({"x": mf.float32}, mf.int64)
    got = drain(ds.make_one_shot_iterator().get_next())
    assert [g.n.tolist() for g in got] == [[0, 1, 2], [3, 4, 5], [6]]
    np.testing.assert_array_equal(np.concatenate([g.x["x"] for g in got]), X[:7])


def test_concatenate_joins_sources_end_to_end():
    a = mf.placeholder(mf.float32, [None, 2])
    ds = mf.data.Dataset.from_tensor_slices((X[:3], Y[:3])).concatenate(
        mf.data.Dataset.from_tensor_slices((X[7:], Y[7:])))
    assert labels(drain(ds.batch(4).make_one_shot_iterator().get_next())) == \
        [[0, 1, 2, 7], [8, 9]]
    fed = mf.data.Dataset.from_tensor_slices(X[:2]).concatenate(
        mf.data.Dataset.from_tensor_slices(a))
    it = fed.make_initializable_iterator()
    with mf.Session() as sess:
        sess.run(it.initializer, {a: X[5:6]})
        np.testing.assert_array_equal(np.stack(drain(it.get_next(), sess)), X[[0, 1, 5]])


@pytest.mark.parametrize("join,match", [
    (lambda: mf.data.Dataset.zip((mf.data.Dataset.range(3).batch(2), mf.data.Dataset.range(3))),
     "before any stage"),
    (lambda: mf.data.Dataset.range(3).concatenate(mf.data.Dataset.range(3).map(lambda v: v)),
     "before any stage"),
    (lambda: mf.data.Dataset.range(3).concatenate(mf.data.Dataset.from_tensor_slices(X)),
     "int64 \\(\\) here and float32 \\(2,\\)"),
])
def test_zip_and_concatenate_of_what_they_cannot_join_say_what_to_do(join, match):
    with pytest.raises((mf.errors.UnimplementedError, mf.errors.InvalidArgumentError),
                       match=match):
        join()


# -- batch, repeat, take, skip, shard ------------------------------------------------------------

def test_batch_has_an_unknown_batch_dimension_and_a_short_last_batch():
    ds = mf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    assert ds.output_shapes[0].as_list() == [None, 2]
    got = drain(ds.make_one_shot_iterator().get_next())
    assert labels(got) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    np.testing.assert_array_equal(got[2][0], X[8:])


def test_drop_remainder_gives_a_static_batch_dimension_and_only_full_batches():
    ds = mf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)
    x, _ = ds.make_one_shot_iterator().get_next()
    assert x.shape.as_list() == [4, 2]
    assert labels(drain(ds.make_one_shot_iterator().get_next())) == \
        [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batch_then_repeat_repeats_the_short_batch_and_repeat_then_batch_spans_epochs():
    base = mf.data.Dataset.from_tensor_slices((X[:5], Y[:5]))
    assert labels(drain(base.batch(2).repeat(2).make_one_shot_iterator().get_next())) == \
        [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4]]
    assert labels(drain(base.repeat(2).batch(4).make_one_shot_iterator().get_next())) == \
        [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4]]


def test_repeat_forever_take_skip_and_shard_pick_elements():
    ds = mf.data.Dataset.range(5)
    assert drain(ds.repeat().skip(3).take(6).make_one_shot_iterator().get_next()) == \
        [3, 4, 0, 1, 2, 3]
    assert drain(ds.shard(2, 1).make_one_shot_iterator().get_next()) == [1, 3]
    assert drain(ds.take(-1).skip(0).make_one_shot_iterator().get_next()) == [0, 1, 2, 3, 4]
    assert drain(ds.repeat(0).make_one_shot_iterator().get_next()) == []
    assert ds.prefetch(4) is ds


def test_a_batch_of_batches_and_a_short_inner_batch():
    ds = mf.data.Dataset.range(7).batch(3).batch(2)
    assert ds.output_shapes.as_list() == [None, None]
    got = drain(ds.make_one_shot_iterator().get_next())
    assert [g.tolist() for g in got] == [[[0, 1, 2], [3, 4, 5]], [[6]]]
    ragged = mf.data.Dataset.range(5).batch(2).batch(3).make_one_shot_iterator().get_next()
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match="Cannot batch elements of different shapes"):
        sess.run(ragged)


def test_repeating_an_empty_dataset_forever_ends_at_once():
    empty = mf.data.Dataset.from_tensor_slices(np.zeros((0, 3), np.float32))
    assert drain(empty.repeat().batch(2).make_one_shot_iterator().get_next()) == []


# -- shuffle ------------------------------------------------------------------------------------

def orders(ds, runs=1):
    """The label order of each of ``runs`` initializations of one iterator."""
    it = ds.make_initializable_iterator()
    element = it.get_next()
    out = []
    with mf.Session() as sess:
        for _ in range(runs):
            sess.run(it.initializer)
            out.append([int(v) for v in drain(element, sess)])
    return out


def test_a_large_buffer_shuffles_each_epoch_differently_yet_reproducibly():
    ds = mf.data.Dataset.range(50).shuffle(50, seed=7).repeat(3)
    (order,), (again,) = orders(ds), orders(ds)
    epochs = [order[i * 50:(i + 1) * 50] for i in range(3)]
    assert all(sorted(e) == list(range(50)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert order == again                       # same seed, new graph-free session
    first, rerun = orders(ds, runs=2)
    assert first == rerun == order              # re-initializing starts the same sequence


def test_reshuffle_each_iteration_false_repeats_one_order():
    ds = mf.data.Dataset.range(30).shuffle(30, seed=3, reshuffle_each_iteration=False)
    (order,) = orders(ds.repeat(2))
    assert order[:30] == order[30:] != list(range(30))


def test_the_graph_seed_alone_makes_shuffles_reproducible_and_distinct():
    def build():
        with mf.Graph().as_default():
            mf.set_random_seed(42)
            ds = mf.data.Dataset.range(40)
            return orders(ds.shuffle(40))[0], orders(ds.shuffle(40))[0]
    a1, b1 = build()
    a2, b2 = build()
    assert (a1, b1) == (a2, b2)
    assert a1 != b1                             # two shuffles of one graph differ


def test_an_unseeded_shuffle_draws_a_new_order_at_each_initialization():
    first, second = orders(mf.data.Dataset.range(60).shuffle(60), runs=2)
    assert sorted(first) == sorted(second) == list(range(60)) and first != second


def buffered_shuffle_reference(n, size, seeds, chunk):
    """The one-at-a-time buffer of TF's shuffle, fed the draws the engine makes (one call
    to ``integers`` per source chunk after the buffer is full)."""
    rng = np.random.default_rng(seeds)
    buffer, out = [], []
    for start in range(0, n, chunk):
        items = list(range(start, min(n, start + chunk)))
        while items and len(buffer) < size:
            buffer.append(items.pop(0))
        if items:
            for item, slot in zip(items, rng.integers(0, size, size=len(items))):
                out.append(buffer[slot])
                buffer[slot] = item
    return out + [buffer[i] for i in rng.permutation(len(buffer))]


@pytest.mark.parametrize("n,size,chunk", [(100, 10, 1 << 16), (100, 10, 7), (23, 5, 4),
                                          (10, 1, 3), (8, 20, 3)])
def test_the_vectorised_buffer_returns_what_a_one_at_a_time_buffer_would(
        monkeypatch, n, size, chunk):
    monkeypatch.setattr(dataset_streams, "SOURCE_CHUNK", chunk)
    stream = dataset_streams.build(n, [["shuffle", size, 5, 6, True]])
    got = np.concatenate(list(stream.chunks())).tolist()
    assert got == buffered_shuffle_reference(n, size, [5, 6], chunk)
    # A buffer of b items can only hand out items at most b - 1 ahead of their position.
    assert all(item <= t + size - 1 for t, item in enumerate(got))


def test_a_buffer_far_larger_than_the_data_is_not_allocated_whole():
    """shuffle(10**12) is legal in TF (a "shuffle everything" buffer): the buffer holds
    what arrives, so it gives the uniform shuffle of any buffer >= the data."""
    ds = mf.data.Dataset.range(10)
    (huge,), (exact,) = orders(ds.shuffle(10 ** 12, seed=4)), orders(ds.shuffle(10, seed=4))
    assert huge == exact and sorted(huge) == list(range(10))


def test_cache_replays_its_first_complete_pass_and_drops_a_partial_one():
    """As TF's in-memory cache: a shuffle before it is drawn once per initialization; a
    pass cut short by a take is not kept, so the next pass draws anew."""
    (order,) = orders(mf.data.Dataset.range(8).shuffle(8, seed=5).cache().repeat(3))
    assert order[:8] == order[8:16] == order[16:] != list(range(8))
    (cut,) = orders(mf.data.Dataset.range(8).shuffle(8, seed=5).cache().take(3).repeat(2))
    assert cut[:3] == order[:3] and cut[3:] != cut[:3]
    (again,) = orders(mf.data.Dataset.range(8).cache().shuffle(8, seed=5).repeat(2))
    assert sorted(again[:8]) == sorted(again[8:]) == list(range(8)) and again[:8] != again[8:]
    with pytest.raises(mf.errors.UnimplementedError, match="use cache()"):
        mf.data.Dataset.range(3).cache("/tmp/data.cache")


def test_a_buffer_of_one_keeps_the_order():
    (order,) = orders(mf.data.Dataset.range(12).shuffle(1, seed=1))
    assert order == list(range(12))


# -- map --------------------------------------------------------------------------------------

def test_map_after_batch_runs_on_each_batch_and_unpacks_tuples():
    ds = mf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    mapped = ds.map(lambda x, y: {"x": x * 2.0, "y": y + 1})
    element = mapped.make_one_shot_iterator().get_next()
    assert element["x"].shape.as_list() == [None, 2]
    got = drain(element)
    np.testing.assert_array_equal(got[0]["x"], X[:4] * 2)
    np.testing.assert_array_equal(got[2]["y"], Y[8:] + 1)


def test_map_of_single_elements_then_shuffle_and_repeat_is_exact():
    ds = mf.data.Dataset.range(6).map(lambda v: v * 10).shuffle(6, seed=2).repeat(2)
    (order,) = orders(ds)
    assert sorted(order) == sorted([v * 10 for v in range(6)] * 2)


# Recorded from TF 2.21's tf.compat.v1: from_tensor_slices((XM, arange(8))).map(_parse)
# .batch(3); each row is centered on its own mean and scaled by its own sum.
XM = (np.arange(24, dtype=np.float32).reshape(8, 3) ** 1.5) / 7
TF_PARSED_X = [
    [[-0.05139843747019768, -0.011122021824121475, 0.06252046674489975],
     [-0.06455643475055695, -0.0027656801976263523, 0.06732214987277985],
     [-0.05098511651158333, -0.0012312071630731225, 0.05221636965870857]],
    [[-0.040496595203876495, -0.000681338831782341, 0.0411779060959816],
     [-0.03319833055138588, -0.00042863740236498415, 0.033626988530159],
     [-0.027993036434054375, -0.00029322277987375855, 0.028286289423704147]],
    [[-0.02414023131132126, -0.0002127530606230721, 0.024352984502911568],
     [-0.021190742030739784, -0.00016115675680339336, 0.02135193906724453]]]


def _parse(a, b):
    return {"x": (a - mf.reduce_mean(a)) / mf.reduce_sum(a + 1.0), "y": mf.cast(b, mf.int32) * 2}


def test_a_map_before_batch_runs_on_each_element_as_tensorflow():
    ds = mf.data.Dataset.from_tensor_slices((XM, np.arange(8))).map(_parse).batch(3)
    got = drain(ds.make_one_shot_iterator().get_next())
    assert len(got) == 3
    for batch, want in zip(got, TF_PARSED_X):
        np.testing.assert_array_equal(batch["x"], np.array(want, np.float32))
    assert [b["y"].tolist() for b in got] == [[0, 2, 4], [6, 8, 10], [12, 14]]
    assert got[0]["y"].dtype == np.int32


def test_map_shuffle_batch_gives_each_shuffled_element_mapped_on_its_own():
    def centered(x, y):
        return x - mf.reduce_mean(x), y        # on a whole batch: the batch's mean
    ds = mf.data.Dataset.from_tensor_slices((X, Y)).map(centered).shuffle(10, seed=3)
    x, y = ds.batch(4).repeat(2).make_one_shot_iterator().get_next()
    got = drain((x, y))
    plain = mf.data.Dataset.from_tensor_slices((X, Y)).shuffle(10, seed=3).batch(4).repeat(2)
    order = [b[1] for b in drain(plain.make_one_shot_iterator().get_next())]
    assert [b[1].tolist() for b in got] == [o.tolist() for o in order]
    for xb, yb in got:
        rows = X[yb // 10]
        np.testing.assert_array_equal(xb, rows - rows.mean(axis=1, keepdims=True))
        assert xb.shape[1:] == (2,) and xb.dtype == np.float32


def test_a_mapped_dataset_knows_its_output_types_and_shapes_as_tensorflow():
    ds = mf.data.Dataset.from_tensor_slices((XM, np.arange(8))).map(_parse)
    assert ds.output_types == {"x": mf.float32, "y": mf.int32}
    assert {k: v.as_list() for k, v in ds.output_shapes.items()} == {"x": [3], "y": []}
    batched = ds.batch(3)       # TF's: {'x': (None, 3), 'y': (None,)}
    assert {k: v.as_list() for k, v in batched.output_shapes.items()} == \
        {"x": [None, 3], "y": [None]}
    after = batched.map(lambda e: (e["x"][:, :2], e["y"]))
    assert after.output_types == (mf.float32, mf.int32)
    assert [s.as_list() for s in after.output_shapes] == [[None, 2], [None]]
    it = after.make_one_shot_iterator()
    assert it.output_types == (mf.float32, mf.int32)     # before get_next, as TF's


def test_from_structure_takes_a_mapped_dataset_and_its_maps_run_per_element():
    train = mf.data.Dataset.from_tensor_slices((XM, np.arange(8))).map(_parse).batch(3)
    test = mf.data.Dataset.from_tensor_slices((XM[:2], np.arange(2))).map(_parse).batch(3) \
        .map(lambda e: {"x": e["x"] * 2.0, "y": e["y"]})   # after the last batch
    it = mf.data.Iterator.from_structure(train.output_types, train.output_shapes)
    element = it.get_next()
    to_train, to_test = it.make_initializer(train), it.make_initializer(test)
    with mf.Session() as sess:
        sess.run(to_train)
        np.testing.assert_array_equal(sess.run(element)["x"], np.float32(TF_PARSED_X[0]))
        sess.run(to_test)
        got = sess.run(element)
    np.testing.assert_array_equal(got["x"], np.float32(TF_PARSED_X[0][:2]) * 2)
    assert got["y"].tolist() == [0, 2]


def test_maps_between_batches_run_on_each_element_of_their_depth():
    ds = mf.data.Dataset.range(8).map(lambda v: v * 10).batch(2) \
        .map(lambda b: b - mf.reduce_min(b)).batch(2)
    assert ds.output_shapes.as_list() == [None, None]
    got = drain(ds.make_one_shot_iterator().get_next())
    assert [b.tolist() for b in got] == [[[0, 10], [0, 10]], [[0, 10], [0, 10]]]


def test_a_random_map_draws_per_element_and_a_seeded_one_again_at_each_initialization():
    with mf.Graph().as_default():
        mf.set_random_seed(7)
        ds = mf.data.Dataset.from_tensor_slices(np.zeros((6, 2), np.float32))
        ds = ds.map(lambda v: v + mf.random_uniform([])).batch(6)
        it = ds.make_initializable_iterator()
        element = it.get_next()
        with mf.Session() as sess:
            sess.run(it.initializer)
            first = sess.run(element)
            sess.run(it.initializer)
            again = sess.run(element)
    assert len(set(first[:, 0].tolist())) == 6           # one draw per element
    np.testing.assert_array_equal(first[:, 0], first[:, 1])
    np.testing.assert_array_equal(first, again)


def test_a_map_that_reads_an_outer_tensor_is_refused_where_it_runs_per_element():
    scale = mf.placeholder(mf.float32, [])
    weight = mf.Variable(2.0)
    for fn in (lambda v: v * scale, lambda v: v * weight, lambda v: scale):
        ds = mf.data.Dataset.from_tensor_slices(X).map(fn)
        with pytest.raises(mf.errors.UnimplementedError,
                           match=r"Dataset.batch after Dataset.map: Dataset.map\(<lambda>\) "
                                 r"reads tensor .* of the outer graph.*pass the value as a "
                                 r"component of the dataset .* or map after batching"):
            ds.batch(2)
        with pytest.raises(mf.errors.UnimplementedError, match="outer graph"):
            ds.output_types
    # After the last batch it runs in the graph, on the batch, and may read it.
    ds = mf.data.Dataset.from_tensor_slices(X).batch(4).map(lambda v: v * scale)
    x = ds.make_one_shot_iterator().get_next()
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(x, {scale: 3.0}), X[:4] * 3)
    it = mf.data.Iterator.from_structure(mf.float32, [None, 2])
    with pytest.raises(mf.errors.UnimplementedError, match="make_initializer: .*outer graph"):
        it.make_initializer(ds)


def test_a_map_that_creates_a_variable_is_refused():
    ds = mf.data.Dataset.from_tensor_slices(X).map(lambda v: v * mf.get_variable("w", []))
    with pytest.raises(mf.errors.UnimplementedError, match="creates a variable"):
        ds.batch(2)


def test_map_outputs_of_different_shapes_cannot_be_batched_naming_the_map_and_component():
    def ragged(v):
        return v, mf.range(v)
    ds = mf.data.Dataset.range(1, 4).map(ragged).batch(3)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Cannot batch the outputs of Dataset.map\(ragged\): component 1 "
                             r"has different shapes .* in op 'IteratorGetNext.*expected shape "
                             r"\[1\] \(element 0\), got shape \[2\] \(element 1\)"):
        drain(ds.make_one_shot_iterator().get_next())


# -- iterators ------------------------------------------------------------------------------

def test_an_initializable_iterator_reads_fed_arrays_and_restarts_at_each_initializer():
    x = mf.placeholder(mf.float32, [None, 2])
    it = mf.data.Dataset.from_tensor_slices(x).batch(3).make_initializable_iterator()
    batch = it.get_next()
    with mf.Session() as sess:
        with pytest.raises(mf.errors.FailedPreconditionError, match="run its initializer"):
            sess.run(batch)
        data = X.copy()
        sess.run(it.initializer, {x: data})
        data[:] = -1                            # the iterator holds its own copy
        np.testing.assert_array_equal(sess.run(batch), X[:3])
        sess.run(it.initializer, {x: X[5:]})
        np.testing.assert_array_equal(np.concatenate(drain(batch, sess)), X[5:])


def test_one_shot_iterators_need_constant_data():
    x = mf.placeholder(mf.float32, [None, 2])
    with pytest.raises(mf.errors.InvalidArgumentError, match="make_initializable_iterator"):
        mf.data.Dataset.from_tensor_slices(x).make_one_shot_iterator()
    with pytest.raises(mf.errors.InvalidArgumentError, match="has none"):
        mf.data.Dataset.range(3).make_one_shot_iterator().initializer


def test_a_reinitializable_iterator_switches_between_datasets_of_one_structure():
    train = mf.data.Dataset.from_tensor_slices((X, Y)).batch(5)
    test = mf.data.Dataset.from_tensor_slices((X[:3] + 100, Y[:3])).batch(5)
    it = mf.data.Iterator.from_structure(train.output_types, train.output_shapes)
    x, y = it.get_next()
    to_train, to_test = it.make_initializer(train), it.make_initializer(test)
    with mf.Session() as sess:
        sess.run(to_train)
        np.testing.assert_array_equal(sess.run(y), Y[:5])
        sess.run(to_test)
        np.testing.assert_array_equal(sess.run(x), X[:3] + 100)
    with pytest.raises(mf.errors.InvalidArgumentError, match="structure"):
        it.make_initializer(mf.data.Dataset.from_tensor_slices(X))
    with pytest.raises(mf.errors.InvalidArgumentError, match="float64"):
        it.make_initializer(mf.data.Dataset.from_tensor_slices((X.astype(np.float64), Y)))


def test_from_structure_takes_shapes_as_tuples_or_lists_nested_like_the_types():
    it = mf.data.Iterator.from_structure((mf.float32, {"a": mf.int64}),
                                         ((None, 2), {"a": [None]}))
    assert it.output_shapes[0].as_list() == [None, 2]
    assert it.output_shapes[1]["a"].as_list() == [None]
    with pytest.raises(mf.errors.InvalidArgumentError, match="structure of output_types"):
        mf.data.Iterator.from_structure((mf.float32, mf.int64), ((None, 2),))


def test_an_element_that_does_not_fit_the_iterators_static_shape_is_refused():
    """A from_structure iterator may promise a narrower shape than a dataset has (TF
    checks at each GetNext): a short last batch must not come out of a tensor whose
    static batch dimension says 4, which code like ``x.shape[0]`` would trust."""
    it = mf.data.Iterator.from_structure(mf.float32, [4, 2])
    x = it.get_next()
    init = it.make_initializer(mf.data.Dataset.from_tensor_slices(X).batch(4))
    with mf.Session() as sess:
        sess.run(init)
        np.testing.assert_array_equal(sess.run(x), X[:4])
        sess.run(x)
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Incompatible shapes at component 0.*expected \[4, 2\], "
                                 r"got \[2, 2\]"):
            sess.run(x)


def test_the_tf1_module_functions_make_the_same_iterators():
    ds = mf.data.Dataset.range(3)
    assert drain(mf.data.make_one_shot_iterator(ds).get_next()) == [0, 1, 2]
    assert drain(mf.compat.v1.data.make_one_shot_iterator(ds).get_next()) == [0, 1, 2]
    it = mf.data.make_initializable_iterator(ds)
    assert mf.data.get_output_types(ds) == mf.int64
    assert mf.data.get_output_shapes(it).as_list() == []


def test_each_session_has_its_own_iterator_position():
    element = mf.data.Dataset.range(4).make_one_shot_iterator().get_next()
    with mf.Session() as a, mf.Session() as b:
        assert [a.run(element), a.run(element)] == [0, 1]
        assert [b.run(element), a.run(element), b.run(element)] == [0, 2, 1]


def test_two_get_next_ops_advance_one_iterator():
    it = mf.data.Dataset.range(4).make_one_shot_iterator()
    first, second = it.get_next(), it.get_next()
    with mf.Session() as sess:
        assert [sess.run(first), sess.run(second), sess.run(first)] == [0, 1, 2]


def test_monitored_training_session_stops_cleanly_at_the_end_of_input():
    ds = mf.data.Dataset.from_tensor_slices((X, Y.astype(np.float32))).batch(4).repeat(2)
    x, y = ds.make_one_shot_iterator().get_next()
    w = mf.Variable(np.zeros(2, np.float32), name="w")
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - y))
    step = mf.train.get_or_create_global_step()
    train_op = mf.train.GradientDescentOptimizer(1e-3).minimize(loss, global_step=step)
    runs = 0
    with mf.train.MonitoredTrainingSession() as sess:
        while not sess.should_stop():
            sess.run(train_op)
            runs += 1
    assert runs == 6                            # 3 batches per epoch, 2 epochs, then the end


def test_the_iterator_stays_on_the_worker_under_replica_device_setter():
    cluster = mf.train.ClusterSpec({"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster,
                                                  worker_device="/job:worker/task:1")):
        ds = mf.data.Dataset.from_tensor_slices((X, Y)).shuffle(10, seed=1).batch(2)
        it = ds.make_initializable_iterator()
        x, _ = it.get_next()
        w = mf.Variable(np.ones(2, np.float32), name="w")
        out = mf.reduce_sum(x * w)
    placer = Placer(mf.get_default_graph(), cluster, "worker", 1)
    iterator_ops = [op for op in mf.get_default_graph().get_operations()
                    if op.type.startswith("Iterator")]
    assert {op.type for op in iterator_ops} == {"IteratorAnchor", "IteratorInit",
                                                "IteratorGetNext"}
    for op in iterator_ops + [out.op]:
        assert placer.task_of(op) == ("worker", 1), op.name
    assert placer.task_of(w.op)[0] == "ps"


def test_iterator_ops_are_plain_data_that_import_into_another_graph():
    """What a partition shipped to another rank carries: the pipeline is an attr."""
    with mf.Graph().as_default() as g:
        ds = mf.data.Dataset.from_tensor_slices({"x": X}).shuffle(10, seed=4).batch(3)
        x = ds.make_one_shot_iterator().get_next()["x"]
        want = drain(x)
    with mf.Graph().as_default() as h:
        import_graph_def(as_graph_def(g), name="")
        got = drain(h.get_tensor_by_name(x.name))
    assert len(got) == len(want) == 4
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_per_element_maps_travel_in_the_iterator_ops_and_import_into_another_graph():
    with mf.Graph().as_default() as g:
        ds = mf.data.Dataset.from_tensor_slices((XM, np.arange(8))).map(_parse).batch(3)
        x = ds.make_one_shot_iterator().get_next()["x"]
    with mf.Graph().as_default() as h:
        import_graph_def(as_graph_def(g), name="")
        got = drain(h.get_tensor_by_name(x.name))
    np.testing.assert_array_equal(got[1], np.float32(TF_PARSED_X[1]))


def test_autotune_is_taken_by_map_and_prefetch():
    assert mf.data.experimental.AUTOTUNE == mf.data.AUTOTUNE == -1
    ds = mf.data.Dataset.range(5).batch(2).map(
        lambda v: v * 2, num_parallel_calls=mf.data.experimental.AUTOTUNE)
    ds = ds.prefetch(mf.compat.v1.data.experimental.AUTOTUNE)
    assert [v.tolist() for v in drain(ds.make_one_shot_iterator().get_next())] == \
        [[0, 2], [4, 6], [8]]


# -- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("build,match", [
    (lambda: mf.data.Dataset.from_tensor_slices(np.float32(3)), "is a scalar"),
    (lambda: mf.data.Dataset.from_tensor_slices((X, Y[:5])), "same first dimension"),
    (lambda: mf.data.Dataset.range(3).batch(0), r"expected >= 1, got 0"),
    (lambda: mf.data.Dataset.range(3).shuffle(2.5), "expected an int"),
    (lambda: mf.data.Dataset.range(3).repeat().skip(-1), "never end"),
    (lambda: mf.data.Dataset.range(3).shard(2, 2), "0 <= index < num_shards"),
])
def test_bad_arguments_are_refused_when_the_dataset_is_built(build, match):
    with pytest.raises(mf.errors.InvalidArgumentError, match=match):
        build()


def test_fed_arrays_of_different_lengths_fail_at_initialization_naming_the_op():
    a, b = mf.placeholder(mf.float32, [None]), mf.placeholder(mf.float32, [None])
    it = mf.data.Dataset.from_tensor_slices((a, b)).make_initializable_iterator()
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match=r"same number of examples.*MakeIterator"):
        sess.run(it.initializer, {a: np.zeros(3), b: np.zeros(4)})


@pytest.mark.parametrize("use,words", [
    (lambda: mf.data.Dataset.list_files, r"Dataset\.list_files\. .*docs/tf1_api\.md"),
    (lambda: mf.data.Dataset.range(3).filter, r"Dataset\.filter: .*x\[mask\]"),
    (lambda: mf.data.Dataset.from_generator, "cannot hold a Python generator"),
    (lambda: mf.data.Dataset.range(3).padded_batch, "pad the arrays"),
    (lambda: mf.data.Dataset.range(3).shufle, r"did you mean tf\.data\.Dataset\.shuffle\?"),
    (lambda: mf.data.experimental.shuffle_and_repeat, r"shuffle\(buffer_size, seed\)"),
])
def test_a_dataset_method_mpiflow_lacks_says_so_and_what_to_do(use, words):
    with pytest.raises(mf.errors.UnsupportedAPIError, match=words) as info:
        use()
    assert isinstance(info.value, AttributeError)       # hasattr still answers False
    assert not hasattr(mf.data.Dataset.range(3), "flat_map")
    with pytest.raises(AttributeError, match="_private") as info:
        operator.attrgetter("_private")(mf.data.Dataset.range(3))
    assert not isinstance(info.value, mf.errors.UnsupportedAPIError)
