"""mf.train optimizers: a few steps against the numpy updates of optimizer_reference.py
(dense and sparse, float64 and float32), slots, the global step, schedules and errors."""

import contextlib
import dataclasses

import numpy as np
import pytest

import mpiflow as mf
from tests.unit import optimizer_reference as ref

TOL = {np.float64: dict(rtol=1e-6, atol=1e-9), np.float32: dict(rtol=1e-5, atol=1e-6)}
STEPS = 3
LR = 0.1
IDS = np.array([4, 1, 4, 0, 4])       # rows 2, 3, 5 of the table are never looked up
ADAM = dict(beta1=0.9, beta2=0.999, epsilon=1e-8)
RMS = dict(rho=0.9, momentum=0.5, epsilon=1e-10)
FTRL = dict(l1_regularization_strength=0.05, l2_regularization_strength=0.1)
FTRL_REF = dict(l1=0.05, l2=0.1, lr_power=-0.5)
PROX = dict(l1_regularization_strength=0.05, l2_regularization_strength=0.1)
PROX_REF = dict(l1=0.05, l2=0.1)


@dataclasses.dataclass
class OptCase:
    """An optimizer and its numpy twin: ``slots`` maps reference state keys to the
    optimizer's slot names and initial values; ``step(state, grad, t, lr)``."""

    name: str
    make: callable
    slots: dict
    step: callable
    rowwise: bool = True

    def __repr__(self):
        return self.name


def _adam_step(s, g, t, lr):
    return ref.update_adam(s, g, ADAM["beta1"] ** t, ADAM["beta2"] ** t, lr, **ADAM)


CASES = [
    OptCase("sgd", lambda lr: mf.train.GradientDescentOptimizer(lr), {},
            lambda s, g, t, lr: ref.update_gradient_descent(s, g, alpha=lr)),
    OptCase("momentum", lambda lr: mf.train.MomentumOptimizer(lr, momentum=0.9),
            {"accum": ("momentum", 0.0)},
            lambda s, g, t, lr: ref.update_momentum(s, g, lr, 0.9)),
    OptCase("nesterov", lambda lr: mf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
            {"accum": ("momentum", 0.0)},
            lambda s, g, t, lr: ref.update_momentum(s, g, lr, 0.9, use_nesterov=True)),
    OptCase("adagrad", lambda lr: mf.train.AdagradOptimizer(lr),
            {"accum": ("accumulator", 0.1)},
            lambda s, g, t, lr: ref.update_adagrad(s, g, lr)),
    OptCase("rmsprop", lambda lr: mf.train.RMSPropOptimizer(lr, decay=0.9, momentum=0.5),
            {"ms": ("rms", 1.0), "mom": ("momentum", 0.0)},
            lambda s, g, t, lr: ref.update_rmsprop(s, g, lr, **RMS)),
    OptCase("rmsprop_centered",
            lambda lr: mf.train.RMSPropOptimizer(lr, decay=0.9, momentum=0.5, centered=True),
            {"mg": ("mg", 0.0), "ms": ("rms", 1.0), "mom": ("momentum", 0.0)},
            lambda s, g, t, lr: ref.update_centered_rmsprop(s, g, lr, **RMS)),
    OptCase("ftrl", lambda lr: mf.train.FtrlOptimizer(lr, **FTRL),
            {"accum": ("accum", 0.1), "linear": ("linear", 0.0)},
            lambda s, g, t, lr: ref.update_ftrl(s, g, lr, **FTRL_REF)),
    OptCase("ftrl_shrinkage_power",
            lambda lr: mf.train.FtrlOptimizer(
                lr, learning_rate_power=-0.75, initial_accumulator_value=0.5,
                l2_shrinkage_regularization_strength=0.3, **FTRL),
            {"accum": ("accum", 0.5), "linear": ("linear", 0.0)},
            lambda s, g, t, lr: ref.update_ftrl(s, g, lr, **{**FTRL_REF, "lr_power": -0.75},
                                                l2_shrinkage=0.3)),
    OptCase("adadelta", lambda lr: mf.train.AdadeltaOptimizer(lr * 10, rho=0.9, epsilon=1e-6),
            {"accum": ("accum", 0.0), "accum_update": ("accum_update", 0.0)},
            lambda s, g, t, lr: ref.update_adadelta(s, g, lr * 10, rho=0.9, epsilon=1e-6)),
    OptCase("proximal_sgd", lambda lr: mf.train.ProximalGradientDescentOptimizer(lr, **PROX),
            {}, lambda s, g, t, lr: ref.update_proximal_gradient_descent(s, g, lr, **PROX_REF)),
    OptCase("proximal_adagrad",
            lambda lr: mf.train.ProximalAdagradOptimizer(lr, **PROX),
            {"accum": ("accumulator", 0.1)},
            lambda s, g, t, lr: ref.update_proximal_adagrad(s, g, lr, **PROX_REF)),
    OptCase("adam", lambda lr: mf.train.AdamOptimizer(lr, **ADAM), {"m": ("m", 0.0),
                                                                   "v": ("v", 0.0)},
            _adam_step, rowwise=False),
]


class Twin:
    """The numpy side: one reference state per variable."""

    def __init__(self, case, values):
        self.case = case
        self.states = {}
        for name, value in values.items():
            state = {"var": value.astype(np.float64)}
            for key, (_, init) in case.slots.items():
                state[key] = np.full(value.shape, init)
            self.states[name] = state

    def step(self, grads, t, lr=LR, rows=None):
        for name, g in grads.items():
            s = self.states[name]
            if rows is not None and name in rows and self.case.rowwise:
                values, indices = rows[name]
                self.states[name] = ref.sparse_rows(
                    lambda st, gg: self.case.step(st, gg, t, lr), s, values, indices)
            else:
                self.states[name] = self.case.step(s, g, t, lr)

    def check(self, sess, opt, variables, dtype, label):
        for name, v in variables.items():
            state = self.states[name]
            np.testing.assert_allclose(sess.run(v), state["var"], **TOL[dtype],
                                       err_msg=f"{label}: {name}")
            for key, (slot_name, _) in self.case.slots.items():
                slot = opt.get_slot(v, slot_name)
                np.testing.assert_allclose(sess.run(slot), state[key], **TOL[dtype],
                                           err_msg=f"{label}: slot {slot_name} of {name}")


