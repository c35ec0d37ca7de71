"""The differential matrix: one small model trained in every mode, with every optimizer,
table layout and kind of session, against a single-process reference on the same data.

Usage: mpiexec -n K python mode_matrix.py CASE [CASE ...]   (MPIFLOW_PS sets the ps count)
A CASE is ``mode:optimizer:layout:session[:constrained][:gpu]``:
  mode     ps (asynchronous, one worker), sync (SyncReplicasOptimizer), allreduce, hybrid;
           auto-ps, auto-allreduce, auto-hybrid: TrainingMode("auto") left that one
           candidate, so it builds the model unplaced, then places it at minimize()
  layout   whole (every variable in one piece) or split (big variables in parts: over the
           ps tasks by TrainingMode, or, with one ps, by the model's own partitioner)
  session  session (mf.Session + TrainingMode.initialize), monitored
           (MonitoredTrainingSession), supervisor (Supervisor.prepare_or_wait_for_session)
  constrained  the dense variables have constraints (CONSTRAINTS), which the optimizer
           applies after each update where the variable lives
  gpu      the model is built under /device:GPU:0 inside the mode's scope, as a user puts a
           worker's compute on its GPU: the workers compute there, and so do the ps for
           the variables placed on them (hybrid's tables stay on the ps hosts); the
           single-process reference runs on the CPU, so values agree to 1e-4 relative
           (cuBLAS sums in another order), the replicas still bit for bit

The model has an embedding table (only gathered from: a table), a dense weight as large
as the table (used by a matmul: never a table) and a small dense layer. Each worker
trains on its share of every step's batch; the chief then checks, for each case:
  - replicated variables are bit-identical on every worker at every step (and right after
    the session is made: the initial broadcast), as they must be;
  - hybrid mode put the table, and only the table, on the ps, and no update of a
    replicated variable reads state kept on the ps (optimizer state shared by the
    replicas would advance once per worker, and the replicas drift apart);
  - the variables (and, with one worker, every step's loss) equal a single-process run
    of the same model from the same initial values on the whole batch: exactly where
    one worker makes the computation the same, to 1e-5 relative where averaging over
    workers reorders sums. (Hybrid with several workers applies table rows
    asynchronously: only the replicas' agreement is checked there.)
Prints "OK <case>" or "FAIL <case>: why" per case; exits 1 if any case failed. Cases are
separated by Session.reset, so each starts from an empty cluster.
"""

import contextlib
import hashlib
import sys
import traceback

import numpy as np
from mpi4py import MPI

import mpiflow as mf

OPTIMIZERS = {
    "sgd": lambda: mf.train.GradientDescentOptimizer(0.2),
    "momentum": lambda: mf.train.MomentumOptimizer(0.1, 0.9),
    "nesterov": lambda: mf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "adam": lambda: mf.train.AdamOptimizer(0.05),
    "adagrad": lambda: mf.train.AdagradOptimizer(0.2),
    "rmsprop": lambda: mf.train.RMSPropOptimizer(0.05, momentum=0.5),
    "rmsprop_centered": lambda: mf.train.RMSPropOptimizer(0.05, momentum=0.5, centered=True),
    "adadelta": lambda: mf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-6),
    "ftrl": lambda: mf.train.FtrlOptimizer(0.2, l1_regularization_strength=0.01,
                                           l2_regularization_strength=0.01),
    "ftrl_shrinkage": lambda: mf.train.FtrlOptimizer(
        0.2, learning_rate_power=-0.75, l1_regularization_strength=0.01,
        l2_shrinkage_regularization_strength=0.05),
    "proximal_adagrad": lambda: mf.train.ProximalAdagradOptimizer(
        0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.01),
    "proximal_sgd": lambda: mf.train.ProximalGradientDescentOptimizer(
        0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.01),
}
VOCAB, DIM, FEATURES, HIDDEN, CLASSES = 12, 3, 5, 4, 3
SPLIT_ROWS = 8              # the table (12 rows) and the dense weight (8 rows) qualify
BATCH, STEPS = 4, 3
# Names sort the table first: optimizer state kept "with the first variable" then lands
# on the ps, where one worker's steps would advance what the others' replicas read.
MODEL = ("emb", "w_big", "w_out", "w_bias")
# A constrained case's constraints, each binding from the first step: elementwise for the
# weight that may be split in parts (a part's projection is then the whole's), a max-norm
# per column, non-negative.
CONSTRAINTS = {"w_big": lambda v: mf.clip_by_value(v, -0.3, 0.3),
               "w_out": lambda v: mf.clip_by_norm(v, 0.5, axes=[0]),
               "w_bias": lambda v: mf.maximum(v, 0.0)}


