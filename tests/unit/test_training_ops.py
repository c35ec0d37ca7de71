"""The fused apply ops (mpiflow/ops/training_ops.py) against the numpy updates of
optimizer_reference.py: dense and sparse, float32 and float64, duplicate indices, errors."""

import dataclasses

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops import training_ops
from mpiflow.ops.registry import get_op_def, registered_op_types
from tests.unit import optimizer_reference as ref

TOL = {np.float64: dict(rtol=1e-6, atol=1e-9), np.float32: dict(rtol=1e-5, atol=1e-6)}
ROWS, COLS = 6, 3
INDICES = np.array([4, 1, 4, 0, 4])       # unsorted, with duplicates; rows 2, 3, 5 untouched


@dataclasses.dataclass
class OpCase:
    name: str
    dense: str
    sparse: str
    slots: dict            # slot input name -> (low, high) of its random initial value
    hypers: dict
    update: callable
    attrs: dict = dataclasses.field(default_factory=dict)
    rowwise: bool = True   # the sparse op touches only the gradient's rows

    def __repr__(self):
        return self.name


ADAM_HYPERS = {"beta1_power": 0.9 ** 2, "beta2_power": 0.999 ** 2, "lr": 0.01, "beta1": 0.9,
               "beta2": 0.999, "epsilon": 1e-8}
RMS_HYPERS = {"lr": 0.01, "rho": 0.9, "momentum": 0.5, "epsilon": 1e-3}
FTRL_HYPERS = {"lr": 0.1, "l1": 0.3, "l2": 0.1, "lr_power": -0.5}
FTRL_SLOTS = {"accum": (0.1, 1.0), "linear": (-1, 1)}
PROXIMAL = {"l1": 0.02, "l2": 0.1}
CASES = [
    OpCase("gradient_descent", "ApplyGradientDescent", "SparseApplyGradientDescent", {},
           {"alpha": 0.3}, ref.update_gradient_descent),
    OpCase("momentum", "ApplyMomentum", "SparseApplyMomentum", {"accum": (-1, 1)},
           {"lr": 0.1, "momentum": 0.9}, ref.update_momentum),
    OpCase("momentum_nesterov", "ApplyMomentum", "SparseApplyMomentum", {"accum": (-1, 1)},
           {"lr": 0.1, "momentum": 0.9}, ref.update_momentum, {"use_nesterov": True}),
    OpCase("adagrad", "ApplyAdagrad", "SparseApplyAdagrad", {"accum": (0.5, 1.5)},
           {"lr": 0.1}, ref.update_adagrad),
    OpCase("rmsprop", "ApplyRMSProp", "SparseApplyRMSProp", {"ms": (1, 2), "mom": (-1, 1)},
           RMS_HYPERS, ref.update_rmsprop),
    OpCase("centered_rmsprop", "ApplyCenteredRMSProp", "SparseApplyCenteredRMSProp",
           {"mg": (-0.3, 0.3), "ms": (1, 2), "mom": (-1, 1)}, RMS_HYPERS,
           ref.update_centered_rmsprop),
    OpCase("ftrl", "ApplyFtrl", "SparseApplyFtrl", FTRL_SLOTS, FTRL_HYPERS, ref.update_ftrl),
    OpCase("ftrl_power", "ApplyFtrl", "SparseApplyFtrl", FTRL_SLOTS,
           {**FTRL_HYPERS, "lr_power": -0.75}, ref.update_ftrl),
    OpCase("ftrl_v2", "ApplyFtrlV2", "SparseApplyFtrlV2", FTRL_SLOTS,
           {**FTRL_HYPERS, "l2_shrinkage": 0.2}, ref.update_ftrl),
    OpCase("adadelta", "ApplyAdadelta", "SparseApplyAdadelta",
           {"accum": (0, 1), "accum_update": (0, 1)}, {"lr": 1.0, "rho": 0.9, "epsilon": 1e-6},
           ref.update_adadelta),
    OpCase("proximal_gradient_descent", "ApplyProximalGradientDescent",
           "SparseApplyProximalGradientDescent", {}, {"alpha": 0.1, **PROXIMAL},
           ref.update_proximal_gradient_descent),
    OpCase("proximal_gradient_descent_l2", "ApplyProximalGradientDescent",
           "SparseApplyProximalGradientDescent", {}, {"alpha": 0.1, "l1": 0.0, "l2": 0.1},
           ref.update_proximal_gradient_descent),
    OpCase("proximal_adagrad", "ApplyProximalAdagrad", "SparseApplyProximalAdagrad",
           {"accum": (0.5, 1.5)}, {"lr": 0.1, **PROXIMAL}, ref.update_proximal_adagrad),
    OpCase("adam", "ApplyAdam", "SparseApplyAdam", {"m": (-1, 1), "v": (0.1, 1)},
           ADAM_HYPERS, ref.update_adam, rowwise=False),
    OpCase("adam_nesterov", "ApplyAdam", "SparseApplyAdam", {"m": (-1, 1), "v": (0.1, 1)},
           ADAM_HYPERS, ref.update_adam, {"use_nesterov": True}, rowwise=False),
]


