"""TF1 math ops a ported script reaches for beyond the basics: round and ceil, expm1,
softsign, selu, log_sigmoid, reduce_logsumexp, cumsum and cumprod. Forward values against
numpy or against values TensorFlow 2.x (compat.v1 graphs, CPU) printed for the same
inputs; gradients against finite differences."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import check_forward

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