def build_model(emb_partitioner, constrained=False):
    ids = mf.placeholder(mf.int64, [None], name="ids")
    x = mf.placeholder(mf.float32, [None, FEATURES], name="x")
    y = mf.placeholder(mf.int64, [None], name="y")
    emb = mf.get_variable("emb", [VOCAB, DIM], partitioner=emb_partitioner,
                          initializer=mf.random_normal_initializer(0.0, 0.5))
    constraints = CONSTRAINTS if constrained else {}
    big = mf.get_variable("w_big", [FEATURES + DIM, HIDDEN],
                          constraint=constraints.get("w_big"))
    out = mf.get_variable("w_out", [HIDDEN, CLASSES], constraint=constraints.get("w_out"))
    bias = mf.get_variable("w_bias", [CLASSES],
                           initializer=mf.random_normal_initializer(0.0, 0.1),
                           constraint=constraints.get("w_bias"))
    h = mf.concat([x, mf.nn.embedding_lookup(emb, ids)], 1)
    logits = mf.matmul(mf.nn.tanh(mf.matmul(h, big)), out) + bias
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    return (ids, x, y), loss, dict(zip(MODEL, (emb, big, out, bias)))


def batches(case_seed, workers):
    rng = np.random.default_rng(case_seed)
    for _ in range(STEPS):
        n = workers * BATCH
        yield (rng.integers(0, VOCAB, n), rng.standard_normal((n, FEATURES)).astype(np.float32),
               rng.integers(0, CLASSES, n))


class Case:
    def __init__(self, text, num_ps, workers):
        self.text = text
        self.mode, self.optimizer, self.layout, self.session, *extra = text.split(":")
        unknown = set(extra) - {"constrained", "gpu"}
        if unknown:
            raise ValueError(f"unknown case options {sorted(unknown)} in {text!r}")
        self.constrained = "constrained" in extra
        self.gpu = "gpu" in extra
        self.auto = self.mode.startswith("auto-")
        self.mode = self.mode.removeprefix("auto-")     # the mode trained in
        self.num_ps, self.workers = num_ps, workers
        self.seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")

    def training_mode(self, cluster, task):
        """The TrainingMode of the case: sync trains in ps placement."""
        mode = "ps" if self.mode == "sync" else self.mode
        auto_split = self.layout == "split" and self.num_ps >= 2
        shard_rows = SPLIT_ROWS if auto_split else 10 ** 6
        if self.auto:
            return mf.train.TrainingMode("auto", cluster, task, shard_rows=shard_rows,
                                         candidates=[mode])
        return mf.train.TrainingMode(mode, cluster, task, shard_rows=shard_rows)

    def emb_partitioner(self):
        """With one ps, "split" is the model's own partitioner (TrainingMode splits only
        over several ps)."""
        return mf.fixed_size_partitioner(2) if self.layout == "split" and \
            self.num_ps < 2 else None


# -- one case on one worker -----------------------------------------------------------------

def train_case(case, cluster, server):
    task, is_chief = server.task_index, server.is_chief
    graph = mf.Graph()
    with graph.as_default():
        mf.set_random_seed(100 + task)        # replicas differ until the broadcast
        mode = case.training_mode(cluster, task)
        with mode.scope(), (mf.device("/device:GPU:0") if case.gpu else
                            contextlib.nullcontext()):
            feeds, loss, params = build_model(case.emb_partitioner(), case.constrained)
            step = mf.train.get_or_create_global_step()
            opt = OPTIMIZERS[case.optimizer]()
            if case.mode == "sync":
                opt = mf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=case.workers)
            train_op = mode.optimizer(opt).minimize(loss, global_step=step)
        full = {name: mf.convert_to_tensor(v) for name, v in params.items()}
        replicated = sorted(graph.get_collection(mf.GraphKeys.REPLICATED_VARIABLES),
                            key=lambda v: v.op.name)
        devices = {name: sorted({p.device for p in (list(v) if hasattr(v, "get_variable_list")
                                                   else [v])}) for name, v in params.items()}
        shared_state = ps_state_read_by_replicas(graph)
        with open_session(case, server, opt, graph) as sess:
            record = {"task": task, "devices": devices, "losses": [], "steps_fetched": [],
                      "chosen": mode.mode,
                      "shared_state": shared_state,
                      "digests": [digest(sess.run(replicated))] if replicated else []}
            if is_chief:
                record["initial"] = sess.run(full)
            for ids, x, y in batches(case.seed, case.workers):
                mine = slice(task * BATCH, (task + 1) * BATCH)
                lo, _, at = sess.run([loss, train_op, step],
                                     dict(zip(feeds, (ids[mine], x[mine], y[mine]))))
                record["losses"].append(lo)
                record["steps_fetched"].append(int(at))
                if replicated:
                    record["digests"].append(digest(sess.run(replicated)))
            if is_chief:
                record["final"] = sess.run(full)
                record["step"] = int(sess.run(step))
    return record


