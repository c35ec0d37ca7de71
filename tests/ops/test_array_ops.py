"""Array, indexing and gather ops: forward against numpy, gradients against finite
differences (second order where a gradient op has its own gradient), and build/run errors
that name the op."""

import msgpack
import numpy as np
import pytest

import mpiflow as mf
from mpiflow.gradients import densify
from mpiflow.ops.weights_broadcast import align_rank
from tests.ops.gradcheck import GradCase, check_forward, check_gradient, second_order

R = np.random.default_rng(11)


def arr(*shape):
    return R.uniform(-1.0, 1.0, size=shape)


def ints(*values):
    return np.array(values, dtype=np.int32)


GRAD_CASES = [
    # existing ops: Reshape, ConcatV2, ConcatGrad, gather family
    GradCase("reshape", lambda a: mf.reshape(a, [4, -1]) * 1.0, [arr(2, 6)]),
    GradCase("reshape_second_order", second_order(lambda a: mf.reshape(a, [-1])), [arr(2, 3)]),
    GradCase("concat_axis1", lambda a, b: mf.concat([a, b], 1), [arr(2, 3), arr(2, 2)]),
    GradCase("concat_negative_axis", lambda a, b, c: mf.concat([a, b, c], -1),
             [arr(2, 1), arr(2, 3), arr(2, 2)]),
    GradCase("concat_grad_second_order",
             second_order(lambda a, b: mf.concat([a, b], 0)), [arr(2, 3), arr(1, 3)]),
    GradCase("concat_grad_one_piece_used",
             lambda a, b: mf.gradients(mf.reduce_sum(mf.concat([a, b], 0) ** 3), a)[0] * b,
             [arr(2, 3), arr(2, 3)]),
    GradCase("gather_axis0_repeated", lambda p, i: mf.gather(p, i),
             [arr(4, 3), ints(0, 2, 0, 3, 0)]),
    GradCase("gather_axis0_matrix_indices", lambda p, i: mf.gather(p, i),
             [arr(5, 2), np.array([[1, 1], [4, 0]], dtype=np.int64)]),
    GradCase("gather_axis0_scalar_index", lambda p, i: mf.gather(p, i), [arr(3, 2), ints(2)[0]]),
    GradCase("gather_axis1", lambda p, i: mf.gather(p, i, axis=1),
             [arr(2, 4, 3), ints(3, 0, 3)]),
    GradCase("gather_dense_grad_second_order",
             second_order(lambda p, i: mf.gather(p, i, axis=1)), [arr(3, 4), ints(1, 1, 2)]),
    GradCase("gather_sparse_grad_second_order",
             second_order(lambda p, i: mf.gather(p, i)), [arr(4, 2), ints(3, 0, 3)]),
    GradCase("unsorted_segment_sum", lambda d, s: mf.unsorted_segment_sum(d, s, 4),
             [arr(5, 2), ints(0, 3, 0, 1, 3)]),
    GradCase("unsorted_segment_sum_negative_ids_dropped",
             lambda d, s: mf.unsorted_segment_sum(d, s, 3),
             [arr(2, 3, 2), np.array([[0, -1, 2], [-4, 2, 1]], dtype=np.int64)]),
    GradCase("embedding_lookup_duplicate_ids", lambda p, i: mf.nn.embedding_lookup(p, i),
             [arr(6, 3), ints(5, 1, 5, 5, 0)]),
    # transpose
    GradCase("transpose_perm", lambda a: mf.transpose(a, [2, 0, 1]), [arr(2, 3, 4)]),
    GradCase("transpose_default", mf.transpose, [arr(3, 4)]),
    # split / unstack / stack
    GradCase("split_even", lambda a: mf.split(a, 2, axis=1)[0] * mf.split(a, 2, axis=1)[1],
             [arr(3, 4)]),
    GradCase("split_sizes_minus_one", lambda a: mf.concat(mf.split(a, [1, -1, 2], 0)[::-1], 0),
             [arr(5, 2)]),
    GradCase("split_one_output_used", lambda a: mf.split(a, 3, axis=-1)[1], [arr(2, 6)]),
    GradCase("split_second_order_zero_fill",
             second_order(lambda a: mf.split(a, [2, 1], axis=0)[0]), [arr(3, 2)]),
    GradCase("stack_axis1", lambda a, b: mf.stack([a, b], axis=1), [arr(2, 3), arr(2, 3)]),
    GradCase("stack_second_order", second_order(lambda a, b: mf.stack([a, b], -1)),
             [arr(3), arr(3)]),
    GradCase("unstack", lambda a: mf.unstack(a, axis=1)[0] * mf.unstack(a, axis=1)[2],
             [arr(2, 3)]),
    GradCase("unstack_second_order", second_order(lambda a: mf.unstack(a)[1]), [arr(3, 2)]),
    # expand_dims / squeeze / tile / pad
    GradCase("expand_dims", lambda a: mf.expand_dims(a, -1), [arr(2, 3)]),
    GradCase("squeeze_axis", lambda a: mf.squeeze(a, axis=[1]), [arr(3, 1, 2)]),
    GradCase("squeeze_all", mf.squeeze, [arr(1, 3, 1)]),
    GradCase("tile", lambda a: mf.tile(a, [2, 3]), [arr(2, 2)]),
    GradCase("tile_second_order", second_order(lambda a: mf.tile(a, [1, 2, 2])),
             [arr(2, 1, 3)]),
    GradCase("pad", lambda a: mf.pad(a, [[1, 0], [2, 3]], constant_values=0.5), [arr(2, 3)]),
    GradCase("pad_second_order", second_order(lambda a: mf.pad(a, [[0, 2], [1, 1]])),
             [arr(2, 2)]),
    GradCase("pad_reflect", lambda a: mf.pad(a, [[2, 1], [3, 0]], mode="REFLECT"),
             [arr(3, 4)]),
    GradCase("pad_symmetric", lambda a: mf.pad(a, [[2, 3], [0, 1], [1, 1]], mode="symmetric"),
             [arr(3, 2, 2)]),
    GradCase("pad_reflect_second_order",
             second_order(lambda a: mf.pad(a, [[1, 2], [1, 0]], mode="REFLECT")), [arr(3, 2)]),
    GradCase("reverse", lambda a: mf.reverse(a, [0, -1]), [arr(2, 3, 4)]),
    # slice / strided slice / __getitem__
    GradCase("slice", lambda a: mf.slice(a, [1, 0], [2, -1]), [arr(4, 3)]),
    GradCase("slice_second_order", second_order(lambda a: mf.slice(a, [0, 1], [-1, 2])),
             [arr(2, 4)]),
    GradCase("getitem_int_drops_dim", lambda a: a[1], [arr(3, 2)]),
    GradCase("getitem_negative_and_steps", lambda a: a[-1, ::-2], [arr(2, 5)]),
    GradCase("getitem_ellipsis_newaxis", lambda a: a[..., None, 1:3], [arr(2, 3, 4)]),
    GradCase("getitem_all_ints", lambda a: a[1, -2] * a[0, 0], [arr(2, 3)]),
    GradCase("strided_slice_grad_second_order", second_order(lambda a: a[1:, ::2]),
             [arr(3, 5)]),
    # AlignRank (weights and labels of a rank known only at run time): each branch
    GradCase("align_rank_expands_weights",
             lambda w, v: align_rank(w, v, "test", squeeze_if=1, expand_if=-1) * v,
             [arr(3), arr(3, 2)], wrt=[0, 1]),
    GradCase("align_rank_squeezes_weights",
             lambda w, v: align_rank(w, v, "test", squeeze_if=1, check=True) * v,
             [arr(3, 1), arr(3)], wrt=[0, 1]),
    # lists of tensors packed by convert_to_tensor; shapes packed from a computed size
    GradCase("convert_packs_nested_lists",
             lambda a, b: mf.convert_to_tensor([[a[0], b], [2.0, a[1] * b]]) * 1.0,
             [arr(2), arr()]),
    GradCase("reshape_to_a_packed_shape",
             lambda a: mf.reshape(a, [mf.shape(a)[0], -1]) * 1.0, [arr(2, 3, 2)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# -- forward against numpy -----------------------------------------------------------------

X = arr(2, 3, 4)


@pytest.mark.parametrize("name,fn,ref", [
    ("reshape", lambda a: mf.reshape(a, [4, -1]), lambda a: a.reshape(4, -1)),
    ("concat", lambda a: mf.concat([a, a * 2.0], 1), lambda a: np.concatenate([a, a * 2], 1)),
    ("transpose_perm", lambda a: mf.transpose(a, [1, 2, 0]), lambda a: a.transpose(1, 2, 0)),
    ("transpose_default", mf.transpose, np.transpose),
    ("stack", lambda a: mf.stack([a, a + 1.0], axis=-1), lambda a: np.stack([a, a + 1], -1)),
    ("expand_dims", lambda a: mf.expand_dims(a, 1), lambda a: np.expand_dims(a, 1)),
    ("expand_dims_negative", lambda a: mf.expand_dims(a, -1), lambda a: a[..., None]),
    ("squeeze", lambda a: mf.squeeze(mf.expand_dims(a, 0), 0), lambda a: a),
    ("tile", lambda a: mf.tile(a, [2, 1, 3]), lambda a: np.tile(a, (2, 1, 3))),
    ("pad", lambda a: mf.pad(a, [[1, 1], [0, 2], [3, 0]], constant_values=-1.5),
     lambda a: np.pad(a, [(1, 1), (0, 2), (3, 0)], constant_values=-1.5)),
    ("slice", lambda a: mf.slice(a, [1, 0, 2], [-1, 2, 2]), lambda a: a[1:, 0:2, 2:4]),
    ("getitem_int", lambda a: a[1], lambda a: a[1]),
    ("getitem_negative", lambda a: a[-1, -2], lambda a: a[-1, -2]),
    ("getitem_steps", lambda a: a[:, ::-1, 1::2], lambda a: a[:, ::-1, 1::2]),
    ("getitem_ellipsis", lambda a: a[..., 2], lambda a: a[..., 2]),
    ("getitem_newaxis", lambda a: a[None, :, None, 0], lambda a: a[None, :, None, 0]),
    ("getitem_scalar", lambda a: a[1, 2, 3], lambda a: a[1, 2, 3]),
    ("getitem_clipped_slice", lambda a: a[:, 1:100], lambda a: a[:, 1:100]),
    ("strided_slice", lambda a: mf.ops.indexing_ops.strided_slice(
        a, [0, 1, 0], [2, 0, 4], [1, 1, 2], end_mask=2, shrink_axis_mask=1),
     lambda a: a[0, 1:, 0:4:2]),
])
def test_forward_matches_numpy(name, fn, ref):
    check_forward(fn, [X], ref(X))


@pytest.mark.parametrize("count_or_sizes,axis", [(2, 0), (3, 1), (4, -1), ([1, 3], 2),
                                                 ([2, -1, 1], 1), ([0, 2], 0)])
def test_split_pieces_match_numpy(count_or_sizes, axis):
    if isinstance(count_or_sizes, int):
        expected = np.split(X, count_or_sizes, axis=axis)
    else:
        sizes = list(count_or_sizes)
        if -1 in sizes:
            sizes[sizes.index(-1)] = X.shape[axis] - sum(s for s in sizes if s != -1)
        expected = np.split(X, np.cumsum(sizes)[:-1], axis=axis)
    for i, piece in enumerate(expected):
        check_forward(lambda a: mf.split(a, count_or_sizes, axis=axis)[i], [X], piece)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unstack_matches_numpy(axis):
    pieces = np.moveaxis(X, axis, 0)
    for i, piece in enumerate(pieces):
        check_forward(lambda a: mf.unstack(a, axis=axis)[i], [X], piece)


def test_integer_tensors_keep_their_dtype():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    check_forward(lambda a: mf.transpose(a), [x], x.T)
    check_forward(lambda a: mf.tile(a, [1, 2, 1]), [x], np.tile(x, (1, 2, 1)))
    check_forward(lambda a: mf.pad(a, [[0, 1], [0, 0], [1, 1]], constant_values=7), [x],
                  np.pad(x, [(0, 1), (0, 0), (1, 1)], constant_values=7))
    check_forward(lambda a: a[:, 1], [x], x[:, 1])
    check_forward(lambda a: mf.stack(mf.unstack(a, axis=2), axis=0), [x],
                  np.moveaxis(x, 2, 0))


@pytest.mark.parametrize("kwargs,ref", [
    ({}, lambda i: np.eye(4, dtype=np.float32)[i]),
    ({"axis": 0}, lambda i: np.moveaxis(np.eye(4, dtype=np.float32)[i], -1, 0)),
    ({"on_value": 5, "off_value": -1, "dtype": mf.int32},
     lambda i: np.where(np.eye(4, dtype=bool)[i], 5, -1).astype(np.int32)),
    ({"dtype": mf.float64, "on_value": 0.5}, lambda i: np.eye(4)[i] * 0.5),
])
def test_one_hot_matches_numpy(kwargs, ref):
    idx = np.array([[0, 3], [2, 1], [1, 1]], dtype=np.int64)
    check_forward(lambda i: mf.one_hot(i, 4, **kwargs), [idx], ref(idx))


@pytest.mark.parametrize("kwargs,dtype,on,off", [
    # Without dtype, the values' dtype (TensorFlow's): on_value's, else off_value's.
    ({"on_value": 5, "off_value": 0}, np.int32, 5, 0),
    ({"off_value": -1}, np.int32, 1, -1),
    ({"on_value": np.float64(1.0), "off_value": np.float64(0.0)}, np.float64, 1.0, 0.0),
    ({"on_value": mf.constant(2, mf.int64)}, np.int64, 2, 0),
    ({"on_value": 0.5}, np.float32, 0.5, 0.0),
    ({"on_value": 1, "dtype": mf.float32}, np.float32, 1.0, 0.0),
    ({}, np.float32, 1.0, 0.0),
])
def test_one_hot_takes_the_dtype_of_its_values_as_tensorflow(kwargs, dtype, on, off):
    idx = np.array([0, 2], dtype=np.int32)
    expected = np.where(np.eye(3, dtype=bool)[idx], on, off).astype(dtype)
    assert mf.one_hot(idx, 3, **kwargs).dtype.np_dtype == dtype
    check_forward(lambda i: mf.one_hot(i, 3, **kwargs), [idx], expected)


def test_one_hot_refuses_values_of_two_dtypes_and_axes_below_minus_1():
    with _raises(r"one_hot 'one_hot': on_value and off_value must have the same dtype, got "
                 r"int32 and float32"):
        mf.one_hot([0, 2], 3, on_value=5, off_value=0.0)
    with _raises(r"Invalid axis in op 'one_hot' \(OneHot\): expected -1 or an axis in "
                 r"\[0, rank\], got -2"):
        mf.one_hot([0, 2], 3, axis=-2)


@pytest.mark.parametrize("kwargs", [{}, {"axis": []}, {"squeeze_dims": []}, {"axis": ()}])
def test_squeeze_with_no_axes_listed_removes_every_dimension_of_size_1(kwargs):
    # TensorFlow's default axis is [], meaning all: an empty list squeezes everything.
    x = np.ones((2, 1, 3, 1))
    assert mf.squeeze(mf.placeholder(mf.float64, [2, 1, 3, 1]), **kwargs).shape == [2, 3]
    check_forward(lambda a: mf.squeeze(a, **kwargs), [x], np.ones((2, 3)))


def test_one_hot_out_of_range_indices_are_all_off():
    idx = np.array([-1, 4, 2], dtype=np.int32)
    expected = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]], dtype=np.float32)
    check_forward(lambda i: mf.one_hot(i, 4), [idx], expected)


