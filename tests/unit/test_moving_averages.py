"""tf.train.ExponentialMovingAverage as TF1 scripts use it: shadows named and collected as
TensorFlow's, their values step by step (num_updates, zero_debias, float64), updates that
follow the train op they depend on, and the evaluation pattern that restores the shadows
into the model with Saver(ema.variables_to_restore()).

Reference numbers were recorded from TF 2.21's tf.compat.v1, running the train op and the
average's op in separate steps (TF's reference variables leave the read order within one
step open)."""

import numpy as np
import pytest

import mpiflow as mf


def _model():
    """w, a variable in a scope, a non-trainable one, and a float64 one; a SGD train op
    counting the global step."""
    w = mf.Variable([1.0, 2.0], name="w")
    with mf.variable_scope("s"):
        v = mf.get_variable("v", initializer=mf.constant([[3.0]]))
    c = mf.Variable(5.0, trainable=False, name="c")
    d = mf.Variable(np.array([1.0, -1.0]), name="d")
    loss = mf.reduce_sum(mf.square(w)) + mf.reduce_sum(v) + \
        mf.cast(mf.reduce_sum(d), mf.float32)
    step = mf.train.get_or_create_global_step()
    train = mf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return w, v, c, d, loss, step, train


def test_shadows_are_named_collected_and_not_trainable_as_in_tensorflow():
    with mf.Graph().as_default() as graph:
        w, v, c, d, loss, step, _ = _model()
        ema = mf.train.ExponentialMovingAverage(0.9, num_updates=step)
        op = ema.apply([w, v, c, d, loss])
        assert ema.name == "ExponentialMovingAverage"
        assert op.name == "ExponentialMovingAverage"
        for x, name in [(w, "w"), (v, "s/v"), (c, "c"), (d, "d"),
                        (loss, loss.op.name)]:
            shadow = ema.average(x)
            assert shadow.name == f"{name}/ExponentialMovingAverage:0"
            assert ema.average_name(x) == f"{name}/ExponentialMovingAverage"
            assert shadow.dtype is x.dtype.base_dtype
            assert shadow in mf.global_variables()
            assert shadow not in mf.trainable_variables()
        # Variables go to the collection, tensors do not.
        assert mf.moving_average_variables() == [w, v, c, d]
        assert graph.get_collection(mf.GraphKeys.MOVING_AVERAGE_VARIABLES) == [w, v, c, d]
        assert ema.average(mf.Variable(0.0, name="other")) is None


def test_values_follow_tensorflow_with_num_updates_and_zero_debias():
    with mf.Graph().as_default():
        w, v, c, d, loss, step, train = _model()
        ema = mf.train.ExponentialMovingAverage(0.9, num_updates=step)
        ema_op = ema.apply([w, v, c, d, loss])
        debiased = mf.train.ExponentialMovingAverage(0.5, zero_debias=True, name="Avg2")
        debiased_op = debiased.apply([loss])
        assert debiased.average(loss).op.name == f"{loss.op.name}/Avg2"
        names = {x.op.name for x in mf.global_variables()}
        assert {f"{loss.op.name}/Avg2/biased", f"{loss.op.name}/Avg2/local_step"} <= names
        fetch = [ema.average(x) for x in (w, v, c, d, loss)] + [debiased.average(loss)]
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            # A Variable's shadow starts at its initial value, a tensor's at zero.
            start = sess.run(fetch)
            np.testing.assert_array_equal(start[0], [1.0, 2.0])
            np.testing.assert_array_equal(start[1], [[3.0]])
            assert start[2] == 5.0 and start[4] == 0.0 and start[5] == 0.0
            got = []
            for _ in range(3):
                sess.run(train)
                sess.run([ema_op, debiased_op])
                got.append(sess.run(fetch))
    # Recorded from TF 2.21's tf.compat.v1.
    want_w = [[0.8363637, 1.6727273], [0.6890909, 1.3781818], [0.56648946, 1.1329789]]
    want_v = [2.918182, 2.8295455, 2.7398603]
    want_d = [[0.91818182, -1.08181818], [0.82954545, -1.17045455],
              [0.73986013, -1.26013987]]
    want_loss = [4.8272734, 4.542818, 3.759058]
    want_debiased = [5.9000006, 4.932, 4.0626974]
    for i in range(3):
        np.testing.assert_allclose(got[i][0], want_w[i], rtol=1e-6)
        np.testing.assert_allclose(got[i][1], [[want_v[i]]], rtol=1e-6)
        assert got[i][2] == 5.0      # a constant's shadow stays put
        # float64: the weights themselves differ from TF1's in the 8th digit
        # (docs/tf1_api.md: float64 hyperparameters).
        np.testing.assert_allclose(got[i][3], want_d[i], rtol=1e-7)
        np.testing.assert_allclose(got[i][4], want_loss[i], rtol=1e-6)
        np.testing.assert_allclose(got[i][5], want_debiased[i], rtol=1e-6)


