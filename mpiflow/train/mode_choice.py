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


class Link:
    """What a worker step's traffic and updates cost here, as measured (``measure``).

    allreduce_latency_s + allreduce_s_per_byte * bytes: one allreduce of that many bytes
    among the workers; message_latency_s + receive_s_per_byte * bytes: a worker's
    point-to-point exchange (with the other workers, or a pull or push with a ps);
    update_s_per_element: an optimizer's update of one element with no slot (each slot
    adds as much again).
    """

    FIELDS = ("allreduce_latency_s", "allreduce_s_per_byte", "message_latency_s",
              "receive_s_per_byte", "update_s_per_element")

    def __init__(self, allreduce_latency_s, allreduce_s_per_byte, message_latency_s,
                 receive_s_per_byte, update_s_per_element):
        self.allreduce_latency_s = float(allreduce_latency_s)
        self.allreduce_s_per_byte = float(allreduce_s_per_byte)
        self.message_latency_s = float(message_latency_s)
        self.receive_s_per_byte = float(receive_s_per_byte)
        self.update_s_per_element = float(update_s_per_element)

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
                f"{_rate(self.receive_s_per_byte)}, updates "
                f"{1e-6 / max(self.update_s_per_element, 1e-15):.0f} M elements/s")


class Prediction(NamedTuple):
    mode: str
    seconds: float          # what the mode adds to a worker step
    why: str                # where that time goes
    fits: bool              # its state fits a worker's share of memory


class Choice(NamedTuple):
    mode: str
    reason: str
    predictions: dict       # mode -> Prediction


def model_shape(grads_and_vars, slots: int) -> ModelShape:
    """The ``ModelShape`` of a model from its (gradient, variable) pairs: a variable with
    a sparse gradient is a table, and its lookups' batch says how many ids a step takes
    (``ASSUMED_IDS`` per lookup where that is not static)."""
    dense = table = row = ids = 0
    for grad, var in grads_and_vars:
        nbytes = var.shape.num_elements() * var.dtype.np_dtype.itemsize
        if isinstance(grad, IndexedSlices):
            table += nbytes
            row = max(row, int(np.prod(var.shape.as_list()[1:])) * var.dtype.np_dtype.itemsize)
            looked_up = grad.indices.shape.as_list()[:1]
            ids += looked_up[0] if looked_up and looked_up[0] is not None else ASSUMED_IDS
        else:
            dense += nbytes
    return ModelShape(dense, table, row, ids, slots)


def predict_seconds(mode: str, shape: ModelShape, workers: int, ps: int, link: Link,
                    memory_per_worker: float) -> Prediction:
    """What ``mode`` adds to a worker step of ``shape`` (see the module docstring)."""
    cost = predict(mode, shape, workers, ps if mode != "allreduce" else 0)
    update = link.update_s_per_element * (1 + shape.slots)
    fits = cost.worker_state <= memory_per_worker
    # A pull and a push with each ps a step (ps mode), or with each ps a table is on.
    exchanges = 2 * ps * link.message_latency_s if mode == "ps" or shape.table_bytes else 0
    if mode == "ps":
        worker = exchanges + link.receive_s_per_byte * (cost.worker_sent +
                                                        cost.worker_received)
        serving = workers * (link.receive_s_per_byte * (cost.ps_sent + cost.ps_received) +
                             update * cost.ps_applied)
        return Prediction(mode, max(worker, serving),
                          f"pulls and pushes {_ms(worker)}, the ps serving every worker "
                          f"{_ms(serving)}", fits)
    dense = link.allreduce_s(shape.dense_bytes)
    dense_share = allreduce_bytes(shape.dense_bytes, workers)
    applied = update * cost.worker_applied
    if mode == "allreduce":     # the other workers' rows come in an allgather
        rows = link.receive_s_per_byte * (cost.worker_received - dense_share) + \
            (link.message_latency_s if shape.table_bytes else 0.0)
        return Prediction(mode, dense + rows + applied,
                          f"allreduce {_ms(dense)}, others' rows {_ms(rows)}, updates "
                          f"{_ms(applied)}", fits)
    rows = exchanges + link.receive_s_per_byte * (cost.worker_sent + cost.worker_received -
                                                  2 * dense_share)
    serving = workers * (link.receive_s_per_byte * (cost.ps_sent + cost.ps_received) +
                         update * cost.ps_applied)
    return Prediction(mode, max(dense + rows + applied, serving),
                      f"allreduce {_ms(dense)}, rows to and from the ps {_ms(rows)}, "
                      f"updates {_ms(applied)}, the ps serving every worker "
                      f"{_ms(serving)}", fits)


