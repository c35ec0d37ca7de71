"""Checkpoint ops: SaveShard writes one shard file, RestoreSlice reads one variable back.

There is no string dtype, so a checkpoint path travels as a uint8 tensor of its UTF-8
bytes: ``path_tensor()`` makes the placeholder, ``encode_path(str)`` the value to feed.
Both ops are stateful and have no gradient. ``mf.train.Saver`` colocates one SaveShard
with the variables of each device (each ps writes its own shard) and one RestoreSlice
with each variable. The file format lives in ``checkpoint_format``, reading in
``checkpoint_reader``.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import checkpoint_reader
from mpiflow.ops.checkpoint_format import SliceSpec, decode_path, encode_path
from mpiflow.ops.constant_ops import convert_to_tensor, placeholder
from mpiflow.ops.registry import REQUIRED, OpDef, apply_op, register_op

__all__ = ["encode_path", "path_tensor", "restore_slice", "save_shard"]


def _check_path_input(b, i=0, what="the checkpoint path"):
    if b.dtype(i) is not dtypes.uint8 or b.shape(i).ndims not in (None, 1):
        raise b.error(f"Input {i} ({what}) must be a uint8 vector of UTF-8 bytes",
                      expected="uint8 of shape [n]", got=f"{b.dtype(i).name} {b.shape(i)}")


def _host(xp, value) -> np.ndarray:
    """A numpy view of a kernel input (a copy only for a GPU array)."""
    return value if isinstance(value, np.ndarray) else xp.asnumpy(value)


@register_op("SaveShard", attrs={"names": REQUIRED, "slices": REQUIRED, "shard": REQUIRED,
                                 "num_shards": REQUIRED, "lookups": []})
class SaveShardOp(OpDef):
    """Write ``values`` to ``{prefix}.shard-{shard:05d}-of-{num_shards:05d}.{save_id}.npz``.

    Inputs: the path prefix and the save's id (both UTF-8 bytes as uint8), then the values.
    Output: the shard's manifest (UTF-8 JSON bytes as uint8), which the Saver turns into
    the checkpoint's index.
    """
    gpu_kernel = False

    stateful = True
    gradient = None

    def infer(self, b):
        _check_path_input(b)
        _check_path_input(b, 1, "the save id")
        names, slices = list(b.attrs["names"]), list(b.attrs["slices"])
        n_values = len(b.inputs) - 2
        if len(names) != n_values or len(slices) != n_values:
            raise b.error("SaveShard needs one name and one slice spec per value",
                          expected=f"{n_values} names and slices",
                          got=f"{len(names)} names, {len(slices)} slices")
        if len(set(zip(names, slices))) != len(names):
            raise b.error("SaveShard saves a (name, slice) twice", got=names)
        shard, num_shards = int(b.attrs["shard"]), int(b.attrs["num_shards"])
        if not 0 <= shard < num_shards:
            raise b.error("Shard index out of range", expected=f"0 <= shard < {num_shards}",
                          got=shard)
        for i, (name, spec) in enumerate(zip(names, slices)):
            if not isinstance(name, str) or not name:
                raise b.error(f"Checkpoint name {i} must be a non-empty str", got=repr(name))
            if spec:
                box = SliceSpec.parse(spec)
                if not b.shape(i + 2).is_compatible_with(box.length):
                    raise b.error(f"Value {i} ('{name}') does not have the shape of its slice "
                                  f"{spec!r}", expected=box.length, got=b.shape(i + 2))
        return [(dtypes.uint8, [None])]

    def forward(self, xp, ctx, prefix, save_id, *values):
        attrs = ctx.attrs
        arrays = [_host(xp, v) for v in values]
        for name, spec, array in zip(attrs["names"], attrs["slices"], arrays):
            if spec and list(array.shape) != SliceSpec.parse(spec).length:
                raise errors.op_error(errors.InvalidArgumentError, f"Value of '{name}' does "
                                      f"not have the shape of its slice {spec!r}", ctx.op,
                                      expected=SliceSpec.parse(spec).length,
                                      got=list(array.shape))
        manifest = fmt.write_shard(decode_path(_host(xp, prefix), ctx.op),
                                   decode_path(_host(xp, save_id), ctx.op), attrs["shard"],
                                   attrs["num_shards"], attrs["names"], attrs["slices"],
                                   attrs["lookups"], arrays, ctx.op)
        return xp.asarray(np.frombuffer(manifest, dtype=np.uint8))


@register_op("RestoreSlice", attrs={"name": REQUIRED, "slice": "", "dtype": REQUIRED,
                                    "shape": TensorShape(None), "lookup": "",
                                    "fallback": ""})
class RestoreSliceOp(OpDef):
    """Return slice ``slice`` ("" = whole) of checkpoint tensor ``name``, however it was
    saved (whole, or as slices of another partitioning). ``lookup`` "mod:<parts>": the
    variable is a part of a table looked up with "mod" (see ``read_slice``).
    ``fallback``: the tensor read where the checkpoint has no ``name``."""
    gpu_kernel = False

    stateful = True
    gradient = None

    def infer(self, b):
        _check_path_input(b)
        shape = TensorShape(b.attrs["shape"])
        spec = b.attrs["slice"]
        if spec:
            box = SliceSpec.parse(spec)
            if not shape.is_compatible_with(box.length):
                raise b.error(f"Slice {spec!r} does not match the shape", expected=shape,
                              got=box.length)
            shape = shape.merge_with(box.length)
        return [(b.attrs["dtype"], shape)]

    def forward(self, xp, ctx, prefix):
        shape = ctx.op.outputs[0].shape
        value = checkpoint_reader.read_slice(
            decode_path(_host(xp, prefix), ctx.op), ctx.attrs["name"], ctx.attrs["slice"],
            ctx.attrs["dtype"], None if shape.ndims is None else shape.as_list(), ctx.op,
            ctx.attrs["lookup"], ctx.attrs["fallback"])
        return xp.asarray(value)


def path_tensor(name: str = "filename"):
    """Return a placeholder for a checkpoint path (feed it ``encode_path(path)``)."""
    return placeholder(dtypes.uint8, [None], name=name)


def save_shard(prefix, save_id, values, names, slices, shard: int = 0, num_shards: int = 1,
               lookups=None, name=None):
    """Add a SaveShard op writing ``values`` as shard ``shard`` of ``num_shards``.

    Args:
        prefix: the path tensor (see ``path_tensor``).
        save_id: a tensor of the save's id (fed like the path: ``encode_path(id)``).
        values: tensors to save, one per name.
        names: checkpoint names (a partition part's full variable name).
        slices: slice spec of each value in its full tensor ("" = the whole tensor).
        lookups: per value, "mod:<parts>" for a part of a table looked up with "mod",
            else "" (recorded so that a restore into another part count is refused).

    Returns:
        The manifest tensor (uint8 JSON bytes) describing what the shard holds.
    """
    values = [convert_to_tensor(v) for v in values]
    return apply_op("SaveShard", [prefix, save_id] + values,
                    {"names": [str(n) for n in names], "slices": [str(s) for s in slices],
                     "shard": int(shard), "num_shards": int(num_shards),
                     "lookups": [str(k) for k in (lookups or [""] * len(values))]},
                    name=name).outputs[0]


def restore_slice(prefix, tensor_name: str, slice_spec: str, dtype, shape=None, lookup="",
                  fallback="", name=None):
    """Add a RestoreSlice op reading ``slice_spec`` of ``tensor_name`` (of ``fallback``
    where the checkpoint has no ``tensor_name``); return its value."""
    return apply_op("RestoreSlice", [prefix],
                    {"name": str(tensor_name), "slice": str(slice_spec),
                     "dtype": dtypes.as_dtype(dtype), "shape": TensorShape(shape),
                     "lookup": str(lookup), "fallback": str(fallback)},
                    name=name).outputs[0]