@contextlib.contextmanager
def steps_against_twin(twin, train, grads, opt, variables, dtype, label):
    """Run ``STEPS`` of ``train`` beside ``twin``'s numpy steps and check the variables
    and slots after them; yields the session for more checks."""
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for t in range(1, STEPS + 1):
            sess.run(train)
            twin.step(grads(twin.states), t)
        twin.check(sess, opt, variables, dtype, label)
        yield sess


def dense_model(rng, dtype, constraints=None):
    """loss = sum(A * w^2) + sum(C * w) + sum((b - D)^2) + F * (s - G)^2, s a scalar
    variable (``constraints``: {name: the variable's constraint}); returns its numpy
    gradient too."""
    constraints = constraints or {}
    A, C = rng.uniform(0.5, 1.5, (3, 4)), rng.standard_normal((3, 4))
    D = rng.standard_normal(4)
    F, G = rng.uniform(0.5, 1.5), rng.standard_normal()
    values = {"w": rng.standard_normal((3, 4)).astype(dtype),
              "b": rng.standard_normal(4).astype(dtype),
              "s": np.asarray(rng.standard_normal(), dtype)}
    w = mf.Variable(values["w"], name="w", constraint=constraints.get("w"))
    b = mf.Variable(values["b"], name="b", constraint=constraints.get("b"))
    s = mf.Variable(values["s"], name="s")
    loss = mf.reduce_sum(mf.constant(A.astype(dtype)) * mf.square(w)) + \
        mf.reduce_sum(mf.constant(C.astype(dtype)) * w) + \
        mf.reduce_sum(mf.square(b - mf.constant(D.astype(dtype)))) + \
        mf.constant(dtype(F)) * mf.square(s - mf.constant(dtype(G)))

    def grads(states):
        return {"w": 2 * A * states["w"]["var"] + C, "b": 2 * (states["b"]["var"] - D),
                "s": 2 * F * (states["s"]["var"] - G)}
    return {"w": w, "b": b, "s": s}, values, loss, grads


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_optimizer_dense_steps_match_numpy(case, dtype, rng):
    variables, values, loss, grads = dense_model(rng, dtype)
    opt = case.make(LR)
    train = opt.minimize(loss)
    with steps_against_twin(Twin(case, values), train, grads, opt, variables, dtype,
                            case.name) as sess:
        for v in variables.values():
            assert sess.run(v).dtype == dtype


# Constraints and their numpy twins: non-negative, and a max-norm that binds (|b| > 0.5).
PROJECTIONS = {"w": (lambda v: mf.maximum(v, 0.0), lambda a: np.maximum(a, 0.0)),
               "b": (lambda v: mf.clip_by_norm(v, 0.5),
                     lambda a: a * 0.5 / max(np.linalg.norm(a), 0.5))}


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_constraint_projects_its_variable_after_each_dense_update(case, rng):
    # TF1's order: the fused update, then assign constraint(the updated value); slots and
    # the global step are the update's, unprojected.
    constraints = {name: made for name, (made, _) in PROJECTIONS.items()}
    variables, values, loss, grads = dense_model(rng, np.float64, constraints)
    opt = case.make(LR)
    step = mf.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=step)
    twin = Twin(case, values)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for t in range(1, STEPS + 1):
            sess.run(train)
            twin.step(grads(twin.states), t)
            for name, (_, project) in PROJECTIONS.items():
                twin.states[name]["var"] = project(twin.states[name]["var"])
        twin.check(sess, opt, variables, np.float64, f"{case.name} with constraints")
        w, b = sess.run([variables["w"], variables["b"]])
        assert (w == 0).any() and np.isclose(np.linalg.norm(b), 0.5)   # both bind
        assert sess.run(step) == STEPS


# Three steps of TF 2.21's tf.compat.v1 optimizers (reference and resource variables
# alike) on sum((w * x - target)^2) with constraint=lambda v: tf.maximum(v, 0.0).
TF_CONSTRAINED = {
    "sgd": [0.7440000176429749, 0.0, 1.0800000429153442, 1.57212495803833],
    "momentum": [0.9690000414848328, 0.0, 2.8439998626708984, 1.1941250562667847],
    "adam": [0.7951276898384094, 0.20090387761592865, 0.1960195004940033, 1.7003825902938843],
}


@pytest.mark.parametrize("name", sorted(TF_CONSTRAINED))
def test_constrained_training_matches_tensorflow(name):
    w = mf.get_variable("w", initializer=np.array([0.5, 0.5, -1.0, 2.0], np.float32),
                        constraint=lambda v: mf.maximum(v, 0.0))
    x = mf.placeholder(mf.float32, [4])
    loss = mf.reduce_sum(mf.square(w * x - np.array([1.0, -2.0, 3.0, -0.5], np.float32)))
    opt = {"sgd": mf.train.GradientDescentOptimizer(0.1),
           "momentum": mf.train.MomentumOptimizer(0.1, 0.9),
           "adam": mf.train.AdamOptimizer(0.1)}[name]
    train = opt.minimize(loss, global_step=mf.train.get_or_create_global_step())
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(3):
            sess.run(train, {x: np.array([1, 2, 1, 0.5], np.float32)})
        np.testing.assert_allclose(sess.run(w), TF_CONSTRAINED[name], rtol=1e-6)


def test_a_constraint_on_a_variable_with_a_sparse_gradient_is_refused_as_in_tf1():
    table = mf.Variable(np.ones((5, 2)), name="table", constraint=lambda v: v)
    loss = mf.reduce_sum(mf.nn.embedding_lookup(table, [1, 3]))
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"Cannot use a constraint function on a sparse variable: "
                             r"'table:0' has a constraint and its gradient is sparse"):
        mf.train.GradientDescentOptimizer(0.1).minimize(loss)


def test_the_projection_runs_next_to_its_variable_before_the_optimizer_finishes():
    # On the variable's ps (a replica_device_setter model), and Adam's beta powers
    # advance after it, as TF1's _finish waits on the projected updates.
    cluster = mf.train.ClusterSpec({"ps": ["p:1", "p:2"], "worker": ["w:1"]})
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        a = mf.get_variable("a", [3], constraint=lambda v: mf.maximum(v, 0.0))
        b = mf.get_variable("b", [3], constraint=lambda v: mf.clip_by_norm(v, 1.0))
        mf.train.AdamOptimizer(0.1).minimize(mf.reduce_sum(a * b))
    graph = mf.get_default_graph()
    for var in (a, b):
        scope = f"Adam/update_{var.op.name}/"
        made = [op for op in graph.get_operations() if op.name.startswith(scope)]
        assert {op.device for op in made} == {var.device}, made
        projection = graph.get_operation_by_name(scope + "Assign")
        assert projection.inputs[0].op is var.op
        # The constraint reads the variable after the update, not the read made with it.
        read = graph.get_operation_by_name(scope + "read")
        assert read.inputs[0].op is var.op and read in _ops_before(projection)
        assert graph.get_operation_by_name(scope + "ApplyAdam") in read.control_inputs
        assert projection in _ops_before(graph.get_operation_by_name("Adam/Assign"))
    assert a.device != b.device


