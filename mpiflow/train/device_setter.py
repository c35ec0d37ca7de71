"""replica_device_setter and ps placement strategies (TensorFlow's semantics).

``replica_device_setter`` returns a device function for ``mf.device``: ops whose type is a
variable type (``ps_ops``) go to a ps task chosen by a strategy (round-robin by default,
or ``GreedyLoadBalancingStrategy``), every other op to the worker device; whatever device
fields the op already carries are merged on top. Placement itself (full device names,
defaults, checks against the cluster) is the runtime's job; this module only computes the
device strings a graph records.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from mpiflow import errors
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.train.cluster_spec import ClusterSpec, is_cluster_def

_LOG = logging.getLogger(__name__)

# TensorFlow's STANDARD_PS_OPS: the op types that hold state a ps serves.
STANDARD_PS_OPS = (
    "Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable",
    "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
    "MutableDenseHashTable", "MutableDenseHashTableV2", "VarHandleOp",
)


class _RoundRobinStrategy:
    """Return ps task indices 0, 1, ..., num_tasks - 1, 0, ... one per ps op."""

    def __init__(self, num_tasks: int):
        self._num_tasks = _positive_int(num_tasks, "_RoundRobinStrategy num_tasks")
        self._next_task = 0

    def __call__(self, unused_op) -> int:
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class GreedyLoadBalancingStrategy:
    """Place each ps op on the ps task with the least load so far (ties: lowest index).

    The load of an op is ``load_fn(op)`` in any consistent unit, e.g. ``byte_size_load_fn``.
    The result depends on the order in which ps ops are created, as in TensorFlow.
    """

    def __init__(self, num_tasks: int, load_fn: Callable):
        self._num_tasks = _positive_int(num_tasks, "GreedyLoadBalancingStrategy num_tasks")
        if not callable(load_fn):
            raise errors.InvalidArgumentError(
                f"GreedyLoadBalancingStrategy: load_fn must be callable (op -> load), got "
                f"{load_fn!r}")
        self._load_fn = load_fn
        self._ps_loads = np.zeros(self._num_tasks)

    def __call__(self, op) -> int:
        task = int(np.argmin(self._ps_loads))
        self._ps_loads[task] += self._load_fn(op)
        return task


def byte_size_load_fn(op) -> int:
    """Return the size in bytes of ``op``'s single output (a variable's buffer).

    Raises:
        InvalidArgumentError: ``op`` does not have exactly one output, or its shape is not
            fully defined.
    """
    outputs = op.outputs
    if len(outputs) != 1:
        raise errors.InvalidArgumentError(
            f"byte_size_load_fn: op '{op.name}' ({op.type}) must have a single output, it "
            f"has {len(outputs)}")
    shape = outputs[0].shape
    if not shape.is_fully_defined() and "shape" in op.attrs:
        shape = shape.merge_with(TensorShape(op.get_attr("shape")))
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"byte_size_load_fn: the output of op '{op.name}' ({op.type}) has shape {shape}, "
            "which is not fully defined, so its size in bytes is unknown")
    return shape.num_elements() * outputs[0].dtype.size


class _ReplicaDeviceChooser:
    """The device function ``replica_device_setter`` returns (as a bound method)."""

    def __init__(self, ps_tasks, ps_device, worker_device, merge_devices, ps_ops,
                 ps_strategy):
        self._ps_tasks = ps_tasks
        self._ps_device = ps_device
        self._worker_device = worker_device
        self._merge_devices = merge_devices
        self._ps_ops = ps_ops
        self._ps_strategy = ps_strategy

    def device_function(self, op) -> str:
        """Return the device of ``op``: a ps task for ps ops, else the worker device."""
        if not self._merge_devices and op.device:
            return op.device
        current = DeviceSpec.from_string(op.device or "")
        if self._ps_tasks and self._ps_device and op.type in self._ps_ops:
            ps_device = DeviceSpec.from_string(self._ps_device)
            # The strategy picks the task only when the op's own job (if any) is the ps
            # job: an op pinned to another job keeps it and consumes no ps slot.
            if ps_device.job and (not current.job or current.job == ps_device.job):
                ps_device.task = self._task_for(op)
            return ps_device.merge_from(current).to_string()
        worker_device = DeviceSpec.from_string(self._worker_device or "")
        return worker_device.merge_from(current).to_string()

    def _task_for(self, op) -> int:
        task = self._ps_strategy(op)
        if isinstance(task, bool) or not isinstance(task, numbers.Integral) or \
                not 0 <= int(task) < self._ps_tasks:
            raise errors.InvalidArgumentError(
                f"replica_device_setter: ps_strategy {self._ps_strategy!r} returned {task!r} "
                f"for op '{op.name}' ({op.type}): expected a task index in "
                f"[0, {self._ps_tasks})")
        return int(task)


def replica_device_setter(ps_tasks: int = 0, ps_device: str | None = "/job:ps",
                          worker_device: str | None = "/job:worker", merge_devices: bool = True,
                          cluster=None, ps_ops=None,
                          ps_strategy: Callable | None = None) -> Callable | None:
    """Return a device function placing variables on ps tasks and other ops on a worker.

    Use it as ``with mf.device(mf.train.replica_device_setter(cluster=cluster)):``.

    Args:
        ps_tasks: number of ps tasks; ignored when ``cluster`` is given.
        ps_device: device of the ps job ("" or None: no ps job is used).
        worker_device: device of the worker job, e.g. "/job:worker/task:0".
        merge_devices: merge the chosen device with the fields an op already has (True)
            or leave an op that already has a device alone (False).
        cluster: a ClusterSpec (anything with ``jobs`` and ``num_tasks(job)``, or
            ``as_dict()``), a dict job -> list of tasks, or the ``as_cluster_def()`` dict
            of a ClusterSpec; ``ps_tasks`` becomes the
            number of tasks of the ps job, or 0 when the cluster has no such job.
        ps_ops: op types placed on the ps (default: ``STANDARD_PS_OPS``).
        ps_strategy: callable ``op -> ps task index`` (default: round-robin).

    Returns:
        A device function, or None when there are no ps tasks (``mf.device(None)`` then
        leaves placement as it is).

    Raises:
        InvalidArgumentError: a negative or non-integer ``ps_tasks``, a cluster of an
            unknown kind, ``ps_ops`` that is not a list of op type names, an unparsable
            device, or a ``ps_strategy`` that is not callable.
    """
    ps_device = _device_string(ps_device, "ps_device")
    worker_device = _device_string(worker_device, "worker_device")
    if cluster is not None:
        ps_job = DeviceSpec.from_string(ps_device).job
        ps_tasks = _num_tasks(cluster, ps_job)
    else:
        ps_tasks = _non_negative_int(ps_tasks, "ps_tasks")
    if ps_tasks == 0:
        return None
    ps_ops = STANDARD_PS_OPS if ps_ops is None else ps_ops
    if isinstance(ps_ops, str) or not all(isinstance(t, str) for t in ps_ops):
        raise errors.InvalidArgumentError(
            f"replica_device_setter: ps_ops must be a list of op type names, got {ps_ops!r}")
    if not merge_devices:
        _LOG.warning("replica_device_setter: merge_devices=False is deprecated (as in "
                     "TensorFlow); ops that already have a device keep it unmerged")
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise errors.InvalidArgumentError(
            f"replica_device_setter: ps_strategy must be callable (op -> ps task index), "
            f"got {ps_strategy!r}")
    chooser = _ReplicaDeviceChooser(ps_tasks, ps_device, worker_device, bool(merge_devices),
                                    frozenset(ps_ops), ps_strategy)
    return chooser.device_function


def _num_tasks(cluster, job) -> int:
    """Return how many tasks ``cluster`` has in ``job`` (0 when it has no such job)."""
    if hasattr(cluster, "jobs") and callable(getattr(cluster, "num_tasks", None)):
        return cluster.num_tasks(job) if job in cluster.jobs else 0
    if callable(getattr(cluster, "as_dict", None)):
        cluster = cluster.as_dict()
    if is_cluster_def(cluster):     # ClusterSpec.as_cluster_def(): TF takes a ClusterDef
        return _num_tasks(ClusterSpec(cluster), job)
    if not isinstance(cluster, Mapping):
        raise errors.InvalidArgumentError(
            "replica_device_setter: cluster must be a ClusterSpec or a dict job -> list of "
            f"tasks, got {type(cluster).__name__}")
    tasks = cluster.get(job)
    if tasks is None:
        return 0
    if isinstance(tasks, numbers.Integral) and not isinstance(tasks, bool):
        return _non_negative_int(tasks, f"cluster[{job!r}]")
    if isinstance(tasks, (list, tuple, Mapping)):
        return len(tasks)
    raise errors.InvalidArgumentError(
        f"replica_device_setter: cluster[{job!r}] must be a list of tasks, got {tasks!r}")


def _device_string(device, what) -> str:
    if device is None or device == "":
        return ""
    if isinstance(device, DeviceSpec):
        return device.to_string()
    if not isinstance(device, str):
        raise errors.InvalidArgumentError(
            f"replica_device_setter: {what} must be a device string, got {device!r}")
    return DeviceSpec.from_string(device).to_string()   # parse now: errors name the string


def _non_negative_int(value, what) -> int:
    return errors.integer_at_least(value, 0, f"replica_device_setter: {what}")


def _positive_int(value, what) -> int:
    return errors.integer_at_least(value, 1, what)