def test_under_the_train_ops_dependency_the_shadow_reads_the_updated_weights():
    with mf.Graph().as_default():
        w = mf.Variable([1.0, 2.0], name="w")
        train = mf.train.GradientDescentOptimizer(0.1).minimize(mf.reduce_sum(mf.square(w)))
        ema = mf.train.ExponentialMovingAverage(0.5)
        with mf.control_dependencies([train]):
            step = ema.apply([w])
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for weights, shadow in [([0.8, 1.6], [0.9, 1.8]), ([0.64, 1.28], [0.77, 1.54])]:
                sess.run(step)
                np.testing.assert_allclose(sess.run(w), weights, rtol=1e-6)
                np.testing.assert_allclose(sess.run(ema.average(w)), shadow, rtol=1e-6)


def test_apply_defaults_to_the_trainable_variables_and_takes_a_decay_tensor():
    with mf.Graph().as_default():
        w = mf.Variable([4.0], name="w")
        frozen = mf.Variable([1.0], trainable=False, name="frozen")
        decay = mf.placeholder(mf.float32, [])
        ema = mf.train.ExponentialMovingAverage(decay)
        op = ema.apply()
        assert ema.average(w) is not None and ema.average(frozen) is None
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            sess.run(w.assign([0.0]))
            sess.run(op, {decay: 0.75})
            np.testing.assert_allclose(sess.run(ema.average(w)), [3.0])


def test_applying_again_reuses_the_shadow():
    with mf.Graph().as_default():
        w = mf.Variable([4.0], name="w")
        ema = mf.train.ExponentialMovingAverage(0.5)
        ema.apply([w])
        shadow = ema.average(w)
        ema.apply([w])
        assert ema.average(w) is shadow
        assert [x.op.name for x in mf.global_variables()] == \
            ["w", "w/ExponentialMovingAverage"]


def test_variables_to_restore_maps_shadow_names_to_the_model_as_tensorflow():
    with mf.Graph().as_default():
        w, v, c, d, loss, _step, _ = _model()
        ema = mf.train.ExponentialMovingAverage(0.9)
        ema.apply([w, v, c, d, loss])
        names = {k: x.op.name for k, x in ema.variables_to_restore().items()}
        shadow = f"{loss.op.name}/ExponentialMovingAverage"
        assert names == {"w/ExponentialMovingAverage": "w",
                         "s/v/ExponentialMovingAverage": "s/v",
                         "c/ExponentialMovingAverage": "c",
                         "d/ExponentialMovingAverage": "d",
                         "global_step": "global_step", shadow: shadow}
        # Only w is averaged: the others restore from their own names.
        only_w = {k: x.op.name for k, x in ema.variables_to_restore([w]).items()}
        assert only_w["w/ExponentialMovingAverage"] == "w"
        assert only_w["c"] == "c" and only_w["c/ExponentialMovingAverage"] == \
            "c/ExponentialMovingAverage"


def test_an_evaluation_graph_restores_the_shadows_into_the_model(tmp_path):
    with mf.Graph().as_default():
        w = mf.get_variable("w", initializer=mf.constant([1.0, 2.0]))
        step = mf.train.get_or_create_global_step()
        train = mf.train.GradientDescentOptimizer(0.1).minimize(
            mf.reduce_sum(mf.square(w)), global_step=step)
        ema = mf.train.ExponentialMovingAverage(0.5, num_updates=step)
        with mf.control_dependencies([train]):
            train_and_average = mf.group(ema.apply())
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for _ in range(3):
                sess.run(train_and_average)
            shadow = sess.run(ema.average(w))
            path = mf.train.Saver().save(sess, str(tmp_path / "model"), global_step=step)
    with mf.Graph().as_default():
        w = mf.get_variable("w", initializer=mf.constant([0.0, 0.0]))
        step = mf.train.get_or_create_global_step()
        ema = mf.train.ExponentialMovingAverage(0.5)
        # No apply here: the names are those apply would have given.
        assert ema.average_name(w) == "w/ExponentialMovingAverage"
        saver = mf.train.Saver(ema.variables_to_restore())
        with mf.Session() as sess:
            saver.restore(sess, path)
            np.testing.assert_array_equal(sess.run(w), shadow)
            assert sess.run(step) == 3


def test_shadows_live_next_to_their_variables():
    with mf.Graph().as_default():
        with mf.device("/job:ps/task:0"):
            w = mf.Variable([1.0], name="w")
        ema = mf.train.ExponentialMovingAverage(0.5)
        ema.apply([w])
        assert ema.average(w).device == w.device


def test_values_that_are_not_floats_are_refused_also_as_a_type_error():
    with mf.Graph().as_default():
        count = mf.Variable(1, name="count")
        ema = mf.train.ExponentialMovingAverage(0.5)
        with pytest.raises(TypeError, match="half, float or double.*int32 'count:0'"):
            ema.apply([count])
        with pytest.raises(mf.errors.InvalidArgumentError):
            ema.apply([count])