def initial_state(case, dtype, rng, shape=(ROWS, COLS)):
    state = {"var": rng.uniform(-1, 1, shape)}
    for name, (low, high) in case.slots.items():
        state[name] = rng.uniform(low, high, shape)
    # The reference starts from the same rounded values as the op.
    return {k: v.astype(dtype).astype(np.float64) for k, v in state.items()}


def run_fused(op_type, state, feeds, dtype, attrs=None, indices=None, hypers=None):
    """Build ``op_type`` on variables holding ``state``; run it once per gradient in
    ``feeds``; return the final state."""
    graph = mf.Graph()
    with graph.as_default():
        variables = {k: mf.Variable(v.astype(dtype), name=k) for k, v in state.items()}
        grad = mf.placeholder(mf.as_dtype(dtype), None, name="grad")
        named = {**variables, **hypers, "grad": grad, "delta": grad}
        if indices is not None:
            named["indices"] = mf.constant(indices)
        inputs = [named[n] for n in get_op_def(op_type).inputs]
        update = training_ops.fused_apply(op_type, inputs, attrs)
        assert update.dtype == mf.as_dtype(dtype)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            for g in feeds:
                sess.run(update, {grad: g.astype(dtype)})
            out = sess.run(variables)
    for k, v in out.items():
        assert v.dtype == dtype, f"{op_type} changed the dtype of '{k}' to {v.dtype}"
    return out


def assert_state_close(got, expected, dtype, label):
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], **TOL[dtype], err_msg=f"{label}: {k}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_dense_apply_matches_numpy(case, dtype, rng):
    state = initial_state(case, dtype, rng)
    grads = [rng.standard_normal((ROWS, COLS)).astype(dtype).astype(np.float64)
             for _ in range(3)]
    got = run_fused(case.dense, state, grads, dtype, case.attrs, hypers=case.hypers)
    expected = state
    for g in grads:
        expected = case.update(expected, g, **case.hypers, **case.attrs)
    assert_state_close(got, expected, dtype, case.dense)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_sparse_apply_with_duplicate_indices_matches_numpy(case, dtype, rng):
    state = initial_state(case, dtype, rng)
    grads = [rng.standard_normal((len(INDICES), COLS)).astype(dtype).astype(np.float64)
             for _ in range(3)]
    got = run_fused(case.sparse, state, grads, dtype, case.attrs, indices=INDICES,
                    hypers=case.hypers)
    expected = state
    for g in grads:
        if case.rowwise:
            expected = ref.sparse_rows(case.update, expected, g, INDICES, **case.hypers,
                                       **case.attrs)
        else:   # Adam: the update of the densified gradient, every row
            expected = case.update(expected, ref.densify(g, INDICES, ROWS), **case.hypers,
                                   **case.attrs)
    assert_state_close(got, expected, dtype, case.sparse)
    if case.rowwise:
        untouched = [2, 3, 5]
        for k in state:
            np.testing.assert_array_equal(got[k][untouched], state[k][untouched].astype(dtype),
                                          err_msg=f"{case.sparse} changed untouched rows of {k}")