def test_gather_and_segment_sum_match_numpy():
    p, i = arr(5, 3), np.array([[2, 0], [0, 2]], dtype=np.int32)
    check_forward(lambda a, b: mf.gather(a, b), [p, i], p[i])
    check_forward(lambda a, b: mf.gather(a, b, axis=1), [p, i], np.take(p, i, axis=1))
    seg = np.array([2, 0, 2, 1, 0], dtype=np.int32)
    expected = np.zeros((3, 3))
    np.add.at(expected, seg, p)
    check_forward(lambda a, b: mf.unsorted_segment_sum(a, b, 3), [p, seg], expected)


def test_segment_sum_drops_rows_with_a_negative_id_as_tensorflow():
    # TensorFlow's values: the row of id -1 is in no sum and its gradient is 0; an id at
    # or above num_segments is still an error naming the op.
    d, ids = mf.placeholder(mf.float32, [3]), mf.placeholder(mf.int32, [3])
    y = mf.unsorted_segment_sum(d, ids, 2, name="late_sums")
    grad = mf.gradients(mf.reduce_sum(y), d)[0]
    with mf.Session() as sess:
        got, got_grad = sess.run([y, grad], {d: [1.0, 2.0, 3.0], ids: [0, -1, 1]})
        np.testing.assert_array_equal(got, np.array([1.0, 3.0], np.float32))
        np.testing.assert_array_equal(got_grad, np.array([1.0, 0.0, 1.0], np.float32))
        with _raises(r"Index out of range in op 'late_sums' \(UnsortedSegmentSum\): "
                     r"expected indices in \[0, 2\) for num_segments, got 2"):
            sess.run(y, {d: [1.0, 2.0, 3.0], ids: [0, -1, 2]})