def choose(shape: ModelShape, workers: int, ps: int, link: Link, memory_per_worker: float,
           candidates=CANDIDATES) -> Choice:
    """The mode of ``candidates`` that adds least to a step and fits, with the reason."""
    possible = [m for m in candidates if ps or m == "allreduce"]
    if not shape.table_bytes:
        possible = [m for m in possible if m != "hybrid"] or possible
    if not possible:
        raise errors.InvalidArgumentError(
            f"TrainingMode('auto', candidates={tuple(candidates)!r}): the launch made no ps "
            "task, so only allreduce can run")
    predictions = {m: predict_seconds(m, shape, workers, ps, link, memory_per_worker)
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
    if ps == 0:
        reason.append("the launch made no ps task")
    if not shape.table_bytes and "hybrid" in candidates and ps:
        reason.append("no table (no variable with a sparse gradient): hybrid would be "
                      "allreduce")
    return Choice(best.mode, "; ".join(reason), predictions)


def measure(comm, nbytes: int, timeout: float | None = None) -> Link:
    """Measure a ``Link`` among the ranks of ``comm`` (every rank calls it; rank 0's
    figures are returned on all of them, so every rank decides alike)."""
    from mpiflow.comm.collectives import MpiCollective, get_collective  # noqa: PLC0415

    nbytes = int(min(max(nbytes, _SMALL_BYTES), _PROBE_CAP_BYTES))
    size = comm.Get_size() if comm is not None else 1
    update = _update_seconds_per_element()
    if size == 1:
        copy = _copy_seconds_per_byte(nbytes)
        link = Link(0.0, copy, 0.0, copy, update)
    else:
        small = np.zeros(_SMALL_BYTES // 4, np.float32)
        big = np.zeros(nbytes // 4, np.float32)
        reduce = get_collective("auto", comm, big)
        latency = _best_of(lambda: get_collective("auto", comm, small).allreduce(
            small, out=small, name="mode_probe_small", timeout=timeout))
        whole = _best_of(lambda: reduce.allreduce(big, out=big, name="mode_probe",
                                                  timeout=timeout))
        gather = MpiCollective(comm)

        def gathering(part, name):
            return _best_of(lambda: gather.allgather(part, name=name, timeout=timeout))
        message = gathering(np.zeros(8, np.uint8), "mode_probe_message")
        part = np.zeros(nbytes // size, np.uint8)
        gathered = gathering(part, "mode_probe_gather")
        link = Link(latency, max(whole - latency, 0.0) / nbytes, message,
                    max(gathered - message, 0.0) / max(part.nbytes * (size - 1), 1), update)
    if size > 1:
        figures = link.as_array()
        MpiCollective(comm).broadcast(figures, root=0, name="mode_probe_figures",
                                      timeout=timeout)
        link = Link.from_array(figures)
    return link


def memory_per_worker() -> float:
    """This rank's share of its node's available memory for model state."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return float("inf")
    return MEMORY_SHARE * available / backend.ranks_on_node()


def _update_seconds_per_element() -> float:
    """An SGD update (``v -= lr * g``) of a million float32 elements, per element."""
    v, g, t = (np.ones(1 << 20, np.float32) for _ in range(3))

    def update():
        np.multiply(g, np.float32(0.1), out=t)
        np.subtract(v, t, out=v)
    return _best_of(update) / v.size


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


def _rate(seconds_per_byte: float) -> str:
    return f"{1e-9 / max(seconds_per_byte, 1e-18):.2f} GB/s"


__all__ = ["ASSUMED_IDS", "CANDIDATES", "Choice", "Link", "Prediction", "choose",
           "measure", "memory_per_worker", "model_shape", "predict_seconds"]
