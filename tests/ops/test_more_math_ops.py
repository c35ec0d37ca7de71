"""TF1 math ops a ported script reaches for beyond the basics: round and ceil, expm1,
softsign, selu, log_sigmoid, reduce_logsumexp, reduce_all and reduce_any, cumsum and
cumprod, confusion_matrix. Forward values against
numpy or against values TensorFlow 2.x (compat.v1 graphs, CPU) printed for the same
inputs; gradients against finite differences."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_forward, check_gradient

R = np.random.default_rng(23)


def arr(*shape, low=-1.0, high=1.0):
    return R.uniform(low, high, size=shape)


GRAD_CASES = []


# -- round and ceil ----------------------------------------------------------------------

def test_round_takes_halves_to_even_as_tensorflow():
    # TensorFlow: [0. 2. 2. -0. -2. -2.] (banker's rounding, not away from zero).
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, -3.7])
    check_forward(mf.round, [x], [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, -4.0])
    check_forward(mf.round, [x.astype(np.float32)], np.array(
        [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, -4.0], np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
def test_round_keeps_integers_and_their_dtype(dtype):
    x = np.array([0, 3, 7, 100], dtype)
    check_forward(mf.round, [x], x)


def test_round_and_ceil_keep_non_finite_values_and_empty_tensors():
    x = np.array([np.inf, -np.inf, np.nan, 2.0])
    check_forward(mf.round, [x], x)
    check_forward(mf.ceil, [x], x)
    check_forward(mf.round, [np.zeros((0, 3))], np.zeros((0, 3)))
    check_forward(mf.ceil, [np.zeros((2, 0))], np.zeros((2, 0)))


def test_ceil_matches_numpy():
    x = np.array([0.5, 1.0, -0.5, -1.2, 2.0000001, 1e30])
    check_forward(mf.ceil, [x], np.ceil(x))
    check_forward(mf.ceil, [x.astype(np.float32)], np.ceil(x.astype(np.float32)))


def test_ceil_refuses_integers_as_tensorflow():
    with mf.Graph().as_default(), \
            pytest.raises(mf.errors.InvalidArgumentError, match="Unsupported dtype"):
        mf.ceil(mf.constant([1, 2]))


def test_round_and_ceil_have_no_gradient_as_in_tensorflow():
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float64, [3])
        assert mf.gradients(mf.round(x), x) == [None]
        assert mf.gradients(mf.ceil(x), x) == [None]



# -- expm1, softsign, selu, log_sigmoid --------------------------------------------------

X = np.array([-100.0, -20.0, -3.5, -1.0, -0.25, 0.0, 0.3, 2.0, 20.0, 100.0])

# What TensorFlow 2.x (tf.compat.v1 graph, CPU) gave for X in float64: (values, gradients).
TF_FLOAT64 = {
    "expm1": (mf.expm1,
        [-1.0, -0.9999999979388464, -0.9698026165776815, -0.6321205588285577, -0.22119921692859512, 0.0, 0.34985880757600313, 6.389056098930652, 485165194.4097903, 2.6881171418161356e+43],
        [3.7200759760208356e-44, 2.061153622438558e-09, 0.0301973834223185, 0.3678794411714423, 0.7788007830714049, 1.0, 1.3498588075760032, 7.38905609893065, 485165195.4097903, 2.6881171418161356e+43]),
    "softsign": (mf.nn.softsign,
        [-0.9900990099009901, -0.9523809523809523, -0.7777777777777778, -0.5, -0.2, 0.0, 0.23076923076923075, 0.6666666666666666, 0.9523809523809523, 0.9900990099009901],
        [9.802960494069208e-05, 0.0022675736961451248, 0.04938271604938271, 0.25, 0.64, 1.0, 0.5917159763313609, 0.1111111111111111, 0.0022675736961451248, 9.802960494069208e-05]),
    "selu": (mf.nn.selu,
        [-1.7580993408473768, -1.7580993372236642, -1.7050093409572833, -1.1113307378125628, -0.388890197478119, 0.0, 0.31521029620664415, 2.101401974710961, 21.014019747109607, 105.07009873554804],
        [0.0, 3.6237126632698846e-09, 0.05308999989009355, 0.6467686030348141, 1.369209143369258, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805]),
    "log_sigmoid": (mf.log_sigmoid,
        [-100.0, -20.000000002061153, -3.5297504182726205, -1.3132616875182228, -0.8259394198788433, -0.6931471805599453, -0.5543552444685271, -0.1269280110429725, -2.061153620314381e-09, -3.720075976020836e-44],
        [1.0, 0.9999999979388464, 0.9706877692486436, 0.7310585786300049, 0.5621765008857981, 0.5, 0.425557483188341, 0.11920292202211755, 2.0611536181902033e-09, 3.720075976020836e-44]),
}


@pytest.mark.parametrize("name", sorted(TF_FLOAT64))
def test_values_and_gradients_match_tensorflow(name):
    fn, values, grads = TF_FLOAT64[name]
    check_forward(fn, [X], values, rtol=1e-14, atol=0)
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float64, [X.size])
        grad = mf.gradients(fn(x), x)[0]
        with mf.Session() as sess:
            got = sess.run(grad, {x: X})
    np.testing.assert_allclose(got, grads, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("fn,ref", [
    (mf.expm1, np.expm1),
    (mf.nn.softsign, lambda v: v / (1 + np.abs(v))),
    (mf.log_sigmoid, lambda v: -np.logaddexp(0, -v)),
])
def test_float32_and_empty_inputs(fn, ref):
    x = X.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = ref(x)
    check_forward(fn, [x], expected, rtol=1e-6, atol=1e-30)
    check_forward(fn, [np.zeros((0, 4), np.float32)], np.zeros((0, 4), np.float32))


def test_selu_float32_uses_tensorflows_constants():
    x = X.astype(np.float32)
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    expected = np.where(x > 0, scale * x, scale * alpha * np.expm1(np.minimum(x, 0)))
    check_forward(mf.nn.selu, [x], expected.astype(np.float32), rtol=1e-6)
    check_forward(mf.nn.selu, [np.zeros((3, 0), np.float32)], np.zeros((3, 0), np.float32))


def test_log_sigmoid_does_not_overflow():
    # log(sigmoid(x)) in the naive form is log(0) = -inf at -800 (exp(800) overflows).
    check_forward(mf.log_sigmoid, [np.array([-800.0, 800.0])], [-800.0, 0.0])


def test_the_activations_refuse_integers_as_tensorflow():
    for fn in (mf.expm1, mf.nn.softsign, mf.nn.selu):
        with mf.Graph().as_default(), \
                pytest.raises(mf.errors.InvalidArgumentError, match="Unsupported dtype"):
            fn(mf.constant([1, 2]))


GRAD_CASES += [
    GradCase("expm1", mf.expm1, [arr(3, 4) * 3]),
    GradCase("softsign", mf.nn.softsign, [arr(3, 4) * 4]),
    # away from 0 (the kink of selu)
    GradCase("selu", mf.nn.selu, [np.array([[-3.0, -0.7, -0.05], [0.04, 0.8, 2.5]])]),
    GradCase("log_sigmoid", mf.log_sigmoid, [arr(2, 5) * 6]),
]

# -- reduce_logsumexp ---------------------------------------------------------------------

LSE_IN = np.array([[1.0, 2.0, 3.0, -1.0], [-np.inf] * 4, [np.inf, 1.0, 2.0, 0.0],
                   [800.0, 799.0, -5.0, 0.0]])


@pytest.mark.parametrize("kwargs,expected", [
    # TensorFlow's values for LSE_IN (a row of all -inf gives -inf, one with inf gives inf,
    # 800 does not overflow).
    ({"axis": 1}, [3.4197166463153397, -np.inf, np.inf, 800.3132616875182]),
    ({"axis": 0}, [np.inf, 799.0, 3.313506900283053, 0.861994804058251]),
    ({}, np.inf),
    ({"axis": 1, "keepdims": True},
     [[3.4197166463153397], [-np.inf], [np.inf], [800.3132616875182]]),
    ({"axis": [0, 1], "keepdims": True}, [[np.inf]]),
    ({"reduction_indices": -1, "keep_dims": False},
     [3.4197166463153397, -np.inf, np.inf, 800.3132616875182]),
])
def test_reduce_logsumexp_matches_tensorflow(kwargs, expected):
    check_forward(lambda a: mf.reduce_logsumexp(a, **kwargs), [LSE_IN], expected,
                  rtol=1e-14, atol=0)


def test_reduce_logsumexp_float32_and_empty():
    x = R.uniform(-50, 50, size=(3, 5)).astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    expected = (np.log(np.exp(x - m).sum(axis=1, keepdims=True)) + m)[:, 0]
    check_forward(lambda a: mf.reduce_logsumexp(a, axis=1), [x], expected, rtol=1e-6)
    # Nothing to sum: log(0) = -inf, as TensorFlow; an empty result stays empty.
    empty = np.zeros((0, 3))
    check_forward(lambda a: mf.reduce_logsumexp(a, axis=0), [empty], [-np.inf] * 3)
    check_forward(lambda a: mf.reduce_logsumexp(a, axis=1), [empty], np.zeros(0))
    check_forward(mf.reduce_logsumexp, [empty], -np.inf)


def test_reduce_logsumexp_gradient_is_the_softmax_of_the_row_as_tensorflow():
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float64, [4, 4])
        grad = mf.gradients(mf.reduce_logsumexp(x, axis=1), x)[0]
        with mf.Session() as sess:
            got = sess.run(grad, {x: LSE_IN})
    # TensorFlow's: NaN for the row of all -inf and at the +inf entry.
    nan = np.nan
    np.testing.assert_allclose(got, [
        [0.0889468172974043, 0.24178251715880072, 0.6572330228318554, 0.012037642711939451],
        [nan, nan, nan, nan], [nan, 0.0, 0.0, 0.0],
        [0.7310585786300049, 0.2689414213699951, 0.0, 0.0]], rtol=1e-14, atol=1e-300)


def test_reduce_logsumexp_refuses_integers_as_tensorflow():
    with mf.Graph().as_default(), pytest.raises(mf.errors.InvalidArgumentError):
        mf.reduce_logsumexp(mf.constant([1, 2]))


# -- reduce_all and reduce_any -----------------------------------------------------------

def test_reduce_all_and_any_match_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1 (a 2x2 and an empty bool tensor).
    x = mf.constant([[True, False], [True, True]])
    empty = mf.zeros([0, 3], mf.int32) > 0
    got = {"all_rows_keepdims": mf.reduce_all(x, axis=1, keepdims=True),
           "any_rows": mf.reduce_any(x, axis=-1), "all": mf.reduce_all(x),
           "any_columns_v1": mf.reduce_any(x, reduction_indices=[0], keep_dims=True),
           "all_empty": mf.reduce_all(empty, 0), "any_empty": mf.reduce_any(empty, 0)}
    assert {k: (t.dtype, t.shape.as_list()) for k, t in got.items()} == {
        "all_rows_keepdims": (mf.bool, [2, 1]), "any_rows": (mf.bool, [2]),
        "all": (mf.bool, []), "any_columns_v1": (mf.bool, [1, 2]),
        "all_empty": (mf.bool, [3]), "any_empty": (mf.bool, [3])}
    with mf.Session() as sess:
        values = sess.run(got)
    assert {k: v.tolist() for k, v in values.items()} == {
        "all_rows_keepdims": [[False], [True]], "any_rows": [True, True], "all": False,
        "any_columns_v1": [[True, True]], "all_empty": [True] * 3, "any_empty": [False] * 3}


def test_reductions_refuse_an_axis_named_twice_when_the_graph_is_built():
    # TensorFlow refuses it too ("Axes contains duplicate dimension"); numpy's message
    # came when the step ran.
    x = mf.constant(np.ones((2, 3, 4)))
    for reduce in (mf.reduce_sum, mf.reduce_max, mf.reduce_mean):
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"duplicate dimension.*expected distinct axes of a rank-3 "
                                 r"tensor, got \[1, -2\]"):
            reduce(x, axis=[1, -2])


def test_reduce_all_and_any_take_bools_only_and_have_no_gradient():
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"op 'All' \(All\)"):
        mf.reduce_all(mf.constant([1.0, 0.0]))
    x = mf.placeholder(mf.float32, [3])
    assert mf.gradients(mf.cast(mf.reduce_any(x > 0.0), mf.float32), x) == [None]


GRAD_CASES += [
    GradCase("reduce_logsumexp_axis", lambda a: mf.reduce_logsumexp(a, axis=1), [arr(3, 4) * 5]),
    GradCase("reduce_logsumexp_all_keepdims",
             lambda a: mf.reduce_logsumexp(a, keepdims=True), [arr(2, 3) * 5]),
    GradCase("reduce_logsumexp_large", lambda a: mf.reduce_logsumexp(a, axis=0),
             [arr(3, 2) + 700.0]),
]

# -- cumsum and cumprod ------------------------------------------------------------------

SCAN_IN = np.array([[2.0, 0.0, 3.0, -1.0], [0.5, 1.5, -2.0, 4.0]])
SCAN_WEIGHTS = np.array([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, 1.0]])

# TensorFlow's values of tf.math.cumsum / cumprod(SCAN_IN, axis, exclusive, reverse) and
# the gradients of reduce_sum(that * SCAN_WEIGHTS); cumprod's at the 0 of SCAN_IN are
# TensorFlow's (div_no_nan there gives 0, not the true derivative).
TF_SCANS = [
    ("cumsum", 1, False, False, [[2.0, 2.0, 5.0, 4.0], [0.5, 2.0, 0.0, 4.0]],
     [[10.0, 9.0, 7.0, 4.0], [2.5, 3.5, 3.0, 1.0]]),
    ("cumsum", 1, False, True, [[4.0, 2.0, 2.0, -1.0], [4.0, 3.5, 2.0, 4.0]],
     [[1.0, 3.0, 6.0, 10.0], [-1.0, -0.5, 1.5, 2.5]]),
    ("cumsum", 1, True, False, [[0.0, 2.0, 2.0, 5.0], [0.0, 0.5, 2.0, 0.0]],
     [[9.0, 7.0, 4.0, 0.0], [3.5, 3.0, 1.0, 0.0]]),
    ("cumsum", 1, True, True, [[2.0, 2.0, -1.0, 0.0], [3.5, 2.0, 4.0, 0.0]],
     [[0.0, 1.0, 3.0, 6.0], [0.0, -1.0, -0.5, 1.5]]),
    ("cumsum", 0, False, False, [[2.0, 0.0, 3.0, -1.0], [2.5, 1.5, 1.0, 3.0]],
     [[0.0, 2.5, 5.0, 5.0], [-1.0, 0.5, 2.0, 1.0]]),
    ("cumsum", 0, False, True, [[2.5, 1.5, 1.0, 3.0], [0.5, 1.5, -2.0, 4.0]],
     [[1.0, 2.0, 3.0, 4.0], [0.0, 2.5, 5.0, 5.0]]),
    ("cumsum", 0, True, False, [[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 3.0, -1.0]],
     [[-1.0, 0.5, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0]]),
    ("cumsum", 0, True, True, [[0.5, 1.5, -2.0, 4.0], [0.0, 0.0, 0.0, 0.0]],
     [[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]]),
    ("cumprod", 1, False, False, [[2.0, 0.0, 0.0, -0.0], [0.5, 0.75, -1.5, -6.0]],
     [[1.0, 0.0, 0.0, -0.0], [-18.25, -5.75, 4.5, -1.5]]),
    ("cumprod", 1, False, True, [[-0.0, -0.0, -3.0, -1.0], [-6.0, -12.0, -8.0, 4.0]],
     [[0.0, 0.0, -3.0, 13.0], [12.0, 0.0, 8.0, -3.0]]),
    ("cumprod", 1, True, False, [[1.0, 2.0, 0.0, 0.0], [1.0, 0.5, 0.75, -1.5]],
     [[2.0, 0.0, 0.0, -0.0], [0.5, 0.0, 0.75, 0.0]]),
    ("cumprod", 1, True, True, [[-0.0, -3.0, -1.0, 1.0], [-12.0, -8.0, 4.0, 1.0]],
     [[0.0, 0.0, -2.0, 9.0], [0.0, 8.0, -4.0, 4.0]]),
    ("cumprod", 0, False, False, [[2.0, 0.0, 3.0, -1.0], [1.0, 0.0, -6.0, -4.0]],
     [[0.5, 0.0, -1.0, 8.0], [-2.0, 0.0, 6.0, -1.0]]),
    ("cumprod", 0, False, True, [[1.0, 0.0, -6.0, -4.0], [0.5, 1.5, -2.0, 4.0]],
     [[0.5, 0.0, -6.0, 16.0], [1.0, 0.5, 11.0, -3.0]]),
    ("cumprod", 0, True, False, [[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 3.0, -1.0]],
     [[-1.0, 0.0, 2.0, 1.0], [0.0, 0.0, -0.0, 0.0]]),
    ("cumprod", 0, True, True, [[0.5, 1.5, -2.0, 4.0], [1.0, 1.0, 1.0, 1.0]],
     [[0.0, 0.0, 0.0, -0.0], [1.0, 2.0, 3.0, 4.0]]),
]


@pytest.mark.parametrize("fn,axis,exclusive,reverse,values,grads", TF_SCANS)
def test_cumsum_and_cumprod_match_tensorflow(fn, axis, exclusive, reverse, values, grads):
    scan = getattr(mf, fn)
    kw = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    check_forward(lambda a: scan(a, **kw), [SCAN_IN], values, rtol=1e-14, atol=0)
    with mf.Graph().as_default():
        x = mf.placeholder(mf.float64, [2, 4])
        grad = mf.gradients(mf.reduce_sum(scan(x, **kw) * SCAN_WEIGHTS), x)[0]
        with mf.Session() as sess:
            got = sess.run(grad, {x: SCAN_IN})
    np.testing.assert_allclose(got, grads, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8, np.float32])
def test_scans_keep_the_dtype(dtype):
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype)
    check_forward(lambda a: mf.cumsum(a, axis=1), [x], np.cumsum(x, axis=1, dtype=dtype))
    check_forward(lambda a: mf.cumprod(a, axis=-1, exclusive=True),
                  [x], np.array([[1, 1, 2], [1, 4, 20]], dtype))
    check_forward(lambda a: mf.cumsum(a, exclusive=True, reverse=True),
                  [x], np.array([[4, 5, 6], [0, 0, 0]], dtype))


def test_scans_of_empty_tensors():
    for shape in [(0,), (0, 3), (3, 0)]:
        for axis in range(len(shape)):
            for exclusive in (False, True):
                empty = np.zeros(shape)
                check_forward(lambda a, axis=axis, ex=exclusive: mf.cumsum(
                    a, axis=axis, exclusive=ex), [empty], empty)
                check_forward(lambda a, axis=axis, ex=exclusive: mf.cumprod(
                    a, axis=axis, exclusive=ex, reverse=True), [empty], empty)


def test_scans_refuse_scalars_bools_and_an_axis_out_of_range():
    with mf.Graph().as_default():
        for bad in (lambda: mf.cumsum(mf.constant(1.0)),
                    lambda: mf.cumprod(mf.constant([True, False])),
                    lambda: mf.cumsum(mf.constant([[1.0]]), axis=2)):
            with pytest.raises(mf.errors.InvalidArgumentError):
                bad()


GRAD_CASES += [
    GradCase("cumsum", lambda a: mf.cumsum(a, axis=1), [arr(3, 4)]),
    GradCase("cumsum_exclusive_reverse",
             lambda a: mf.cumsum(a, axis=0, exclusive=True, reverse=True), [arr(3, 4)]),
    # cumprod away from 0 (TensorFlow's gradient divides by x)
    GradCase("cumprod", lambda a: mf.cumprod(a, axis=1), [arr(3, 4, low=0.5, high=1.5)]),
    GradCase("cumprod_exclusive_reverse",
             lambda a: mf.cumprod(a, axis=-1, exclusive=True, reverse=True),
             [arr(2, 5, low=0.5, high=1.5) * np.sign(arr(2, 5))]),
]

# (later ops' cases go above this line)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# -- confusion_matrix ---------------------------------------------------------------------

CM_LABELS = np.array([0, 1, 2, 1, 3, 0, 2, 2], np.int64)
CM_PREDICTIONS = np.array([0, 2, 2, 1, 0, 0, 1, 2], np.int64)
CM_WEIGHTS = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 0.0, 1.0, 2.0], np.float32)


def test_confusion_matrix_counts_label_prediction_pairs_as_tensorflow():
    # Recorded from TF 2.21's tf.compat.v1.confusion_matrix on the same inputs.
    counted = mf.confusion_matrix(CM_LABELS, CM_PREDICTIONS)
    weighted = mf.confusion_matrix(CM_LABELS, CM_PREDICTIONS, num_classes=5,
                                   weights=CM_WEIGHTS)
    as_float = mf.confusion_matrix(CM_LABELS, CM_PREDICTIONS, num_classes=4,
                                   weights=CM_WEIGHTS, dtype=mf.float32)
    column = mf.confusion_matrix(CM_LABELS[:, None], CM_PREDICTIONS)
    assert counted.dtype == mf.int32 and as_float.dtype == mf.float32
    assert as_float.shape.as_list() == [4, 4] and weighted.shape.as_list() == [5, 5]
    with mf.Session() as sess:
        got = sess.run({"counted": counted, "weighted": weighted, "as_float": as_float,
                        "column": column})
    tf_counted = [[2, 0, 0, 0], [0, 1, 1, 0], [0, 1, 2, 0], [1, 0, 0, 0]]
    np.testing.assert_array_equal(got["counted"], tf_counted)
    np.testing.assert_array_equal(got["column"], tf_counted)
    np.testing.assert_array_equal(got["weighted"], [
        [1, 0, 0, 0, 0], [0, 1, 2, 0, 0], [0, 1, 2, 0, 0], [3, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(got["as_float"], [
        [1, 0, 0, 0], [0, 1, 2, 0], [0, 1, 2.5, 0], [3, 0, 0, 0]])


def test_confusion_matrix_of_fed_ids_has_the_size_of_the_largest_id_seen():
    labels = mf.placeholder(mf.int32, [None])
    cm = mf.confusion_matrix(labels, labels)
    with mf.Session() as sess:
        np.testing.assert_array_equal(sess.run(cm, {labels: [0, 2, 2]}),
                                      [[1, 0, 0], [0, 0, 0], [0, 0, 2]])
        assert sess.run(cm, {labels: [1]}).shape == (2, 2)


@pytest.mark.parametrize("labels,predictions,message", [
    ([0, 1], [0, -1], "`predictions` contains negative values"),
    ([-1, 1], [0, 1], "`labels` contains negative values"),
    ([0, 1], [0, 4], "`predictions` out of bound"),
    ([4, 1], [0, 1], "`labels` out of bound")])
def test_confusion_matrix_refuses_ids_outside_the_classes_when_the_step_runs(
        labels, predictions, message):
    # Unchecked, [1, -1] would be counted in cell [0, 3] and [-1, 1] dropped.
    y, p = mf.placeholder(mf.int64, [None]), mf.placeholder(mf.int64, [None])
    cm = mf.confusion_matrix(y, p, num_classes=4)
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError, match=message):
        sess.run(cm, {y: labels, p: predictions})