def _ops_before(op):
    seen, stack = set(), [op]
    while stack:
        after = stack.pop()
        for before in list(after.control_inputs) + [t.op for t in after.inputs]:
            if before not in seen:
                seen.add(before)
                stack.append(before)
    return seen


def sparse_model(rng, dtype, lookup):
    """loss = sum(E * rows) + sum(rows^2) with rows = lookup(table, IDS), plus a dense w."""
    E = rng.standard_normal((len(IDS), 3))
    values = {"table": rng.standard_normal((6, 3)).astype(dtype),
              "w": rng.standard_normal(3).astype(dtype)}
    table = mf.Variable(values["table"], name="table")
    w = mf.Variable(values["w"], name="w")
    rows = lookup(table, mf.constant(IDS))
    loss = mf.reduce_sum(mf.constant(E.astype(dtype)) * rows) + mf.reduce_sum(
        mf.square(rows)) + mf.reduce_sum(mf.square(w))

    def grads(states):
        row_grads = E + 2 * states["table"]["var"][IDS]
        return ({"table": ref.densify(row_grads, IDS, 6), "w": 2 * states["w"]["var"]},
                {"table": (row_grads, IDS)})
    return {"table": table, "w": w}, values, loss, grads


@pytest.mark.parametrize("lookup", [mf.nn.embedding_lookup, mf.gather],
                         ids=["embedding_lookup", "gather"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_optimizer_sparse_steps_match_numpy(case, dtype, lookup, rng):
    variables, values, loss, grads = sparse_model(rng, dtype, lookup)
    opt = case.make(LR)
    grads_and_vars = opt.compute_gradients(loss)
    table_grad = dict((v.name, g) for g, v in grads_and_vars)["table:0"]
    assert isinstance(table_grad, mf.IndexedSlices), "embedding gradient was densified"
    train = opt.apply_gradients(grads_and_vars)
    types = {op.type for op in mf.get_default_graph().get_operations()}
    sparse_type = opt._apply_ops["sparse"]
    assert sparse_type in types and opt._apply_ops["dense"] in types
    twin = Twin(case, values)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for t in range(1, STEPS + 1):
            sess.run(train)
            dense, rows = grads(twin.states)
            twin.step(dense, t, rows=rows)
        twin.check(sess, opt, variables, dtype, f"{case.name} ({sparse_type})")
        if case.rowwise:
            np.testing.assert_array_equal(sess.run(variables["table"])[[2, 3, 5]],
                                          values["table"][[2, 3, 5]],
                                          err_msg=f"{sparse_type} changed rows never looked up")


def test_adam_with_sparse_gradient_equals_adam_with_densified_gradient(rng):
    from mpiflow.gradients import densify
    results = []
    for make_dense in (False, True):
        graph = mf.Graph()
        with graph.as_default():
            variables, _, loss, _ = sparse_model(np.random.default_rng(3), np.float64,
                                                 mf.nn.embedding_lookup)
            opt = mf.train.AdamOptimizer(0.1)
            gv = opt.compute_gradients(loss)
            if make_dense:
                gv = [(densify(g), v) for g, v in gv]
            train = opt.apply_gradients(gv)
            kinds = {op.type for op in graph.get_operations() if "Adam" in op.type}
            assert kinds == ({"ApplyAdam"} if make_dense else {"ApplyAdam", "SparseApplyAdam"})
            with mf.Session() as sess:
                sess.run(mf.global_variables_initializer())
                for _ in range(STEPS):
                    sess.run(train)
                results.append(sess.run(variables["table"]))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-14)


def test_two_lookups_of_one_table_still_apply_sparsely():
    table = mf.Variable(np.ones((5, 2)), name="table")
    loss = mf.reduce_sum(mf.gather(table, [1, 3])) + mf.reduce_sum(mf.gather(table, [3]))
    train = mf.train.GradientDescentOptimizer(0.5).minimize(loss)
    assert "SparseApplyGradientDescent" in {o.type for o in
                                            mf.get_default_graph().get_operations()}
    with mf.Session() as sess:
        sess.run(table.initializer)
        sess.run(train)
        np.testing.assert_allclose(sess.run(table)[:, 0], [1, 0.5, 1, 0, 1])


class _RowMomentum(mf.train.Optimizer):
    """An optimizer a TF1 user writes: m = beta * m + grad; var -= lr * m. Its sparse
    update gathers and scatters the rows of its slot, right only if each row comes once
    (TF1's ``_apply_sparse`` contract)."""

    def __init__(self, lr, beta):
        super().__init__(False, "RowMomentum")
        self._lr, self._beta = lr, beta

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "m", self._name)

    def _apply_sparse(self, grad, var):
        m = self.get_slot(var, "m")
        rows = self._beta * mf.gather(m, grad.indices) + grad.values
        with mf.control_dependencies([mf.scatter_update(m, grad.indices, rows)]):
            return mf.scatter_sub(var, grad.indices, self._lr * rows)


def test_a_subclass_apply_sparse_gets_each_index_once_with_its_values_summed():
    # TF1 sums the values of a repeated index before its optimizers' _apply_sparse:
    # without it the scatter_update of the slot keeps one of row 1's three values.
    table = mf.Variable(np.zeros((4, 2)), name="table")
    loss = mf.reduce_sum(mf.gather(table, [1, 3, 1, 1]) * np.array([[1.0, 2.0]]))
    opt = _RowMomentum(0.1, 0.5)
    train = opt.minimize(loss)
    dense = np.array([[0, 0], [3, 6], [0, 0], [1, 2]], dtype=np.float64)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(2):
            sess.run(train)
        np.testing.assert_allclose(sess.run(opt.get_slot(table, "m")), 1.5 * dense)
        np.testing.assert_allclose(sess.run(table), -0.25 * dense)


