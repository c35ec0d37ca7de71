"""``init_from_checkpoint``: variables that start from a checkpoint's tensors (TF1's
``tf.train.init_from_checkpoint``), the way TF1 scripts fine-tune a pretrained model; and
``warm_start``, TF1's ``tf.train.warm_start``: the same for the variables a pattern or a
list picks, each from the tensor of its own name (or the name it had before).

It changes the initializers of the variables it is given, not their values: each
variable's initializer becomes an assignment of a ``RestoreSlice`` of the checkpoint,
colocated with the variable, so ``global_variables_initializer()`` (or a
``MonitoredTrainingSession``'s Scaffold) made afterwards reads the checkpoint where the
variable lives, and a restart from the training's own checkpoint overrides it as any
initializer. Which pieces a variable reads (whole, or a slice of a partitioned one) is
decided as the Saver decides it for its own ``var_list``, so a partitioned variable
starts from a checkpoint of any other partitioning.
"""

from __future__ import annotations

import os

from mpiflow import errors
from mpiflow.framework.graph import GraphKeys
from mpiflow.framework.scopes import get_collection
from mpiflow.ops import constant_ops, io_ops, state_ops
from mpiflow.ops.partitioned_variables import PartitionedVariable
from mpiflow.ops.variable_scope import _store
from mpiflow.ops.variables import Variable
from mpiflow.train.checkpoint_utils import load_checkpoint
from mpiflow.train.saver import _entries

__all__ = ["init_from_checkpoint", "warm_start"]


def init_from_checkpoint(ckpt_dir_or_file, assignment_map) -> None:
    """Initialize variables from checkpoint tensors instead of their own initializers.

    Args:
        ckpt_dir_or_file: a checkpoint prefix, or a directory (its newest whole one).
        assignment_map: a dict (or pairs) from checkpoint names to what they initialize:
            ``"old/w": "new/w"`` (a variable made with ``get_variable``, or a partitioned
            one by its full name), ``"old/w": variable`` (a Variable, a list of partition
            parts or a PartitionedVariable), or a scope to a scope, ``"old/": "new/"``:
            every ``get_variable`` variable under ``new/`` from the tensor of the same
            name under ``old/`` (``"/"`` is the root on either side). A single variable
            reads its tensor whole; the parts of a partitioned variable read their slices.

    Raises:
        NotFoundError: no such checkpoint.
        InvalidArgumentError: a checkpoint name is not in the checkpoint, a shape differs,
            a name is no variable and no scope ("scope/"), or a scope maps to a name.
    """
    reader = load_checkpoint(ckpt_dir_or_file)
    prefix = os.path.abspath(reader.prefix)
    shapes = reader.get_variable_to_shape_map()
    store = _store()
    items = assignment_map.items() if isinstance(assignment_map, dict) else assignment_map
    for key, target in sorted(items, key=lambda item: item[0]):
        found = _variables_named(target, store)
        if found is not None:
            _start_from(prefix, shapes, key, found)
            continue
        for name, ckpt_name in _scope_pairs(key, target, store, shapes, prefix):
            _start_from(prefix, shapes, ckpt_name, _variables_named(name, store))


def _variables_named(target, store):
    """A Variable, a list of parts or a PartitionedVariable, for ``target`` (itself, or
    the name of a ``get_variable`` variable); None when it names none."""
    if isinstance(target, (Variable, PartitionedVariable)):
        return target
    if isinstance(target, (list, tuple)) and target and \
            all(isinstance(v, Variable) for v in target):
        return list(target)
    if isinstance(target, str):
        name = target.removesuffix(":0")
        found = store.vars.get(name)
        return found if found is not None else store.partitioned_vars.get(name)
    raise errors.InvalidArgumentError(
        f"init_from_checkpoint: assignment_map values are variables, lists of partition "
        f"parts, PartitionedVariables or names, got {target!r}")


def _scope_pairs(key: str, target, store, shapes, prefix) -> list:
    """[(variable's full name, checkpoint name)] of a scope-to-scope entry."""
    if not isinstance(target, str) or not key.endswith("/") or not target.endswith("/"):
        raise errors.InvalidArgumentError(
            f"init_from_checkpoint: '{target}' is no variable of this graph, so "
            f"{{'{key}': '{target}'}} must map a scope to a scope, both ending in '/' "
            "(e.g. {'old_scope/': 'new_scope/'}, '/' for the root)")
    scope = target.strip("/")
    names = set()
    for name, var in store.vars.items():
        if not scope or name.startswith(scope + "/"):
            info = var._save_slice_info
            names.add(info.full_name if info is not None else name)
    pairs = []
    for name in sorted(names):
        rest = name[len(scope) + 1:] if scope else name
        ckpt_name = rest if key == "/" else key + rest
        if ckpt_name not in shapes:
            raise errors.InvalidArgumentError(
                f"init_from_checkpoint: tensor '{ckpt_name}' (for variable '{name}' of "
                f"scope '{target}', mapped from '{key}') is not in checkpoint '{prefix}'")
        pairs.append((name, ckpt_name))
    return pairs


