"""TrainingMode("auto"): which of ps, allreduce and hybrid to train a model in, and why.

The choice waits for the gradients (``minimize``): only they say which variables are
tables (a sparse gradient) and how many rows a batch touches. It weighs, for the model at
hand (``mode_cost.ModelShape``) and the launch's workers and ps tasks:

- what each mode moves and updates per worker step (``mode_cost.predict``), priced with a
  ``Link`` measured among the workers just then: the time of an allreduce of the dense
  gradients' size, the rate at which a worker receives the others' bytes (an allgather:
  the rate of point-to-point traffic, which the ps's pulls and pushes take too), and the
  rate of an optimizer update on this rank;
- that a ps serves every worker: in ps and hybrid mode a step waits for the slower of the
  worker's own traffic and the ps's share of all workers' pulls, pushes and updates;
- a node with more working ranks than cores: there every rank's work shares the cores,
  and a round of steps takes the work of every worker and ps over the cores; but a ps,
  one process serving every worker, gets only its share of them, so a step also waits
  for its work for all the workers at that share; allreduce mode leaves the launch's ps
  ranks idle, so its workers may have the cores to themselves;
- memory: a mode whose state (variables and slots) would not fit a worker's share of its
  node's available memory is left out (allreduce with a big table).

The forward and backward pass cost the same in every mode, so they are left out of the
comparison: a prediction is the time a mode adds to a worker step. Worker 0 measures and
decides, and tells the other workers (every worker must build the same mode).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from mpiflow import backend, errors
from mpiflow.comm.traffic import allreduce_bytes
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.train.mode_cost import ModelShape, predict

CANDIDATES = ("ps", "allreduce", "hybrid")
# Ids a step is taken to look up where a lookup's batch size is not static.
ASSUMED_IDS = 1024
# Share of a node's available memory a worker's model state may take.
MEMORY_SHARE = 0.5
_PROBE_CAP_BYTES = 16 << 20      # the largest allreduce the probe times
_SMALL_BYTES = 4096
# What another number of ps tasks must save of a step's added time to be suggested.
PS_ADVICE_GAIN = 0.1
_PS_ADVICE_MAX = 256        # the most ps tasks weighed


class Link:
    """What a worker step's traffic and updates cost here, as measured (``measure``).

    allreduce_latency_s + allreduce_s_per_byte * bytes: one allreduce of that many bytes
    among the workers; message_latency_s + receive_s_per_byte * bytes: a worker's
    point-to-point exchange (with the other workers, or a pull or push with a ps);
    update_s_per_element: an optimizer's update of one element with no slot (each slot
    adds as much again). row_update_s_per_element: a sparse update's, per element of the
    rows a batch touches, with the model's slots (the duplicates summed, the rows of the
    table and of each slot gathered, updated and scattered back: several times a dense
    element's). ps_round_trip_s + ps_s_per_byte * bytes: a step's exchange with a ps
    through mpiflow's own ps path (a session's run, the ps's service; every worker asking
    at once), where there is a ps (else the point-to-point figures stand in).
    ps_busy_round_trip_s: the same round trip while every worker computes, as in
    training, on average: where the ps shares cores with the workers it must first get
    one back (2 cores, 2 workers: 0.1-3.5 ms each, about 1.6 ms on average, against
    120 us idle).
    """

    FIELDS = ("allreduce_latency_s", "allreduce_s_per_byte", "message_latency_s",
              "receive_s_per_byte", "update_s_per_element", "ps_round_trip_s",
              "ps_s_per_byte", "row_update_s_per_element", "ps_busy_round_trip_s")

    def __init__(self, allreduce_latency_s, allreduce_s_per_byte, message_latency_s,
                 receive_s_per_byte, update_s_per_element, ps_round_trip_s=None,
                 ps_s_per_byte=None, row_update_s_per_element=None,
                 ps_busy_round_trip_s=None):
        self.allreduce_latency_s = float(allreduce_latency_s)
        self.allreduce_s_per_byte = float(allreduce_s_per_byte)
        self.message_latency_s = float(message_latency_s)
        self.receive_s_per_byte = float(receive_s_per_byte)
        self.update_s_per_element = float(update_s_per_element)
        self.ps_round_trip_s = float(message_latency_s if ps_round_trip_s is None
                                     else ps_round_trip_s)
        self.ps_s_per_byte = float(receive_s_per_byte if ps_s_per_byte is None
                                   else ps_s_per_byte)
        # Not measured: taken as a dense update's with no slot, and as the idle round trip.
        self.row_update_s_per_element = float(
            update_s_per_element if row_update_s_per_element is None
            else row_update_s_per_element)
        self.ps_busy_round_trip_s = float(
            self.ps_round_trip_s if ps_busy_round_trip_s is None else ps_busy_round_trip_s)

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f) for f in self.FIELDS], np.float64)

    @classmethod
    def from_array(cls, values) -> "Link":
        return cls(*(float(v) for v in values))

    def allreduce_s(self, nbytes: int) -> float:
        return self.allreduce_latency_s + self.allreduce_s_per_byte * nbytes if nbytes else 0.0

    def describe(self) -> str:
        return (f"allreduce {self.allreduce_latency_s * 1e6:.0f} us + "
                f"{_rate(self.allreduce_s_per_byte)}, point-to-point "
                f"{self.message_latency_s * 1e6:.0f} us + "
                f"{_rate(self.receive_s_per_byte)}, through a ps "
                f"{self.ps_round_trip_s * 1e6:.0f} us + {_rate(self.ps_s_per_byte)} "
                f"({self.ps_busy_round_trip_s * 1e6:.0f} us while the workers compute), "
                f"updates {_rate(self.update_s_per_element, 1e-6, 'M elements/s')}, "
                f"{_rate(self.row_update_s_per_element, 1e-6, 'M row elements/s')}")


class Prediction(NamedTuple):
    mode: str
    seconds: float          # what the mode adds to a worker step
    why: str                # where that time goes
    fits: bool              # its state fits a worker's share of memory


class Choice(NamedTuple):
    mode: str
    reason: str
    predictions: dict       # mode -> Prediction
    # the number of ps tasks that would serve the chosen mode best, where it differs
    # enough from the launch's (``better_ps_count``); None: the launch's count will do
    ps_advice: int | None = None


def model_shape(grads_and_vars, slots: int, ids_per_step: int | None = None) -> ModelShape:
    """The ``ModelShape`` of a model from its (gradient, variable) pairs: a variable with
    a sparse gradient is a table, and its lookups' batch says how many ids a step takes
    (``ASSUMED_IDS`` per lookup where that is not static). ``ids_per_step``: the ids a
    step looks up in every table together, as the user knows them (a batch dimension of
    None says nothing); it takes the place of the lookups' count."""
    dense = table = row = ids = 0
    assumed_for = set()     # the tables (a partitioned one once) priced at ASSUMED_IDS
    for grad, var in grads_and_vars:
        nbytes = var.shape.num_elements() * var.dtype.np_dtype.itemsize
        if isinstance(grad, IndexedSlices):
            table += nbytes
            row = max(row, int(np.prod(var.shape.as_list()[1:])) * var.dtype.np_dtype.itemsize)
            looked_up = grad.indices.shape.as_list()[:1]
            if looked_up and looked_up[0] is not None:
                ids += looked_up[0]
            else:
                part_of = getattr(var, "_save_slice_info", None)
                whole = part_of.full_name if part_of is not None else var.name
                if whole not in assumed_for:
                    assumed_for.add(whole)
                    ids += ASSUMED_IDS
        else:
            dense += nbytes
    if ids_per_step is not None and table:
        ids = int(ids_per_step)
    return ModelShape(dense, table, row, ids, slots)