class _Accumulating(mf.train.Optimizer):
    """Adagrad as a TF1 user writes it with the base class's helpers: the slot from an
    initializer (TF1's six-argument signature), the rate through _call_if_callable."""

    def __init__(self, lr):
        super().__init__(False, "Accumulating")
        self._lr = lr

    def _create_slots(self, var_list):
        for v in var_list:
            self._get_or_make_slot_with_initializer(
                v, mf.constant_initializer(0.5), v.shape, v.dtype, "acc", self._name)

    def _prepare(self):
        self._lr_t = mf.convert_to_tensor(self._call_if_callable(self._lr), name="lr")

    def _apply_dense(self, grad, var):
        acc = mf.assign_add(self.get_slot(var, "acc"), grad * grad)
        return mf.assign_sub(var, mf.cast(self._lr_t, var.dtype) * grad / mf.sqrt(acc))


def test_a_subclass_uses_tf1s_slot_initializer_and_callable_helpers():
    w = mf.Variable([1.0, -2.0], dtype=mf.float64)
    opt = _Accumulating(lambda: 0.1)
    train = opt.minimize(mf.reduce_sum(w * w))
    assert opt.get_slot(w, "acc").name == "Variable/Accumulating:0"
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train)
        grad = np.array([2.0, -4.0])
        np.testing.assert_allclose(sess.run(w), [1.0, -2.0] - 0.1 * grad / np.sqrt(0.5 + grad ** 2))


# -- FTRL, Adadelta and the proximal optimizers against TensorFlow ------------------------------

# Hyperparameters exact in float32, so float64 runs match TensorFlow's (which rounds them
# through float32) to float64 rounding.
REGULARIZED = {
    "ftrl": lambda: mf.train.FtrlOptimizer(0.5),
    "ftrl_l1_l2": lambda: mf.train.FtrlOptimizer(0.5, l1_regularization_strength=0.25,
                                                 l2_regularization_strength=0.125),
    "ftrl_shrinkage": lambda: mf.train.FtrlOptimizer(
        0.5, l1_regularization_strength=0.0625, l2_regularization_strength=0.125,
        l2_shrinkage_regularization_strength=0.25),
    "ftrl_power": lambda: mf.train.FtrlOptimizer(
        0.5, learning_rate_power=-0.75, initial_accumulator_value=0.25,
        l1_regularization_strength=0.0625),
    "ftrl_power0": lambda: mf.train.FtrlOptimizer(
        0.25, learning_rate_power=0.0, initial_accumulator_value=0.0,
        l2_regularization_strength=0.5),
    "ftrl_beta": lambda: mf.train.FtrlOptimizer(0.5, l2_regularization_strength=0.125,
                                                beta=0.25),
    "adadelta": lambda: mf.train.AdadeltaOptimizer(1.0, rho=0.875, epsilon=2.0 ** -10),
    "proximal_adagrad": lambda: mf.train.ProximalAdagradOptimizer(
        0.5, initial_accumulator_value=0.25, l1_regularization_strength=0.125,
        l2_regularization_strength=0.25),
    "proximal_adagrad_l2": lambda: mf.train.ProximalAdagradOptimizer(
        0.5, l2_regularization_strength=0.5),
    "proximal_sgd": lambda: mf.train.ProximalGradientDescentOptimizer(
        0.25, l1_regularization_strength=0.25, l2_regularization_strength=0.5),
    "proximal_sgd_l2": lambda: mf.train.ProximalGradientDescentOptimizer(
        0.25, l2_regularization_strength=0.5),
}

