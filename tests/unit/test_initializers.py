"""Initializers and the random ops under them, as TF1's: the value each gives (shapes,
dtypes, distributions measured on large seeded draws) and the arguments each takes."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors


def _value(tensor, feed=None):
    with mf.Session() as sess:
        return sess.run(tensor, feed)


# -- constant ----------------------------------------------------------------------------------

def test_constant_initializer_completes_a_short_value_with_its_last_element():
    """TF1's constant_initializer: fewer elements than the shape are completed with the
    last one; more are refused, and verify_shape=True takes only the exact shape."""
    got = _value(mf.constant_initializer([1, 2, 3])([2, 3]))
    np.testing.assert_array_equal(got, [[1, 2, 3], [3, 3, 3]])
    np.testing.assert_array_equal(_value(mf.constant_initializer([[1, 2, 3], [4, 5, 6]])([3, 2])),
                                  [[1, 2], [3, 4], [5, 6]])
    with pytest.raises(errors.InvalidArgumentError, match="expected at most 6 elements"):
        mf.constant_initializer(list(range(7)))([2, 3])
    with pytest.raises(errors.InvalidArgumentError, match="verify_shape.*shape \\[6\\] is not "
                       "the variable shape \\[2, 3\\]"):
        mf.constant_initializer(list(range(6)), verify_shape=True)([2, 3])


# -- variance scaling --------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0.0, -1.0, "2"])
def test_variance_scaling_refuses_a_scale_that_is_not_positive(scale):
    with pytest.raises(errors.InvalidArgumentError, match="scale must be a positive number"):
        mf.variance_scaling_initializer(scale)