def predict_seconds(mode: str, shape: ModelShape, workers: int, ps: int, link: Link,
                    memory_per_worker: float, node: tuple | None = None) -> Prediction:
    """What ``mode`` adds to a worker step of ``shape`` (see the module docstring).

    ``node``: (ranks of the job on this node, its cores). Where the ranks that work in
    ``mode`` outnumber the cores (allreduce leaves the ps ranks idle), every rank's work
    shares them, so a step takes the work of all the workers and ps tasks over the cores
    instead of the slower of worker and ps.
    """
    cost = predict(mode, shape, workers, ps if mode != "allreduce" else 0)
    fits = cost.worker_state <= memory_per_worker
    # A step's two exchanges (pull and push; hybrid: lookup and push) with each ps (ps
    # mode), or with each ps a table is on: round trips taken while the workers compute.
    waits = 2 * ps * link.ps_busy_round_trip_s if mode == "ps" or (
        mode == "hybrid" and shape.table_bytes) else 0.0
    dense_share = allreduce_bytes(shape.dense_bytes, workers)
    if mode == "ps":
        work = link.ps_s_per_byte * (cost.worker_sent + cost.worker_received)
        parts = f"round trips to the ps {_ms(waits)}, pulls and pushes {_ms(work)}"
    else:
        dense = link.allreduce_s(shape.dense_bytes)
        applied = _update_s(link, shape, cost.worker_applied, cost.worker_rows_applied)
        if mode == "allreduce":     # the other workers' rows come in an allgather
            rows = link.receive_s_per_byte * (cost.worker_received - dense_share) + \
                (link.message_latency_s if shape.table_bytes else 0.0)
            what = "others' rows"
        else:
            rows = link.ps_s_per_byte * (
                cost.worker_sent + cost.worker_received - 2 * dense_share)
            what = f"round trips to the ps {_ms(waits)}, rows to and from it"
        work = dense + rows + applied
        parts = f"allreduce {_ms(dense)}, {what} {_ms(rows)}, updates {_ms(applied)}"
    # each ps's, per worker step (allreduce: 0)
    ps_updates = _update_s(link, shape, cost.ps_applied, cost.ps_rows_applied)
    # Each ps's work for every worker's step: its share of the bytes and its updates.
    serving = workers * (link.ps_s_per_byte * (cost.ps_sent + cost.ps_received) + ps_updates)
    crowding = _crowding(mode, workers, ps, node)
    if crowding is not None:
        # The ps's side of a transfer is in the time measured through it already (it
        # spans both processes): only the ps's updates are added. A round trip's wait
        # is no work: the cores go on with the others' meanwhile.
        working = workers if mode == "allreduce" else workers + ps
        seconds = workers * (work + ps * ps_updates) * crowding / working + waits
        why = f"{parts}; on {crowding:.1f} ranks per core, a step waits for every rank's work"
        # But a ps is one process: it serves every worker in turn on its share of the
        # cores, so its work for all of them, at that share, bounds a step (2 cores, 4
        # workers and a ps, a table and 8.5 MiB of dense variables with Adagrad: ps mode
        # 0.71 of hybrid's steps/s where its work spread over the cores priced them
        # alike).
        if mode != "allreduce" and serving * crowding > seconds:
            seconds = serving * crowding
            why += (f", and the ps serving every worker on its share of the cores "
                    f"{_ms(seconds)}")
        return Prediction(mode, seconds, why, fits)
    if mode != "allreduce":
        parts += f", the ps serving every worker {_ms(serving)}"
    return Prediction(mode, max(work + waits, serving), parts, fits)