def test_size_and_rank_of_unknown_shapes_run_as_ops():
    x = mf.placeholder(mf.float32, [None, 3])
    u = mf.placeholder(mf.float32)
    n, r = mf.size(x), mf.rank(u)
    n64 = mf.size(u, out_type=mf.int64)
    assert (n.op.type, r.op.type) == ("Size", "Rank")
    assert n.shape == [] and n.dtype is mf.int32 and n64.dtype is mf.int64
    with mf.Session() as sess:
        got = sess.run([n, r, n64], {x: np.ones((5, 3)), u: np.ones((2, 2, 2))})
    assert [type(v) for v in got] == [np.int32, np.int32, np.int64]
    assert [int(v) for v in got] == [15, 3, 8]


def test_size_and_rank_of_known_shapes_are_constants():
    x = mf.placeholder(mf.float32, [2, 3])
    assert mf.size(x).op.type == "Const" and mf.rank(x).op.type == "Const"
    with mf.Session() as sess:
        assert sess.run([mf.size(x), mf.rank(x)]) == [6, 2]


# -- static shapes with unknown dimensions -------------------------------------------------

def test_static_shapes_keep_unknown_dimensions_unknown():
    x = mf.placeholder(mf.float32, [None, 4, 6])
    assert mf.transpose(x, [2, 0, 1]).shape == [6, None, 4]
    assert [t.shape for t in mf.split(x, [1, -1], axis=2)] == [[None, 4, 1], [None, 4, 5]]
    assert [t.shape for t in mf.split(x, 2, axis=0)] == [[None, 4, 6]] * 2
    assert mf.slice(x, [1, 0, 2], [-1, 2, -1]).shape == [None, 2, 4]
    assert x[1:, ::3, -1].shape == [None, 2]
    assert x[..., None].shape == [None, 4, 6, 1]
    assert mf.tile(x, [2, 1, 2]).shape == [None, 4, 12]
    assert mf.pad(x, [[1, 1], [0, 0], [2, 0]]).shape == [None, 4, 8]
    assert mf.stack([x, x], axis=1).shape == [None, 2, 4, 6]
    assert mf.squeeze(x).shape.ndims is None     # the unknown dim might be 1
    assert mf.one_hot(mf.placeholder(mf.int32, [None]), 5).shape == [None, 5]
    u = mf.placeholder(mf.float32)
    assert mf.transpose(u, [1, 0]).shape == [None, None]
    assert len(mf.unstack(u, num=3)) == 3


def test_unknown_shapes_run_and_differentiate():
    x = mf.placeholder(mf.float64, [None, 3])
    v = arr(4, 3)
    y = mf.pad(mf.tile(x[1:, ::-1], [2, 1]), [[1, 0], [0, 2]]) * 2.0
    z = mf.slice(y, [1, 1], [-1, 2])
    g = mf.gradients(mf.reduce_sum(z * z), x)[0]
    with mf.Session() as sess:
        got_z, got_g = sess.run([z, g], {x: v})
    tiled = np.tile(v[1:, ::-1], (2, 1))
    np.testing.assert_allclose(got_z, 2 * tiled[:, 1:3])
    expected = np.zeros_like(v)
    d_tiled = np.zeros_like(tiled)
    d_tiled[:, 1:3] = 8 * tiled[:, 1:3]
    expected[1:, ::-1] = d_tiled[:3] + d_tiled[3:]
    np.testing.assert_allclose(got_g, expected)


