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


class DeviceRules:
    """What a session's ``ConfigProto`` says about devices, applied to one op's device.

    ``allow_soft_placement``: a GPU this process cannot use falls back to the task's CPU.
    ``device_count={"GPU": n}``: only GPUs 0..n-1 exist for the session (TensorFlow's way
    to hide them; ``{"GPU": 0}`` runs everything on CPUs). ``device_filters``: the devices
    a distributed session may use; an op placed elsewhere is an error naming it.
    """

    def __init__(self, config=None, who: str = "this process"):
        self.soft = bool(getattr(config, "allow_soft_placement", False))
        counts = getattr(config, "device_count", None) or {}
        self.gpu_count = counts.get("GPU")
        self.filters = [DeviceSpec.from_string(f) for f in
                        (getattr(config, "device_filters", None) or ())]
        self._who = who

    def processor(self, op, spec: DeviceSpec) -> tuple[str, int]:
        """Return the (device type, index) ``op`` runs on, given its ``spec``."""
        index = spec.device_index or 0
        if spec.device_type != "GPU":
            return "CPU", index
        hidden = self.gpu_count is not None and index >= self.gpu_count
        # The rank that runs the op binds its GPUs; one without raises PlacementError
        # there, naming the device. Soft placement falls back to the CPU when this
        # process sees no GPU (the ranks of a job are assumed alike).
        if not hidden and (not self.soft or backend.gpu_available()):
            return "GPU", index
        if hidden and not self.soft:
            raise errors.PlacementError(
                f"Cannot place op '{op.name}' ({op.type}) on /device:GPU:{index} ({self._who}):"
                f" ConfigProto(device_count={{'GPU': {self.gpu_count}}}) hides it; set "
                "allow_soft_placement=True to run it on the CPU", op)
        return "CPU", 0

    def check_filters(self, op, spec: DeviceSpec) -> None:
        if self.filters and not any(_matches(spec, f) for f in self.filters):
            raise errors.PlacementError(
                f"Op '{op.name}' ({op.type}) is placed on {spec.to_string()}, outside the "
                f"session's ConfigProto(device_filters={[f.to_string() for f in self.filters]})"
                f" on {self._who}: widen the filters or place the op inside them", op)


def _matches(spec: DeviceSpec, pattern: DeviceSpec) -> bool:
    """Whether ``spec`` lies within ``pattern`` (each field ``pattern`` sets agrees)."""
    return all(want is None or want == got for want, got in (
        (pattern.job, spec.job), (pattern.replica, spec.replica), (pattern.task, spec.task),
        (pattern.device_type, spec.device_type), (pattern.device_index, spec.device_index)))


class LocalPlacement:
    """Devices of an in-process session: the op's own device (or, for an op colocated
    with another, that op's) under ``DeviceRules``."""

    def __init__(self, config):
        self._rules = DeviceRules(config)
        self._devices = {}

    def device_of(self, op) -> str:
        device = self._devices.get(op)
        if device is None:
            anchor = _colocation_root(op)
            if anchor is not op:
                device = self._devices[op] = self.device_of(anchor)
                return device
            spec = DeviceSpec.from_string(op.device)
            if spec.device_type == "GPU":
                kind, index = self._rules.processor(op, spec)
                spec = DeviceSpec(spec.job, spec.replica, spec.task, kind, index)
            device = self._devices[op] = spec.to_string()
        return device


def _colocation_root(op):
    """The op ``op`` is colocated with (``op`` itself when none, or when it is gone)."""
    groups = op._attrs.get("_class")
    if not groups:
        return op
    name = groups[0][len("loc:@"):]
    if name == op.name:
        return op
    try:
        return op.graph.get_operation_by_name(name)
    except errors.NotFoundError:
        return op


class Placer:
    """Computes and caches full devices for the ops of one graph in one cluster."""

    def __init__(self, graph, cluster, job: str, task: int, config=None, log=None,
                 who: str = ""):
        self._who = who or f"/job:{job}/task:{task}"
        self._graph = graph
        self._cluster = cluster
        self._job = job
        self._task = task
        self._rules = DeviceRules(config, self._who)
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
        # A sparse job ({0: ..., 2: ...}) has exactly the tasks it lists, not 0..n-1.
        tasks = self._cluster.task_indices(job)
        if spec.task is not None:
            task = spec.task
        else:
            task = self._task if job == self._job else (tasks[0] if tasks else 0)
        if task not in tasks:
            raise errors.PlacementError(
                f"Cannot place op '{op.name}' ({op.type}) of the session on {self._who}: it "
                f"asks for /job:{job}/task:{task} but job '{job}' has {len(tasks)} task(s), "
                f"{tasks}, in the cluster {self._cluster.as_dict()}", op)
        kind, index = self._rules.processor(op, spec)
        placed = DeviceSpec(job, spec.replica or 0, task, kind, index)
        self._rules.check_filters(op, placed)
        return placed


def print_placement(op, device) -> None:
    """The ``log_device_placement`` line for one op (TensorFlow's format)."""
    print(f"{op.name}: ({op.type}): {device}", file=sys.stderr)