# w (2x3, dense gradient) then the table (5x2, gathered at ids [3, 1, 3, 0, 3]: row 3
# three times, rows 2 and 4 never) after four steps of TF 2.21's tf.compat.v1 optimizers
# on the model of regularized_model. TF refuses float64 for the proximal optimizers (their
# learning rate stays float32), so those have no float64 record.
TF_REGULARIZED = {
    ("ftrl", np.float32): [-0.216807991, 0.395095021, -0.349766523, -0.0673739836, -0.439412892,
        0.780035377, 0.0271605067, 0.0979713351, 0.499947548, 0.200244948, -0.699999988,
        0.899999976, 0.515674591, -0.234318614, 1, 0.400000006],
    ("ftrl_l1_l2", np.float32): [-0.138791353, 0.388690352, -0.349999964, -0.0588573143,
        -0.394692659, 0.761185586, 0, 0.0996102169, 0.493451327, 0.190600902, -0.699999988,
        0.899999976, 0.523352206, -0.233264878, 1, 0.400000006],
    ("ftrl_shrinkage", np.float32): [-0.187910169, 0.341464818, -0.278789312, -0.0248608328,
        -0.387439549, 0.657604873, 0, 0.0720917434, 0.388432801, 0.159960136, -0.699999988,
        0.899999976, 0.465066016, -0.21560742, 1, 0.400000006],
    ("ftrl_power", np.float32): [-0.137878969, 0.32162112, -0.349984378, -0.550527275,
        -0.218677133, 0.668254495, 0, 0.0978031904, 0.496811628, 0.200097695, -0.699999988,
        0.899999976, 0.532849848, -0.233283326, 1, 0.400000006],
    ("ftrl_power0", np.float32): [-0.259040028, 0.401280016, -0.308960021, 0.106879994,
        -0.517680049, 0.748749971, -0.0086400006, 0.104320005, 0.39200002, 0.148159996,
        -0.699999988, 0.899999976, 0.534879982, -0.238719985, 1, 0.400000006],
    ("ftrl_beta", np.float32): [-0.178317472, 0.385350883, -0.34964788, -0.0708114803,
        -0.394259453, 0.748305023, 0.00112825516, 0.100069538, 0.484906107, 0.199759901,
        -0.699999988, 0.899999976, 0.530598521, -0.233334422, 1, 0.400000006],
    ("adadelta", np.float32): [0.460692614, 0.0228589103, -0.233212784, -0.757230759, 0.257587373,
        0.347786069, -0.000107826258, 0.051612746, 0.5, 0.199892178, -0.699999988, 0.899999976,
        0.495893449, -0.324033916, 1, 0.400000006],
    ("proximal_adagrad", np.float32): [-0.0900313854, 0.324026525, -0.255555481, -0.0562826321,
        -0.313791782, 0.664101124, 0, 0.0327179767, 0.395465702, 0.129711479, -0.699999988,
        0.899999976, 0.475692272, -0.205296412, 1, 0.400000006],
    ("proximal_adagrad_l2", np.float32): [-0.135347918, 0.338323563, -0.279942662, -0.0698064268,
        -0.337639362, 0.654161215, 0.0472976789, 0.0769693777, 0.417719126, 0.188802958,
        -0.699999988, 0.899999976, 0.476020336, -0.21700877, 1, 0.400000006],
    ("proximal_sgd", np.float32): [-0.0111111142, 0.270035058, -0.171025753, 0.0333333276,
        -0.255936563, 0.576378584, 0, 0, 0.30780369, 0.0693644285, -0.699999988, 0.899999976,
        0.445892394, -0.192455396, 1, 0.400000006],
    ("proximal_sgd_l2", np.float32): [-0.00246915547, 0.341289431, -0.267123908, 0.088888891,
        -0.349977136, 0.658683121, 0.00390184415, 0.0690748394, 0.403901845, 0.165462568,
        -0.699999988, 0.899999976, 0.482853264, -0.230391711, 1, 0.400000006],
    ("ftrl", np.float64): [-0.21680797771284824, 0.39509499917711344, -0.34976650329417247,
        -0.067373969380238055, -0.43941290281494699, 0.78003537951895718, 0.027160505869398062,
        0.09797132957015231, 0.499947553702902, 0.20024494874417276, -0.69999999999999996,
        0.90000000000000002, 0.51567462605264558, -0.23431860718001785, 1, 0.40000000000000002],
    ("ftrl_l1_l2", np.float64): [-0.13879132346057776, 0.38869033125314234, -0.34999995943469253,
        -0.058857281993663545, -0.39469267276164255, 0.76118556375146551, 0, 0.099610217116487376,
        0.49345133308040345, 0.19060089719498877, -0.69999999999999996, 0.90000000000000002,
        0.52335222461273168, -0.23326487612976118, 1, 0.40000000000000002],
    ("ftrl_shrinkage", np.float64): [-0.18791016887019102, 0.34146479484740594,
        -0.27878933689367524, -0.024860836500343604, -0.38743957960883674, 0.65760486282478314, 0,
        0.072091735839165755, 0.3884328182766269, 0.15996014971172959, -0.69999999999999996,
        0.90000000000000002, 0.46506604348958369, -0.21560742770993055, 1, 0.40000000000000002],
    ("ftrl_power", np.float64): [-0.1378789543740464, 0.32162114599449937, -0.34998437954838924,
        -0.5505272767599948, -0.21867720069335214, 0.66825443919460126, 0, 0.097803188989602566,
        0.49681165060522203, 0.20009769625601637, -0.69999999999999996, 0.90000000000000002,
        0.53284980576126095, -0.23328332404223751, 1, 0.40000000000000002],
    ("ftrl_power0", np.float64): [-0.25904000000000005, 0.40128000000000003, -0.30896000000000001,
        0.10688, -0.51768000000000003, 0.74875000000000003, -0.0086400000000000001,
        0.10432000000000001, 0.39200000000000002, 0.14816000000000001, -0.69999999999999996,
        0.90000000000000002, 0.53487999999999991, -0.23871999999999999, 1, 0.40000000000000002],
    ("ftrl_beta", np.float64): [-0.17831747443090101, 0.38535090947322637, -0.3496479064550847,
        -0.070811447065888475, -0.3942595021238347, 0.74830498501424014, 0.0011282554841819169,
        0.10006953841091119, 0.48490609257488737, 0.19975990154160911, -0.69999999999999996,
        0.90000000000000002, 0.53059859568058876, -0.23333443177240618, 1, 0.40000000000000002],
    ("adadelta", np.float64): [0.46069258174938443, 0.022858948203743901, -0.23321280123798604,
        -0.75723067567090085, 0.25758736345151312, 0.34778608089642299, -0.00010782653374132598,
        0.051612745123454956, 0.5, 0.19989217346625868, -0.69999999999999996, 0.90000000000000002,
        0.49589345812850527, -0.32403388252042165, 1, 0.40000000000000002],
}


def regularized_model(dtype):
    """sum(A * w^2) + sum(C * w) + sum((gather(e, ids) - T)^2), as recorded in TF."""
    a = np.array([[0.5, 1.5, 1.0], [2.0, 0.75, 1.25]])
    c = np.array([[0.3, -1.2, 0.7], [-0.4, 0.9, -2.0]])
    w0 = np.array([[0.8, -0.3, 0.05], [-1.1, 0.6, 0.02]])
    e0 = np.array([[0.1, -0.2], [0.5, 0.3], [-0.7, 0.9], [0.25, -0.6], [1.0, 0.4]])
    target = np.array([[1.0, -1.0], [0.5, 0.2], [-0.3, 0.8], [0.0, 0.1], [0.9, -0.5]])
    w = mf.Variable(w0.astype(dtype), name="w")
    e = mf.Variable(e0.astype(dtype), name="e")
    loss = mf.reduce_sum(mf.constant(a.astype(dtype)) * w * w) + \
        mf.reduce_sum(mf.constant(c.astype(dtype)) * w) + \
        mf.reduce_sum(mf.square(mf.gather(e, [3, 1, 3, 0, 3]) - mf.constant(target.astype(dtype))))
    return w, e, loss


@pytest.mark.parametrize("name,dtype", sorted(TF_REGULARIZED, key=str),
                         ids=[f"{n}-{d.__name__}" for n, d in sorted(TF_REGULARIZED, key=str)])
def test_ftrl_adadelta_and_proximal_steps_match_tensorflow(name, dtype):
    w, e, loss = regularized_model(dtype)
    opt = REGULARIZED[name]()
    train = opt.minimize(loss)
    types = {op.type for op in mf.get_default_graph().get_operations()}
    assert opt._apply_ops["dense"] in types and opt._apply_ops["sparse"] in types
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(4):
            sess.run(train)
        got = np.concatenate([sess.run(w).ravel(), sess.run(e).ravel()])
    assert got.dtype == dtype
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got, TF_REGULARIZED[name, dtype], **tol)


def test_ftrl_l1_sets_coordinates_to_exactly_zero_as_tensorflow():
    _, e, loss = regularized_model(np.float32)
    train = REGULARIZED["ftrl_l1_l2"]().minimize(loss)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for _ in range(4):
            sess.run(train)
        assert sess.run(e)[0, 0] == 0.0 == TF_REGULARIZED["ftrl_l1_l2", np.float32][6]