def _start_from(prefix: str, shapes: dict, ckpt_name: str, variables) -> None:
    """Make the initializer of ``variables`` read ``ckpt_name`` of the checkpoint."""
    if ckpt_name not in shapes:
        known = ", ".join(sorted(shapes)[:20])
        raise errors.InvalidArgumentError(
            f"init_from_checkpoint: tensor '{ckpt_name}' is not in checkpoint '{prefix}' "
            f"(it holds: {known})")
    saved = list(shapes[ckpt_name])
    for entry in _entries({ckpt_name: variables}):
        var = entry.variable
        info = var._save_slice_info
        shape = list(info.full_shape) if entry.spec else var.shape.as_list()
        if shape != saved:
            raise errors.InvalidArgumentError(
                f"init_from_checkpoint: shape of variable '{var.op.name}' "
                f"({'full shape ' if entry.spec else ''}{shape}) does not match tensor "
                f"'{ckpt_name}' ({saved}) of checkpoint '{prefix}'")
        graph = var.graph
        with graph.control_dependencies(None), graph.colocate_with(var.op), \
                graph.name_scope(f"{var.op.name}/init_from_checkpoint"):
            path = constant_ops.constant(io_ops.encode_path(prefix), name="checkpoint")
            value = io_ops.restore_slice(path, ckpt_name, entry.spec, var.dtype, var.shape,
                                         lookup=entry.lookup, name="restore_slice")
            var._initializer_op = state_ops.assign(var._ref(), value, name="Assign").op
            var._initial_value = value


def warm_start(ckpt_to_initialize_from, vars_to_warm_start=".*", var_name_to_vocab_info=None,
               var_name_to_prev_var_name=None) -> None:
    """Start the variables ``vars_to_warm_start`` picks from a checkpoint (TF1's
    ``tf.train.warm_start``), each from the tensor of its own name, or of the name
    ``var_name_to_prev_var_name`` gives it: ``init_from_checkpoint`` for each of them (a
    partitioned variable by its whole name, from a checkpoint of any partitioning).

    Args:
        ckpt_to_initialize_from: a checkpoint prefix, or a directory (its newest one).
        vars_to_warm_start: a regular expression matched at the start of the names of
            the trainable variables (not optimizer slots or moving statistics); a list of
            such expressions, matched among all global variables; a list of Variables;
            None: none.
        var_name_to_vocab_info: vocabulary remapping; mpiflow has none (refused unless
            empty).
        var_name_to_prev_var_name: variable name -> its name in the checkpoint; every
            name must be one of the variables picked (a misspelt one is refused, before
            any variable is changed).

    Raises:
        UnimplementedError: ``var_name_to_vocab_info`` given.
        InvalidArgumentError: a bad ``vars_to_warm_start``, a name of
            ``var_name_to_prev_var_name`` that is no variable picked, and what
            ``init_from_checkpoint`` refuses.
    """
    if var_name_to_vocab_info:
        raise errors.UnimplementedError(
            "warm_start: var_name_to_vocab_info (vocabulary remapping with "
            "tf.estimator.VocabInfo) is not supported by mpiflow; warm-start those "
            "variables with init_from_checkpoint, or remap their rows yourself")
    grouped = _picked(vars_to_warm_start)
    renames = dict(var_name_to_prev_var_name or {})
    unknown = sorted(set(renames) - set(grouped))
    if unknown:
        raise errors.InvalidArgumentError(
            f"warm_start: var_name_to_prev_var_name names {unknown}, which are not among "
            f"the variables warm-started (misspelt?); those are: {sorted(grouped)}")
    if vars_to_warm_start is None or not grouped:
        return
    assignment = {}
    for name, parts in grouped.items():
        variables = parts[0] if len(parts) == 1 else parts
        previous = renames.get(name, name)
        if previous in assignment:      # two variables from one tensor: one map each
            init_from_checkpoint(ckpt_to_initialize_from, assignment)
            assignment = {}
        assignment[previous] = variables
    init_from_checkpoint(ckpt_to_initialize_from, assignment)


def _picked(vars_to_warm_start) -> dict:
    """{whole variable name: [its Variables (the parts of a partitioned one)]}."""
    if vars_to_warm_start is None or isinstance(vars_to_warm_start, str):
        found = get_collection(GraphKeys.TRAINABLE_VARIABLES, scope=vars_to_warm_start)
    elif isinstance(vars_to_warm_start, (list, tuple)) and \
            all(isinstance(v, str) for v in vars_to_warm_start):
        found = []
        for pattern in vars_to_warm_start:
            found += [v for v in get_collection(GraphKeys.GLOBAL_VARIABLES, scope=pattern)
                      if v not in found]
    elif isinstance(vars_to_warm_start, (list, tuple)) and \
            all(isinstance(v, (Variable, PartitionedVariable)) for v in vars_to_warm_start):
        found = []
        for v in vars_to_warm_start:
            found += list(v) if isinstance(v, PartitionedVariable) else [v]
    else:
        raise errors.InvalidArgumentError(
            "warm_start: vars_to_warm_start is a regular expression, a list of them, a "
            f"list of Variables, or None; got {vars_to_warm_start!r}")
    grouped: dict = {}
    for var in found:
        info = var._save_slice_info
        grouped.setdefault(info.full_name if info is not None else var.op.name, []).append(var)
    return grouped
