"""ConfigProto, RunOptions and RunMetadata: what a session and a run are told, TF's names.

Every field TensorFlow users set either works here or, where mpiflow has nothing to
apply it to, says so once (a warning), so no setting is silently dropped.
"""

from __future__ import annotations

from typing import ClassVar

from mpiflow import backend, errors
from mpiflow.logger import get_logger

_LOG = get_logger("mpiflow.session")
_WARNED = set()


class _Options:
    """Fields by TensorFlow's names with their defaults (``_FIELDS``); an unknown one is an
    error rather than a setting silently dropped."""

    _FIELDS: ClassVar[dict] = {}

    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(self._FIELDS))
        if unknown:
            raise errors.InvalidArgumentError(
                f"{type(self).__name__} has no option '{unknown[0]}': expected one of "
                f"{sorted(self._FIELDS)}")
        for key, default in self._FIELDS.items():
            setattr(self, key, kwargs.get(key, default))


class ConfigProto(_Options):
    """Session options (TensorFlow's names); unknown options raise instead of being ignored.

    What each does:
        log_device_placement: print each op's device when a plan is made.
        allow_soft_placement: an op on a GPU this process cannot use runs on its CPU.
        device_count: ``{"GPU": n}`` shows the session only GPUs 0..n-1 (``{"GPU": 0}``:
            none; with soft placement their ops run on the CPU). A CPU count has no
            effect (kernels run on one host device) and warns once.
        device_filters: the devices a session on a server may use, e.g. ``["/job:ps",
            "/job:worker/task:1"]``; an op placed outside them is a PlacementError naming
            it. An in-process session has one device and ignores them.
        intra_op_parallelism_threads: > 0 limits this process's BLAS threads (process-wide,
            like MPIFLOW_CPU_THREADS); each rank of a cluster sets its own.
        inter_op_parallelism_threads: no effect (a step runs its kernels in order on one
            thread); warns once when set.
        gpu_options: ``{"allow_growth": True}`` (or an object with it) is what cupy's memory
            pool does anyway; any other setting has no effect and warns once.
        operation_timeout_in_ms: > 0 bounds how long a step waits for other ranks.
    """

    _FIELDS: ClassVar[dict] = {"log_device_placement": False, "allow_soft_placement": False,
                               "device_filters": (), "inter_op_parallelism_threads": 0,
                               "intra_op_parallelism_threads": 0, "gpu_options": None,
                               "operation_timeout_in_ms": 0, "device_count": None}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _check_int(self, "intra_op_parallelism_threads")
        _check_int(self, "inter_op_parallelism_threads")
        _check_int(self, "operation_timeout_in_ms")
        if self.device_count is not None and not (
                isinstance(self.device_count, dict) and
                all(isinstance(n, int) and n >= 0 for n in self.device_count.values())):
            raise errors.InvalidArgumentError(
                f"ConfigProto: device_count must be a dict like {{'GPU': 0}} of counts >= 0, "
                f"got {self.device_count!r}")
        if isinstance(self.device_filters, str):
            self.device_filters = [self.device_filters]

    def apply(self) -> None:
        """Apply what a session applies to its process, and warn (once per process and
        setting) about what has no effect here."""
        if self.intra_op_parallelism_threads > 0:
            backend.limit_blas_threads(self.intra_op_parallelism_threads)
        if self.inter_op_parallelism_threads > 0:
            _warn_once("inter_op_parallelism_threads", "has no effect: a step runs its "
                       "kernels in order on one thread")
        if set(self.device_count or {}) - {"GPU"}:
            _warn_once("device_count", f"{self.device_count!r}: only the 'GPU' count has an "
                       "effect (kernels run on the host's one CPU device)")
        if self.gpu_options is not None and _gpu_settings(self.gpu_options) != \
                {"allow_growth": True}:
            _warn_once("gpu_options", f"{self.gpu_options!r} has no effect: each rank binds "
                       "one GPU (MPIFLOW_GPU) and cupy's memory pool grows as needed")

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS
                           if getattr(self, k) != self._FIELDS[k])
        return f"ConfigProto({fields})"


def _check_int(config, field):
    errors.integer_at_least(getattr(config, field), 0, f"ConfigProto: {field}")


def _gpu_settings(options) -> dict:
    if isinstance(options, dict):
        return {k: v for k, v in options.items() if v}
    return {k: v for k, v in vars(options).items() if v and not k.startswith("_")}


def _warn_once(field, text):
    if field not in _WARNED:
        _WARNED.add(field)
        _LOG.warning("ConfigProto.%s %s", field, text)


class RunOptions(_Options):
    """Options of one ``Session.run`` (TensorFlow's names): ``timeout_in_ms`` bounds how
    long the step may wait for other ranks (0: MPIFLOW_TIMEOUT or the session's
    ``ConfigProto.operation_timeout_in_ms``); ``trace_level`` FULL_TRACE times every
    kernel and transfer into ``RunMetadata.step_stats``; ``output_partition_graphs`` puts
    the pieces the step ran on each task into ``RunMetadata.partition_graphs``;
    ``inter_op_thread_pool`` is accepted and has no effect (one thread runs a step)."""

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3
    _FIELDS: ClassVar[dict] = {"timeout_in_ms": 0, "trace_level": 0,
                               "inter_op_thread_pool": 0, "output_partition_graphs": False}


class RunMetadata:
    """What a ``Session.run`` reports (TensorFlow's name): ``step_stats``, the spans of this
    rank's part of a traced step (kernels, sends, receives, collectives), which
    ``mf.timeline.Timeline`` turns into a Chrome trace; ``partition_graphs``, with
    ``RunOptions(output_partition_graphs=True)``, one GraphDef dict per task (its
    ``device`` key names the task) of the pieces the step ran."""

    def __init__(self):
        self.step_stats: list[dict] = []
        self.partition_graphs: list = []
