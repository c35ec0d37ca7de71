"""Partitioned variables: one logical variable stored as parts along one axis (TF1).

``get_variable(..., partitioner=p)`` (or a ``variable_scope(partitioner=p)``) asks ``p``
how many parts to make along which axis and creates ``name/part_0``, ``name/part_1``, ...
as ordinary Variables, so a device function (``replica_device_setter``) spreads them over
the ps tasks. Rows are split as TensorFlow splits them: the first ``dim % n`` parts get one
extra row. Each part carries a ``SaveSliceInfo`` (where it sits in the full variable) and
its initializer gets a ``PartitionInfo``, so e.g. a constant of the full value initialises
each part with its slice. The getter registers itself in ``variable_scope`` at import;
the partitioners themselves live in ``partitioners.py``.
"""

from __future__ import annotations

import inspect

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops, control_ops, indexing_ops, init_ops, variable_scope
from mpiflow.ops.constant_ops import constant, convert_to_tensor, is_tensor_like
from mpiflow.ops.variables import SaveSliceInfo, Variable


class PartitionInfo:
    """What a part's initializer is told: the full shape and this part's offset in it."""

    def __init__(self, full_shape, var_offset):
        self.full_shape = [int(d) for d in full_shape]
        self.var_offset = [int(o) for o in var_offset]
        if len(self.full_shape) != len(self.var_offset):
            raise errors.InvalidArgumentError(
                f"PartitionInfo: var_offset {self.var_offset} needs one entry per dimension of "
                f"full_shape {self.full_shape}")
        for o, d in zip(self.var_offset, self.full_shape):
            if o < 0 or (o >= d and o != 0):
                raise errors.InvalidArgumentError(
                    f"PartitionInfo: expected 0 <= offset < dimension, got var_offset "
                    f"{self.var_offset} for full_shape {self.full_shape}")

    def single_slice_dim(self, shape):
        """Return the one dimension along which a part of ``shape`` is cut (None: none)."""
        shape = list(shape)
        if len(shape) != len(self.full_shape):
            raise errors.InvalidArgumentError(
                f"PartitionInfo: part shape {shape} and full_shape {self.full_shape} differ "
                "in rank")
        if any(o + n > d for o, n, d in zip(self.var_offset, shape, self.full_shape)):
            raise errors.InvalidArgumentError(
                f"PartitionInfo: a part of shape {shape} at offset {self.var_offset} exceeds "
                f"full_shape {self.full_shape}")
        cut = [i for i, (n, d) in enumerate(zip(shape, self.full_shape)) if n != d]
        if len(cut) > 1:
            raise errors.InvalidArgumentError(
                f"PartitionInfo: a part of shape {shape} of {self.full_shape} is cut along "
                f"dimensions {cut}; only one is supported")
        return cut[0] if cut else None

    def single_offset(self, shape) -> int:
        """Return this part's offset along its slice dimension (0 when not cut)."""
        dim = self.single_slice_dim(shape)
        return 0 if dim is None else self.var_offset[dim]

    def __repr__(self):
        return f"PartitionInfo(full_shape={self.full_shape}, var_offset={self.var_offset})"


_PartitionInfo = PartitionInfo