def test_ftrl_and_adadelta_slots_are_named_as_tf1_names_them():
    w = mf.Variable(np.zeros((2, 2)), name="w")
    loss = mf.reduce_sum(mf.square(w))
    expected = {mf.train.FtrlOptimizer(0.1): {"accum": "w/Ftrl:0", "linear": "w/Ftrl_1:0"},
                mf.train.AdadeltaOptimizer(): {"accum": "w/Adadelta:0",
                                               "accum_update": "w/Adadelta_1:0"},
                mf.train.ProximalAdagradOptimizer(0.1): {"accumulator": "w/ProximalAdagrad:0"},
                mf.train.FtrlOptimizer(0.1, accum_name="A", linear_name="L"): {
                    "accum": "w/A:0", "linear": "w/L:0"}}
    for opt, slots in expected.items():
        opt.minimize(loss)
        assert opt.get_slot_names() == sorted(slots)
        assert {n: opt.get_slot(w, n).name for n in slots} == slots
    assert mf.train.ProximalGradientDescentOptimizer(0.1).get_slot_names() == []


def test_ftrl_takes_apply_ftrl_v2_only_with_l2_shrinkage():
    w = mf.Variable(np.zeros(3), name="w")
    loss = mf.reduce_sum(mf.square(w - 1.0))
    mf.train.FtrlOptimizer(0.1).minimize(loss)
    mf.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1).minimize(loss)
    types = [op.type for op in mf.get_default_graph().get_operations()]
    assert types.count("ApplyFtrl") == 1 and types.count("ApplyFtrlV2") == 1


@pytest.mark.parametrize("make", [mf.train.FtrlOptimizer, mf.train.AdadeltaOptimizer,
                                  mf.train.ProximalAdagradOptimizer,
                                  mf.train.ProximalGradientDescentOptimizer],
                         ids=lambda c: c.__name__)
def test_regularized_optimizers_take_a_tensor_learning_rate(make):
    results = []
    for fed in (False, True):
        graph = mf.Graph()
        with graph.as_default():
            w, e, loss = regularized_model(np.float32)
            lr = mf.placeholder(mf.float32, []) if fed else 0.5
            train = make(lr).minimize(loss)
            with mf.Session() as sess:
                sess.run(mf.global_variables_initializer())
                for _ in range(2):
                    sess.run(train, {lr: 0.5} if fed else None)
                results.append(sess.run([w, e]))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("make,message", [
    (lambda: mf.train.FtrlOptimizer(0.1, learning_rate_power=0.5),
     "learning_rate_power must be zero or negative, got 0.5"),
    (lambda: mf.train.FtrlOptimizer(0.1, initial_accumulator_value=-1.0),
     "initial_accumulator_value must be zero or positive"),
    (lambda: mf.train.FtrlOptimizer(0.1, l1_regularization_strength=-1.0),
     "l1_regularization_strength must be zero or positive"),
    (lambda: mf.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=-0.1),
     "l2_shrinkage_regularization_strength must be zero or positive"),
    (lambda: mf.train.ProximalAdagradOptimizer(0.1, initial_accumulator_value=0.0),
     "initial_accumulator_value must be positive, got 0.0"),
    (lambda: mf.train.ProximalGradientDescentOptimizer(0.1, l2_regularization_strength=-1),
     "l2_regularization_strength must be zero or positive"),
], ids=["ftrl_power", "ftrl_accum", "ftrl_l1", "ftrl_shrinkage", "proximal_adagrad_accum",
        "proximal_sgd_l2"])
def test_regularized_optimizers_refuse_bad_hyperparameters_as_value_errors(make, message):
    # TensorFlow raises ValueError for each; an initial accumulator of 0 is Ftrl's default
    # for some users and allowed there.
    with pytest.raises(ValueError, match=message):
        make()
    mf.train.FtrlOptimizer(0.1, initial_accumulator_value=0.0, learning_rate_power=0.0)


# -- slots, names, colocation -----------------------------------------------------------------

def test_slots_are_named_like_tf_colocated_and_not_trainable():
    with mf.device("/job:ps/task:1"):
        w = mf.Variable(np.zeros((2, 2)), name="w")
    with mf.device("/job:ps/task:0"):
        a = mf.Variable(np.zeros(2), name="a")
    loss = mf.reduce_sum(mf.square(w)) + mf.reduce_sum(mf.square(a))
    with mf.device("/job:worker/task:0"):
        momentum = mf.train.MomentumOptimizer(0.1, 0.9)
        momentum.minimize(loss)
        adam = mf.train.AdamOptimizer()
        adam.minimize(loss)
    slot = momentum.get_slot(w, "momentum")
    assert slot.name == "w/Momentum:0"
    assert momentum.get_slot_names() == ["momentum"]
    assert momentum.get_slot(w, "nope") is None
    assert [adam.get_slot(w, n).name for n in adam.get_slot_names()] == \
        ["w/Adam:0", "w/Adam_1:0"]
    for opt, v in ((momentum, w), (momentum, a), (adam, w), (adam, a)):
        for name in opt.get_slot_names():
            s = opt.get_slot(v, name)
            assert s.device == v.device and s.op.colocation_groups() == [f"loc:@{v.op.name}"]
            assert s in mf.global_variables() and s not in mf.trainable_variables()
    # beta powers live with the first variable by name ("a" on ps:0), once per graph
    beta1 = adam._get_non_slot_variable("beta1_power", mf.get_default_graph())
    assert beta1.name == "beta1_power:0" and beta1.device == a.device
    assert [v.name for v in adam.variables()] == [
        "a/Adam:0", "a/Adam_1:0", "beta1_power:0", "beta2_power:0", "w/Adam:0", "w/Adam_1:0"]
    graph = mf.get_default_graph()
    update = graph.get_operation_by_name("Momentum/update_w/ApplyMomentum")
    assert update.device == w.device and update.colocation_groups() == ["loc:@w"]
    assert all(op.device == w.device for op in graph.get_operations()
               if op.name.startswith("Adam/update_w/"))


def test_second_optimizer_on_a_variable_gets_new_slots():
    w = mf.Variable(np.zeros(2), name="w")
    loss = mf.reduce_sum(mf.square(w))
    first, second = mf.train.MomentumOptimizer(0.1, 0.9), mf.train.MomentumOptimizer(0.1, 0.9)
    first.minimize(loss)
    second.minimize(loss)
    assert first.get_slot(w, "momentum").name == "w/Momentum:0"
    assert second.get_slot(w, "momentum").name == "w/Momentum_1:0"


