"""Saver: save and restore variables as sharded checkpoints (TF1's ``tf.train.Saver``).

At construction the Saver adds its ops to the graph: one ``SaveShard`` per device that
holds variables, colocated with them (so each ps writes its own shard and no variable
crosses the network), and one ``RestoreSlice`` + ``Assign`` per variable, colocated with
it. A partition part is saved under its full variable's name with its slice, and read
back as any slice, so a checkpoint restores into another partitioning, another number
of ps, or one process.

``save`` gives the save an id, runs the shard ops (each writes a new file named with the
id), then writes the index, then the state file ``checkpoint``, then deletes what older
saves of the prefix and dead saves left, and the checkpoints beyond ``max_to_keep``; each
file is replaced atomically, so a crash at any point leaves the previous checkpoint
complete and named by the state file, even when both saves use one prefix.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time

import numpy as np

import mpiflow
from mpiflow import errors
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import checkpoint_reader as reader
from mpiflow.ops import control_ops, io_ops, state_ops
from mpiflow.ops.partitioned_variables import PartitionedVariable
from mpiflow.ops.variables import Variable, global_variables
from mpiflow.train import checkpoint_management as ckpt

_LOG = logging.getLogger(__name__)


class _Entry:
    """One saved piece: a variable, its checkpoint name, its slice ("" = whole) and, for a
    part of a table, how ids address it: "mod:<parts>" or "div:<parts>" (see
    ``SaveSliceInfo.lookup``)."""

    __slots__ = ("fallback", "lookup", "name", "spec", "variable")

    def __init__(self, name: str, spec: str, variable: Variable):
        self.name = name
        self.spec = spec
        self.variable = variable
        self.lookup = ""
        # The key read where ``name`` is absent (``Variable._restore_fallback``), only
        # for a variable saved under its own name.
        self.fallback = (variable._restore_fallback or "") if name == variable.op.name \
            else ""


def _entries(var_list) -> list:
    """Expand ``var_list`` (list or dict; PartitionedVariables into parts) into entries.

    A partition part is saved as a slice of its full variable when it comes in a list,
    in a PartitionedVariable, or in a list of parts under a dict name; a part that is a
    dict's value by itself is saved whole under that name, as TensorFlow does: a script's
    ``{v.op.name: v for v in global_variables()}`` saves ``emb/part_0`` as the part's
    own tensor, which reads back alone and restores into a variable of the part's shape.
    """
    if isinstance(var_list, dict):
        items = sorted(var_list.items())
    else:
        items = [(None, v) for v in var_list]
    entries, seen = [], set()
    for name, item in items:
        whole = False
        if isinstance(item, PartitionedVariable):
            name, parts = name or item.name, item.get_variable_list()
        elif isinstance(item, (list, tuple)):
            parts = list(item)
        else:
            parts, whole = [item], name is not None
        for var in parts:
            if not isinstance(var, Variable):
                raise errors.InvalidArgumentError(
                    f"Saver: var_list holds {var!r} ({type(var).__name__}); expected "
                    "Variables or PartitionedVariables")
            if var in seen:
                raise errors.InvalidArgumentError(
                    f"Saver: variable '{var.op.name}' appears in var_list more than once")
            seen.add(var)
            info = None if whole else var._save_slice_info
            if len(parts) > 1 and info is None:
                raise errors.InvalidArgumentError(
                    f"Saver: '{name}' lists several variables, but '{var.op.name}' is not a "
                    "partition part (it has no SaveSliceInfo)")
            entries.append(_Entry(name or (info.full_name if info else var.op.name),
                                  info.spec if info else "", var))
    _check_names(entries)
    parts = {}
    for e in entries:
        parts[e.name] = parts.get(e.name, 0) + 1
    for e in entries:
        info = e.variable._save_slice_info
        if e.spec and info.lookup:
            e.lookup = f"{info.lookup}:{parts[e.name]}"
    return entries


def _check_names(entries) -> None:
    """A name is saved either whole by one variable, or as slices of one full shape."""
    by_name = {}
    for e in entries:
        by_name.setdefault(e.name, []).append(e)
    for name, group in by_name.items():
        fulls = {tuple(e.variable._save_slice_info.full_shape) if e.spec else None
                 for e in group}
        specs = [e.spec for e in group]
        if len(group) > 1 and ("" in specs or len(fulls) > 1 or len(set(specs)) < len(specs)):
            raise errors.InvalidArgumentError(
                f"Saver: two variables would be saved as '{name}': "
                f"{[e.variable.op.name for e in group]} (slices {specs})")


class Saver:
    """Save and restore variables (TF1's ``Saver``); see the module docstring.

    Args:
        var_list: Variables / PartitionedVariables, or a dict {checkpoint name: variable,
            PartitionedVariable or list of parts}; None = all global variables (optimizer
            slots and the global step included). A dict's variable is saved whole, a
            partition part too; parts in a list or PartitionedVariable are saved as
            slices of their full variable.
        sharded: True = one shard per device holding variables (written there); False =
            one shard, written by the process running the save op's device.
        max_to_keep: checkpoints kept on disk (oldest deleted first); 0/None keeps all.
        keep_checkpoint_every_n_hours: additionally keep one checkpoint per this period.
        name: name scope of the Saver's ops (default "save").
        defer_build: build the ops in ``build()`` instead of now.
        allow_empty: allow a Saver with nothing to save: its ``save`` writes nothing (no
            checkpoint, no state file) and returns None, its ``restore`` does nothing.
        pad_step_number: format the step suffix as ``-%08d``.
        reshape: only False (restoring into another full shape is not supported).
        restore_sequentially: accepted for TF1 code; all variables restore in one step.

    The arguments come in TensorFlow's order; TF1's ``saver_def``, ``builder``,
    ``write_version``, ``save_relative_paths`` and ``filename`` are not accepted (the
    state file always holds paths relative to its directory).
    """

    def __init__(self, var_list=None, reshape: bool = False, sharded: bool = True,
                 max_to_keep: int = 5, keep_checkpoint_every_n_hours: float = 10000.0,
                 name: str | None = None, restore_sequentially: bool = False,
                 defer_build: bool = False, allow_empty: bool = False,
                 pad_step_number: bool = False):
        if reshape:
            raise errors.UnimplementedError(
                "Saver(reshape=True) is not supported: a checkpoint restores into variables "
                "of the same full shape (any partitioning)")
        if max_to_keep is not None:
            errors.integer_at_least(max_to_keep, 0, "Saver: max_to_keep",
                                    " (0 or None keeps every checkpoint)")
        self._var_list = var_list
        self._sharded = bool(sharded)
        self._max_to_keep = max_to_keep
        self._keep_every_s = keep_checkpoint_every_n_hours * 3600.0
        self._next_keep_time = time.time() + self._keep_every_s
        self._name = name or "save"
        self._allow_empty = allow_empty
        self._pad_step_number = pad_step_number
        self._last_checkpoints = []         # [(prefix, time)], oldest first
        self._to_delete = []
        self._built = False
        self._is_empty = False
        if not defer_build:
            self.build()

    # -- graph -----------------------------------------------------------------------------
    def build(self) -> None:
        """Add the save and restore ops to the default graph (once)."""
        if self._built:
            return
        var_list = global_variables() if self._var_list is None else self._var_list
        entries = _entries(var_list)
        if not entries:
            if not self._allow_empty:
                raise errors.InvalidArgumentError("No variables to save")
            self._is_empty = True
            self._built = True
            return
        graph = get_default_graph()
        with graph.name_scope(self._name), graph.control_dependencies(None), \
                graph._colocation_reset():
            self._filename = io_ops.path_tensor("filename")
            self._save_id = io_ops.path_tensor("save_id")
            self._manifests = self._add_save_ops(graph, entries)
            self._restore_op = self._add_restore_ops(graph, entries)
        self._entries = entries
        self._built = True

    def _add_save_ops(self, graph, entries) -> list:
        groups = {}
        for e in entries:
            groups.setdefault(e.variable.device if self._sharded else "", []).append(e)
        manifests = []
        for shard, device in enumerate(sorted(groups)):
            group = groups[device]
            anchor = group[0].variable.op if self._sharded else None
            with graph.colocate_with(anchor, ignore_existing=anchor is None):
                manifests.append(io_ops.save_shard(
                    self._filename, self._save_id, [e.variable._ref() for e in group],
                    [e.name for e in group], [e.spec for e in group], shard, len(groups),
                    lookups=[e.lookup for e in group], name=f"save_shard_{shard}"))
        return manifests

    def _add_restore_ops(self, graph, entries):
        assigns = []
        for e in entries:
            var = e.variable
            with graph.colocate_with(var.op):
                value = io_ops.restore_slice(self._filename, e.name, e.spec, var.dtype,
                                             var.shape, lookup=e.lookup,
                                             fallback=e.fallback, name="restore_slice")
                assigns.append(state_ops.assign(var, value, name="restore_assign",
                                                validate_shape=var.shape.is_fully_defined()))
        return control_ops.group(*assigns, name="restore_all")

    # -- save ------------------------------------------------------------------------------
    def save(self, sess, save_path: str, global_step=None, latest_filename: str | None = None,
             meta_graph_suffix: str = "meta", write_meta_graph: bool = True,
             write_state: bool = True) -> str | None:
        """Save the variables to checkpoint ``save_path[-step]``; return that prefix (None
        for a Saver with nothing to save, ``allow_empty=True``: it writes nothing).

        ``global_step`` (an integer, or an integer Tensor/Variable evaluated in ``sess``)
        is appended as ``-N``. mpiflow writes no meta graph: ``meta_graph_suffix`` and
        ``write_meta_graph`` are accepted for TF1 code and have no effect. ``sess`` may be
        a ``MonitoredSession``: its raw session runs the save, unseen by its hooks (a save
        is no training step).

        Raises:
            InvalidArgumentError: the directory of ``save_path`` does not exist,
                ``global_step`` is not a whole number, or ``latest_filename`` has a
                directory part.
            OpError: a shard could not be written (the previous checkpoint stays valid).
            FailedPreconditionError: ``sess`` is a closed MonitoredSession.
        """
        self._check_built()
        if latest_filename and os.path.basename(latest_filename) != latest_filename:
            # Refused before anything is written: the state file would go elsewhere than
            # the checkpoint's directory, or nowhere, after the shards were written.
            raise errors.InvalidArgumentError(
                f"Saver.save: 'latest_filename' must not contain path components, got "
                f"{latest_filename!r} (the state file is written in the checkpoint's "
                "directory)")
        sess = _raw_session(sess, "save")
        prefix = os.fspath(save_path)
        directory = os.path.dirname(prefix) or "."
        if self._is_empty:
            _LOG.info("Saver: nothing to save (allow_empty=True): %s not written",
                      self._stepped(sess, prefix, global_step))
            return None
        if not os.path.isdir(directory):
            raise errors.InvalidArgumentError(
                f"Parent directory of {prefix} doesn't exist, can't save.")
        with _directory_lock(directory):
            # The step is read when this save's turn comes: read before waiting for another
            # save (the Supervisor's checkpoint thread beside a script's own save), it
            # named this later save after an older step, which then became the latest.
            prefix = self._stepped(sess, prefix, global_step)
            self._save_locked(sess, prefix, os.path.abspath(prefix), directory,
                              latest_filename, write_state)
        return prefix

    def _stepped(self, sess, prefix: str, global_step) -> str:
        """``prefix``, with ``-<global step>`` when a step is given."""
        if global_step is None:
            return prefix
        return prefix + ("-%08d" if self._pad_step_number else "-%d") % \
            _step_number(sess, global_step)

    def _save_locked(self, sess, prefix, absolute, directory, latest_filename, write_state):
        """The save itself, alone in its directory among this process's saves (a
        Supervisor's checkpoint thread beside the training loop's own): the clean-up of
        one must never take another's shards for a dead save's."""
        save_id = fmt.new_save_id()
        started = time.time()
        # Other processes saving into this directory (another job, a second worker) leave
        # the files of this save alone while the marker says it is in progress.
        marker = fmt.mark_saving(absolute, save_id)
        try:
            try:
                manifests = sess.run(self._manifests,
                                     {self._filename: io_ops.encode_path(absolute),
                                      self._save_id: io_ops.encode_path(save_id)})
                index = fmt.index_document(manifests, mpiflow.__version__, save_id)
                _check_shards_exist(os.path.dirname(absolute), index["shards"])
                fmt.write_json(fmt.index_path(absolute), index)
            except BaseException:
                # Give back the space the shards of this failed save hold (a full disk).
                fmt.remove_save(absolute, save_id)
                raise
            # The new checkpoint is whole: what an older save of this prefix or a dead
            # save left (shards no index names, temporary files) can go.
            fmt.remove_leftovers(os.path.dirname(absolute), before=started,
                                 keep=[os.path.join(os.path.dirname(absolute), f)
                                       for f in index["shards"]], own=save_id)
            if write_state:
                self._record(prefix)
                ckpt.update_checkpoint_state(
                    directory, prefix, self.last_checkpoints, latest_filename,
                    all_model_checkpoint_timestamps=[t for _, t in self._last_checkpoints]
                    if self._last_checkpoints else None)
                self._delete_old(directory)
        finally:
            fmt.unmark_saving(marker)

    def _record(self, prefix: str) -> None:
        if not self._max_to_keep:
            return
        self._last_checkpoints = [(p, t) for p, t in self._last_checkpoints if p != prefix]
        self._last_checkpoints.append((prefix, time.time()))
        while len(self._last_checkpoints) > self._max_to_keep:
            self._to_delete.append(self._last_checkpoints.pop(0))

    def _delete_old(self, directory: str) -> None:
        """Delete checkpoints pushed out of ``max_to_keep`` (after the new state is in
        place, so never the newest whole one), keeping one per
        ``keep_checkpoint_every_n_hours``; never anything outside ``directory``."""
        while self._to_delete:
            prefix, stamp = self._to_delete.pop(0)
            if stamp > self._next_keep_time:
                self._next_keep_time += self._keep_every_s
                continue
            if not ckpt.is_within(prefix, directory):
                _LOG.warning("Not deleting checkpoint %s: it lies outside %s", prefix,
                             directory)
                continue
            ckpt.remove_checkpoint(prefix)

    # -- restore ---------------------------------------------------------------------------
    def restore(self, sess, save_path: str) -> None:
        """Restore every variable of this Saver from checkpoint ``save_path``; nothing for
        a Saver with nothing to save (``allow_empty=True``), whatever the path. ``sess``
        may be a ``MonitoredSession`` (its raw session runs the restore).

        Raises:
            NotFoundError: no checkpoint at ``save_path``, or it lacks a variable.
            DataLossError: the checkpoint's files are truncated or corrupted.
            InvalidArgumentError: a saved shape or dtype differs from the variable's.
            FailedPreconditionError: ``sess`` is a closed MonitoredSession.
        """
        self._check_built()
        if self._is_empty:
            return
        sess = _raw_session(sess, "restore")
        if save_path is None:
            raise errors.InvalidArgumentError("Can't load save_path when it is None.")
        prefix = os.fspath(save_path)
        if not ckpt.checkpoint_exists(prefix):
            raise errors.CheckpointNotFoundError(
                f"The passed save_path is not a valid checkpoint: {prefix} (there is no "
                f"{fmt.index_path(prefix)})")
        absolute = os.path.abspath(prefix)
        index = reader.read_index(absolute)
        for e in self._entries:         # name the missing key here, before any ps is asked
            if reader.saved_key(index, prefix, e.name, e.fallback) != e.name:
                _LOG.info("Restoring '%s' from '%s' of %s: the checkpoint was written in "
                          "a mode with one copy of it", e.name, e.fallback, prefix)
        sess.run(self._restore_op, {self._filename: io_ops.encode_path(absolute)})

    # -- bookkeeping -------------------------------------------------------------------------
    @property
    def last_checkpoints(self) -> list:
        """Prefixes of the checkpoints this Saver keeps, oldest first."""
        return [p for p, _ in self._last_checkpoints]

    def set_last_checkpoints(self, last_checkpoints) -> None:
        """Take over ``last_checkpoints`` (prefixes) as this Saver's, never to be deleted
        by its rotation: timed at infinity, as TensorFlow does."""
        _check_list("set_last_checkpoints", last_checkpoints, "checkpoint prefixes")
        for prefix in last_checkpoints:
            if not isinstance(prefix, (str, os.PathLike)):
                raise TypeError(
                    f"set_last_checkpoints takes a list of checkpoint prefixes (str), got "
                    f"{prefix!r} in it (set_last_checkpoints_with_time takes (prefix, "
                    "time) pairs)")
        self._last_checkpoints = [(os.fspath(p), math.inf) for p in last_checkpoints]

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time) -> None:
        """Take over ``last_checkpoints_with_time``, a list of (prefix, time) pairs."""
        _check_list("set_last_checkpoints_with_time", last_checkpoints_with_time,
                    "(prefix, time) pairs")
        self._last_checkpoints = [(p, float(t)) for p, t in last_checkpoints_with_time]

    def recover_last_checkpoints(self, checkpoint_paths) -> None:
        """Adopt the existing ones of ``checkpoint_paths`` (e.g. from the state file)."""
        existing = [p for p in checkpoint_paths if ckpt.checkpoint_exists(p)]
        self.set_last_checkpoints_with_time(
            list(zip(existing, ckpt.get_checkpoint_mtimes(existing))))

    def _check_built(self) -> None:
        if not self._built:
            raise errors.FailedPreconditionError(
                "Saver was created with defer_build=True: call build() before save/restore")


def _check_shards_exist(directory: str, shards) -> None:
    """Refuse to index shards that are gone (deleted by a process that does not know this
    save is in progress): the index would name a checkpoint that cannot be restored."""
    gone = [name for name in shards if not os.path.exists(os.path.join(directory, name))]
    if gone:
        raise errors.DataLossError(
            f"Checkpoint shard '{os.path.join(directory, gone[0])}' was deleted before its "
            f"save could index it ({len(gone)} of {len(shards)} shards gone): another "
            "process removed it from the directory; not writing a checkpoint that cannot "
            "be restored")


def _check_list(method: str, value, of: str) -> None:
    """Refuse anything but a list, as TensorFlow does (it asserts one): a string given
    where a list of prefixes is expected would otherwise be taken letter by letter."""
    if not isinstance(value, list):
        raise TypeError(f"{method} takes a list of {of}, got {type(value).__name__} "
                        f"{value!r}")


_DIRECTORY_LOCKS = {}
_LOCKS_LOCK = threading.Lock()


def _directory_lock(directory: str) -> threading.Lock:
    key = os.path.realpath(directory)
    with _LOCKS_LOCK:
        return _DIRECTORY_LOCKS.setdefault(key, threading.Lock())


def _raw_session(sess, what: str):
    """The session that runs a save or restore: a MonitoredSession's raw one, so that its
    hooks see no step (nor refuse one after a stop was requested)."""
    unwrap = getattr(sess, "_tf_sess", None)        # a MonitoredSession's
    if unwrap is None:
        return sess
    raw = unwrap()
    if raw is None:
        raise errors.FailedPreconditionError(
            f"Saver.{what}: the MonitoredSession is closed; {what} inside its with block, "
            "or with an open Session")
    return raw


def _step_number(sess, global_step) -> int:
    """The step a checkpoint is named after: a whole number (an int, an integral float, or
    an integer Tensor/Variable run in ``sess``)."""
    step = global_step
    if isinstance(step, (Tensor, Variable)):
        step = sess.run(step)
    value = np.asarray(step)
    if value.ndim != 0 or value.dtype.kind not in "iuf" or isinstance(step, bool) or \
            (value.dtype.kind == "f" and not float(value).is_integer()):
        raise errors.InvalidArgumentError(
            f"Saver.save: global_step must be a whole number (the step a checkpoint is "
            f"named after), got {global_step!r}")
    return int(value)
