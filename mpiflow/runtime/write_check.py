"""Kernels never write what they do not own, checked where it happens.

A kernel's inputs are other kernels' results, variables' buffers and arrays the caller
fed; only the inputs an op declares (``OpDef.ref_inputs``, handed over as StateRefs, and
ordered and barriered by the plan like every variable write) are its to write. An
undeclared in-place write corrupts a value some other reader, rank or caller still holds,
silently. With MPIFLOW_CHECK_KERNEL_WRITES=1 (the test suite sets it) every kernel of a
plan runs through ``guarded``: numpy inputs arrive as read-only views, so the write raises
at once, and GPU inputs are compared with a copy taken before the kernel.
"""

from __future__ import annotations

import numpy as np

from mpiflow import backend, errors


def guarded(kernel, op, writable=frozenset()):
    """Return ``kernel`` run on read-only views of its inputs (see the module docstring),
    but for the ``writable`` ones: inputs the plan donated to it (``ctx.donated``).

    Results that are views of a writable input (Identity, Reshape) are handed on writable
    again, so what the check changes is only what the kernel itself may do.
    """
    def run(*args):
        views = [a if i in writable else backend.read_only(a) for i, a in enumerate(args)]
        copies = [None if i in writable else backend.snapshot(a)
                  for i, a in enumerate(args)]
        try:
            result = kernel(*views)
        except (ValueError, BufferError) as exc:      # numpy's, or MPI's for a buffer
            if "read-only" not in str(exc) and "not writable" not in str(exc):
                raise
            raise _write_error(op, "an input", exc) from exc
        for i, (array, copy) in enumerate(zip(args, copies)):
            if copy is not None and not backend.unchanged(array, copy):
                raise _write_error(op, f"input {i} ('{_input_name(op, i)}')")
        if isinstance(result, tuple):
            return tuple(_writable_again(r, args) for r in result)
        return _writable_again(result, args)
    return run


def _writable_again(result, inputs):
    if type(result) is np.ndarray and not result.flags.writeable:
        for array in inputs:
            if type(array) is np.ndarray and array.flags.writeable and \
                    np.may_share_memory(result, array):
                result.flags.writeable = True
                break
    return result


def _input_name(op, i) -> str:
    inputs = getattr(op, "inputs", ())
    return inputs[i].name if i < len(inputs) else f"#{i}"


def _write_error(op, which, exc=None) -> errors.InternalError:
    detail = f" ({exc})" if exc is not None else ""
    return errors.InternalError(
        f"Kernel of op '{op.name}' ({op.type}) wrote {which} in place{detail}: a kernel owns "
        "only the inputs its op declares it writes (ref_inputs); write into a new array, or "
        "declare the write so that the plan orders it after the other readers", op)
