"""Chains of elementwise ops on a GPU run as one fused kernel.

Written with array calls, ``relu(x @ w + b)`` and its gradient launch a GPU kernel per
op and move every intermediate through device memory; a training step of an MLP spends
more time there than in its matrix products. When a plan is compiled, ``find_groups``
collects connected elementwise ops (``OpDef.fusable``: their ``forward`` is ufunc
arithmetic) on one GPU, and the plan runs each group as one call of ``cupy.fuse`` over
the members' own ``forward`` functions, so the fused kernel computes exactly the formula
the numpy reference does. Results only the group reads stay in registers; results that
ops outside read later (activations kept for the backward pass) are given out by the
same kernel.

A group is checked once per input signature (dtypes and ranks): its first call runs the
members one by one too and compares; a formula cupy cannot fuse, or one it fuses to other
values or dtypes, makes the group run unfused from then on (logged once). A kernel that
fails is run again op by op, so the error names the op that failed.
``MPIFLOW_FUSE_ELEMENTWISE=0`` turns fusion off.
"""

from __future__ import annotations

import bisect

import numpy as np

from mpiflow import backend, config, errors, logger
from mpiflow.framework import dtypes
from mpiflow.ops.registry import get_op_def

_log = logger.get_logger(__name__)


def fuser(xp):
    """The function that fuses a Python formula into one kernel for array module ``xp``,
    or None where there is none (numpy) or fusion is off. Tests replace it to exercise
    the grouping on the host."""
    if not config.get("MPIFLOW_FUSE_ELEMENTWISE"):
        return None
    return backend.elementwise_fuser(xp)


class Group:
    """Ops that run as one kernel: ``members`` in plan order (the last is the root),
    ``inputs``, the tensors they read from outside the group (in first-use order), and
    ``outputs``, the tensors the kernel gives out: members' results that something outside
    the group reads or the caller fetches, then the root's."""

    def __init__(self, members, outputs):
        self.members = members
        self.outputs = outputs
        inside = {op.outputs[0] for op in members}
        self.inputs = list(dict.fromkeys(t for op in members for t in op.inputs
                                         if t not in inside))

    @property
    def root(self):
        return self.members[-1]


def find_groups(order, place_of, fed, fetched, barriers):
    """Return the fusable ``Group``s of ``order`` (groups of one op are left out).

    ``place_of(op)`` is the device an op's kernel runs on (None: not fusable there). A
    group runs where its root is in ``order``, so an op joins a group only if everything
    else reading its result runs after that root (no cycle through ops outside, no reader
    left without its input). ``fed`` outputs are never computed inside a group;
    ``fetched`` ones are given out. ``barriers`` are ops no group may span: writers of
    variables (a member would otherwise read a value the writer has already changed by
    the time the root runs), and steps where the plan may wait and another step's writer
    run meanwhile (receives, async kernels).
    """
    position = {op: i for i, op in enumerate(order)}
    consumers = {}
    for op in order:
        for t in op.inputs:
            consumers.setdefault(t, set()).add(op)
        for c in op._control_inputs:
            consumers.setdefault(c, set()).add(op)      # control edges pin an op in place
    barrier_positions = sorted(position[op] for op in barriers if op in position)

    def spans_barrier(start, end):
        k = bisect.bisect_right(barrier_positions, start)
        return k < len(barrier_positions) and barrier_positions[k] < end
    group_of = {}
    groups = []

    def runs_at(op):
        """Where ``op`` runs: its own position, or its group's root's."""
        return position[group_of[op][-1] if op in group_of else op]

    for op in reversed(order):
        place = place_of(op)
        if place is None or not _fusable(op):
            continue
        members = _joinable_group(op, place, consumers, group_of, fed, place_of, position,
                                  runs_at, spans_barrier)
        if members is None:
            members = [op]
            groups.append(members)
        else:
            members.insert(0, op)
        group_of[op] = members
    found = []
    for members in groups:
        if len(members) < 2:
            continue
        inside = set(members)
        given_out = [m.outputs[0] for m in members[:-1]
                     if m.outputs[0] in fetched or
                     any(r not in inside for r in consumers.get(m.outputs[0], ()))]
        found.append(Group(members, given_out + [members[-1].outputs[0]]))
    return found