def test_kernels_do_not_mutate_their_inputs():
    v = arr(3, 4)
    saved = v.copy()
    x = mf.placeholder(mf.float64, [3, 4])
    outs = [mf.transpose(x), x[1:], mf.pad(x, [[1, 1], [0, 0]]), mf.tile(x, [1, 2]),
            mf.squeeze(mf.expand_dims(x, 0)), mf.split(x, 2, 1)[0], mf.unstack(x)[0]]
    grads = mf.gradients(mf.add_n([mf.reduce_sum(o) for o in outs]), x)
    with mf.Session() as sess:
        sess.run(outs + grads, {x: v})
    np.testing.assert_array_equal(v, saved)


def test_new_ops_round_trip_through_a_graph_def():
    x = mf.placeholder(mf.float32, [2, 3], name="x")
    y = mf.reduce_sum(mf.pad(x[::-1, None, 1:], [[0, 1], [0, 0], [1, 0]]) *
                      mf.one_hot(mf.constant([0, 2, 1]), 3, axis=0), name="y")
    gd = msgpack.unpackb(msgpack.packb(mf.get_default_graph().as_graph_def()), raw=False)
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    with mf.Session() as sess:
        expected = sess.run(y, {x: value})
    g2 = mf.Graph()
    with g2.as_default():
        y2, x2 = mf.import_graph_def(gd, return_elements=["y:0", "x:0"], name="")
        with mf.Session() as sess:
            assert sess.run(y2, {x2: value}) == expected


def test_variable_supports_getitem():
    v = mf.Variable(np.arange(6.0).reshape(2, 3))
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(v[:, -1]), [2.0, 5.0])


# -- gather's sparse gradient ----------------------------------------------------------------

def test_gather_gradient_is_indexed_slices_that_densifies_like_add_at():
    params = arr(5, 3)
    ids = np.array([4, 1, 4, 4, 0], dtype=np.int32)
    weights = arr(5, 3)
    p = mf.placeholder(mf.float64, [5, 3])
    loss = mf.reduce_sum(mf.gather(p, ids) * weights)
    grad = mf.gradients(loss, p)[0]
    assert isinstance(grad, mf.IndexedSlices)
    expected = np.zeros_like(params)
    np.add.at(expected, ids, weights)
    with mf.Session() as sess:
        values, indices, dense = sess.run([grad.values, grad.indices, densify(grad)],
                                          {p: params})
    np.testing.assert_array_equal(indices, ids)
    np.testing.assert_allclose(values, weights)
    np.testing.assert_allclose(dense, expected)


@pytest.mark.parametrize("shape, indices", [
    ((50, 7), R.integers(-50, 50, 300)),                       # negative ids count back
    ((20, 3, 4), R.integers(0, 20, (10, 6)).astype(np.int32)),  # ids of several dims
    ((3000, 64), R.integers(0, 40, 5000)),                    # many blocks, many repeats
])
def test_add_at_of_rows_adds_every_duplicate_in_order_as_numpy_does(shape, indices):
    """The rows' fast path (flat indices through numpy's 1-D loop) sums to the bit what
    ``np.add.at`` sums: the same elements in the same order."""
    from mpiflow.ops.registry import add_at
    target = R.standard_normal(shape).astype(np.float32)
    values = R.standard_normal(indices.shape + shape[1:]).astype(np.float32)
    expected = target.copy()
    np.add.at(expected, indices, values)
    add_at(np, target, indices, values)
    np.testing.assert_array_equal(target, expected)


@pytest.mark.parametrize("indices, values", [
    (np.array([True, True, True, True]), np.ones((4, 3), np.float32)),   # a mask
    ([0, 2, 2], np.ones((3, 3), np.float32)),                           # a list
    (np.array([1, 3]), 2.0),                                            # a scalar
    (np.array([0, 1, 1]), np.ones((3, 3), np.float64)),                 # another dtype
])
def test_add_at_leaves_what_is_not_a_row_index_with_its_values_to_numpy(indices, values):
    """Masks, lists, broadcast or converted values mean what numpy says they mean."""
    from mpiflow.ops.registry import add_at
    target = np.arange(12, dtype=np.float32).reshape(4, 3)
    expected = target.copy()
    np.add.at(expected, indices, values)
    add_at(np, target, indices, values)
    np.testing.assert_array_equal(target, expected)


def test_add_at_of_rows_reads_values_that_are_a_view_of_the_target_before_adding():
    from mpiflow.ops.registry import add_at
    target = R.standard_normal((4000, 16)).astype(np.float32)
    indices = np.arange(4000)[::-1].copy()
    expected = target.copy()
    np.add.at(expected, indices, expected)
    add_at(np, target, indices, target)
    np.testing.assert_array_equal(target, expected)


@pytest.mark.parametrize("bad", [5, -6])
def test_add_at_of_rows_refuses_a_row_out_of_range_as_numpy_does(bad):
    from mpiflow.ops.registry import add_at
    target = np.zeros((5, 2), np.float32)
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 with "
                                         "size 5"):
        add_at(np, target, np.array([bad]), np.ones((1, 2), np.float32))
    assert not target.any()


def test_two_gathers_of_one_table_stay_sparse():
    p = mf.placeholder(mf.float64, [4, 2])
    loss = mf.reduce_sum(mf.gather(p, [0, 1])) + mf.reduce_sum(mf.gather(p, [1, 3]))
    grad = mf.gradients(loss, p)[0]
    assert isinstance(grad, mf.IndexedSlices)
    with mf.Session() as sess:
        dense = sess.run(densify(grad), {p: np.zeros((4, 2))})
    np.testing.assert_allclose(dense, [[1, 1], [2, 2], [0, 0], [1, 1]])


def test_a_sparse_gradient_used_as_a_tensor_is_densified_as_tensorflow_does(recwarn):
    table = mf.Variable(np.ones((4, 2), np.float32))
    grad = mf.gradients(mf.reduce_sum(mf.nn.embedding_lookup(table, [1, 1, 3])), table)[0]
    assert isinstance(grad, mf.IndexedSlices)
    dense = mf.convert_to_tensor(grad)
    doubled = mf.multiply(2.0, grad)          # an op's operand converts alike
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(dense), [[0, 0], [2, 2], [0, 0], [1, 1]])
        np.testing.assert_array_equal(sess.run(doubled), [[0, 0], [4, 4], [0, 0], [2, 2]])
    assert not recwarn.list          # small and of known shape: nothing to warn about
    with pytest.raises(mf.errors.InvalidArgumentError, match="has dtype float32, expected"):
        mf.convert_to_tensor(grad, dtype=mf.float64)


@pytest.mark.parametrize("params, says", [
    (lambda: mf.placeholder(mf.float32, [None, 8]), "of unknown shape"),
    (lambda: mf.Variable(mf.zeros([12_500_000, 8])), "with 100000000 elements"),
])
def test_densifying_a_sparse_gradient_that_may_be_large_warns(params, says):
    # As TensorFlow: a table's gradient made dense takes the whole table's memory.
    table = params()
    grad = mf.gradients(mf.reduce_sum(mf.gather(table, [0, 2])), table)[0]
    with pytest.warns(UserWarning, match=f"dense Tensor {says}.*large amount of memory"):
        mf.convert_to_tensor(grad)


