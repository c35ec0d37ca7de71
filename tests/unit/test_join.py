"""mf.train.join's refusals, in one process: with nobody else to go on, and with an
allreduce optimizer not built to let a worker leave."""

import pytest

import mpiflow as mf


def test_join_without_a_cluster_says_there_are_no_other_workers():
    w = mf.Variable(1.0, name="w")
    mf.train.GradientDescentOptimizer(0.1).minimize(mf.square(w))
    with mf.Session() as sess:
        with pytest.raises(mf.errors.FailedPreconditionError, match="no cluster"):
            mf.train.join(sess)


def test_an_allreduce_optimizer_must_be_joinable_to_join():
    w = mf.Variable(1.0, name="w")
    opt = mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.1))
    opt.minimize(mf.square(w))
    with mf.Session() as sess:
        with pytest.raises(mf.errors.FailedPreconditionError, match="joinable=True"):
            opt.join(sess)