def ps_state_read_by_replicas(graph):
    """[(update op, ps variable)] where an op writing a variable off the ps reads a
    variable on the ps directly (through reads and casts only, not through the model)."""
    found = []
    for op in graph.get_operations():
        defn = mf.ops.registry.get_op_def(op.type)
        if not defn.ref_inputs or "/job:ps" in op.inputs[defn.ref_inputs[0]].op.device:
            continue
        stack = [t.op for i, t in enumerate(op.inputs) if i not in defn.ref_inputs]
        while stack:
            source = stack.pop()
            if source.type == "VariableV2":
                if "/job:ps" in source.device:
                    found.append((op.name, source.name))
            elif source.type in ("Identity", "Cast"):
                stack.extend(t.op for t in source.inputs)
    return found


def digest(values):
    h = hashlib.sha256()
    for v in values:
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


class open_session:
    """The case's kind of session, set up as a user of that kind sets it up."""

    def __init__(self, case, server, opt, graph):
        self.case, self.server, self.opt, self.graph = case, server, opt, graph
        self.sync = case.mode == "sync"

    def __enter__(self):
        server, chief = self.server, self.server.is_chief
        hooks = [self.opt.make_session_run_hook(chief)] if self.sync else []
        if self.case.session == "monitored":
            self.handle = mf.train.MonitoredTrainingSession(
                server.target, is_chief=chief, hooks=hooks, log_step_count_steps=0,
                progress_bar=False)
            return self.handle
        if self.case.session == "supervisor":
            kwargs = {}
            if self.sync:
                kwargs = {"local_init_op": self.opt.chief_init_op if chief
                          else self.opt.local_step_init_op,
                          "ready_for_local_init_op": self.opt.ready_for_local_init_op}
                queue_runner, tokens = self.opt.get_chief_queue_runner(), \
                    self.opt.get_init_tokens_op()
            self.handle = mf.train.Supervisor(is_chief=chief, logdir=None, **kwargs)
            sess = self.handle.prepare_or_wait_for_session(server.target)
            if self.sync and chief:
                sess.run(tokens)
                self.handle.start_queue_runners(sess, [queue_runner])
            return sess
        sess = self.handle = mf.Session(server.target)
        self.case_mode_init(sess)
        for hook in hooks:
            hook.after_create_session(sess, None)
        self.hooks = hooks
        return sess

    def case_mode_init(self, sess):
        mode = self.case.training_mode(self.server.cluster_spec, self.server.task_index)
        mode.initialize(sess, self.server.is_chief)
        if self.sync:
            sess.run(mf.local_variables_initializer())

    def __exit__(self, *exc):
        if self.case.session == "supervisor":
            self.handle.stop()
        elif self.case.session == "session":
            for hook in self.hooks:
                hook.end(self.handle)
            self.handle.close()
        else:
            self.handle.close()
        return False


# -- the reference and the checks -------------------------------------------------------------