def test_var_list_restricts_the_update():
    w = mf.Variable(np.ones(2), name="w")
    b = mf.Variable(np.ones(2), name="b")
    train = mf.train.GradientDescentOptimizer(0.5).minimize(
        mf.reduce_sum(mf.square(w) + mf.square(b)), var_list=[w])
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train)
        np.testing.assert_allclose(sess.run([w, b]), [[0, 0], [1, 1]])


def test_gate_graph_gives_the_same_update():
    out = []
    for gate in (mf.train.Optimizer.GATE_OP, mf.train.Optimizer.GATE_GRAPH):
        graph = mf.Graph()
        with graph.as_default():
            w = mf.Variable(np.arange(3.0), name="w")
            train = mf.train.GradientDescentOptimizer(0.1).minimize(
                mf.reduce_sum(mf.square(w)), gate_gradients=gate)
            with mf.Session() as sess:
                sess.run(w.initializer)
                sess.run(train)
                out.append(sess.run(w))
    np.testing.assert_array_equal(out[0], out[1])


# -- global step ------------------------------------------------------------------------------

def test_minimize_increments_the_global_step_once_per_run():
    w = mf.Variable(np.ones(2), name="w")
    step = mf.train.get_or_create_global_step()
    train = mf.train.MomentumOptimizer(0.1, 0.9).minimize(mf.reduce_sum(mf.square(w)),
                                                          global_step=step)
    assert train.type == "AssignAdd" and train.name == "Momentum"
    assert [c.name for c in train.control_inputs] == ["Momentum/update"]
    assert train in mf.get_collection(mf.GraphKeys.TRAIN_OP)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        assert mf.train.global_step(sess, step) == 0
        for _ in range(3):
            sess.run(train)
        assert mf.train.global_step(sess, step) == 3
        assert mf.train.global_step(sess, "global_step:0") == 3


def test_global_step_is_a_zero_int64_scalar_in_its_collections():
    assert mf.train.get_global_step() is None
    with mf.variable_scope("model"), mf.name_scope("inner"):
        step = mf.train.create_global_step()
    assert step.name == "global_step:0" and step.dtype == mf.int64 and step.shape == []
    assert not step.trainable
    assert mf.get_collection(mf.GraphKeys.GLOBAL_STEP) == [step]
    assert step in mf.global_variables() and step not in mf.trainable_variables()
    assert mf.train.get_global_step() is step
    assert mf.train.get_or_create_global_step() is step
    with pytest.raises(mf.errors.AlreadyExistsError, match="global_step"):
        mf.train.create_global_step()
    with mf.Session() as sess:
        sess.run(step.initializer)
        value = sess.run(step)
        assert value == 0 and value.dtype == np.int64


def test_global_step_of_another_graph():
    graph = mf.Graph()
    step = mf.train.get_or_create_global_step(graph)
    assert step.graph is graph and mf.train.get_global_step() is None
    assert mf.train.get_global_step(graph) is step



@pytest.mark.parametrize("value", [0.0, False], ids=["float", "bool"])
def test_a_float_or_bool_global_step_is_refused_with_a_type_error_as_in_tensorflow(value):
    step = mf.Variable(value, name="global_step", trainable=False)
    mf.add_to_collection(mf.GraphKeys.GLOBAL_STEP, step)
    for check in (mf.train.get_global_step, mf.train.get_or_create_global_step,
                  lambda: mf.train.assert_global_step(step),
                  lambda: mf.train.StopAtStepHook(last_step=2).begin()):
        with pytest.raises(TypeError, match="'global_step:0' must have an integer dtype"):
            check()
    mf.train.assert_global_step(mf.Variable(0, name="counter"))
    with pytest.raises(mf.errors.InvalidArgumentError, match="must be a scalar"):
        mf.train.assert_global_step(mf.Variable([0, 0], name="pair"))


def test_minimize_refuses_to_count_steps_in_a_bool_variable():
    # TensorFlow: AssignAdd has no bool kernel (numpy's += would make it a logical or:
    # a "step" stuck at True). A float step counts, as in TensorFlow.
    w = mf.Variable(1.0, name="w")
    with pytest.raises(mf.errors.InvalidArgumentError, match="numeric .*got bool"):
        mf.train.GradientDescentOptimizer(0.1).minimize(
            w * w, global_step=mf.Variable(False, name="flag", trainable=False))
    counted = mf.Variable(0.0, name="counted", trainable=False)
    train = mf.train.GradientDescentOptimizer(0.1).minimize(w * w, global_step=counted)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(train)
        sess.run(train)
        assert sess.run(counted) == 2.0

# -- learning rates ---------------------------------------------------------------------------

def test_learning_rate_as_a_decaying_tensor_matches_numpy(rng):
    variables, values, loss, grads = dense_model(rng, np.float64)
    step = mf.train.get_or_create_global_step()
    lr = mf.train.exponential_decay(LR, step, decay_steps=1, decay_rate=0.5)
    case = CASES[1]
    opt = case.make(lr)
    train = opt.minimize(loss, global_step=step)
    twin = Twin(case, values)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for t in range(1, STEPS + 1):
            sess.run(train)
            twin.step(grads(twin.states), t, lr=float(np.float32(LR)) * 0.5 ** (t - 1))
        twin.check(sess, opt, variables, np.float64, "momentum with exponential_decay")


def test_learning_rate_as_a_fed_placeholder(rng):
    variables, values, loss, grads = dense_model(rng, np.float64)
    lr = mf.placeholder(mf.float32, [])     # cast to the variables' float64
    case = CASES[-1]
    opt = case.make(lr)
    train = opt.minimize(loss)
    twin = Twin(case, values)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for t, rate in enumerate([0.125, 0.0625, 0.25], start=1):
            sess.run(train, {lr: rate})
            twin.step(grads(twin.states), t, lr=rate)
        twin.check(sess, opt, variables, np.float64, "adam with a fed learning rate")


