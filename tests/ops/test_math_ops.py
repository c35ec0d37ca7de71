"""Elementwise math, matmul and reductions: forward against numpy, gradients against
finite differences (including broadcasting)."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.math_ops import sum_to_shape
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(7)


def arr(*shape, low=-1.0, high=1.0):
    return R.uniform(low, high, size=shape)


def pos(*shape):
    return R.uniform(0.5, 2.0, size=shape)


GRAD_CASES = [
    # Values away from the clip bounds (the kink): inside passes the gradient, outside not.
    GradCase("clip_by_value", lambda a: mf.clip_by_value(a, -0.5, 0.5),
             [np.array([[-0.9, -0.3, 0.1], [0.35, 0.7, -0.62]])]),
    GradCase("add_broadcast", lambda a, b: a + b, [arr(3, 4), arr(4)]),
    GradCase("add_broadcast_both", lambda a, b: mf.add(a, b), [arr(3, 1), arr(1, 4)]),
    GradCase("sub", lambda a, b: a - b, [arr(2, 3), arr(2, 1)]),
    GradCase("mul", lambda a, b: a * b, [arr(2, 3), arr(3)]),
    GradCase("div", lambda a, b: a / b, [arr(2, 3), pos(2, 3)]),
    GradCase("pow", lambda a, b: mf.pow(a, b), [pos(2, 3), arr(2, 3)]),
    GradCase("maximum", lambda a, b: mf.maximum(a, b), [arr(3, 4), arr(3, 4) + 0.05]),
    GradCase("minimum", lambda a, b: mf.minimum(a, b), [arr(3, 4), arr(4) + 0.05]),
    GradCase("squared_difference", mf.squared_difference, [arr(3, 2), arr(2)]),
    # floormod: 1 for x and -floor(x / y) for y, as TensorFlow (away from the jumps).
    GradCase("floormod_broadcast", mf.floormod,
             [np.array([[-7.3, 7.2, -2.9], [5.1, -0.4, 3.3]]), np.array([2.1, -1.7, 0.65])]),
    GradCase("neg", lambda a: -a, [arr(3)]),
    GradCase("square", mf.square, [arr(2, 3)]),
    GradCase("sqrt", mf.sqrt, [pos(4)]),
    GradCase("rsqrt", mf.rsqrt, [pos(4)]),
    GradCase("exp", mf.exp, [arr(2, 2)]),
    GradCase("cos", mf.cos, [arr(2, 3) * 3]),
    GradCase("sin", mf.sin, [arr(2, 3) * 3]),
    GradCase("log", mf.log, [pos(5)]),
    GradCase("log1p", mf.log1p, [pos(5)]),
    GradCase("abs", mf.abs, [arr(6) + np.sign(arr(6)) * 0.1]),
    GradCase("sign_is_flat", lambda a: mf.sign(a) * a, [pos(3)]),
    GradCase("reciprocal", mf.reciprocal, [pos(3)]),
    GradCase("select", lambda c, a, b: mf.where(c, a, b),
             [R.uniform(size=(3, 4)) > 0.5, arr(3, 4), arr(4)], wrt=[1, 2]),
    GradCase("select_vector_condition_picks_rows",
             lambda a, b: mf.where(mf.constant([True, False, True]), a, b),
             [arr(3, 3), arr(3, 3)]),
    GradCase("cast_float32_roundtrip",
             lambda a: mf.cast(mf.cast(a, mf.float32), mf.float64) * 2.0, [arr(3)],
             rtol=1e-3, atol=1e-3, delta=1e-3),
    GradCase("add_n", lambda a, b, c: mf.add_n([a, b, c]), [arr(2, 2), arr(2, 2), arr(2, 2)]),
    GradCase("matmul", mf.matmul, [arr(3, 4), arr(4, 5)]),
    GradCase("matmul_ta", lambda a, b: mf.matmul(a, b, transpose_a=True), [arr(4, 3), arr(4, 5)]),
    GradCase("matmul_tb", lambda a, b: mf.matmul(a, b, transpose_b=True), [arr(3, 4), arr(5, 4)]),
    GradCase("matmul_tab", lambda a, b: mf.matmul(a, b, transpose_a=True, transpose_b=True),
             [arr(4, 3), arr(5, 4)]),
    GradCase("matmul_batched", mf.matmul, [arr(2, 3, 4), arr(2, 4, 2)]),
    GradCase("matmul_batch_broadcast", mf.matmul, [arr(2, 3, 4), arr(4, 2)]),
    GradCase("reduce_sum_all", mf.reduce_sum, [arr(3, 4)]),
    GradCase("reduce_sum_axis", lambda a: mf.reduce_sum(a, axis=1), [arr(3, 4)]),
    GradCase("reduce_sum_keepdims", lambda a: mf.reduce_sum(a, axis=[0, 2], keepdims=True),
             [arr(2, 3, 4)]),
    GradCase("reduce_mean", lambda a: mf.reduce_mean(a, axis=-1), [arr(3, 4)]),
    GradCase("reduce_mean_all", mf.reduce_mean, [arr(3, 4)]),
    GradCase("reduce_max", lambda a: mf.reduce_max(a, axis=1), [arr(3, 5)]),
    GradCase("reduce_min_keepdims", lambda a: mf.reduce_min(a, axis=0, keepdims=True),
             [arr(3, 5)]),
    GradCase("reduce_prod", lambda a: mf.reduce_prod(a, axis=1), [pos(2, 3)]),
    # Zeros: the derivative is the product of the others (TensorFlow's), not prod / x = NaN.
    GradCase("reduce_prod_with_zeros", lambda a: mf.reduce_prod(a, axis=[0, -1]),
             [np.array([[[0.0, 1.5], [2.0, -1.0]], [[0.5, 0.0], [3.0, 0.0]],
                        [[-2.0, 1.0], [0.7, 1.2]]])]),
    GradCase("reduce_prod_all_keepdims_one_zero",
             lambda a: mf.reduce_prod(a, keepdims=True), [np.array([[1.5, 0.0], [-2.0, 0.5]])]),
    GradCase("reduce_prod_second_order",
             lambda a: mf.gradients(mf.reduce_sum(mf.reduce_prod(a, axis=1) ** 2), a)[0] * a,
             [pos(2, 3)]),
    GradCase("fan_out_two_paths", lambda a: a * a + mf.exp(a), [arr(4)]),
    GradCase("sum_to_shape", lambda a, b: sum_to_shape(a, b) * 1.0, [arr(2, 3, 4), arr(3, 1)],
             wrt=[0]),
    GradCase("broadcast_to", lambda a: mf.broadcast_to(a, [3, 2, 4]), [arr(2, 1)]),
    GradCase("reduce_grad_second_order",
             lambda a: mf.gradients(mf.reduce_sum(mf.reduce_mean(a * a, axis=1)), a)[0] * a,
             [arr(2, 3)]),
    GradCase("fill", lambda v: mf.fill([2, 3], v), [np.array(1.5)]),
    GradCase("identity_stop", lambda a, b: mf.identity(a) * mf.stop_gradient(b),
             [arr(3), arr(3)], wrt=[0]),
    GradCase("check_numerics", lambda a: mf.check_numerics(a * 2.0, "bad"), [arr(3)]),
    GradCase("print_passes_through", lambda a: mf.Print(a * 2.0, [a], first_n=0), [arr(3)]),
    GradCase("placeholder_with_default",
             lambda a: mf.placeholder_with_default(a, [3]) * 3.0, [arr(3)]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


@pytest.mark.parametrize("name,fn,ref,inputs", [
    ("add", mf.add, np.add, [arr(3, 4), arr(4)]),
    ("subtract", mf.subtract, np.subtract, [arr(3, 4), arr(3, 1)]),
    ("multiply", mf.multiply, np.multiply, [arr(2, 3), arr(2, 3)]),
    ("divide", mf.divide, np.divide, [arr(2, 3), pos(2, 3)]),
    ("pow", mf.pow, np.power, [pos(3), arr(3)]),
    ("maximum", mf.maximum, np.maximum, [arr(5), arr(5)]),
    ("minimum", mf.minimum, np.minimum, [arr(5), arr(5)]),
    ("matmul", mf.matmul, np.matmul, [arr(3, 4), arr(4, 2)]),
    ("floordiv", mf.floordiv, np.floor_divide, [arr(4) * 10, pos(4)]),
    ("floormod", mf.floormod, np.remainder, [arr(4) * 10, pos(4)]),
])
def test_binary_forward_matches_numpy(name, fn, ref, inputs):
    check_forward(fn, inputs, ref(*inputs))


@pytest.mark.parametrize("fn,ref,x", [
    (mf.negative, np.negative, arr(3)), (mf.square, np.square, arr(3)),
    (mf.sqrt, np.sqrt, pos(3)), (mf.exp, np.exp, arr(3)), (mf.log, np.log, pos(3)),
    (mf.abs, np.abs, arr(3)), (mf.sign, np.sign, arr(3)), (mf.floor, np.floor, arr(3) * 5),
    (mf.cos, np.cos, arr(3) * 4), (mf.sin, np.sin, arr(3) * 4),
    (mf.rsqrt, lambda v: 1 / np.sqrt(v), pos(3)), (mf.reciprocal, lambda v: 1 / v, pos(3)),
])
def test_unary_forward_matches_numpy(fn, ref, x):
    check_forward(fn, [x], ref(x))


@pytest.mark.parametrize("fn,ref,kwargs", [
    (mf.reduce_sum, np.sum, {}), (mf.reduce_sum, np.sum, {"axis": 1}),
    (mf.reduce_mean, np.mean, {"axis": 0, "keepdims": True}),
    (mf.reduce_max, np.max, {"axis": -1}), (mf.reduce_min, np.min, {}),
    (mf.reduce_prod, np.prod, {"axis": 1}),
])
def test_reductions_match_numpy(fn, ref, kwargs):
    x = arr(3, 4)
    check_forward(lambda a: fn(a, **kwargs), [x], ref(x, **kwargs))


def test_the_gradient_of_a_reduction_follows_the_shape_fed_in_each_run():
    # The gradient kernel keeps the layout of the last input shape it saw: a shape fed
    # anew in a later run is broadcast to, not the one before. The sum's gradient is a
    # read-only view of the incoming gradient (a kernel that wrote it in place would
    # write every element at once), the mean's its own array.
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float32, [None, 3])
        grads = [mf.gradients(mf.reduce_sum(x * 2.0), x)[0],
                 mf.gradients(mf.reduce_sum(x, axis=1), x)[0],
                 mf.gradients(mf.reduce_mean(x, axis=0), x)[0]]
        with mf.Session() as sess:
            for rows in (2, 4, 2, 1):
                total, per_row, mean = sess.run(grads, {x: np.ones((rows, 3), np.float32)})
                np.testing.assert_array_equal(total, np.full((rows, 3), 2.0, np.float32))
                np.testing.assert_array_equal(per_row, np.ones((rows, 3), np.float32))
                np.testing.assert_allclose(mean, np.full((rows, 3), 1.0 / rows), rtol=1e-6)
                assert total.dtype == per_row.dtype == mean.dtype == np.float32


def test_the_gradient_of_a_product_with_zeros_is_the_product_of_the_others():
    # TensorFlow's values: one zero gets the product of the rest, the rest 0; two zeros
    # in a row give 0 everywhere in it (never NaN, which prod / x gives).
    x = mf.constant([[0.0, 2.0, 3.0], [0.0, 0.0, 3.0], [1.0, 2.0, 3.0]], mf.float64)
    grad = mf.gradients(mf.reduce_prod(x, axis=1), x)[0]
    with mf.Session() as sess:
        got = sess.run(grad)
    np.testing.assert_array_equal(got, [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0], [6.0, 3.0, 2.0]])


@pytest.mark.parametrize("fn,dtype,expected", [
    (mf.reduce_max, np.float32, -np.inf), (mf.reduce_min, np.float64, np.inf),
    (mf.reduce_max, np.int32, np.iinfo(np.int32).min),
    (mf.reduce_min, np.int64, np.iinfo(np.int64).max),
])
def test_max_and_min_over_no_elements_give_their_identity_as_tensorflow(fn, dtype, expected):
    x = mf.placeholder(mf.as_dtype(dtype), [None, 3])
    over_rows, kept, everything = (fn(x, axis=0), fn(x, axis=[-2], keepdims=True), fn(x))
    per_row = fn(x, axis=1)         # no row: an empty result, as numpy's
    with mf.Session() as sess:
        got = sess.run([over_rows, kept, everything, per_row], {x: np.zeros((0, 3), dtype)})
    np.testing.assert_array_equal(got[0], np.full(3, expected, dtype))
    np.testing.assert_array_equal(got[1], np.full((1, 3), expected, dtype))
    assert got[2] == expected and got[2].dtype == dtype
    assert got[3].shape == (0,) and all(g.dtype == dtype for g in got)


def test_the_mean_of_no_elements_is_nan_without_a_warning_as_tensorflow(recwarn):
    x = mf.placeholder(mf.float32, [None, 3])
    with mf.Session() as sess:
        everything, over_rows = sess.run([mf.reduce_mean(x), mf.reduce_mean(x, axis=0)],
                                         {x: np.zeros((0, 3), np.float32)})
    assert np.isnan(everything) and everything.dtype == np.float32
    assert over_rows.shape == (3,) and np.isnan(over_rows).all()
    assert not [w for w in recwarn if "empty slice" in str(w.message)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_float_sums_and_means_add_in_float32_as_tensorflow(dtype):
    # 5000 values of 1.1 (bfloat16 1.1015625): added in bfloat16 the sum sticks at 512.
    dt = mf.as_dtype(dtype)
    values = np.full((2, 5000), 1.1, np.float32).astype(dt.np_dtype)
    exact = values.astype(np.float64).sum(axis=1)
    x = mf.placeholder(dt, values.shape)
    bias = mf.zeros([2], dt)
    out = [mf.reduce_sum(x, axis=1), mf.reduce_mean(x), mf.nn.l2_loss(x),
           mf.nn.moments(x, axes=[1])[1],
           mf.gradients(mf.reduce_sum(mf.nn.bias_add(mf.transpose(x), bias)), [bias])[0]]
    with mf.Session() as sess:
        total, mean, half_squares, variance, bias_grad = sess.run(out, {x: values})
    assert total.dtype == dt.np_dtype
    np.testing.assert_allclose(total.astype(np.float64), exact, rtol=1e-2)
    np.testing.assert_allclose(float(mean), exact[0] / 5000, rtol=1e-2)
    np.testing.assert_allclose(float(half_squares),
                               (values.astype(np.float64) ** 2).sum() / 2, rtol=1e-2)
    np.testing.assert_array_equal(variance.astype(np.float32), [0, 0])    # a constant row
    np.testing.assert_allclose(bias_grad.astype(np.float32), [5000, 5000], rtol=1e-2)


def test_integer_sum_keeps_dtype():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    check_forward(lambda a: mf.reduce_sum(a, axis=0), [x], x.sum(axis=0).astype(np.int32))


def test_argmax_argmin_and_comparisons():
    x = arr(3, 4)
    check_forward(lambda a: mf.argmax(a, axis=1), [x], np.argmax(x, axis=1))
    check_forward(lambda a: mf.argmin(a, 0), [x], np.argmin(x, axis=0))
    check_forward(lambda a: mf.equal(a, a), [x], np.ones_like(x, dtype=bool))
    check_forward(lambda a: a > 0.0, [x], x > 0)
    check_forward(lambda a: mf.logical_not(a > 0.0), [x], ~(x > 0))


def _run(build, *values):
    phs = [mf.placeholder(mf.as_dtype(np.asarray(v).dtype), np.shape(v)) for v in values]
    out = build(*phs)
    with mf.Session() as sess:
        got = sess.run(out, dict(zip(phs, values)))
    assert got.dtype == out.dtype.np_dtype
    return got


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_argmax_and_argmin_skip_nan_as_tensorflow(dtype):
    # TensorFlow's CPU kernel (which these rows were checked against) skips NaN; numpy
    # gives the first NaN's index. A row with no value above the dtype's lowest gives 0.
    n, i = np.nan, np.inf
    rows = np.array([[1, n, 3], [n, 1, n], [n, n, n], [n, -i, 5], [n, -i, -i], [-i, n, -i],
                     [n, -1e38, n], [2, n, 2]], np.float32)
    x = mf.placeholder(mf.as_dtype(dtype), rows.shape)
    with mf.Session() as sess:
        got = sess.run([mf.argmax(x, 1), mf.argmin(mf.negative(x), 1), mf.argmax(x, 0),
                        mf.argmax(mf.transpose(x), 0)], {x: rows.astype(x.dtype.np_dtype)})
    expected = [2, 1, 0, 2, 0, 0, 1, 0]
    for value in (got[0], got[1], got[3]):
        np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(got[2], [7, 1, 3])


def test_argmax_and_argmin_of_bools_as_tensorflow():
    # True is the larger; the first of equals wins (TensorFlow: 1 and 1 here).
    assert _run(mf.argmax, np.array([False, True, True])) == 1
    assert _run(lambda a: mf.argmin(a, 0), np.array([True, False, False])) == 1
    np.testing.assert_array_equal(
        _run(lambda a: mf.argmax(a, 1, output_type=mf.int32),
             np.array([[False, False], [False, True]])), [0, 1])


@pytest.mark.parametrize("compare", [mf.less, mf.less_equal, mf.greater, mf.greater_equal,
                                     lambda a, b: a < b, lambda a, b: a >= b],
                         ids=["less", "less_equal", "greater", "greater_equal", "<", ">="])
def test_bools_have_no_order_comparing_them_is_refused_when_built(compare):
    # TensorFlow refuses them when the graph is built; numpy ordered False < True.
    a, b = mf.constant([False, True]), mf.constant([True, True])
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Unsupported dtype for input 0 in op '\w+' \((Less|Greater)"
                             r"(Equal)?\): expected a numeric \(non-bool\) dtype, got bool"):
        compare(a, b)
    np.testing.assert_array_equal(_run(mf.equal, np.array([False, True]),
                                       np.array([True, True])), [False, True])


def test_negative_of_uint8_is_refused_when_built_as_in_tensorflow():
    # numpy wrapped it around (-200 was 56); TensorFlow's Neg has no unsigned dtype.
    x = mf.constant(np.array([1, 200], np.uint8))
    for negate in (mf.negative, lambda t: -t):
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"input 0 in op 'Neg' \(Neg\): expected a signed numeric "
                                 r"dtype \(not bool or uint8\), got uint8"):
            negate(x)
    np.testing.assert_array_equal(_run(mf.negative, np.array([1, -128], np.int8)), [-1, -128])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_realdiv_of_integers_is_refused_when_built_as_tensorflow_has_no_kernel(dtype):
    # It gave float64 true division; TensorFlow builds it and fails when it runs ("No
    # OpKernel was registered to support Op 'RealDiv' ... T=DT_INT32").
    a, b = mf.constant(np.array([7, 6], dtype)), mf.constant(np.array([2, 4], dtype))
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"input 0 in op 'RealDiv' \(RealDiv\): expected a floating dtype "
                             r"\(divide and truediv cast integers to a float, floordiv keeps "
                             rf"them\), got {np.dtype(dtype).name}"):
        mf.realdiv(a, b)
    # tf.divide, tf.truediv and / still divide them: as TensorFlow's truediv, 8- and
    # 16-bit integers into float32, wider ones into float64.
    wide = np.float32 if np.dtype(dtype).itemsize <= 2 else np.float64
    with mf.Session() as sess:
        for divide in (mf.divide, mf.truediv, lambda x, y: x / y):
            got = sess.run(divide(a, b))
            assert got.dtype == wide
            np.testing.assert_array_equal(got, [3.5, 1.5])
        np.testing.assert_array_equal(sess.run(mf.realdiv(mf.cast(a, mf.float32), 2.0)),
                                      [3.5, 3.0])


def test_python_scalars_take_the_tensor_dtype():
    x = mf.placeholder(mf.float32, [2])
    y = 2 * x + 1
    assert y.dtype is mf.float32
    with mf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: [1.0, 2.0]}), [3.0, 5.0])


def test_integer_division_is_true_division():
    a = mf.constant([3, 4])
    with mf.Session() as sess:
        np.testing.assert_allclose(sess.run(a / 2), [1.5, 2.0])


def test_the_mean_of_integers_rounds_toward_zero_in_their_dtype_as_tensorflow():
    a, b = mf.constant([[1, 2], [3, 5]]), mf.constant([-7, 2, 0])
    with mf.Session() as sess:
        whole, rows, negative, kept = sess.run([
            mf.reduce_mean(a), mf.reduce_mean(a, axis=1), mf.reduce_mean(b),
            mf.reduce_mean(a, axis=0, keepdims=True)])
    assert whole.dtype == np.int32 and whole == 2
    np.testing.assert_array_equal(rows, [1, 4])
    assert negative == -1                       # -5 / 3, toward zero
    np.testing.assert_array_equal(kept, [[2, 3]])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8])
def test_the_mean_of_integers_does_not_wrap_around_as_tensorflow(dtype):
    # TensorFlow sums in a wider type: the mean of [max, max, 1] is (2 max + 1) // 3.
    top, bottom = np.iinfo(dtype).max, np.iinfo(dtype).min
    values = np.array([[top, top, 1], [bottom, bottom, 0]], dtype)
    x = mf.placeholder(mf.as_dtype(dtype), [2, 3])
    with mf.Session() as sess:
        rows = sess.run(mf.reduce_mean(x, axis=1), {x: values})
    assert rows.dtype == dtype
    np.testing.assert_array_equal(rows, [(2 * int(top) + 1) // 3, -(-2 * int(bottom) // 3)])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_floordiv_of_floats_is_the_floor_of_the_quotient_as_tensorflow(dtype):
    # numpy's floor_divide rounds through fmod: 7 // 0.1 is 69, -5 // inf is -1 and
    # inf // 2 NaN; TensorFlow's FloorDiv is floor(x / y).
    x = np.array([7, -5, 5, np.inf, -np.inf, 1, -1, 7, -7], dtype)
    y = np.array([0.1, np.inf, np.inf, 2, 2, 0, 0, 2, 2], dtype)
    a, b = mf.placeholder(mf.as_dtype(dtype), [9]), mf.placeholder(mf.as_dtype(dtype), [9])
    d_mod = mf.gradients(mf.reduce_sum(mf.floormod(a, b)), [b])[0]
    with mf.Session() as sess:
        quotient, fused, d_y = sess.run([mf.floordiv(a, b), mf.floordiv(a * 1, b) + 1, d_mod],
                                        {a: x, b: y})
    with np.errstate(divide="ignore"):
        expected = np.floor(x / y)                      # divided in the dtype, as TensorFlow
    assert quotient.dtype == dtype
    np.testing.assert_array_equal(quotient, expected)
    assert np.signbit(quotient[1]) and not np.signbit(quotient[2])     # -0 and 0
    np.testing.assert_array_equal(fused, expected + 1)
    np.testing.assert_array_equal(d_y, -expected)          # d floormod / dy = -(x // y)


def test_div_divides_integers_as_python_2_and_floats_as_divide():
    # TensorFlow 1's div: floor division for integers (dtype kept), true for floats;
    # divide, truediv and / are true division whatever the dtype.
    a, b = mf.constant([7, -7, 5, -3]), mf.constant([2, 2, -3, 2])
    x = mf.constant([7.0, -7.0])
    with mf.Session() as sess:
        ints, floats, true = sess.run([mf.div(a, b), mf.div(x, 2.0), mf.divide(a, b)])
    assert ints.dtype == np.int32
    np.testing.assert_array_equal(ints, [3, -4, -2, -2])
    np.testing.assert_allclose(floats, [3.5, -3.5])
    assert true.dtype == np.float64
    np.testing.assert_allclose(true, [3.5, -3.5, -5 / 3, -1.5])


@pytest.mark.parametrize("build", [
    lambda a, b: mf.floordiv(a, b, name="late_div"),
    lambda a, b: mf.floormod(a, b, name="late_div"),
    lambda a, b: mf.div(a, b, name="late_div"),
])
@pytest.mark.parametrize("dtype", [mf.int32, mf.int64, mf.uint8])
def test_integer_division_by_zero_fails_naming_the_op_as_tensorflow(build, dtype):
    # numpy gives 0 (with a warning the executor silences): a silently wrong result.
    a = mf.placeholder(dtype, [None])
    b = mf.placeholder(dtype, [None])
    y = build(a, b)
    with mf.Session() as sess:
        expected = 1 if y.op.type == "FloorMod" else 3
        np.testing.assert_array_equal(sess.run(y, {a: [7], b: [2]}), [expected])
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Integer division by zero in op 'late_div' \(Floor(Div|Mod)\)"):
            sess.run(y, {a: [7, 3], b: [2, 0]})
    floats = mf.placeholder(mf.float32, [2])
    with mf.Session() as sess:         # floats divide by zero into inf and nan, as IEEE
        got = sess.run(mf.floordiv(floats, 0.0), {floats: [1.0, 0.0]})
    assert np.isinf(got[0]) and np.isnan(got[1])


def test_where_with_a_vector_condition_picks_rows_as_tensorflow_1():
    # TF1's tf.where: a condition of rank 1 against x and y of higher rank has one entry
    # per row. numpy's broadcasting would pick columns of a square x instead.
    x = np.arange(9.0).reshape(3, 3)
    rows = np.array([[0.0, 1.0, 2.0], [-3.0, -4.0, -5.0], [6.0, 7.0, 8.0]])
    check_forward(lambda c, a, b: mf.where(c, a, b), [np.array([True, False, True]), x, -x],
                  rows)
    check_forward(lambda c, a, b: mf.where(c, a, b),
                  [np.array([False, True]), np.ones((2, 2, 3)), np.zeros((2, 2, 3))],
                  np.stack([np.zeros((2, 3)), np.ones((2, 3))]))
    unknown = mf.placeholder(mf.float64)            # the rank known only when it runs
    with mf.Session() as sess:
        got = sess.run(mf.where(mf.constant([True, False, True]), unknown, -unknown),
                       {unknown: x})
    np.testing.assert_array_equal(got, rows)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"op 'Select' \(Select\): expected condition of shape \(4,\)"):
        mf.where(mf.constant([True, False, True]), mf.ones([4, 3]), mf.zeros([4, 3]))


def test_where_of_a_condition_alone_gives_the_coordinates_of_its_true_elements():
    # TF1's one-argument tf.where: int64 rows of coordinates in row-major order.
    condition = mf.placeholder(mf.bool, [None, 3])
    found = mf.where(condition)
    assert found.dtype == mf.int64 and found.shape.as_list() == [None, 2]
    with mf.Session() as sess:
        got = sess.run(found, {condition: [[True, False, True], [False, False, True]]})
        np.testing.assert_array_equal(got, [[0, 0], [0, 2], [1, 2]])
        assert got.dtype == np.int64
        none = sess.run(mf.where(mf.constant([0.0, 0.0])))      # numbers: nonzero
        assert none.shape == (0, 1)
    with pytest.raises(mf.errors.InvalidArgumentError, match="x and y must both be given"):
        mf.where(mf.constant([True]), mf.constant([1.0]))


def test_integer_powers_and_squared_differences_as_tensorflow():
    # TensorFlow computes both for integers in their dtype; they were refused at build time.
    a, b = mf.constant([2, 3, -2]), mf.constant([3, 0, 3])
    with mf.Session() as sess:
        power, square, diff = sess.run([mf.pow(a, b), a ** 2, mf.squared_difference(a, b)])
        assert power.dtype == square.dtype == diff.dtype == np.int32
        np.testing.assert_array_equal(power, [8, 1, -8])
        np.testing.assert_array_equal(square, [4, 9, 4])
        np.testing.assert_array_equal(diff, [1, 9, 25])
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Integers to negative integer powers.*in op 'late_pow' \(Pow\)"):
            sess.run(mf.pow(a, mf.placeholder_with_default(mf.constant([1, -1, 2]), [3]),
                            name="late_pow"))


def test_check_numerics_checks_the_gradient_too_as_tensorflow():
    x = mf.placeholder(mf.float32, [2])
    grad = mf.gradients(mf.reduce_sum(mf.sqrt(mf.check_numerics(x, "bad x"))), x)[0]
    with mf.Session() as sess:
        np.testing.assert_allclose(sess.run(grad, {x: [4.0, 1.0]}), [0.25, 0.5])
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Not a number \(NaN\) or infinity \(Inf\) values detected "
                                 r"in gradient. bad x: Tensor had Inf values"):
            sess.run(grad, {x: [0.0, 1.0]})


def test_shapes_known_only_at_run_time_are_checked_as_tensorflow_does():
    # numpy would take a vector for a matrix, broadcast AddN's inputs and count a range
    # away from its limit as empty: TensorFlow refuses all three, naming the op.
    a, b = mf.placeholder(mf.float32), mf.placeholder(mf.float32)
    start, limit = mf.placeholder(mf.int32, []), mf.placeholder(mf.int32, [])
    product = mf.matmul(a, b, name="late_matmul")
    total = mf.add_n([a, b], name="late_add_n")
    counted = mf.range(start, limit, name="late_range")
    down = mf.range(start, limit, -1, name="late_range_down")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"MatMul needs inputs of rank >= 2 in op 'late_matmul' "
                                 r"\(MatMul\): expected rank >= 2, got shapes \(3,\) and \(3, 2\)"):
            sess.run(product, {a: np.ones(3), b: np.ones((3, 2))})
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"AddN inputs must have the same shape in op 'late_add_n' "
                                 r"\(AddN\): expected shape \(1,\) \(input 0\), got shape \(3,\)"):
            sess.run(total, {a: np.ones(1), b: np.ones(3)})
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Requires start <= limit when delta > 0: 0/-1 in op 'late_range'"):
            sess.run(counted, {start: 0, limit: -1})
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Requires start >= limit when delta < 0: 0/2"):
            sess.run(down, {start: 0, limit: 2})
        assert sess.run(counted, {start: 2, limit: 2}).shape == (0,)
        np.testing.assert_array_equal(sess.run(product, {a: np.ones((2, 3)),
                                                         b: np.ones((3, 1))}), [[3], [3]])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"Requires start <= limit"):
        mf.range(5, 0)


def test_matmul_shape_mismatch_is_a_build_error_naming_the_op():
    a = mf.placeholder(mf.float32, [3, 4])
    b = mf.placeholder(mf.float32, [5, 6])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'MatMul' \(MatMul\).*4 vs 5"):
        mf.matmul(a, b)


def test_matmul_takes_tf1s_adjoint_and_sparse_hint_arguments():
    # Real dtypes: an adjoint is the transpose; the sparse hints change no value (TF1).
    a, b = np.arange(24.0).reshape(2, 3, 4), np.arange(40.0).reshape(2, 5, 4)
    c = np.arange(30.0).reshape(2, 3, 5)
    with mf.Session() as sess:
        adjoint = sess.run(mf.matmul(a, b, adjoint_b=True, a_is_sparse=True))
        both = sess.run(mf.matmul(b, c, adjoint_a=True, transpose_b=True, b_is_sparse=True))
    np.testing.assert_array_equal(adjoint, a @ b.transpose(0, 2, 1))
    np.testing.assert_array_equal(both, b.transpose(0, 2, 1) @ c.transpose(0, 2, 1))
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match="only one of transpose_a and adjoint_a"):
        mf.matmul(a, a, transpose_a=True, adjoint_a=True)


def test_mixed_dtypes_are_rejected_naming_the_op():
    a = mf.placeholder(mf.float32, [3])
    b = mf.placeholder(mf.float64, [3])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'Add'.*float32.*float64"):
        mf.add(a, b)


def test_broadcast_mismatch_names_shapes():
    a = mf.placeholder(mf.float32, [3, 4])
    b = mf.placeholder(mf.float32, [5])
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'Mul'.*\(3, 4\) and \(5,\)"):
        a * b


def test_runtime_shape_mismatch_names_the_op():
    a = mf.placeholder(mf.float32, [None, 4])
    b = mf.placeholder(mf.float32, [None, 4])
    c = mf.add(a, b, name="late_add")
    with mf.Session() as sess:
        with pytest.raises(mf.errors.InvalidArgumentError, match="late_add"):
            sess.run(c, {a: np.ones((2, 4)), b: np.ones((3, 4))})


def test_clip_by_value_clips_into_the_range_and_keeps_the_dtype():
    x = np.array([-3.0, -0.5, 0.2, 4.0], np.float32)
    with mf.Session() as sess:
        got = sess.run(mf.clip_by_value(x, -1.0, 1.0))
    np.testing.assert_array_equal(got, np.array([-1.0, -0.5, 0.2, 1.0], np.float32))
    assert got.dtype == np.float32


def test_bool_operators_and_logical_xor_match_numpy():
    a = mf.constant([True, True, False, False])
    b = mf.constant([True, False, True, False])
    pairs = [(a ^ b, [False, True, True, False]),
             (mf.logical_xor(a, b), [False, True, True, False]),
             (True & b, [True, False, True, False]), (False | b, [True, False, True, False]),
             (True ^ b, [False, True, False, True]), (~(a ^ b), [True, False, False, True])]
    with mf.Session() as sess:
        got = sess.run([t for t, _ in pairs])
    for value, (tensor, expected) in zip(got, pairs):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value, expected, err_msg=tensor.name)
    with pytest.raises(mf.errors.InvalidArgumentError, match="LogicalXor"):
        mf.constant([1, 2]) ^ mf.constant([1, 0])