@pytest.mark.parametrize("case", [c for c in CASES if c.rowwise], ids=repr)
def test_sparse_apply_on_a_vector_variable(case, rng):
    state = initial_state(case, np.float64, rng, shape=(5,))
    indices = np.array([3, 3, 0], dtype=np.int32)
    grad = rng.standard_normal(3)
    got = run_fused(case.sparse, state, [grad], np.float64, case.attrs, indices=indices,
                    hypers=case.hypers)
    expected = ref.sparse_rows(case.update, state, grad, indices, **case.hypers, **case.attrs)
    assert_state_close(got, expected, np.float64, case.sparse)


def test_sparse_adam_equals_dense_adam_on_the_densified_gradient(rng):
    case = CASES[-2]
    state = initial_state(case, np.float64, rng)
    values = [rng.standard_normal((len(INDICES), COLS)) for _ in range(3)]
    sparse = run_fused("SparseApplyAdam", state, values, np.float64, indices=INDICES,
                       hypers=case.hypers)
    dense = run_fused("ApplyAdam", state, [ref.densify(v, INDICES, ROWS) for v in values],
                      np.float64, hypers=case.hypers)
    assert_state_close(sparse, dense, np.float64, "SparseApplyAdam vs ApplyAdam")
    assert not np.allclose(sparse["var"][[2, 3, 5]], state["var"][[2, 3, 5]]), \
        "Adam moves untouched rows too (their m is not zero)"


def test_apply_updates_the_variable_buffer_in_place():
    w = mf.Variable(np.ones((2, 3), np.float32), name="w")
    accum = mf.Variable(np.zeros((2, 3), np.float32), name="accum")
    update = training_ops.apply_momentum(w, accum, lr=mf.constant(0.5, mf.float64),
                                         grad=np.full((2, 3), 2, np.float32), momentum=0.5)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        before = {k: sess._store.buffers[k] for k in ("w", "accum")}
        result = sess.run(update)
        assert all(sess._store.buffers[k] is before[k] for k in before), "buffer replaced"
        assert before["w"].dtype == np.float32 and result.dtype == np.float32
        np.testing.assert_allclose(result, np.zeros((2, 3)))


def test_python_functions_take_tf_input_names():
    w = mf.Variable(np.zeros(3), name="w")
    update = training_ops.sparse_apply_gradient_descent(
        w, alpha=0.5, grad=np.array([1.0, 2.0]), indices=np.array([2, 2]))
    assert update.op.type == "SparseApplyGradientDescent"
    with mf.Session() as sess:
        sess.run(w.initializer)
        np.testing.assert_allclose(sess.run(update), [0, 0, -1.5])
    with pytest.raises(mf.errors.InvalidArgumentError, match="unexpected arguments"):
        training_ops.apply_gradient_descent(w, alpha=0.1, grad=np.zeros(3))


def test_every_training_op_writes_its_refs_in_place_and_has_no_gradient():
    expected = {"ApplyGradientDescent", "SparseApplyGradientDescent", "ApplyMomentum",
                "SparseApplyMomentum", "ApplyAdagrad", "SparseApplyAdagrad", "ApplyRMSProp",
                "SparseApplyRMSProp", "ApplyCenteredRMSProp", "SparseApplyCenteredRMSProp",
                "ApplyAdam", "SparseApplyAdam", "ApplyFtrl", "SparseApplyFtrl", "ApplyFtrlV2",
                "SparseApplyFtrlV2", "ApplyAdadelta", "SparseApplyAdadelta",
                "ApplyProximalGradientDescent", "SparseApplyProximalGradientDescent",
                "ApplyProximalAdagrad", "SparseApplyProximalAdagrad"}
    found = {t for t in registered_op_types() if isinstance(get_op_def(t),
                                                            training_ops._ApplyOp)}
    assert found == expected
    for t in found:
        op_def = get_op_def(t)
        assert op_def.stateful and op_def.aliases_state and op_def.gradient is None, t
        assert op_def.inputs[0] == "var" and 0 in op_def.ref_inputs, t
        assert [op_def.inputs[i] for i in op_def.ref_inputs] == \
            [n for n in op_def.inputs if n in training_ops._STATE_INPUTS], t
        assert ("indices" in op_def.inputs) == t.startswith("Sparse"), t