class PartitionedVariable:
    """A variable stored as parts along one axis; converts to their concatenation."""

    def __init__(self, name: str, shape, dtype, variable_list, partitions):
        variable_list = list(variable_list)
        if not variable_list:
            raise errors.InvalidArgumentError(
                f"PartitionedVariable '{name}': variable_list must not be empty")
        for v in variable_list:
            if not isinstance(v, Variable) or v._save_slice_info is None:
                raise errors.InvalidArgumentError(
                    f"PartitionedVariable '{name}': every part must be a Variable with a "
                    f"SaveSliceInfo, got {v!r}")
        shape = TensorShape(shape)
        partitions = [int(p) for p in partitions]
        if len(partitions) != shape.ndims or any(p < 1 for p in partitions):
            raise errors.InvalidArgumentError(
                f"PartitionedVariable '{name}': partitions {partitions} must hold one count "
                f">= 1 per dimension of shape {shape}")
        if int(np.prod(partitions)) != len(variable_list):
            raise errors.InvalidArgumentError(
                f"PartitionedVariable '{name}': partitions {partitions} call for "
                f"{int(np.prod(partitions))} parts, got {len(variable_list)}")
        self._name = name
        self._shape = shape
        self._dtype = dtypes.as_dtype(dtype)
        self._partitions = partitions
        self._variable_list = sorted(variable_list,
                                     key=lambda v: v._save_slice_info.var_offset)
        # How embedding_lookup addresses the parts when not told (None: TensorFlow's
        # "mod"); TrainingMode's tables say "div", which survives a change of part count.
        self.lookup_strategy = None

    # -- identity ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self) -> TensorShape:
        return self._shape

    def get_shape(self) -> TensorShape:
        return self._shape

    @property
    def graph(self):
        return self._variable_list[0].graph

    def get_variable_list(self) -> list:
        return list(self._variable_list)

    _get_variable_list = get_variable_list

    def get_partitions(self) -> list:
        return list(self._partitions)

    _get_partitions = get_partitions

    def __iter__(self):
        return iter(self._variable_list)

    def __len__(self):
        axes = self._partition_axes()
        if len(axes) > 1:
            raise errors.InvalidArgumentError(
                f"PartitionedVariable '{self._name}' is cut along {len(axes)} axes; len() "
                "needs one")
        return len(self._variable_list)

    def _partition_axes(self) -> list:
        return [i for i, p in enumerate(self._partitions) if p > 1] or [0]

    # -- value ---------------------------------------------------------------------------
    def as_tensor(self) -> Tensor:
        """Return the full value: the parts concatenated along the partition axis."""
        graph = self.graph
        with graph.as_default(), graph.control_dependencies(None):
            if len(self._variable_list) == 1:
                with graph.name_scope(None):
                    return control_ops.identity(self._variable_list[0], name=self._name)
            with graph.name_scope(None), graph.name_scope(self._name + "/ConcatPartitions/"):
                axis = self._partition_axes()[0]
                concat = array_ops.concat([v.value() for v in self._variable_list], axis)
            with graph.name_scope(None):
                return control_ops.identity(concat, name=self._name + "/concat")

    _as_tensor = as_tensor
    _concat = as_tensor

    def assign(self, value, use_locking=False, name=None, read_value=True) -> list:
        """Assign ``value`` (the full shape) part by part; return the list of assigns."""
        value = convert_to_tensor(value, dtype=self._dtype)
        if not value.shape.is_compatible_with(self._shape):
            raise errors.InvalidArgumentError(
                f"PartitionedVariable '{self._name}': cannot assign a value of shape "
                f"{value.shape} to shape {self._shape}")
        axis = self._partition_axes()[0]
        sizes = [v._save_slice_info.var_shape[axis] for v in self._variable_list]
        pieces = indexing_ops.split(value, sizes, axis=axis) if len(sizes) > 1 else [value]
        return [v.assign(piece, use_locking=use_locking)
                for v, piece in zip(self._variable_list, pieces)]

    def __repr__(self):
        return (f"<mf.PartitionedVariable '{self._name}' shape={self._shape} "
                f"dtype={self._dtype.name} parts={len(self._variable_list)}>")


def _delegate(op_name):
    def method(self, *args):
        return getattr(self.as_tensor(), op_name)(*args)
    method.__name__ = op_name
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
            "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
            "__neg__", "__abs__", "__getitem__"):
    setattr(PartitionedVariable, _op, _delegate(_op))
PartitionedVariable.__array_priority__ = 100


# -- the getter --------------------------------------------------------------------------

