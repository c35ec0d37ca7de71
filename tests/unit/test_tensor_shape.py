"""TensorShape.admits: the per-step check of an array's shape against a static shape
agrees with is_compatible_with on every kind of static shape."""

import itertools

import pytest

from mpiflow.framework.tensor_shape import TensorShape

STATIC = [None, [], [None], [3], [None, 4], [2, None], [2, 4], [2, 4, 1]]
ARRAYS = [(), (3,), (0,), (2, 4), (5, 4), (2, 7), (2, 4, 1), (2, 4, 2)]


@pytest.mark.parametrize("static, array_shape", list(itertools.product(STATIC, ARRAYS)))
def test_admits_agrees_with_is_compatible_with(static, array_shape):
    shape = TensorShape(static)
    assert shape.admits(array_shape) == shape.is_compatible_with(array_shape)


def test_an_unknown_rank_admits_any_array_and_a_scalar_only_scalars():
    assert TensorShape(None).admits((7, 1, 3))
    assert TensorShape([]).admits(())
    assert not TensorShape([]).admits((1,))