def _fusable(op) -> bool:
    op_def = get_op_def(op.type)
    if not op_def.fuses(op) or len(op.outputs) != 1:
        return False
    if op_def.host_inputs or op_def.host_outputs or op_def.ref_inputs or \
            op_def.tuple_outputs or op_def.stateful or op_def.async_kernel or \
            op_def.transfer is not None:
        return False        # a group's inputs are plain values on its GPU, read once
    # cupy.fuse has no bfloat16: such chains run op by op.
    return all(t.dtype is not dtypes.bfloat16 for t in list(op.inputs) + op.outputs)


def _joinable_group(op, place, consumers, group_of, fed, place_of, position, runs_at,
                    spans_barrier):
    """The members of the group ``op`` can join (it reads ``op``'s result), or None."""
    out = op.outputs[0]
    if out in fed or op in consumers:        # fed, or a control input of something
        return None
    readers = consumers.get(out, ())
    grouped = {id(group_of[r]): group_of[r] for r in readers if r in group_of}
    if not grouped:
        return None
    # Of the groups reading it, the one that runs first (the others read it after).
    members = min(grouped.values(), key=lambda m: position[m[-1]])   # plan order
    root = members[-1]
    if place_of(root) != place:
        return None
    end = position[root]
    if any(runs_at(r) <= end for r in readers if group_of.get(r) is not members):
        return None         # a reader outside the group runs before the group does
    if spans_barrier(position[op], end):
        return None
    return members


class FusedGroup:
    """The kernel of one group: ``run(*inputs)`` computes the group's outputs (a tuple
    where it gives out more than its root's) from its inputs (the tensors its members
    read from outside it)."""

    def __init__(self, group, contexts, fuse):
        self.members = group.members
        self.root = group.root
        self.outputs = group.outputs
        self.inputs = group.inputs
        self.name = "+".join(op.type for op in self.members)
        self._formula = self._compose(contexts,
                                      lambda op_def, xp: op_def.fusion_forward or op_def.forward)
        self._unfused = self._compose(       # each op's own kernel, as the plan would run it
            contexts, lambda op_def, xp: op_def.kernel_for(xp))
        self._fused = fuse(self._formula)
        self._checked = set()
        self._broken = False

    def _compose(self, contexts, kernel_of):
        """One Python function running the members in order on the group's inputs; a
        member that raises is named in the error (the unfused path)."""
        index = {t: i for i, t in enumerate(self.inputs)}
        produced = {op.outputs[0]: k for k, op in enumerate(self.members)}
        steps = []
        for op, ctx in zip(self.members, contexts):
            op_def = get_op_def(op.type)
            sources = tuple((False, index[t]) if t in index else (True, produced[t])
                            for t in op.inputs)
            steps.append((kernel_of(op_def, ctx.xp), ctx, sources))
        given_out = [produced[t] for t in self.outputs]
        single = len(given_out) == 1

        def formula(*inputs):
            results = []
            for kernel, ctx, sources in steps:
                args = [results[i] if inner else inputs[i] for inner, i in sources]
                try:
                    results.append(kernel(ctx.xp, ctx, *args))
                except errors.OpError:
                    raise
                except Exception as exc:
                    raise errors.kernel_error(exc, ctx.op) from exc
            if single:
                return results[-1]
            return tuple(results[k] for k in given_out)
        return formula

    def __call__(self, *inputs):
        if self._broken:
            return self._unfused(*inputs)
        # cupy.fuse compiles per dtypes and ranks; shapes may change freely.
        signature = tuple((getattr(x, "dtype", None), getattr(x, "ndim", None))
                          for x in inputs)
        if signature not in self._checked:
            return self._first_call(signature, inputs)
        try:
            return self._fused(*inputs)
        except MemoryError:
            raise
        except Exception as exc:
            result = self._unfused(*inputs)     # raises, naming the op that fails...
            self._broken = True                 # ...or the fused kernel is at fault
            _log.info("elementwise ops %s (root %s) run unfused: %s: %s", self.name,
                      self.root.name, type(exc).__name__, exc)
            return result

    def _first_call(self, signature, inputs):
        expected = self._unfused(*inputs)       # raises, naming the op, on bad input
        try:
            fused = self._fused(*inputs)
            if len(self.outputs) == 1:
                problem = _difference(fused, expected)
            elif not isinstance(fused, tuple) or len(fused) != len(expected):
                problem = f"fused kernel gave {type(fused).__name__}, not {len(expected)} " \
                          "outputs"
            else:
                problem = "; ".join(filter(None, map(_difference, fused, expected)))
        except MemoryError:
            raise           # no verdict on the formula: the next call tries again
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
