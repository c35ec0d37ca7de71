"""Chains of elementwise ops on a GPU run as one fused kernel.

Written with array calls, ``relu(x @ w + b)`` and its gradient launch a GPU kernel per
op and move every intermediate through device memory; a training step of an MLP spends
more time there than in its matrix products. When a plan is compiled, ``find_groups``
collects connected elementwise ops (``OpDef.fusable``: their ``forward`` is ufunc
arithmetic) on one GPU whose intermediate results nothing else reads, and the plan runs
each group as one call of ``cupy.fuse`` over the members' own ``forward`` functions, so
the fused kernel computes exactly the formula the numpy reference does.

A group is checked once per input signature: its first call runs the members one by one
too and compares; a formula cupy cannot fuse, or one it fuses to other values or dtypes,
makes the group run unfused from then on (logged once). ``MPIFLOW_FUSE_ELEMENTWISE=0``
turns fusion off.
"""

from __future__ import annotations

import numpy as np

from mpiflow import backend, config, logger
from mpiflow.ops.registry import get_op_def, has_fused_kernels

_log = logger.get_logger(__name__)


def fuser(xp):
    """The function that fuses a Python formula into one kernel for array module ``xp``,
    or None where there is none (numpy) or fusion is off. Tests replace it to exercise
    the grouping on the host."""
    if not config.get("MPIFLOW_FUSE_ELEMENTWISE"):
        return None
    return getattr(xp, "fuse", None)


def find_groups(order, place_of, keep, barriers):
    """Return the fusable groups of ``order``, each a list of ops in ``order``'s order,
    the last one (the root) the only one whose output leaves the group.

    ``place_of(op)`` is the GPU an op's kernel runs on (None: host); ``keep`` holds the
    tensors that must be materialised (fetched, fed); ``barriers`` are ops no group may
    span (writers of variables: a member would otherwise read a value the writer has
    already changed by the time the root runs).
    """
    position = {op: i for i, op in enumerate(order)}
    consumers = {}
    for op in order:
        for t in op.inputs:
            consumers.setdefault(t, set()).add(op)
        for c in op._control_inputs:
            consumers.setdefault(c, set()).add(op)      # control edges pin an op in place
    barrier_positions = sorted(position[op] for op in barriers if op in position)
    group_of = {}
    groups = []
    for op in reversed(order):
        place = place_of(op)
        if place is None or not _fusable(op):
            continue
        group = _joinable_group(op, place, consumers, group_of, keep, place_of, position,
                                barrier_positions)
        if group is None:
            group = {"root": op, "members": []}
            groups.append(group)
        group["members"].append(op)
        group_of[op] = group
    return [sorted(g["members"], key=position.__getitem__) for g in groups
            if len(g["members"]) > 1]


def _fusable(op) -> bool:
    op_def = get_op_def(op.type)
    if not op_def.fuses(op) or len(op.outputs) != 1:
        return False
    # cupy.fuse has no bfloat16 (ml_dtypes' kind 'V'): such chains run op by op.
    return all(t.dtype.np_dtype.kind != "V" for t in list(op.inputs) + op.outputs)


def _joinable_group(op, place, consumers, group_of, keep, place_of, position,
                    barrier_positions):
    """The group ``op`` can join as an inner member, or None."""
    out = op.outputs[0]
    if out in keep or op in consumers:       # fetched/fed, or a control input of something
        return None
    groups = [group_of.get(reader) for reader in consumers.get(out, ())]
    group = groups[0] if groups else None
    if group is None or any(g is not group for g in groups):
        return None
    if place_of(group["root"]) != place:
        return None
    start, end = position[op], position[group["root"]]
    if any(start < b < end for b in barrier_positions):
        return None
    return group


def group_inputs(members):
    """The tensors a group's members read from outside it, in first-use order."""
    inside = {op.outputs[0] for op in members}
    inputs = []
    for op in members:
        for t in op.inputs:
            if t not in inside and t not in inputs:
                inputs.append(t)
    return inputs


class FusedGroup:
    """The kernel of one group: ``run(*inputs)`` computes the root's output from the
    group's inputs (the tensors its members read from outside it)."""

    def __init__(self, members, contexts, fuse):
        self.members = members
        self.root = members[-1]
        self.inputs = group_inputs(members)
        self.name = "+".join(op.type for op in members)
        self._formula = self._compose(members, contexts,
                                      lambda op_def, xp: op_def.fusion_forward or op_def.forward)
        self._unfused = self._compose(       # each op's own kernel, as the plan would run it
            members, contexts, lambda op_def, xp: op_def.gpu_forward
            if op_def.gpu_forward is not None and has_fused_kernels(xp) else op_def.forward)
        self._fused = fuse(self._formula)
        self._checked = set()
        self._broken = False

    def _compose(self, members, contexts, kernel_of):
        """One Python function running the members in order on the group's inputs."""
        index = {t: i for i, t in enumerate(self.inputs)}
        steps = []
        for op, ctx in zip(members, contexts):
            op_def = get_op_def(op.type)
            sources = tuple((False, index[t]) if t in index else
                            (True, members.index(t.op)) for t in op.inputs)
            steps.append((kernel_of(op_def, ctx.xp), ctx, sources))

        def formula(*inputs):
            results = []
            for kernel, ctx, sources in steps:
                args = [results[i] if inner else inputs[i] for inner, i in sources]
                results.append(kernel(ctx.xp, ctx, *args))
            return results[-1]
        return formula

    def __call__(self, *inputs):
        if self._broken:
            return self._unfused(*inputs)
        signature = tuple((getattr(x, "dtype", None), getattr(x, "shape", None))
                          for x in inputs)
        if signature in self._checked:
            return self._fused(*inputs)
        return self._first_call(signature, inputs)

    def _first_call(self, signature, inputs):
        expected = self._unfused(*inputs)
        try:
            fused = self._fused(*inputs)
            problem = _difference(fused, expected)
        except Exception as exc:    # a formula cupy cannot fuse: unfused from now on
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            self._broken = True
            _log.info("elementwise ops %s (root %s) run unfused: %s", self.name,
                      self.root.name, problem)
            return expected
        self._checked.add(signature)
        return fused


def _difference(fused, expected):
    """Why ``fused`` is not ``expected`` (dtype, shape, values), or '' when it is. Compared
    on the host: this runs once per group and input signature."""
    if getattr(fused, "dtype", None) != expected.dtype:
        return f"fused dtype {getattr(fused, 'dtype', type(fused))} != {expected.dtype}"
    if fused.shape != expected.shape:
        return f"fused shape {fused.shape} != {expected.shape}"
    fused, expected = backend.to_host(fused), backend.to_host(expected)
    if expected.dtype.kind in "biu":
        same = np.array_equal(fused, expected)
    else:
        tolerance = 1e-2 if expected.dtype.itemsize <= 2 else 1e-5
        same = np.allclose(fused.astype(np.float64), expected.astype(np.float64),
                           rtol=tolerance, atol=tolerance, equal_nan=True)
    return "" if same else "fused values differ from the unfused kernels"