def _update_s(link: Link, shape: ModelShape, applied: int, rows_applied: int) -> float:
    """Seconds to update ``applied`` elements, ``rows_applied`` of them in table rows."""
    dense = (applied - rows_applied) * link.update_s_per_element * (1 + shape.slots)
    return dense + rows_applied * link.row_update_s_per_element


def choose(shape: ModelShape, workers: int, ps: int, link: Link, memory_per_worker: float,
           candidates=CANDIDATES, node: tuple | None = None) -> Choice:
    """The mode of ``candidates`` that adds least to a step and fits, with the reason."""
    possible = [m for m in candidates if ps or m == "allreduce"]
    if not shape.table_bytes:
        possible = [m for m in possible if m != "hybrid"] or possible
    if not possible:
        raise errors.InvalidArgumentError(
            f"TrainingMode('auto', candidates={tuple(candidates)!r}): the launch made no ps "
            "task, so only allreduce can run")
    predictions = {m: predict_seconds(m, shape, workers, ps, link, memory_per_worker, node)
                   for m in possible}
    fitting = [p for p in predictions.values() if p.fits] or list(predictions.values())
    best = min(fitting, key=lambda p: p.seconds)
    left_out = [p.mode for p in predictions.values() if not p.fits]
    others = "; ".join(f"{p.mode} {_ms(p.seconds)}" for p in predictions.values()
                       if p is not best and p.fits)
    reason = [f"{best.mode} adds the least to a step: {_ms(best.seconds)} ({best.why})"]
    if others:
        reason.append(f"against {others}")
    if left_out:
        reason.append(f"{', '.join(left_out)} left out: a worker's state would not fit "
                      f"its {memory_per_worker / 2 ** 20:.0f} MiB share of memory")
    if shape.table_bytes:
        reason.append(f"{shape.ids_per_step} ids a step looked up in the tables (a lookup "
                      f"of unknown batch counts {ASSUMED_IDS}: TrainingMode's ids_per_step "
                      f"says how many)")
    if ps == 0:
        reason.append("the launch made no ps task")
    elif best.mode == "allreduce":
        reason.append(f"the launch's {ps} ps task(s) will only wait: launch with --ps 0 "
                      f"(MPIFLOW_PS=0) to make them workers")
    if not shape.table_bytes and "hybrid" in candidates and ps:
        reason.append("no table (no variable with a sparse gradient): hybrid would be "
                      "allreduce")
    better = better_ps_count(best, shape, workers, ps, link, memory_per_worker, node)
    if better is not None:
        count, seconds = better
        reason.append(f"with {count} ps task(s) instead of the launch's {ps}, {best.mode} "
                      f"would add {_ms(seconds)} a step: the ps tasks are fixed at launch, "
                      f"before the model exists, so launch with --ps {count} "
                      f"(MPIFLOW_PS={count}) to have them")
    return Choice(best.mode, "; ".join(reason), predictions,
                  None if better is None else better[0])