def _call_partitioner(partitioner, shape: TensorShape, dtype, name: str) -> list:
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': its shape must be fully defined, got {shape}")
    if shape.ndims < 1:
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': a partitioned variable must have rank >= 1, got "
            f"shape {shape}")
    slicing = partitioner(shape=shape, dtype=dtype)
    if not isinstance(slicing, (list, tuple)) or not all(
            isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in slicing):
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': the partitioner must return a list of ints, one "
            f"per dimension, got {slicing!r}")
    slicing = [int(p) for p in slicing]
    if len(slicing) != shape.ndims:
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': the partitioner returned {slicing}, which does "
            f"not match the rank of shape {shape}")
    if any(p < 1 for p in slicing):
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': the partitioner returned {slicing}: every axis "
            "needs at least one partition")
    if sum(p > 1 for p in slicing) > 1:
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': the partitioner returned {slicing} for shape "
            f"{shape}: a variable can only be cut along one axis")
    cut = [i for i, p in enumerate(slicing) if p > 1]
    if cut and slicing[cut[0]] > shape[cut[0]]:
        raise errors.InvalidArgumentError(
            f"Partitioned variable '{name}': the partitioner returned {slicing} for shape "
            f"{shape}: more parts than rows along axis {cut[0]}")
    return slicing


def _iter_slices(full_shape, num_slices, slice_dim):
    """Yield (offset, shape) per part; the first ``dim % num_slices`` get one extra row."""
    extra = full_shape[slice_dim] % num_slices
    base = full_shape[slice_dim] // num_slices
    offset = [0] * len(full_shape)
    for i in range(num_slices):
        shape = list(full_shape)
        shape[slice_dim] = base + (1 if i < extra else 0)
        yield list(offset), shape
        offset[slice_dim] += shape[slice_dim]


