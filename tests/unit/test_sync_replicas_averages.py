"""SyncReplicasOptimizer(variable_averages=ema): the chief's step moves the shadows once
per global step, after the update, as ``ema.apply`` under the train op's dependency does
in one process (checked here with one replica; tests/runtime/test_sync_replicas.py runs
it on two workers and two ps)."""

import numpy as np

import mpiflow as mf

STEPS = 4


def _model():
    x = mf.placeholder(mf.float32, [None, 3], name="x")
    w = mf.get_variable("w", [3], initializer=mf.constant_initializer(0.5))
    b = mf.get_variable("b", [], initializer=mf.constant_initializer(-0.2))
    loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, 1) + b - 1.0))
    step = mf.train.get_or_create_global_step()
    ema = mf.train.ExponentialMovingAverage(0.8, num_updates=step)
    return x, [w, b], loss, step, ema


def _batch(i):
    return np.random.default_rng(i).standard_normal((4, 3)).astype(np.float32)


def _one_process():
    """(weights, shadows) of one process applying the shadows after each step."""
    with mf.Graph().as_default():
        x, params, loss, step, ema = _model()
        train = mf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
        with mf.control_dependencies([train]):
            train = ema.apply(params)
        shadows = [ema.average(v) for v in params]
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for i in range(STEPS):
                sess.run(train, {x: _batch(i)})
            return sess.run([params, shadows])


def test_sync_replicas_variable_averages_follow_the_weights_once_per_global_step():
    x, params, loss, step, ema = _model()
    opt = mf.train.SyncReplicasOptimizer(mf.train.MomentumOptimizer(0.1, 0.9),
                                         replicas_to_aggregate=1, variable_averages=ema,
                                         variables_to_average=params)
    train = opt.minimize(loss, global_step=step)
    shadows = [ema.average(v) for v in params]
    assert all(s is not None for s in shadows)
    hooks = [opt.make_session_run_hook(is_chief=True)]
    with mf.train.MonitoredTrainingSession(hooks=hooks) as sess:
        for i in range(STEPS):
            sess.run(train, {x: _batch(i)})
        got_params, got_shadows, got_step = sess.run_step_fn(
            lambda ctx: ctx.session.run([params, shadows, step]))
    want_params, want_shadows = _one_process()
    assert got_step == STEPS
    for got, want in zip(got_params + got_shadows, want_params + want_shadows):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # The shadows moved: they are neither the initial values nor the weights.
    assert not np.allclose(got_shadows[0], 0.5) and not np.allclose(got_shadows[0],
                                                                    got_params[0])


def test_sync_replicas_variable_averages_default_to_the_trainable_variables():
    _, params, loss, step, ema = _model()
    opt = mf.train.SyncReplicasOptimizer(mf.train.GradientDescentOptimizer(0.1),
                                         replicas_to_aggregate=1, variable_averages=ema)
    opt.minimize(loss, global_step=step)
    assert [ema.average(v) is not None for v in params] == [True, True]