# -- errors name the op ----------------------------------------------------------------------

def _raises(pattern):
    return pytest.raises(mf.errors.InvalidArgumentError, match=pattern)


def test_reshape_to_a_size_that_does_not_divide_names_the_op():
    x = mf.placeholder(mf.float32, [3, 4])
    with _raises(r"op 'Reshape' \(Reshape\): expected a shape whose size divides 12"):
        mf.reshape(x, [5, -1])


def test_transpose_with_a_bad_perm_names_the_op():
    x = mf.placeholder(mf.float32, [2, 3, 4])
    with _raises(r"op 'transpose' \(Transpose\): expected a permutation of 0..2.*got \[0, 0, 1\]"):
        mf.transpose(x, [0, 0, 1])
    with _raises(r"op 'transpose' \(Transpose\).*got \[1, 0\]"):
        mf.transpose(x, [1, 0])


def test_concat_of_mismatched_ranks_names_the_op():
    a, b = mf.placeholder(mf.float32, [2, 3]), mf.placeholder(mf.float32, [2, 3, 1])
    with _raises(r"same rank in op 'concat' \(ConcatV2\)"):
        mf.concat([a, b], 0)


def test_split_into_sizes_that_do_not_divide_names_the_op():
    x = mf.placeholder(mf.float32, [2, 5])
    with _raises(r"op 'split' \(Split\): expected a dimension divisible by 2, got dimension 5"):
        mf.split(x, 2, axis=1)
    with _raises(r"op 'split' \(SplitV\): expected a dimension of size 4.*got dimension 5"):
        mf.split(x, [1, 3], axis=1)
    with _raises(r"op 'split' \(SplitV\): expected a dimension of size at least 6"):
        mf.split(x, [1, -1, 5], axis=1)


def test_split_of_an_unknown_dimension_checks_at_run_time():
    x = mf.placeholder(mf.float32, [None, 2])
    pieces = mf.split(x, 2, axis=0, name="late_split")
    with mf.Session() as sess:
        with _raises(r"op 'late_split' \(Split\): expected a dimension divisible by 2"):
            sess.run(pieces, {x: np.ones((3, 2))})


def test_gather_out_of_range_at_run_time_names_the_op_and_index():
    p = mf.placeholder(mf.float32, [3, 2])
    i = mf.placeholder(mf.int32, [None])
    y = mf.gather(p, i, name="lookup")
    with mf.Session() as sess:
        with _raises(r"op 'lookup' \(GatherV2\): expected indices in \[0, 3\).*got 7"):
            sess.run(y, {p: np.ones((3, 2)), i: [0, 7, 1]})


def test_squeeze_of_a_dimension_that_is_not_1_names_the_op():
    x = mf.placeholder(mf.float32, [2, 3, 1])
    with _raises(r"Cannot squeeze dimension 1 in op 'Squeeze' \(Squeeze\): expected a "
                 r"dimension of size 1, got 3"):
        mf.squeeze(x, axis=1)
    u = mf.placeholder(mf.float32, [2, None])
    s = mf.squeeze(u, axis=[-1], name="late_squeeze")
    assert s.shape == [2]
    with mf.Session() as sess:
        with _raises(r"op 'late_squeeze' \(Squeeze\)"):
            sess.run(s, {u: np.ones((2, 3))})


@pytest.mark.parametrize("build,pattern", [
    (lambda x: mf.slice(x, [1, 2], [2, 2]), r"op 'Slice' \(Slice\).*begin \+ size <= 3"),
    (lambda x: mf.slice(x, [0], [1]), r"op 'Slice' \(Slice\): expected 2 of each"),
    (lambda x: x[4], r"op 'strided_slice' \(StridedSlice\): expected an index in \[-4, 4\)"),
    (lambda x: x[0, 0, 0], r"Too many indices in op 'strided_slice'"),
    (lambda x: x[..., 1, ...], r"op 'strided_slice'.*at most one ellipsis"),
    (lambda x: x[::0], r"op 'strided_slice'.*non-zero strides"),
    (lambda x: mf.expand_dims(x, 3), r"Axis out of range in op 'ExpandDims'"),
    (lambda x: mf.stack([x, x], axis=-4), r"Axis out of range in op 'stack' \(Pack\)"),
    (lambda x: mf.stack([x, x[1:]]), r"op 'stack' \(Pack\)"),
    (lambda x: mf.unstack(x, num=3), r"op 'unstack' \(Unpack\): expected num=4"),
    (lambda x: mf.split(x, 2, axis=2), r"Axis out of range in op 'split' \(Split\)"),
    (lambda x: mf.tile(x, [2]), r"op 'Tile' \(Tile\): expected 2 multiples"),
    (lambda x: mf.pad(x, [[1, 1]]), r"op 'Pad' \(Pad\): expected 2 pairs"),
    (lambda x: mf.pad(x, [[1, -1], [0, 0]]), r"op 'Pad' \(Pad\)"),
    (lambda x: mf.one_hot(x, 3), r"op 'one_hot' \(OneHot\)"),
    (lambda x: mf.one_hot(mf.constant([1]), 3, on_value=0.5, dtype=mf.int32),
     r"op 'one_hot' \(OneHot\): expected a value representable as int32"),
])
def test_bad_build_input_names_the_op(build, pattern):
    x = mf.placeholder(mf.float32, [4, 3])
    with _raises(pattern):
        build(x)


def test_unsupported_indices_are_rejected_with_a_hint():
    x = mf.placeholder(mf.float32, [4, 3])
    i = mf.placeholder(mf.int32, [])
    with _raises(r"tensor 'Placeholder:0'.*use mf.gather"):
        x[i]
    with _raises(r"use mf.gather"):
        x[[0, 1]]
    assert x[mf.constant(2)].shape == [3]        # a constant index is fine


def test_unstack_of_an_unknown_dimension_needs_num():
    with _raises(r"op 'unstack' \(Unpack\): expected a known dimension 0 or num="):
        mf.unstack(mf.placeholder(mf.float32, [None, 2]))


@pytest.mark.parametrize("build,feed,pattern", [
    (lambda x: mf.slice(x, [1, 0], [2, -1], name="late_slice"), np.ones((2, 3)),
     r"Slice out of range in op 'late_slice' \(Slice\)"),
    (lambda x: x[3], np.ones((2, 3)), r"op 'strided_slice' \(StridedSlice\)"),
    (lambda x: mf.unstack(x, num=2)[0], np.ones((3, 3)), r"op 'unstack' \(Unpack\)"),
])
def test_bad_runtime_input_names_the_op(build, feed, pattern):
    x = mf.placeholder(mf.float32, [None, 3])
    y = build(x)
    with mf.Session() as sess:
        with _raises(pattern):
            sess.run(y, {x: feed})