def _accepts_partition_info(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "partition_info" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _value_shape(initializer):
    """The shape of an initializer that is a value (Tensor, array), or None for a function."""
    if is_tensor_like(initializer):
        return convert_to_tensor(initializer).shape
    if initializer is not None and not callable(initializer) and not (
            isinstance(initializer, type) and issubclass(initializer, init_ops.Initializer)):
        return TensorShape(np.shape(initializer))
    return None


def _part_initializer(initializer, info: PartitionInfo, var_shape, dtype):
    """Return ``init(shape, dtype=None)`` building the initial value of one part."""
    index = tuple(slice(o, o + n) for o, n in zip(info.var_offset, var_shape))
    if initializer is None:
        initializer = init_ops.GlorotUniform() if dtype.is_floating else init_ops.Zeros()
    if isinstance(initializer, type) and issubclass(initializer, init_ops.Initializer):
        initializer = initializer()
    if is_tensor_like(initializer):
        value = convert_to_tensor(initializer)
        return lambda shape, dtype=None: indexing_ops.slice(value, info.var_offset, var_shape)
    if not callable(initializer):
        piece = np.asarray(initializer)[index]
        return lambda shape, dtype=None: constant(piece, dtype=dtype)
    if _accepts_partition_info(initializer):
        return lambda shape, dtype=None: initializer(shape, dtype=dtype, partition_info=info)
    return initializer


def _get_partitioned_variable(store, name, *, shape, dtype, initializer, regularizer,
                              trainable, collections, validate_shape, reuse, partitioner,
                              constraint=None):
    """Return the PartitionedVariable ``name``, created unless the scope reuses it."""
    if name in store.vars:
        raise errors.InvalidArgumentError(
            f"A partitioner was provided, but an unpartitioned version of the variable was "
            f"found: {name}. Perhaps a variable of the same name was already created without "
            "partitioning?")
    shape = TensorShape(shape)
    value_shape = _value_shape(initializer)
    if value_shape is not None:
        if not shape.is_compatible_with(value_shape):
            raise errors.InvalidArgumentError(
                f"Partitioned variable '{name}': shape {shape} does not match the initial "
                f"value's shape {value_shape}")
        shape = shape.merge_with(value_shape)
    existing = store.partitioned_vars.get(name)
    if existing is not None:
        return _reuse(existing, name, shape, dtype, reuse, partitioner)
    if reuse is True:
        raise errors.InvalidArgumentError(
            f"PartitionedVariable {name} does not exist, or was not created with "
            "mf.get_variable(). Did you mean to set reuse=False or reuse=mf.AUTO_REUSE in "
            "VarScope?")
    partitions = _call_partitioner(partitioner, shape, dtype, name)
    cut = [i for i, p in enumerate(partitions) if p > 1]
    slice_dim, num_slices = (cut[0], partitions[cut[0]]) if cut else (0, 1)
    _check_no_stale_parts(store, name, num_slices)
    full_shape = shape.as_list()
    parts = []
    for i, (offset, var_shape) in enumerate(_iter_slices(full_shape, num_slices, slice_dim)):
        info = PartitionInfo(full_shape, offset)
        init = _part_initializer(initializer, info, var_shape, dtype)
        var = store._single(f"{name}/part_{i}", shape=var_shape, dtype=dtype,
                            initializer=init, regularizer=regularizer, trainable=trainable,
                            collections=collections, validate_shape=validate_shape,
                            reuse=reuse, constraint=constraint)
        var._set_save_slice_info(SaveSliceInfo(name, full_shape, offset, var_shape))
        parts.append(var)
    result = PartitionedVariable(name, shape, dtype, parts, partitions)
    store.partitioned_vars[name] = result
    return result


def _reuse(existing, name, shape, dtype, reuse, partitioner):
    if reuse is False or reuse is None:
        raise errors.InvalidArgumentError(
            f"Partitioned variable with name {name} already exists. Did you mean to set "
            "reuse=True or reuse=mf.AUTO_REUSE in VarScope?")
    if not shape.is_compatible_with(existing.shape):
        raise errors.InvalidArgumentError(
            f"Trying to reuse partitioned variable {name}, but specified shape {shape} and "
            f"found shape {existing.shape}")
    if dtype is not existing.dtype:
        raise errors.InvalidArgumentError(
            f"Trying to reuse partitioned variable {name}, but specified dtype {dtype.name} "
            f"and found dtype {existing.dtype.name}")
    # Without a full shape or a partitioner (reuse=True may leave it out) the partitioner
    # cannot be asked; the stored parts are the answer.
    if shape.is_fully_defined() and partitioner is not None:
        partitions = _call_partitioner(partitioner, shape, dtype, name)
        if partitions != existing.get_partitions():
            raise errors.InvalidArgumentError(
                f"Trying to reuse partitioned variable {name}, but specified partitions "
                f"{partitions} and found partitions {existing.get_partitions()}")
    return existing


def _check_no_stale_parts(store, name, num_slices):
    if f"{name}/part_0" not in store.vars:
        return
    if f"{name}/part_{num_slices - 1}" not in store.vars:
        raise errors.InvalidArgumentError(
            f"Partitioner returned a different partitioning than what was already found. "
            f"Partitioner returned {num_slices} shards, and shard {name}/part_0 was found, "
            f"but {name}/part_{num_slices - 1} was not.")
    if f"{name}/part_{num_slices}" in store.vars:
        raise errors.InvalidArgumentError(
            f"Partitioner returned a different partitioning than what was already found. "
            f"Partitioner returned {num_slices} shards, and shard {name}/part_0 was found, "
            f"but so was the extra shard {name}/part_{num_slices}.")


variable_scope._PARTITIONED_GETTER[:] = [_get_partitioned_variable]


def create_partitioned_variables(shape, slicing, initializer, dtype=dtypes.float32,
                                 trainable: bool = True, collections=None, name=None,
                                 reuse=None) -> list:
    """Create the parts of a variable of ``shape`` cut as ``slicing`` says; return them.

    Deprecated in TensorFlow in favour of ``get_variable(..., partitioner=...)``; kept for
    code written against it.
    """
    shape = list(shape)
    slicing = list(slicing)
    if len(shape) != len(slicing):
        raise errors.InvalidArgumentError(
            f"create_partitioned_variables: shape {shape} and slicing {slicing} must have "
            "the same length")
    if len(shape) < 1:
        raise errors.InvalidArgumentError(
            "create_partitioned_variables: a partitioned variable must have rank >= 1")
    with variable_scope.variable_scope(name, default_name="PartitionedVariable",
                                       reuse=reuse) as scope:
        store = variable_scope._store()
        result = _get_partitioned_variable(
            store, scope.name, shape=shape, dtype=dtypes.as_dtype(dtype),
            initializer=initializer, regularizer=None, trainable=trainable,
            collections=collections, validate_shape=True, reuse=scope.reuse,
            partitioner=lambda **unused: slicing)
    return list(result)
