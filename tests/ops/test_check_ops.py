"""tf.Assert and the tf.assert_* family: a false condition fails the step naming the op
and printing the data; constants and static shapes are checked when the graph is built."""

import numpy as np
import pytest

import mpiflow as mf


def test_assert_fails_the_step_printing_its_data_only_when_false():
    x = mf.placeholder(mf.float32, [2], name="x")
    check = mf.Assert(mf.reduce_min(x) > 0, ["x has a non-positive entry:", x], name="check")
    with mf.control_dependencies([check]):
        y = mf.identity(x * 2.0)
    with mf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: [1.0, 2.0]}), [2.0, 4.0])
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"assertion failed: \[x has a non-positive entry:\] "
                                 r"\[\[ ?1\.? -2\.?\]\] in op 'check' \(Assert\)"):
            sess.run(y, {x: [1.0, -2.0]})


def test_assert_condition_must_be_a_bool_scalar():
    with pytest.raises(mf.errors.InvalidArgumentError, match="bool scalar"):
        mf.Assert(mf.constant([True, False]), [])


@pytest.mark.parametrize("check, good, bad", [
    (mf.assert_equal, [1, 2], [1, 3]), (mf.assert_none_equal, [0, 0], [1, 0]),
    (mf.assert_less, [0, 1], [2, 1]), (mf.assert_less_equal, [1, 2], [1, 3]),
    (mf.assert_greater, [2, 3], [1, 3]), (mf.assert_greater_equal, [1, 2], [0, 2]),
])
def test_comparison_asserts_check_every_element_when_the_step_runs(check, good, bad):
    x = mf.placeholder(mf.int32, [2])
    op = check(x, [1, 2], message="checked:")
    with mf.Session() as sess:
        sess.run(op, {x: good})
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"assertion failed: \[checked:\] \[Condition x"):
            sess.run(op, {x: bad})


@pytest.mark.parametrize("check, good, bad", [
    (mf.assert_positive, [1.0], [0.0]), (mf.assert_negative, [-1.0], [0.0]),
    (mf.assert_non_negative, [0.0], [-1.0]), (mf.assert_non_positive, [0.0], [1.0]),
])
def test_sign_asserts(check, good, bad):
    x = mf.placeholder(mf.float32, [None])
    op = check(x)
    with mf.Session() as sess:
        sess.run(op, {x: good})
        sess.run(op, {x: []})       # nothing to check
        with pytest.raises(mf.errors.InvalidArgumentError, match="did not hold element-wise"):
            sess.run(op, {x: bad})


def test_constants_are_compared_when_the_graph_is_built():
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Condition x == y did not hold element-wise: x \(Const:0\) = 1"):
        mf.assert_equal(mf.constant(1), 2)
    assert mf.assert_less(mf.constant([1, 2]), 3).type == "Assert"


def test_assert_rank_and_type_use_what_the_graph_knows():
    with pytest.raises(mf.errors.InvalidArgumentError, match="must have rank 2: its shape"):
        mf.assert_rank(mf.constant([1.0]), 2)
    with pytest.raises(mf.errors.InvalidArgumentError, match="must be of type float32, got "
                       "int32"):
        mf.assert_type(mf.constant(1), mf.float32)
    assert mf.assert_type(mf.constant(1.0), mf.float32).type == "NoOp"
    x = mf.placeholder(mf.float32)
    op = mf.assert_rank(x, 1)
    with mf.Session() as sess:
        sess.run(op, {x: [1.0]})
        with pytest.raises(mf.errors.InvalidArgumentError, match="must have rank 1; its rank "
                           r"is\] \[2\]"):
            sess.run(op, {x: [[1.0]]})