# -- errors ------------------------------------------------------------------------------------

def _momentum_inputs(**override):
    w = mf.Variable(np.zeros((2, 3)), name="w")
    named = {"var": w, "accum": mf.Variable(np.zeros((2, 3)), name="accum"), "lr": 0.1,
             "grad": mf.constant(np.zeros((2, 3))), "momentum": 0.9}
    named.update(override)
    return [named[n] for n in get_op_def("ApplyMomentum").inputs]


@pytest.mark.parametrize("override,message", [
    (lambda: {"grad": mf.constant(np.zeros(3))}, "Input 'grad' must match the var's shape"),
    (lambda: {"grad": mf.constant(np.zeros((2, 3), np.float32))},
     "Input 'grad' must have the var's dtype"),
    (lambda: {"accum": mf.constant(np.zeros((2, 3)))}, "Input 'accum' must be a variable"),
    (lambda: {"accum": mf.Variable(np.zeros(3), name="a3")},
     "Input 'accum' must have the var's shape"),
    (lambda: {"lr": mf.constant([0.1, 0.2], mf.float64)}, "Input 'lr' must be a float scalar"),
    (lambda: {"momentum": mf.constant(1)}, "Input 'momentum' must be a float scalar"),
], ids=["grad_shape", "grad_dtype", "slot_not_variable", "slot_shape", "lr_vector",
        "int_momentum"])
def test_dense_apply_build_errors_name_the_op(override, message):
    with pytest.raises(mf.errors.InvalidArgumentError, match=message) as info:
        training_ops.fused_apply("ApplyMomentum", _momentum_inputs(**override()),
                                 name="my_update")
    assert "op 'my_update' (ApplyMomentum)" in str(info.value)


@pytest.mark.parametrize("grad,indices,message", [
    (np.zeros((2, 3)), np.array([0.0, 1.0]), "Input 'indices' must be int32 or int64"),
    (np.zeros((2, 3)), np.array([[0, 1]]), "Input 'indices' must be a vector"),
    (np.zeros((2, 2)), np.array([0, 1]), "Input 'grad' must match the var's shape"),
    (np.zeros((3, 3)), np.array([0, 1]), "Input 'grad' must match the var's shape"),
], ids=["float_indices", "matrix_indices", "row_shape", "row_count"])
def test_sparse_apply_build_errors_name_the_op(grad, indices, message):
    w = mf.Variable(np.zeros((4, 3)), name="w")
    with pytest.raises(mf.errors.InvalidArgumentError, match=message) as info:
        training_ops.sparse_apply_gradient_descent(w, 0.1, grad, indices, name="sgd")
    assert "op 'sgd' (SparseApplyGradientDescent)" in str(info.value)


def test_sparse_apply_index_out_of_range_fails_at_run_time_naming_the_op():
    w = mf.Variable(np.zeros((4, 3)), name="w")
    m = mf.Variable(np.zeros((4, 3)), name="m")
    ids = mf.placeholder(mf.int64, [None])
    update = training_ops.sparse_apply_momentum(w, m, 0.1, np.ones((2, 3)), ids, 0.9,
                                                name="upd")
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Index out of range in op 'upd' \(SparseApplyMomentum\).*"
                                 r"got 4"):
            sess.run(update, {ids: [1, 4]})
        np.testing.assert_array_equal(sess.run(w), 0, err_msg="a failed update wrote")


def test_dense_apply_shape_known_only_at_run_time_is_checked():
    w = mf.Variable(np.zeros((2, 3)), name="w")
    g = mf.placeholder(mf.float64, None)
    update = training_ops.apply_gradient_descent(w, 0.1, g, name="upd")
    with mf.Session() as sess:
        sess.run(w.initializer)
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"'delta' does not match the var's shape in op 'upd'"):
            sess.run(update, {g: np.zeros(3)})