@pytest.mark.parametrize("build,feeds,pattern", [
    (lambda a, b: mf.gather(a, b, axis=2, name="late"), [np.ones((2, 3)), np.array([0])],
     r"Axis out of range in op 'late' \(GatherV2\): expected axis in \[-2, 2\), got 2"),
    (lambda a, b: mf.unsorted_segment_sum(a, b, 2, name="late"),
     [np.ones((3, 2)), np.array([0, 1])],
     r"segment_ids shape must be a prefix of data shape in op 'late' "
     r"\(UnsortedSegmentSum\): expected data shape starting with \(2,\), got \(3, 2\)"),
    (lambda a, b: mf.nn.in_top_k(a, b, 1, name="late"), [np.ones((2, 3)), np.array([0, 1, 2])],
     r"in_top_k needs 2-D predictions and a target per row in op 'late' \(InTopK\): "
     r"expected predictions \(batch, classes\) and targets \(batch,\), got shapes "
     r"\(2, 3\) and \(3,\)"),
])
def test_shapes_of_unknown_rank_are_checked_at_run_time_naming_the_op(build, feeds, pattern):
    # These were numpy's IndexError and ValueError texts ("tuple index out of range",
    # "array is not broadcastable to correct shape", "shape mismatch: indexing arrays").
    a, b = mf.placeholder(mf.float32), mf.placeholder(mf.int32)
    y = build(a, b)
    with mf.Session() as sess:
        with _raises(pattern):
            sess.run(y, {a: feeds[0], b: feeds[1]})


def test_non_constant_mode_and_layout_tensors_are_rejected():
    x = mf.placeholder(mf.float32, [2, 2])
    with pytest.raises(mf.errors.InvalidArgumentError, match="'CONSTANT', 'REFLECT' or"):
        mf.pad(x, [[1, 1], [1, 1]], mode="WRAP")
    with _raises(r"tile multiples must be known when the graph is built"):
        mf.tile(x, mf.placeholder(mf.int32, [2]))


_AXIS_TAKERS = {
    "gather": lambda x, a: mf.gather(x, [1, 0], axis=a),
    "concat": lambda x, a: mf.concat([x, x], a),
    "stack": lambda x, a: mf.stack([x, x], a),
    "unstack": lambda x, a: mf.unstack(x, axis=a)[0],
    "split": lambda x, a: mf.split(x, 1, axis=a)[0],
    "expand_dims": lambda x, a: mf.expand_dims(x, a),
    "argmax": lambda x, a: mf.argmax(x, a),
    "argmin": lambda x, a: mf.argmin(x, axis=a),
    "reduce_sum": lambda x, a: mf.reduce_sum(x, a),
    "softmax": lambda x, a: mf.nn.softmax(x, axis=a),
    "log_softmax": lambda x, a: mf.nn.log_softmax(x, a),
    "one_hot": lambda x, a: mf.one_hot([1, 0], 2, axis=a),
    "softmax_cross_entropy": lambda x, a: mf.nn.softmax_cross_entropy_with_logits_v2(
        labels=x, logits=x, axis=a),
}


@pytest.mark.parametrize("what", sorted(_AXIS_TAKERS))
def test_an_axis_may_be_a_constant_and_a_computed_one_is_refused_by_name(what):
    # TensorFlow takes axes as tensors; mpiflow fixes them when the graph is built: a
    # constant is as good as the int, a tensor computed at run time (or a float, which
    # int() used to truncate) is an error saying so, not a TypeError from int().
    build = _AXIS_TAKERS[what]
    x = np.arange(6.0).reshape(2, 3)
    with mf.Session() as sess:
        want = sess.run(build(mf.constant(x), 1))
        got = sess.run(build(mf.constant(x), mf.constant(1)))
    np.testing.assert_array_equal(got, want)
    with _raises(r"axis must be known when the graph is built: expected a Python value or "
                 r"a constant, got the computed tensor 'axis:0'"):
        build(mf.constant(x), mf.placeholder(mf.int32, [], name="axis"))
    with _raises(r"axis: expected integers, got 1.5"):
        build(mf.constant(x), 1.5)


def test_gather_on_an_axis_of_params_with_unknown_rank():
    p = mf.placeholder(mf.float64)
    y = mf.gather(p, [0, 2], axis=1)
    grad = mf.gradients(mf.reduce_sum(y * y), p)[0]
    assert not isinstance(grad, mf.IndexedSlices)
    v = arr(3, 4)
    expected = np.zeros_like(v)
    expected[:, [0, 2]] = 2 * v[:, [0, 2]]
    with mf.Session() as sess:
        got_y, got_g = sess.run([y, grad], {p: v})
    np.testing.assert_allclose(got_y, v[:, [0, 2]])
    np.testing.assert_allclose(got_g, expected)


def test_axes_of_unknown_rank_inputs_are_checked_at_run_time():
    u = mf.placeholder(mf.float32)
    pieces = mf.split(u, 2, axis=2, name="late_axis")
    with mf.Session() as sess:
        with _raises(r"Axis out of range in op 'late_axis' \(Split\): expected axis in "
                     r"\[-2, 2\), got 2"):
            sess.run(pieces, {u: np.ones((2, 2))})


def test_split_count_may_be_a_scalar_constant():
    x = mf.placeholder(mf.float32, [4, 2])
    assert [t.shape for t in mf.split(x, mf.constant(2))] == [[2, 2], [2, 2]]


def test_split_takes_tf1s_num_argument_and_checks_it_against_the_sizes():
    x = mf.placeholder(mf.float32, [2, 3, 4])
    pieces = mf.split(x, [2, 2], axis=2, num=2)
    assert [t.shape.as_list() for t in pieces] == [[2, 3, 2], [2, 3, 2]]
    assert len(mf.split(x, 2, axis=2, num=5)) == 2      # an int count: num is not used
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"num=3 does not match the 2 sizes \[1, -1\]"):
        mf.split(x, [1, -1], axis=2, num=3)


def test_concat_with_an_input_of_unknown_rank_takes_the_others_shape_as_tensorflow():
    known, unknown = mf.placeholder(mf.float32, [2, 3]), mf.placeholder(mf.float32)
    assert mf.concat([unknown, known], 1).shape.as_list() == [2, None]
    assert mf.concat([known, unknown], 0).shape.as_list() == [None, 3]
    assert mf.concat([unknown, unknown], 0).shape.ndims is None
    with _raises(r"concat inputs must have the same rank in op 'concat' \(ConcatV2\)"):
        mf.concat([unknown, known, mf.placeholder(mf.float32, [2])], 0)
    with mf.Session() as sess:
        got = sess.run(mf.concat([unknown, known], -1),
                       {unknown: np.zeros((2, 1)), known: np.ones((2, 3))})
    np.testing.assert_array_equal(got, [[0, 1, 1, 1], [0, 1, 1, 1]])


