"""What a training mode costs per worker step: bytes on the wire, model state held, and
elements updated, as functions of the worker count, the dense size and the rows a batch
touches. It says why a mode wins on a model (and predicts clusters larger than the one at
hand); ``benchmarks/hybrid_cost.py`` checks it against what ``mpiflow.comm.traffic``
measures.

How each mode moves a step (as mpiflow runs it):
- ``ps``: a worker pulls every dense variable (D) and the rows its ids touch from the
  tables (the gather runs on the ps: ids go there, rows come back), and pushes the dense
  gradients and the rows' gradients (values and indices). The ps holds the model and its
  optimizer slots and applies every worker's push.
- ``allreduce``: every worker holds the whole model; dense gradients are allreduced
  (2 (W-1)/W D each way), table gradients all-gathered (each worker receives the other
  workers' rows and indices) and every worker applies all of them.
- ``hybrid``: dense variables as in allreduce, tables as in ps mode: the workers hold only
  the dense part, the ps only the tables.

Counted in bytes (ids are int64); headers and control messages (a few hundred bytes a
step) are left out. State is the variables and their optimizer slots, not activations nor
the runtime's own memory.
"""

from __future__ import annotations

from typing import NamedTuple

from mpiflow import errors
from mpiflow.comm.traffic import allreduce_bytes

ID_BYTES = 8


class ModelShape(NamedTuple):
    """What the cost of a step depends on.

    dense_bytes: every variable that is not a table; table_bytes: the tables;
    row_bytes: one table row; ids_per_step: ids one worker's batch looks up in the tables
    (batch x fields, repeats included: a gather returns a row per id);
    slots: optimizer slots per variable (SGD 0, Adagrad and Momentum 1, Adam 2).
    """

    dense_bytes: int
    table_bytes: int
    row_bytes: int
    ids_per_step: int
    slots: int


class StepCost(NamedTuple):
    """One worker step's cost in a mode (bytes and elements; ps figures per ps)."""

    worker_sent: int
    worker_received: int
    ps_sent: int            # each ps, for one worker step (the workers' pushes spread out)
    ps_received: int
    ps_load: int            # bytes through each ps for one step of every worker
    worker_state: int       # variables + slots one worker holds
    ps_state: int           # variables + slots each ps holds
    worker_applied: int     # elements one worker updates per step
    ps_applied: int         # elements each ps updates for one worker step
    # Of those, the table rows' elements: a sparse update (duplicates summed, rows
    # gathered and scattered back) costs more per element than a dense one.
    worker_rows_applied: int = 0
    ps_rows_applied: int = 0


def predict(mode: str, shape: ModelShape, workers: int, ps: int) -> StepCost:
    """The cost of one worker step of ``shape`` trained in ``mode`` by ``workers`` workers
    and ``ps`` ps tasks (0 in allreduce mode)."""
    if workers < 1 or ps < 0 or (mode != "allreduce" and ps < 1):
        raise errors.InvalidArgumentError(
            f"mode_cost.predict({mode!r}): expected workers >= 1 and ps >= 1 (0 for "
            f"allreduce), got workers={workers}, ps={ps}")
    d, n, r = shape.dense_bytes, shape.ids_per_step, shape.row_bytes
    kept = 1 + shape.slots
    rows_pulled = n * r                              # a row per id comes back
    rows_pushed = n * (r + ID_BYTES)                 # their gradients: values and indices
    ids_sent = n * ID_BYTES                          # the ids go to the gather on the ps
    if mode == "ps":
        sent, received = d + ids_sent + rows_pushed, d + rows_pulled
        worker_state, ps_state = 0, (d + shape.table_bytes) * kept // ps
        worker_applied, ps_applied = 0, (d + rows_pulled) // 4 // ps
        return _with_ps(sent, received, workers, ps, worker_state, ps_state,
                        worker_applied, ps_applied, ps_rows=rows_pulled // 4 // ps)
    dense = allreduce_bytes(d, workers)
    if mode == "allreduce":
        gathered = (workers - 1) * rows_pushed
        moved = dense + gathered
        return StepCost(moved, moved, 0, 0, 0, (d + shape.table_bytes) * kept, 0,
                        (d + workers * rows_pulled) // 4, 0,
                        worker_rows_applied=workers * rows_pulled // 4)
    if mode == "hybrid":
        sent, received = dense + ids_sent + rows_pushed, dense + rows_pulled
        return _with_ps(sent, received, workers, ps, d * kept,
                        shape.table_bytes * kept // ps, d // 4, rows_pulled // 4 // ps,
                        through_ps=(ids_sent + rows_pushed, rows_pulled),
                        ps_rows=rows_pulled // 4 // ps)
    raise errors.InvalidArgumentError(
        f"mode_cost.predict: unknown mode {mode!r}, expected ps, allreduce or hybrid")


def _with_ps(sent, received, workers, ps, worker_state, ps_state, worker_applied,
             ps_applied, through_ps=None, ps_rows=0) -> StepCost:
    """A cost whose ps traffic is what the workers send to and get from the ps tasks
    (``through_ps``: (to, from) the ps; default everything)."""
    to_ps, from_ps = through_ps or (sent, received)
    ps_received, ps_sent = to_ps // ps, from_ps // ps
    return StepCost(sent, received, ps_sent, ps_received,
                    workers * (ps_sent + ps_received), worker_state, ps_state,
                    worker_applied, ps_applied, ps_rows_applied=ps_rows)


__all__ = ["ModelShape", "StepCost", "predict"]
