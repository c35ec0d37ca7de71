"""eye, linspace (lin_space) and meshgrid: values, dtypes and static shapes as TensorFlow's
(recorded from TF 2.21's tf.compat.v1), gradients through the ends and the vectors, and
errors for sizes not known when the graph is built."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_gradient

R = np.random.default_rng(3)

GRAD_CASES = [
    GradCase("linspace_ends", lambda a, b: mf.linspace(a, b, 5), [R.uniform(size=()),
                                                                  R.uniform(size=())]),
    GradCase("linspace_vector_ends_axis", lambda a, b: mf.linspace(a, b, 4, axis=-1),
             [R.uniform(size=3), R.uniform(size=3)]),
    GradCase("meshgrid_xy", lambda a, b: mf.meshgrid(a, b)[0] * mf.meshgrid(a, b)[1],
             [R.uniform(size=3), R.uniform(size=2)]),
    GradCase("meshgrid_ij", lambda a, b, c: mf.meshgrid(a, b, c, indexing="ij")[2],
             [R.uniform(size=2), R.uniform(size=3), R.uniform(size=(2, 2))], wrt=[2]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


def test_eye_matches_tensorflow():
    got = {"square": mf.eye(3), "wide": mf.eye(2, 3), "batch": mf.eye(2, batch_shape=[2]),
           "ints": mf.eye(2, dtype=mf.int32), "empty": mf.eye(0)}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in got.items()} == {
        "square": (mf.float32, [3, 3]), "wide": (mf.float32, [2, 3]),
        "batch": (mf.float32, [2, 2, 2]), "ints": (mf.int32, [2, 2]),
        "empty": (mf.float32, [0, 0])}
    with mf.Session() as sess:
        values = sess.run(got)
    assert values["wide"].tolist() == [[1, 0, 0], [0, 1, 0]]
    assert values["batch"].tolist() == [[[1, 0], [0, 1]], [[1, 0], [0, 1]]]
    np.testing.assert_array_equal(values["square"], np.eye(3))


@pytest.mark.parametrize("build,words", [
    (lambda: mf.eye(-1), "eye: sizes must be non-negative"),
    (lambda: mf.eye(2.5), "eye num_rows: expected integers"),
    (lambda: mf.eye(mf.placeholder(mf.int32, [])), "eye num_rows must be known"),
    (lambda: mf.linspace(0., 1., mf.placeholder(mf.int32, [])), "linspace num must be known"),
    (lambda: mf.linspace(0., 1., -2), "linspace: num must be >= 0"),
    (lambda: mf.meshgrid([1., 2.], [1, 2]), "meshgrid: arguments must have one dtype"),
    (lambda: mf.meshgrid([1.], indexing="xx"), "meshgrid: indexing must be 'xy' or 'ij'"),
])
def test_grid_sizes_and_arguments_are_checked(build, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=words):
        build()


def test_linspace_matches_tensorflow_to_the_bit():
    got = {"quarters": mf.linspace(0., 1., 5), "tenths_f32": mf.linspace(0.1, 0.7, 4),
           "tenths_f64": mf.lin_space(mf.constant(0.1, mf.float64), 0.7, 4),
           "one": mf.linspace(-1., 1., 1), "none": mf.linspace(0., 1., 0),
           "ints": mf.linspace(0, 1, 3),
           "vectors": mf.linspace(mf.constant([0., 1.]), [1., 3.], 3)}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in got.items()} == {
        "quarters": (mf.float32, [5]), "tenths_f32": (mf.float32, [4]),
        "tenths_f64": (mf.float64, [4]), "one": (mf.float32, [1]),
        "none": (mf.float32, [0]), "ints": (mf.float64, [3]),
        "vectors": (mf.float32, [3, 2])}
    assert mf.linspace(mf.placeholder(mf.float32, []), 1., 3).shape.as_list() == [3]
    with mf.Session() as sess:
        values = sess.run(got)
    # Recorded from TF 2.21's tf.compat.v1: the inner values are start + i * delta in the
    # ends' dtype, the last one stop itself.
    assert values["quarters"].tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert values["tenths_f32"].tolist() == np.array(
        [0.1, 0.29999998, 0.49999997, 0.7], np.float32).tolist()
    assert values["tenths_f64"].tolist() == [0.1, 0.3, 0.5, 0.7]
    assert values["one"].tolist() == [-1] and values["none"].tolist() == []
    assert values["ints"].tolist() == [0, 0.5, 1]
    assert values["vectors"].tolist() == [[0, 1], [0.5, 2], [1, 3]]


def test_meshgrid_matches_tensorflow():
    x, y = mf.constant([1., 2., 3.]), mf.constant([4., 5.])
    xy, ij = mf.meshgrid(x, y), mf.meshgrid(x, y, indexing="ij")
    assert [t.shape.as_list() for t in xy + ij] == [[2, 3], [2, 3], [3, 2], [3, 2]]
    assert [t.shape.as_list() for t in mf.meshgrid(x, y, mf.constant([7., 8., 9., 1.]))] == \
        [[2, 3, 4]] * 3
    assert mf.meshgrid(mf.placeholder(mf.float32, [None]), y)[0].shape.as_list() == [2, None]
    grad, = mf.gradients(mf.reduce_sum(xy[0] * [[1., 2., 3.], [4., 5., 6.]]), x)
    with mf.Session() as sess:
        values = sess.run([xy, ij, grad])
    assert values[0][0].tolist() == [[1, 2, 3], [1, 2, 3]]
    assert values[0][1].tolist() == [[4, 4, 4], [5, 5, 5]]
    assert values[1][0].tolist() == [[1, 1], [2, 2], [3, 3]]
    assert values[1][1].tolist() == [[4, 5], [4, 5], [4, 5]]
    assert values[2].tolist() == [5, 7, 9]