def test_concat_of_scalars_and_negative_reshape_dims_are_build_errors():
    with _raises(r"op 'concat' \(ConcatV2\): expected inputs of rank >= 1"):
        mf.concat([mf.constant(1.0), mf.constant(2.0)], 0)
    with _raises(r"op 'Reshape' \(Reshape\): expected dimensions >= 0 and at most one -1"):
        mf.reshape(mf.placeholder(mf.float32, [2, 3]), [-2, -3])


def test_unique_keeps_the_first_appearance_order_and_gives_each_position():
    # TensorFlow's values: y in the order the values first appear (not sorted).
    x = mf.placeholder(mf.float32, [None])
    y, idx = mf.unique(x)
    y64, idx64 = mf.unique(mf.constant([5, 5, 2], mf.int64), out_idx=mf.int64)
    assert (y.dtype, idx.dtype, idx64.dtype) == (mf.float32, mf.int32, mf.int64)
    with mf.Session() as sess:
        got_y, got_idx = sess.run([y, idx], {x: [4.0, 1.0, 4.0, 7.0, 1.0]})
        np.testing.assert_array_equal(got_y, [4.0, 1.0, 7.0])
        np.testing.assert_array_equal(got_idx, [0, 1, 0, 2, 1])
        got_y64, got_idx64 = sess.run([y64, idx64])
        np.testing.assert_array_equal(got_y64, [5, 2])
        np.testing.assert_array_equal(got_idx64, [0, 0, 1])
        empty = sess.run(y, {x: np.zeros(0)})
        assert empty.shape == (0,)
    with pytest.raises(mf.errors.InvalidArgumentError, match="unique needs a vector"):
        mf.unique(mf.ones([2, 2]))


def test_lists_holding_tensors_convert_to_one_packed_tensor_as_tensorflow():
    a, b = mf.constant(1.0), mf.constant(2.0)
    nested = mf.convert_to_tensor([[a, b], [3, a]])     # numbers take the tensors' dtype
    vectors = mf.convert_to_tensor([mf.constant([1, 2]), [3, 4]])
    x = mf.placeholder(mf.float32, [None])
    assert nested.dtype == mf.float32 and nested.shape.as_list() == [2, 2]
    assert mf.convert_to_tensor([x, x]).shape.as_list() == [2, None]
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(nested), [[1.0, 2.0], [3.0, 1.0]])
        np.testing.assert_array_equal(sess.run(vectors), [[1, 2], [3, 4]])
        assert sess.run(mf.reduce_sum([a, b, 4.0])) == 7.0
        assert sess.run(mf.reduce_max([a, b])) == 2.0
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"item 1, tensor 'Const_\d+:0', "
                       r"has dtype int32"):
        mf.convert_to_tensor([a, mf.constant(1)])


def test_stack_and_concat_convert_numbers_to_the_dtype_of_the_tensors_among_them():
    # TensorFlow: all float32 (the numbers take the tensor's dtype; stack of numbers alone
    # converts the whole list, so [1, 2.0] is float32).
    x = mf.constant([[1.0]])
    made = [mf.stack([1, 2.0]), mf.stack([mf.constant(1.0), 2]), mf.stack([2, mf.constant(1.0)]),
            mf.concat([x, [[2]]], 0), mf.concat([[[2]], x], 0), mf.concat([x, np.zeros((1, 1))], 0)]
    assert [t.dtype for t in made] == [mf.float32] * 6
    with mf.Session() as sess:
        assert [v.tolist() for v in sess.run(made)] == [
            [1.0, 2.0], [1.0, 2.0], [2.0, 1.0], [[1.0], [2.0]], [[2.0], [1.0]], [[1.0], [0.0]]]
    with _raises("Cannot convert 2.5 to int32"):
        mf.stack([mf.constant(1), 2.5])


def test_shape_lists_holding_a_computed_size_pack_as_tensorflow():
    x = mf.placeholder(mf.float32, [None, 2, 2])
    batch = mf.shape(x)[0]
    flat = mf.reshape(x, [batch, 4])
    made = [mf.zeros([batch, 3]), mf.ones([batch, 3], mf.int32), mf.fill([batch, 3], 7.0),
            mf.random_normal([batch, 3]), mf.broadcast_to(mf.constant(1.0), [batch, 3])]
    assert flat.shape.as_list() == [None, 4]
    assert [t.shape.as_list() for t in made] == [[None, 3]] * 5
    with mf.Session() as sess:
        got = sess.run([flat, mf.reshape(x, [batch, -1])] + made, {x: np.ones((5, 2, 2))})
    assert [v.shape for v in got] == [(5, 4)] * 2 + [(5, 3)] * 5
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="tile multiples must be known .* tensor 'strided_slice"):
        mf.tile(x, [1, batch, 1])


def test_strided_slice_is_public_with_tensorflows_masks():
    # Recorded from TF 2.21's tf.compat.v1 on x = arange(60).reshape(3, 4, 5).
    x = mf.constant(np.arange(60.0).reshape(3, 4, 5))
    cases = {
        "begin_end_masks": (mf.strided_slice(x, [0, 1, 0], [2, 3, 0], [1, 1, 1],
                                             begin_mask=1, end_mask=4), [2, 2, 5], 390.0),
        "ellipsis": (mf.strided_slice(x, [0, 1], [0, 3], [1, 1], ellipsis_mask=1),
                     [3, 4, 2], 696.0),
        "shrink": (mf.strided_slice(x, [1, 0, -1], [2, 4, 0], [1, 2, 1],
                                    shrink_axis_mask=5), [2], 58.0),
        "new_axis_and_ellipsis": (mf.strided_slice(x, [0, 0, 0], [0, 0, 1], [1, 1, 1],
                                                   ellipsis_mask=2, new_axis_mask=3),
                                  [1, 3, 4, 1], 330.0),
        "negative_strides": (mf.strided_slice(x, [0, 3], [0, 0], [-1, -1], begin_mask=1,
                                              end_mask=1), [3, 3, 5], 1440.0),
    }
    with mf.Session() as sess:
        for name, (t, shape, total) in cases.items():
            assert t.shape.as_list() == shape, name
            got = sess.run(t)
            assert list(got.shape) == shape and got.sum() == total, name


def test_sequence_mask_matches_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1.
    lengths = mf.placeholder(mf.int32, [None])
    masks = {"maxlen": mf.sequence_mask([1, 3, 0], 4),
             "constant_lengths": mf.sequence_mask([1, 3], dtype=mf.float32),
             "rows": mf.sequence_mask([[1, 2], [0, 3]], 3, dtype=mf.int32),
             "int64_lengths": mf.sequence_mask(mf.constant([2, 1], mf.int64), mf.constant(3)),
             "fed": mf.sequence_mask(lengths), "fed_maxlen": mf.sequence_mask(lengths, 2)}
    assert {k: (m.dtype, m.shape.as_list()) for k, m in masks.items()} == {
        "maxlen": (mf.bool, [3, 4]), "constant_lengths": (mf.float32, [2, 3]),
        "rows": (mf.int32, [2, 2, 3]), "int64_lengths": (mf.bool, [2, 3]),
        "fed": (mf.bool, [None, None]), "fed_maxlen": (mf.bool, [None, 2])}
    with mf.Session() as sess:
        got = sess.run(masks, {lengths: [2, 0, 3]})
    assert {k: v.astype(int).tolist() for k, v in got.items()} == {
        "maxlen": [[1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]],
        "constant_lengths": [[1, 0, 0], [1, 1, 1]],
        "rows": [[[1, 0, 0], [1, 1, 0]], [[0, 0, 0], [1, 1, 1]]],
        "int64_lengths": [[1, 1, 0], [1, 0, 0]],
        "fed": [[1, 1, 0], [0, 0, 0], [1, 1, 1]], "fed_maxlen": [[1, 1], [0, 0], [1, 1]]}


