"""Placement: give every op a full device of the cluster, or say why it cannot have one.

Rules, in order: an op in a colocation group (``loc:@name``) takes the device of the op it
names; an op that writes a variable in place takes the variable's device; everything else
keeps what device scopes and functions gave it, with unspecified fields filled from the
session's own task (job, replica 0, task, CPU:0). GPU devices are kept: the rank that
runs the op binds its GPU (``backend``).
"""

from __future__ import annotations

import sys

from mpiflow import backend, errors
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.ops.registry import get_op_def


class Placer:
    """Computes and caches full devices for the ops of one graph in one cluster."""

    def __init__(self, graph, cluster, job: str, task: int, allow_soft_placement=False,
                 log=None, who: str = ""):
        self._who = who or f"/job:{job}/task:{task}"
        self._graph = graph
        self._cluster = cluster
        self._job = job
        self._task = task
        self._soft = allow_soft_placement
        self._log = log
        self._devices = {}

    def task_of(self, op):
        """Return ``(job, task)`` of ``op``'s placed device."""
        spec = self.device_of(op)
        return spec.job, spec.task

    def device_of(self, op) -> DeviceSpec:
        spec = self._devices.get(op)
        if spec is None:
            spec = self._place(op, set())
        return spec

    def _place(self, op, visiting):
        if op in visiting:
            raise errors.PlacementError(
                f"Colocation constraints of op '{op.name}' ({op.type}) form a cycle", op)
        visiting.add(op)
        anchor = self._anchor(op)
        if anchor is not None and anchor is not op:
            spec = self.device_of(anchor) if anchor in self._devices else \
                self._place(anchor, visiting)
        else:
            spec = self._complete(op)
        self._devices[op] = spec
        if self._log is not None:
            self._log(op, spec.to_string())
        return spec

    def _anchor(self, op):
        """The op whose device ``op`` must share: its colocation root or its variable."""
        refs = get_op_def(op.type).ref_inputs
        if refs:
            return op.inputs[refs[0]].op
        for group in op.colocation_groups():
            name = group[len("loc:@"):]
            if name != op.name:
                try:
                    return self._graph.get_operation_by_name(name)
                except errors.NotFoundError:
                    raise errors.PlacementError(
                        f"Op '{op.name}' ({op.type}) is colocated with '{name}', which is "
                        "not in the graph", op) from None
        return None

    def _complete(self, op) -> DeviceSpec:
        spec = DeviceSpec.from_string(op.device)
        job = spec.job or self._job
        if job not in self._cluster.jobs:
            raise errors.PlacementError(
                f"Cannot place op '{op.name}' ({op.type}) of the session on {self._who}: it "
                f"asks for {op.device!r} but job '{job}' is not in the cluster "
                f"{self._cluster.as_dict()}", op)
        task = spec.task if spec.task is not None else (self._task if job == self._job else 0)
        if not 0 <= task < self._cluster.num_tasks(job):
            raise errors.PlacementError(
                f"Cannot place op '{op.name}' ({op.type}) of the session on {self._who}: it "
                f"asks for /job:{job}/task:{task} but job '{job}' has "
                f"{self._cluster.num_tasks(job)} task(s) in the cluster "
                f"{self._cluster.as_dict()}", op)
        index = spec.device_index or 0
        if spec.device_type == "GPU":
            # The rank that runs the op binds its GPUs; one without raises PlacementError
            # there, naming the device. Soft placement falls back to the CPU when this
            # process sees no GPU (the ranks of a job are assumed alike).
            if not self._soft or backend.gpu_available():
                return DeviceSpec(job, spec.replica or 0, task, "GPU", index)
            index = 0
        return DeviceSpec(job, spec.replica or 0, task, "CPU", index)


def print_placement(op, device) -> None:
    """The ``log_device_placement`` line for one op (TensorFlow's format)."""
    print(f"{op.name}: ({op.type}): {device}", file=sys.stderr)