def reference(case, cluster, initial):
    """The same model in one process, from the distributed run's initial values, on the
    whole batch of every step; returns (losses, final values, global step, the global
    step fetched with each step's train op)."""
    graph = mf.Graph()
    with graph.as_default():
        placement = case.training_mode(cluster, 0)   # the same partitioning
        with placement.scope():
            feeds, loss, params = build_model(case.emb_partitioner(), case.constrained)
            step = mf.train.get_or_create_global_step()
            train_op = OPTIMIZERS[case.optimizer]().minimize(loss, global_step=step)
        full = {name: mf.convert_to_tensor(v) for name, v in params.items()}
        values = {name: mf.placeholder(mf.float32, initial[name].shape) for name in MODEL}
        loads = [params[name].assign(values[name]) for name in MODEL]
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            sess.run(loads, {values[n]: initial[n] for n in MODEL})
            runs = [sess.run([loss, train_op, step], dict(zip(feeds, batch)))
                    for batch in batches(case.seed, case.workers)]
            return [lo for lo, _, _ in runs], sess.run(full), int(sess.run(step)), \
                [int(at) for _, _, at in runs]


def check(case, cluster, records):
    chief = records[0]
    chosen = {r["chosen"] for r in records}
    if chosen != {"ps" if case.mode == "sync" else case.mode}:
        return f"the workers trained in {sorted(chosen)}"
    digests = [r["digests"] for r in records]
    if any(d != digests[0] for d in digests[1:]):
        first = next(i for i in range(len(digests[0]))
                     if len({d[i] for d in digests}) > 1)
        return f"replicated variables differ between workers at step {first} (0: after " \
               "the session was made)"
    if case.mode == "hybrid":
        wrong = {n: d for n, d in chief["devices"].items()
                 if any(("/job:ps" in x) != (n == "emb") for x in d)}
        if wrong:
            return f"hybrid placed {wrong}: only the table 'emb' belongs on the ps"
        if chief["shared_state"]:
            return f"replicated variables' updates read state on the ps: " \
                   f"{chief['shared_state'][:3]}"
    if case.constrained:
        final = chief["final"]
        if np.abs(final["w_big"]).max() > 0.3 or final["w_bias"].min() < 0 or \
                np.linalg.norm(final["w_out"], axis=0).max() > 0.5 * (1 + 1e-6):
            return "the variables do not satisfy their constraints"
    if case.mode == "hybrid" and case.workers > 1:
        return None
    losses, final, step, steps_fetched = reference(case, cluster, chief["initial"])
    if step != chief["step"]:
        return f"global step {chief['step']}, the reference {step}"
    if case.workers == 1 and chief["steps_fetched"] != steps_fetched:
        # Fetched with the train op that increments it: the value it had where it was
        # read, in every mode as in one process.
        return f"the global step fetched with each train op {chief['steps_fetched']}, " \
               f"the reference's {steps_fetched}"
    exact = case.workers == 1 and case.mode != "sync" and not case.gpu
    tol = {"rtol": 1e-4, "atol": 1e-6} if case.gpu else {"rtol": 1e-5, "atol": 1e-7}
    for name in MODEL:
        got, want = chief["final"][name], final[name]
        if exact and not np.array_equal(got, want):
            return f"'{name}' differs from the reference (must be equal bit for bit), by up " \
                   f"to {np.max(np.abs(got - want)):.3g}"
        if not np.allclose(got, want, **tol):
            return f"'{name}' differs from the reference by up to " \
                   f"{np.max(np.abs(got - want)):.3g}"
    if case.workers == 1 and not np.allclose(chief["losses"], losses, **tol):
        return f"losses {chief['losses']} differ from the reference's {losses}"
    return None


def main(case_texts):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    workers_comm = MPI.COMM_WORLD.Split(0 if server.job_name == "worker" else 1,
                                        MPI.COMM_WORLD.Get_rank())
    num_ps = cluster.num_tasks("ps") if "ps" in cluster.jobs else 0
    workers = cluster.num_tasks("worker")
    failed = 0
    for text in case_texts:
        case = Case(text, num_ps, workers)
        if server.job_name == "worker":
            try:
                record = train_case(case, cluster, server)
            except Exception as exc:  # noqa: BLE001  (reported as the case's failure)
                record = {"error": f"{type(exc).__name__}: {exc}",
                          "tb": traceback.format_exc()}
            records = workers_comm.gather(record, root=0)
            if server.is_chief:
                errors = [r for r in records if "error" in r]
                why = errors[0]["error"] if errors else check(case, cluster, records)
                if errors:
                    sys.stderr.write(errors[0]["tb"])
                print(f"FAIL {text}: {why}" if why else f"OK {text}", flush=True)
                failed += why is not None
        server.join()                    # every rank is done with the case
        if server.is_chief:
            mf.Session.reset(server.target)
        server.join()                    # and every rank has forgotten it
    if server.is_chief and failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