def test_gradients_of_tile_and_gather_keep_the_static_shape_as_tensorflow():
    # TensorFlow's tf.gradients know [2, 3, 4] for both (mpiflow's were [?, ?, ?]).
    x = mf.constant(np.ones((2, 3, 4), np.float32))
    tiled, = mf.gradients(mf.reduce_sum(mf.tile(x, [2, 1, 3])), x)
    rows, = mf.gradients(mf.reduce_sum(mf.gather(x, [[1, 1], [0, 1]])), x)
    assert tiled.shape.as_list() == [2, 3, 4]
    assert rows.values.shape.as_list() == [4, 3, 4]
    assert mf.convert_to_tensor(rows).shape.as_list() == [2, 3, 4]
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(tiled), np.full((2, 3, 4), 6.0))
        np.testing.assert_array_equal(sess.run(mf.convert_to_tensor(rows)),
                                      np.stack([np.ones((3, 4)), 3 * np.ones((3, 4))]))


def test_newaxis_indexes_as_none():
    x = mf.constant(X)
    assert mf.newaxis is None
    with mf.Session() as sess:
        got = sess.run(x[mf.newaxis, :, mf.newaxis, 0])
    np.testing.assert_array_equal(got, X[np.newaxis, :, np.newaxis, 0])


# -- reverse ------------------------------------------------------------------------------

def test_reverse_matches_tensorflow():
    p = mf.constant(X)
    unknown = mf.placeholder(mf.float64, None)
    got = {"middle": mf.reverse(p, [1]), "first_and_last": mf.reverse(p, [0, -1]),
           "none": mf.reverse(p, []), "v2": mf.reverse_v2(p, [2]),
           "unknown_rank_last": mf.reverse(unknown, [-1]),
           "unknown_rank_leading": mf.reverse(unknown, [0, 2])}
    assert got["middle"].name == "ReverseV2:0"
    assert got["first_and_last"].shape.as_list() == [2, 3, 4]
    with mf.Session() as sess:
        values = sess.run(got, {unknown: X})
    for key, want in {"middle": X[:, ::-1], "first_and_last": X[::-1, :, ::-1], "none": X,
                      "v2": X[..., ::-1], "unknown_rank_last": X[..., ::-1],
                      "unknown_rank_leading": X[::-1, :, ::-1]}.items():
        np.testing.assert_array_equal(values[key], want, err_msg=key)


@pytest.mark.parametrize("axis,words", [
    ([3], r"axis 3 is out of range"), ([1, 1], "axis 1 is given more than once"),
    ([1, -2], "axis 1 is given more than once"), (1, r"axis must be a list of axes \(rank 1\)"),
])
def test_reverse_refuses_bad_axes_as_tensorflow(axis, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=f"reverse: {words}"):
        mf.reverse(mf.constant(X), axis)


# -- pad REFLECT / SYMMETRIC --------------------------------------------------------------

def test_mirror_pads_and_their_gradients_match_tensorflow():
    p = mf.constant(np.arange(12.).reshape(3, 4))
    weights = np.arange(42.).reshape(6, 7)
    got = {}
    for mode in ("REFLECT", "SYMMETRIC", "reflect"):
        padded = mf.pad(p, [[2, 1], [3, 0]], mode=mode)
        assert padded.shape.as_list() == [6, 7] and padded.op.type == "MirrorPad"
        got[mode] = (padded, mf.gradients(mf.reduce_sum(padded * weights), p)[0])
    ints = mf.pad(mf.constant([1, 2, 3]), [[2, 2]], mode="SYMMETRIC")
    assert mf.pad(mf.placeholder(mf.float32, [None, 4]), [[1, 1], [2, 2]],
                  mode="REFLECT").shape.as_list() == [None, 8]
    with mf.Session() as sess:
        values, ints = sess.run([got, ints])
    # Recorded from TF 2.21's tf.compat.v1.
    reflect = [[11, 10, 9, 8, 9, 10, 11], [7, 6, 5, 4, 5, 6, 7], [3, 2, 1, 0, 1, 2, 3],
               [7, 6, 5, 4, 5, 6, 7], [11, 10, 9, 8, 9, 10, 11], [7, 6, 5, 4, 5, 6, 7]]
    symmetric = [[6, 5, 4, 4, 5, 6, 7], [2, 1, 0, 0, 1, 2, 3], [2, 1, 0, 0, 1, 2, 3],
                 [6, 5, 4, 4, 5, 6, 7], [10, 9, 8, 8, 9, 10, 11], [10, 9, 8, 8, 9, 10, 11]]
    for mode, want, want_grad in (
            ("REFLECT", reflect, [[17, 34, 34, 34], [72, 144, 144, 144], [34, 68, 68, 68]]),
            ("reflect", reflect, [[17, 34, 34, 34], [72, 144, 144, 144], [34, 68, 68, 68]]),
            ("SYMMETRIC", symmetric,
             [[52, 52, 52, 33], [52, 52, 52, 33], [136, 136, 136, 75]])):
        assert values[mode][0].tolist() == want, mode
        assert values[mode][1].tolist() == want_grad, mode
    assert ints.tolist() == [2, 1, 1, 2, 3, 3, 2] and ints.dtype == np.int32


@pytest.mark.parametrize("mode,paddings,words", [
    ("REFLECT", [[3, 0], [0, 0]], r"REFLECT paddings must be at most the dimension size - 1"),
    ("SYMMETRIC", [[4, 0], [0, 0]], r"SYMMETRIC paddings must be at most the dimension size"),
])
def test_mirror_pad_larger_than_its_dimension_fails_naming_the_op(mode, paddings, words):
    x = mf.constant(np.ones((3, 4)))
    with _raises(f"{words} in op 'MirrorPad' "):
        mf.pad(x, paddings, mode=mode)
    fed = mf.pad(mf.placeholder_with_default(x, [None, None]), paddings, mode=mode)
    with mf.Session() as sess, _raises(f"{words} in op 'MirrorPad(_1)?'"):
        sess.run(fed)


def test_mirror_pad_refuses_constant_values():
    with _raises(r"pad: constant_values=1 is used by mode 'CONSTANT' only"):
        mf.pad(mf.constant(np.ones((3, 4))), [[1, 0], [0, 0]], mode="REFLECT",
               constant_values=1)