def test_exponential_decay_and_piecewise_constant_values():
    step = mf.train.get_or_create_global_step()
    smooth = mf.train.exponential_decay(1.0, step, 2, 0.5)
    stairs = mf.train.exponential_decay(1.0, step, 2, 0.5, staircase=True)
    piecewise = mf.train.piecewise_constant(step, [2, 4], [1.0, 0.5, 0.1])
    inc = mf.assign_add(step, 1)
    got = []
    with mf.Session() as sess:
        sess.run(step.initializer)
        for _ in range(6):
            got.append(sess.run([smooth, stairs, piecewise]))
            sess.run(inc)
    got = np.array(got)
    t = np.arange(6)
    np.testing.assert_allclose(got[:, 0], 0.5 ** (t / 2), rtol=1e-6)
    np.testing.assert_allclose(got[:, 1], 0.5 ** (t // 2), rtol=1e-6)
    np.testing.assert_allclose(got[:, 2], [1, 1, 1, 0.5, 0.5, 0.1], rtol=1e-6)
    with pytest.raises(mf.errors.InvalidArgumentError, match="one more element"):
        mf.train.piecewise_constant(step, [1, 2], [1.0, 2.0])


# -- the executor orders reads before in-place writes -----------------------------------------

def test_two_layer_mlp_trained_with_sgd_follows_the_numpy_trajectory(rng):
    x = rng.standard_normal((5, 4))
    y = rng.standard_normal((5, 2))
    params = {"w1": rng.standard_normal((4, 3)), "b1": rng.standard_normal(3),
              "w2": rng.standard_normal((3, 2)), "b2": rng.standard_normal(2)}
    lr = 0.5
    v = {k: mf.Variable(p, name=k) for k, p in params.items()}

    def forward():
        z1 = mf.matmul(mf.constant(x), v["w1"]) + v["b1"]
        h = mf.reciprocal(1.0 + mf.exp(-z1))
        out = mf.matmul(h, v["w2"]) + v["b2"]
        return mf.reduce_mean(mf.square(out - mf.constant(y)))

    loss = forward()
    train = mf.train.GradientDescentOptimizer(lr).minimize(loss)
    # Built after the updates, so creation order alone would run it after them: only the
    # executor's read-before-write edges make it see this step's weights.
    report = forward()

    p = {k: a.copy() for k, a in params.items()}
    expected_losses = []
    for _ in range(3):
        hh = 1 / (1 + np.exp(-(x @ p["w1"] + p["b1"])))
        o = hh @ p["w2"] + p["b2"]
        expected_losses.append(np.mean((o - y) ** 2))
        d_out = 2 * (o - y) / o.size
        dz1 = (d_out @ p["w2"].T) * hh * (1 - hh)
        grads = {"w2": hh.T @ d_out, "b2": d_out.sum(0), "w1": x.T @ dz1, "b1": dz1.sum(0)}
        for k in p:
            p[k] = p[k] - lr * grads[k]
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        steps = [sess.run([loss, report, train])[:2] for _ in range(3)]
        np.testing.assert_allclose(np.array(steps)[:, 0], expected_losses, rtol=1e-6,
                                   atol=1e-12, err_msg="loss of the step's weights")
        np.testing.assert_allclose(np.array(steps)[:, 1], expected_losses, rtol=1e-6,
                                   atol=1e-12, err_msg="a read ran after the update")
        for k in p:
            np.testing.assert_allclose(sess.run(v[k]), p[k], rtol=1e-6, atol=1e-12,
                                       err_msg=f"parameter {k} after 3 steps")


# -- errors -----------------------------------------------------------------------------------

def test_apply_gradients_with_only_none_gradients_lists_the_variables():
    w = mf.Variable(np.ones(2), name="w")
    b = mf.Variable(np.ones(2), name="b")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"No gradients provided for any variable: \['w:0', 'b:0'\]"):
        mf.train.AdamOptimizer().apply_gradients([(None, w), (None, b)])


def test_minimize_a_loss_that_does_not_depend_on_the_variables():
    mf.Variable(np.ones(2), name="w")
    loss = mf.reduce_sum(mf.constant([1.0, 2.0]))
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"No gradients provided for any variable.*\['w:0'\]"):
        mf.train.GradientDescentOptimizer(0.1).minimize(loss)


def test_adam_betas_as_tensors_start_the_powers_at_their_values(rng):
    # As TensorFlow: beta1_power and beta2_power begin at the betas, which may be tensors
    # (a constant, a placeholder with a default), and the betas decay the moments.
    variables, values, loss, grads = dense_model(rng, np.float64)
    betas = {"beta1": 0.5, "beta2": 0.75, "epsilon": 1e-8}      # exact in float32
    opt = mf.train.AdamOptimizer(LR, beta1=mf.constant(betas["beta1"]),
                                 beta2=mf.placeholder_with_default(betas["beta2"], []))
    train = opt.minimize(loss)
    case = dataclasses.replace(
        CASES[-1], step=lambda s, g, t, lr: ref.update_adam(
            s, g, np.float32(betas["beta1"]) ** t, np.float32(betas["beta2"]) ** t, lr,
            **betas))
    with steps_against_twin(Twin(case, values), train, grads, opt, variables, np.float64,
                            "adam with tensor betas"):
        pass


def test_minimize_an_int_loss_is_invalid():
    w = mf.Variable(np.ones(2), name="w")
    loss = mf.reduce_sum(mf.cast(w, mf.int32))
    with pytest.raises(mf.errors.InvalidArgumentError, match="Invalid type int32 for loss"):
        mf.train.GradientDescentOptimizer(0.1).minimize(loss)


def test_minimize_a_non_scalar_loss_is_invalid():
    w = mf.Variable(np.ones(2), name="w")
    with pytest.raises(mf.errors.InvalidArgumentError, match=r"must be a scalar, got shape"):
        mf.train.MomentumOptimizer(0.1, 0.9).minimize(mf.square(w))


def test_minimize_without_variables_is_invalid():
    with pytest.raises(mf.errors.InvalidArgumentError, match="No variables to optimize"):
        mf.train.GradientDescentOptimizer(0.1).minimize(mf.reduce_sum(mf.constant([1.0])))


def test_apply_gradients_rejects_a_gradient_of_the_wrong_shape():
    w = mf.Variable(np.ones((2, 2)), name="w")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"'delta' must match the var's shape in op "
                             r"'GradientDescent/update_w/ApplyGradientDescent'"):
        mf.train.GradientDescentOptimizer(0.1).apply_gradients(
            [(mf.constant(np.ones(3)), w)])


def test_adagrad_needs_a_positive_initial_accumulator():
    with pytest.raises(mf.errors.InvalidArgumentError, match="must be positive"):
        mf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0)
