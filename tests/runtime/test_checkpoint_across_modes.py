"""Adam's beta powers across training modes (docs/checkpoints.md): hybrid mode keeps a ps
copy for the tables and a worker copy for the dense variables; a hybrid checkpoint resumed
in allreduce mode gives every variable the ps copy, and a checkpoint of allreduce mode,
which has one copy, gives hybrid mode's both copies that one."""

import json
from pathlib import Path

import pytest

PROG = Path(__file__).parent / "progs" / "cross_mode_adam.py"
pytestmark = pytest.mark.mpi


def result(done):
    lines = [line for line in done.stdout.splitlines() if line.startswith("result ")]
    assert len(lines) == 1, done.stdout + done.stderr
    return json.loads(lines[0].split(" ", 1)[1])


def test_a_hybrid_checkpoint_resumes_in_allreduce_mode_with_the_ps_copy(run_mpi, tmp_path):
    saved = result(run_mpi(3, PROG, "hybrid", 1, tmp_path, 2))["powers"]
    # The ps copy moved with each of the 2 workers' 2 pushes, the worker copy once a step.
    assert saved["beta1_power"] == pytest.approx(0.9 ** 5)
    assert saved["beta1_power_worker"] == pytest.approx(0.9 ** 3)
    resumed = result(run_mpi(2, PROG, "allreduce", 0, tmp_path, 0))
    assert resumed["step"] == 2
    assert resumed["powers"] == {"beta1_power": saved["beta1_power"],
                                 "beta2_power": saved["beta2_power"]}


def test_a_checkpoint_of_allreduce_mode_resumes_in_hybrid_mode_with_its_one_copy(
        run_mpi, tmp_path):
    saved = result(run_mpi(2, PROG, "allreduce", 0, tmp_path, 2))["powers"]
    assert saved == {"beta1_power": pytest.approx(0.9 ** 3),
                     "beta2_power": pytest.approx(0.999 ** 3)}
    resumed = result(run_mpi(3, PROG, "hybrid", 1, tmp_path, 0))
    assert resumed["step"] == 2
    assert resumed["powers"] == {"beta1_power": saved["beta1_power"],
                                 "beta1_power_worker": saved["beta1_power"],
                                 "beta2_power": saved["beta2_power"],
                                 "beta2_power_worker": saved["beta2_power"]}
    # and it trains on from there: the worker copy moves once a step
    trained = result(run_mpi(3, PROG, "hybrid", 1, tmp_path, 1))["powers"]
    assert trained["beta1_power_worker"] == pytest.approx(0.9 ** 4)


def test_a_missing_key_with_its_fallback_missing_too_names_both(tmp_path):
    import mpiflow as mf
    from mpiflow import errors

    with mf.Graph().as_default():
        v = mf.Variable(1.0, name="beta1_power_worker")
        v._restore_fallback = "beta1_power"
        other = mf.Variable(2.0, name="other")
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            prefix = mf.train.Saver([other]).save(sess, str(tmp_path / "ckpt"))
            with pytest.raises(errors.NotFoundError,
                               match="Key 'beta1_power_worker' \\(nor 'beta1_power', read "
                                     "in its place\\) not found in checkpoint"):
                mf.train.Saver([v]).restore(sess, prefix)


def test_a_variable_restores_from_its_fallback_key_and_says_so(tmp_path, caplog):
    import logging

    import mpiflow as mf

    with mf.Graph().as_default():
        mf.Variable(0.729, name="beta1_power")
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            prefix = mf.train.Saver().save(sess, str(tmp_path / "ckpt"))
    with mf.Graph().as_default():
        worker_copy = mf.Variable(1.0, name="beta1_power_worker")
        worker_copy._restore_fallback = "beta1_power"
        with mf.Session() as sess, caplog.at_level(logging.INFO):
            mf.train.Saver().restore(sess, prefix)
            assert sess.run(worker_copy) == pytest.approx(0.729)
    assert "Restoring 'beta1_power_worker' from 'beta1_power'" in caplog.text
