"""State a session (or a ps serving sessions) keeps across steps: variable buffers, RNGs,
shared resources. Kernels reach it through their ``KernelEnv`` (``kernel_env``).

Kernels reach variables only through ``StateRef`` handles bound once per plan, so the
executor's hot loop never looks a variable up by name.
"""

from __future__ import annotations

import numpy as np

from mpiflow import backend, errors

# The words of the error for reading a variable before it is set, which sessions
# recognise (after it crossed ranks as text) to add what to do about it.
UNINITIALIZED_VALUE = "uninitialized value"


class StateRef:
    """A handle on one variable's buffer in a ``ResourceStore``."""

    __slots__ = ("_store", "_name", "_op", "_dtype", "_static_shape", "_dims")

    def __init__(self, store: "ResourceStore", op):
        self._store = store
        self._name = op.name
        self._op = op
        out = op.outputs[0]
        self._dtype = out.dtype.np_dtype
        self._static_shape = out.shape
        self._dims = None if out.shape.ndims is None else tuple(out.shape.as_list())

    @property
    def name(self) -> str:
        return self._name

    @property
    def initialized(self) -> bool:
        return self._name in self._store.buffers

    def read(self):
        """Return the live buffer for reading; raise FailedPreconditionError if unset."""
        try:
            buffer = self._store.buffers[self._name]
        except KeyError:
            raise self._uninitialized() from None
        if buffer.dtype != self._dtype or (buffer.shape != self._dims and
                                           not self._fits(buffer.shape) and
                                           self._name not in self._store.reshaped):
            raise self._declared_otherwise(buffer)
        return buffer

    def get(self):
        """Return the live buffer for an in-place write (after in-flight sends of it end)."""
        barrier = self._store.write_barrier
        if barrier is not None:
            barrier(self._name)
        return self.read()

    def _fits(self, shape) -> bool:
        dims = self._dims
        return dims is None or (len(dims) == len(shape) and
                                all(d is None or d == s for d, s in zip(dims, shape)))

    def _declared_otherwise(self, buffer):
        """The error for a variable that holds what this graph does not declare: two
        workers built the same variable differently (the first made it, the other reads)."""
        return errors.op_error(
            errors.InvalidArgumentError,
            f"Variable '{self._name}' holds {buffer.dtype} {list(buffer.shape)}, but this "
            f"graph declares it {np.dtype(self._dtype)} {self._static_shape}: every worker "
            "must build the same variables (another graph made it first)", self._op)

    def _uninitialized(self):
        return errors.op_error(
            errors.FailedPreconditionError,
            f"Attempting to use {UNINITIALIZED_VALUE} {self._name} (run "
            "mf.global_variables_initializer() or restore a checkpoint first)", self._op)

    def get_checked(self, shape):
        """Return the buffer after checking an update of ``shape`` fits it in place."""
        var = self.get()
        if tuple(shape) != var.shape and np.broadcast_shapes(var.shape, tuple(shape)) != \
                var.shape:
            raise errors.op_error(errors.InvalidArgumentError,
                                  "Update does not match the variable's shape", self._op,
                                  expected=list(var.shape), got=list(shape))
        return var

    def set(self, value, validate_shape: bool = True, owned: bool = False):
        """Store ``value``: copied (the variable never aliases a constant or a feed), but
        for a value the caller ``owned`` outright (the plan donated it, nothing else holds
        it) that sits where a variable's buffer would (``backend.placed_to_last``): that
        one becomes the buffer where the variable has none of its shape yet."""
        value = np.asarray(value) if isinstance(value, (list, tuple, float, int)) else value
        if validate_shape and not self._static_shape.admits(value.shape):
            raise errors.op_error(errors.InvalidArgumentError,
                                  "Assigned value does not match the variable's shape",
                                  self._op, expected=self._static_shape, got=list(value.shape))
        barrier = self._store.write_barrier
        if barrier is not None:
            barrier(self._name)
        buffers = self._store.buffers
        current = buffers.get(self._name)
        if current is not None and current.dtype != self._dtype:
            raise self._declared_otherwise(current)
        if validate_shape:
            self._store.reshaped.discard(self._name)
        else:                       # a shape of its own now, on purpose (TF1 allows it)
            self._store.reshaped.add(self._name)
        if current is not None and current.shape == value.shape and \
                current.dtype == value.dtype:
            current[...] = value        # in place: the buffer stays where it is
            return current
        if owned and value.dtype == self._dtype and backend.placed_to_last(value):
            fresh = value
        elif backend.is_device_array(value):
            fresh = value.astype(self._dtype, copy=True)
        else:           # on huge pages from 64 KiB: MPI sends it faster (pulls)
            fresh = backend.lasting_host_empty(np.shape(value), self._dtype)
            fresh[...] = value
        buffers[self._name] = fresh
        return fresh


class ResourceStore:
    """Variable buffers (by variable op name) and per-op random generators."""

    def __init__(self):
        self.buffers = {}
        self.reshaped = set()       # variables assigned a new shape (validate_shape=False)
        self._rngs = {}
        # Called with a variable's name before any in-place write to it; the runtime sets
        # it to finish sends still reading that buffer (zero-copy pulls).
        self.write_barrier = None
        # Shared resources other than variables (accumulators, token counters), by name.
        self.resources = {}

    def ref(self, op) -> StateRef:
        return StateRef(self, op)

    def rng(self, op) -> np.random.Generator:
        """Return the generator of random op ``op``, seeded from its (seed, seed2) attrs."""
        gen = self._rngs.get(op.name)
        if gen is None:
            seed, seed2 = op.get_attr("seed"), op.get_attr("seed2")
            gen = np.random.default_rng([seed, seed2] if (seed or seed2) else None)
            self._rngs[op.name] = gen
        return gen

    def resource(self, name: str, factory):
        """Return the shared resource ``name``, creating it with ``factory()`` first."""
        found = self.resources.get(name)
        if found is None:
            # setdefault is atomic: two kernels that ask at once get the same resource.
            found = self.resources.setdefault(name, factory())
        return found

    def clear(self) -> None:
        self.buffers.clear()
        self.reshaped.clear()
        self._rngs.clear()
        self.resources.clear()