def better_ps_count(chosen: Prediction, shape: ModelShape, workers: int, ps: int,
                    link: Link, memory_per_worker: float, node: tuple | None = None):
    """``(ps tasks, seconds)``: the number of ps tasks (1 up to one per worker) with which
    the ``chosen`` mode (ps or hybrid) would add least to a step, and that time, where it
    saves at least PS_ADVICE_GAIN of the launch's ``ps``; else None.

    More ps tasks split the serving of every worker (a step waits for the slower of the
    worker and its ps) but add a round trip each, and each is a rank that computes no
    step. On a node with more working ranks than cores there is no advice: ps ranks
    added there share the same cores, and what they cost the workers' compute is not in
    the model.
    """
    if chosen.mode == "allreduce" or not ps or \
            _crowding(chosen.mode, workers, ps, node) is not None:
        return None
    seconds = {count: predict_seconds(chosen.mode, shape, workers, count, link,
                                      memory_per_worker).seconds
               for count in range(1, min(max(workers, ps), _PS_ADVICE_MAX) + 1)}
    count = min(seconds, key=lambda c: (seconds[c], c))
    if count == ps or seconds[count] > (1 - PS_ADVICE_GAIN) * chosen.seconds:
        return None
    return count, seconds[count]


def measure(comm, nbytes: int, timeout: float | None = None, ps_task: int | None = None,
            target: str = "", shape: ModelShape | None = None) -> Link:
    """Measure a ``Link`` among the ranks of ``comm`` (every rank calls it; rank 0's
    figures are returned on all of them, so every rank decides alike), and with
    ``ps_task``, the path to that ps through this process's server (``target``). With a
    ``shape`` that has tables, its sparse update is timed (its rows' width, its ids per
    step, its slots)."""
    from mpiflow.comm.collectives import MpiCollective, get_collective  # noqa: PLC0415

    nbytes = int(min(max(nbytes, _SMALL_BYTES), _PROBE_CAP_BYTES))
    size = comm.Get_size() if comm is not None else 1
    pairs = None
    if size == 1:
        copy = _copy_seconds_per_byte(nbytes)
        link = Link(0.0, copy, 0.0, copy, _update_seconds_per_element())
    else:
        small = np.zeros(_SMALL_BYTES // 4, np.float32)
        big = np.zeros(nbytes // 4, np.float32)
        reduce = get_collective("auto", comm, big)
        latency = _best_of(lambda: get_collective("auto", comm, small).allreduce(
            small, out=small, name="mode_probe_small", timeout=timeout))
        whole = _best_of(lambda: reduce.allreduce(big, out=big, name="mode_probe",
                                                  timeout=timeout))
        pairs = comm.Dup()      # every rank is here: the allreduces above returned
    try:
        if pairs is not None:
            message = _exchange_seconds(pairs, 8, timeout)
            exchanged = _exchange_seconds(pairs, nbytes, timeout)
            update = _on_rank_0_alone(pairs, _update_seconds_per_element, timeout)
            link = Link(latency, max(whole - latency, 0.0) / nbytes, message,
                        max(exchanged - message, 0.0) / nbytes, update or 0.0)
        if ps_task is not None:
            link.ps_round_trip_s, link.ps_s_per_byte, link.ps_busy_round_trip_s = \
                _through_ps(target, ps_task, nbytes, pairs, timeout)
        if shape is not None and shape.table_bytes and shape.row_bytes:
            link.row_update_s_per_element = _on_rank_0_alone(
                pairs, lambda: _row_update_seconds_per_element(
                    shape.row_bytes // 4, shape.ids_per_step, shape.slots),
                timeout) or 0.0
    finally:
        if pairs is not None:
            pairs.Free()
    if size > 1:
        figures = link.as_array()
        MpiCollective(comm).broadcast(figures, root=0, name="mode_probe_figures",
                                      timeout=timeout)
        link = Link.from_array(figures)
    return link


def this_node() -> tuple:
    """(ranks of the job on this node, the processors they may run on in all)."""
    return backend.ranks_on_node(), backend.node_cpus()


def _crowding(mode: str, workers: int, ps: int, node) -> float | None:
    """Working ranks per core on this node where they outnumber its cores (the ps ranks
    of the launch, taken as spread like the workers, idle in allreduce mode)."""
    if node is None:
        return None
    ranks, cores = node
    working = ranks * workers / (workers + ps) if mode == "allreduce" else ranks
    return working / cores if working > cores else None


def memory_per_worker() -> float:
    """This rank's share of its node's available memory for model state."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return float("inf")
    return MEMORY_SHARE * available / backend.ranks_on_node()


def _exchange_seconds(comm, nbytes: int, timeout: float | None) -> float:
    """Each rank sends ``nbytes`` to the next and receives as many from the one before
    (a pull or push of that size, every rank at once): the best of a few, in seconds."""
    from mpi4py import MPI  # noqa: PLC0415

    from mpiflow import config  # noqa: PLC0415

    rank, size = comm.Get_rank(), comm.Get_size()
    sent, received = np.zeros(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    limit = timeout if timeout is not None else config.get("MPIFLOW_TIMEOUT")

    def once():
        requests = [comm.Irecv(received, (rank - 1) % size, 0),
                    comm.Isend(sent, (rank + 1) % size, 0)]
        deadline = time.monotonic() + limit
        while not MPI.Request.Testall(requests):
            if time.monotonic() > deadline:
                raise errors.DeadlineExceededError(
                    f"TrainingMode('auto'): the link probe between workers {rank} and "
                    f"{(rank - 1) % size}/{(rank + 1) % size} did not finish in {limit} s")
            time.sleep(0)
    return _best_of(once)


# The busy round trip: a burst of numpy work (as a step's compute) before each of them.
# Where the ps shares the cores, one takes 0.1-3.5 ms as the scheduler happens to give
# the ps a core (2 workers on 2 cores): the mean of many, what a step pays on average,
# not the median of a few (5 of them gave 0.35 ms in one launch and 2.8 ms in the next,
# and auto's choice between hybrid and allreduce flipped with it).
_BUSY_BURST_S = 2e-3
_BUSY_ROUND_TRIPS = 21


def _on_rank_0_alone(comm, measure, timeout: float | None):
    """``measure()`` on rank 0 of ``comm`` while the other ranks sleep; its result there,
    None on the others. A rate measured on every rank at once would be of ranks sharing
    the cores (half of one each, 4 ranks on 2), which the model prices itself."""
    if comm is not None:        # the others done with what they did before
        _sleep_at_barrier(comm, timeout)
    result = measure() if comm is None or comm.Get_rank() == 0 else None
    if comm is not None:
        _sleep_at_barrier(comm, timeout)
    return result


def _sleep_at_barrier(comm, timeout: float | None) -> None:
    """Every rank of ``comm`` here, each sleeping meanwhile (not polling a core away)."""
    from mpiflow import config  # noqa: PLC0415

    limit = timeout if timeout is not None else config.get("MPIFLOW_TIMEOUT")
    request = comm.Ibarrier()
    deadline = time.monotonic() + limit
    while not request.Test():
        if time.monotonic() > deadline:
            raise errors.DeadlineExceededError(
                f"TrainingMode('auto'): worker {comm.Get_rank()} waited {limit} s for the "
                f"other workers between the probe's measurements")
        time.sleep(2e-4)


def _through_ps(target: str, task: int, nbytes: int, workers=None,
                timeout: float | None = None) -> tuple[float, float, float]:
    """A session's run that reads a tensor from ps ``task`` (and one that sends it one),
    as a ps step's pull (and push) does: (seconds of a tiny one, seconds per byte, the
    mean seconds of a tiny one right after a burst of work). The first two are timed
    by the first of the ``workers`` (a communicator) alone, the ps serving only it; the
    last by every worker at once, each bursting as their steps' compute does."""
    import mpiflow as mf  # noqa: PLC0415  (mpiflow.train is imported by mpiflow)

    graph = mf.Graph()
    with graph.as_default():
        with graph.device(f"/job:ps/task:{task}"):
            tiny = mf.zeros([1], name="mode_probe_tiny")
            pulled = mf.zeros([nbytes // 4], name="mode_probe_pulled")
        fed = mf.placeholder(mf.float32, [nbytes // 4], name="mode_probe_fed")
        with graph.device(f"/job:ps/task:{task}"):
            pushed = mf.reduce_sum(fed, name="mode_probe_pushed")
        sent = np.zeros(nbytes // 4, np.float32)
        with mf.Session(target or "mode-probe", graph=graph) as sess:
            def alone():
                return (_best_of(lambda: sess.run(tiny)), _best_of(lambda: sess.run(pulled)),
                        _best_of(lambda: sess.run(pushed, {fed: sent})))
            round_trip, pull, push = _on_rank_0_alone(workers, alone, timeout) or (0, 0, 0)
            busy = _after_work(lambda: sess.run(tiny))
    # Both big runs include a tiny one's round trip. A tiny run measured slower than
    # either met a busy ps: taken as it was, it would leave nothing per byte (a link
    # of no cost, and ps mode chosen for any size).
    round_trip = min(round_trip, pull, push)
    return (round_trip, (pull + push - 2 * round_trip) / (2 * sent.nbytes),
            max(busy, round_trip))


def _after_work(call) -> float:
    """The mean seconds of ``call`` right after ``_BUSY_BURST_S`` of numpy work."""
    work = np.ones((128, 128), np.float32)
    times = []
    for _ in range(_BUSY_ROUND_TRIPS):
        until = time.perf_counter() + _BUSY_BURST_S
        while time.perf_counter() < until:
            work @ work
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.mean(times))


def _update_seconds_per_element() -> float:
    """An SGD update (``v -= lr * g``) of 8 Mi float32 elements (more than a cache holds,
    as a model's variables are), per element."""
    v, g, t = (np.ones(1 << 23, np.float32) for _ in range(3))

    def update():
        np.multiply(g, np.float32(0.1), out=t)
        np.subtract(v, t, out=v)
    return _best_of(update) / v.size


# The sparse update probe's table: large enough to leave the caches as a model's does.
_ROW_PROBE_TABLE_BYTES = 32 << 20
_ROW_PROBE_MAX_IDS = 1 << 16
_ROW_PROBE_SKEW = 1.2


def _row_update_seconds_per_element(row_elements: int, ids: int, slots: int) -> float:
    """A sparse update as the optimizers run it (``SparseApply*``: duplicates summed, the
    touched rows of the table and of each slot gathered, updated, scattered back) of
    ``ids`` ids into float32 rows of ``row_elements``, per element of its gradient
    (``ids x row_elements``). The ids are skewed as lookups of an embedding usually are
    (Zipf, exponent ``_ROW_PROBE_SKEW``: a few rows take most of them), which sets how
    many rows the gather and scatter touch; evenly spread ids cost about twice as much."""
    from mpiflow.ops.training_ops import sum_duplicates  # noqa: PLC0415

    row_elements = max(int(row_elements), 1)
    ids = int(min(max(ids, 1), _ROW_PROBE_MAX_IDS))
    rows = max(ids, _ROW_PROBE_TABLE_BYTES // (4 * row_elements))
    tables = [np.ones((rows, row_elements), np.float32) for _ in range(1 + slots)]
    picked = (np.random.default_rng(0).zipf(_ROW_PROBE_SKEW, ids) - 1) % rows
    grad = np.ones((ids, row_elements), np.float32)

    def update():
        summed, unique = sum_duplicates(np, grad, picked)
        touched = [table[unique] for table in tables]
        for slot in touched[1:]:
            slot += summed
        touched[0] -= np.float32(0.1) * summed
        for table, values in zip(tables, touched):
            table[unique] = values
    return _best_of(update) / grad.size


def _copy_seconds_per_byte(nbytes: int) -> float:
    src, dst = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    return _best_of(lambda: np.copyto(dst, src)) / nbytes


def _best_of(call, repeats: int = 3) -> float:
    call()      # warm: first touches, plans
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _rate(seconds_per_unit: float, scale: float = 1e-9, unit: str = "GB/s") -> str:
    """A measured cost per byte (element) as a rate; a cost of 0 was not measured (no ps
    in the launch, one rank alone) and says so instead of an infinite rate."""
    if seconds_per_unit <= 0:
        return "(not measured)"
    return f"{scale / seconds_per_unit:.{2 if unit == 'GB/s' else 0}f} {unit}"


__all__ = ["ASSUMED_IDS", "CANDIDATES", "Choice", "Link", "PS_ADVICE_GAIN", "Prediction",
           "better_ps_count", "choose", "this_node",
           "measure", "memory_per_worker", "model_shape", "predict_seconds"]
