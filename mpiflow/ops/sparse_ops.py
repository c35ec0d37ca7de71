"""Row access with sparse gradients: gather, embedding_lookup, unsorted_segment_sum.

Gather along axis 0 has an ``IndexedSlices`` gradient, so training an embedding table
touches only the rows a batch used; ``indexed_slices_to_dense`` densifies where needed.
``embedding_lookup`` over a sharded table partitions the ids per shard (data_flow_ops),
gathers next to each shard and stitches the rows back in the ids' order.
"""

from __future__ import annotations

import warnings

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops, clip_ops, control_ops, data_flow_ops, indexing_ops, math_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.registry import (
    OpDef, add_at, apply_op, const_value, is_index, normalize_axis, register_op, require_dtype)


def _check_indices(ctx, indices, limit, what="params"):
    if indices.size and (indices.min() < 0 or indices.max() >= limit):
        bad = indices[(indices < 0) | (indices >= limit)].ravel()[0]
        raise errors.op_error(errors.InvalidArgumentError, "Index out of range", ctx.op,
                              expected=f"indices in [0, {limit}) for {what}", got=int(bad))


@register_op("GatherV2", attrs={"axis": 0})
class GatherOp(OpDef):
    def infer(self, b):
        require_dtype(b, 1, is_index, "indices")
        p, i = b.shape(0), b.shape(1)
        if p.ndims is None or i.ndims is None:
            return [(b.dtype(0), TensorShape(None))]
        if p.ndims == 0:
            raise b.error("gather params must have rank >= 1", got=p)
        axis = normalize_axis(b, b.attrs["axis"], p.ndims)
        dims = p.as_list()
        return [(b.dtype(0), dims[:axis] + i.as_list() + dims[axis + 1:])]

    def forward(self, xp, ctx, params, indices):
        # The axis attr may be negative (or unchecked, when params' rank was unknown at
        # build time): checked against the runtime rank, naming the op.
        axis = array_ops.runtime_axis(ctx, ctx.attrs["axis"], params.ndim)
        _check_indices(ctx, indices, params.shape[axis])
        if ctx.outgoing is not None and axis == 0:     # rows a ps sends
            out = ctx.outgoing(indices.shape + params.shape[1:], params.dtype)
            # Indices are checked: 'clip' changes none, and numpy writes into ``out``
            # directly (with 'raise' it goes through a temporary).
            return xp.take(params, indices, axis=0, out=out, mode="clip")
        return xp.take(params, indices, axis=axis)

    def gradient(self, op, g):
        params, indices = op.inputs
        axis = op.get_attr("axis")
        if params.shape.ndims is not None:
            axis %= max(params.shape.ndims, 1)
        params_shape = math_ops.shape(params)
        if axis == 0:
            flat_indices = array_ops.reshape(indices, [-1])
            row = g.shape[indices.shape.ndims:] if None not in (
                g.shape.ndims, indices.shape.ndims) else TensorShape(None)
            # A row shape known when the graph is built keeps the values' static shape.
            inner = [-1] + row.as_list() if row.is_fully_defined() else \
                apply_op("GatherRowShape", [g, indices]).outputs[0]
            values = array_ops.reshape(g, inner)
            return [IndexedSlices(values, flat_indices, params_shape), None]
        dense = apply_op("GatherDenseGrad", [g, indices, params_shape],
                         {"axis": axis}).outputs[0]
        return [dense, None]


@register_op("GatherRowShape")
class GatherRowShapeOp(OpDef):
    """Shape [-1] + g.shape[indices.ndim:]: the values shape of gather's sparse gradient."""
    host_outputs = True

    gradient = None

    def infer(self, b):
        g, i = b.shape(0), b.shape(1)
        n = None if g.ndims is None or i.ndims is None else g.ndims - i.ndims + 1
        return [("int64", [n])]

    def forward(self, xp, ctx, g, indices):
        return np.asarray((-1,) + g.shape[indices.ndim:], dtype=np.int64)


@register_op("GatherDenseGrad", attrs={"axis": 0})
class GatherDenseGradOp(OpDef):
    """Scatter-add gather's gradient into a dense zero tensor (for axis != 0)."""
    host_inputs = (2,)

    def infer(self, b):
        return [(b.dtype(0), math_ops.shape_from_tensor(b.inputs[2]))]

    def forward(self, xp, ctx, g, indices, params_shape):
        axis = ctx.attrs["axis"] % len(params_shape)
        out = xp.zeros(tuple(int(d) for d in params_shape), dtype=g.dtype)
        moved = xp.moveaxis(out, axis, 0)
        g_moved = xp.moveaxis(g, list(range(axis, axis + indices.ndim)),
                              list(range(indices.ndim)))
        add_at(xp, moved, indices, g_moved)
        return out

    def gradient(self, op, g):
        return [gather(g, op.inputs[1], axis=op.get_attr("axis")), None, None]


def gather(params, indices, axis=0, name=None, validate_indices=None, batch_dims=0):
    """Return slices of ``params`` at ``indices`` along ``axis``."""
    if batch_dims:
        raise errors.UnimplementedError("gather: batch_dims != 0 is not supported")
    p = convert_to_tensor(params)
    i = convert_to_tensor(indices)
    return apply_op("GatherV2", [p, i], {"axis": array_ops.static_axis(axis, "gather axis")},
                    name=name).outputs[0]


@register_op("Unique", attrs={"out_idx": dtypes.int32})
class UniqueOp(OpDef):
    """y = the distinct values of the vector x in the order they first appear;
    idx[i] = the position of x[i] in y (TensorFlow's Unique)."""

    tuple_outputs = True
    gradient = None

    def infer(self, b):
        if b.shape(0).ndims not in (None, 1):
            raise b.error("unique needs a vector", expected="rank 1", got=b.shape(0))
        out_idx = b.attrs["out_idx"]
        if not is_index(out_idx):
            raise b.error("Invalid out_idx", expected="int32 or int64", got=out_idx.name)
        return [(b.dtype(0), [None]), (out_idx, b.shape(0))]

    def forward(self, xp, ctx, x):
        if x.ndim != 1:
            raise array_ops.kernel_error(ctx, "unique needs a vector", expected="rank 1",
                                         got=x.shape)
        _, first, inverse = xp.unique(x, return_index=True, return_inverse=True)
        order = xp.argsort(first)                # sorted values -> first-appearance order
        position = xp.empty_like(order)
        position[order] = xp.arange(order.size)
        idx = position[inverse.reshape(-1)].astype(ctx.attrs["out_idx"].np_dtype)
        return x[first[order]], idx


def unique(x, out_idx=dtypes.int32, name=None):
    """Return (y, idx): the distinct values of the vector ``x`` in the order they first
    appear, and for each element of ``x`` its position in ``y``."""
    op = apply_op("Unique", [convert_to_tensor(x)], {"out_idx": dtypes.as_dtype(out_idx)},
                  name=name)
    return op.outputs[0], op.outputs[1]


def deduplicate_indexed_slices(slices: IndexedSlices) -> IndexedSlices:
    """``slices`` with the values of each repeated index summed into one row, each index
    once (in the order it first appears): what an optimizer's own sparse update is given
    in TensorFlow, so a ``scatter_update`` of a slot sees each row once."""
    indices, positions = unique(slices.indices)
    rows = apply_op("GatherFirst", [math_ops.shape(indices)]).outputs[0]
    return IndexedSlices(unsorted_segment_sum(slices.values, positions, rows), indices,
                         slices.dense_shape)


def check_segment_ids_prefix(ctx, data, segment_ids) -> None:
    """Refuse, naming the op, ``segment_ids`` whose shape does not start ``data``'s (the
    unsorted segment reductions' one rule on their inputs' shapes)."""
    if data.shape[:segment_ids.ndim] != segment_ids.shape:
        raise array_ops.kernel_error(
            ctx, "segment_ids shape must be a prefix of data shape",
            expected=f"data shape starting with {segment_ids.shape}", got=data.shape)


@register_op("UnsortedSegmentSum")
class UnsortedSegmentSumOp(OpDef):
    host_inputs = (2,)

    def infer(self, b):
        require_dtype(b, 1, is_index, "segment_ids")
        d, s = b.shape(0), b.shape(1)
        n = b.inputs[2].op.get_attr("value").item() if b.inputs[2].op.type == "Const" else None
        if d.ndims is None or s.ndims is None:
            return [(b.dtype(0), TensorShape(None))]
        if not TensorShape(d.as_list()[:s.ndims]).is_compatible_with(s):
            raise b.error("segment_ids shape must be a prefix of data shape",
                          expected=f"prefix of {d}", got=s)
        return [(b.dtype(0), [n] + d.as_list()[s.ndims:])]

    def forward(self, xp, ctx, data, segment_ids, num_segments):
        n = int(num_segments)
        check_segment_ids_prefix(ctx, data, segment_ids)
        if segment_ids.size and segment_ids.min() < 0:     # dropped, as TensorFlow's
            kept = segment_ids >= 0
            segment_ids, data = segment_ids[kept], data[kept]
        _check_indices(ctx, segment_ids, n, "num_segments")
        out = xp.zeros((n,) + data.shape[segment_ids.ndim:], dtype=data.dtype)
        add_at(xp, out, segment_ids, data)
        return out

    def gradient(self, op, g):
        # Each row of data gets its segment's gradient, and a dropped row (a negative id)
        # none: TensorFlow's gather that drops negatives.
        ids = op.inputs[1]
        rows = gather(g, math_ops.maximum(ids, math_ops.zeros_like(ids)))
        kept = math_ops.cast(math_ops.greater_equal(ids, math_ops.zeros_like(ids)), g.dtype)
        row_dims = indexing_ops.slice(math_ops.shape(g), [1], [-1])
        kept = array_ops.reshape(kept, array_ops.concat(
            [math_ops.shape(ids), math_ops.ones_like(row_dims)], 0))
        return [math_ops.multiply(rows, kept), None, None]


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """Return sums of ``data`` rows grouped by ``segment_ids`` (num_segments rows); rows
    whose id is negative are dropped, as in TensorFlow."""
    n = num_segments if isinstance(num_segments, Tensor) else constant(int(num_segments))
    return apply_op("UnsortedSegmentSum", [convert_to_tensor(data),
                                           convert_to_tensor(segment_ids), n],
                    name=name).outputs[0]


def indexed_slices_to_dense(slices: IndexedSlices, name=None) -> Tensor:
    """Return the dense tensor an IndexedSlices stands for (duplicate rows summed)."""
    if slices.dense_shape is None:
        raise errors.InvalidArgumentError(
            f"Cannot densify IndexedSlices '{slices.name}' without a dense_shape")
    known = const_value(slices.dense_shape) if isinstance(slices.dense_shape, Tensor) \
        else None
    rows = constant(int(known[0])) if known is not None and np.ndim(known) == 1 and \
        len(known) else apply_op("GatherFirst", [slices.dense_shape]).outputs[0]
    return unsorted_segment_sum(slices.values, slices.indices, rows, name=name)


# From this many elements a conversion of an IndexedSlices warns, as TensorFlow's does.
LARGE_DENSE_ELEMENTS = 100_000_000


def densified_for_conversion(slices: IndexedSlices) -> Tensor:
    """The dense tensor ``convert_to_tensor`` makes of ``slices`` (a sparse gradient used
    where a dense tensor is expected), with TensorFlow's warning where it may be large: a
    table's gradient densified takes the whole table's memory."""
    elements = _static_elements(slices.dense_shape)
    if elements is None:
        warnings.warn(f"Converting sparse IndexedSlices '{slices.name}' to a dense Tensor of "
                      f"unknown shape. This may consume a large amount of memory.",
                      stacklevel=3)
    elif elements >= LARGE_DENSE_ELEMENTS:
        warnings.warn(f"Converting sparse IndexedSlices '{slices.name}' to a dense Tensor "
                      f"with {elements} elements. This may consume a large amount of memory.",
                      stacklevel=3)
    return indexed_slices_to_dense(slices)


def _static_elements(dense_shape) -> int | None:
    """The element count ``dense_shape`` (a shape tensor) is known to give, else None."""
    if not isinstance(dense_shape, Tensor):
        return None
    op = dense_shape.op
    if op.type == "Const":
        return int(np.prod(op.get_attr("value")))
    if op.type == "Shape":
        return op.inputs[0].shape.num_elements()
    return None


@register_op("GatherFirst")
class GatherFirstOp(OpDef):
    """Element 0 of a 1-D tensor, as a scalar (the row count of a dense shape)."""

    gradient = None

    def infer(self, b):
        return [(b.dtype(0), [])]

    def forward(self, xp, ctx, x):
        return x[0]


@register_op("CheckTableIds", attrs={"table": "", "parts": 1})
class CheckTableIdsOp(OpDef):
    """Pass ``ids`` on after checking each is a row of the (split) table: an id out of
    range is named as the caller gave it, not as the row of a part it would have become."""

    aliases_input = True
    host_inputs = (1,)
    gradient = None

    def infer(self, b):
        require_dtype(b, 0, is_index, "ids")
        return [(b.dtype(0), b.shape(0))]

    def forward(self, xp, ctx, ids, vocab):
        vocab = int(vocab)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            where = xp.nonzero(((ids < 0) | (ids >= vocab)).reshape(-1))[0][0]
            raise errors.op_error(
                errors.InvalidArgumentError,
                f"Id {int(ids.reshape(-1)[where])} (at position {int(where)} of the ids) is "
                f"not a row of table '{ctx.attrs['table']}' ({vocab} rows in "
                f"{ctx.attrs['parts']} parts)", ctx.op, expected=f"ids in [0, {vocab})")
        return ids


def embedding_lookup(params, ids, partition_strategy: str | None = None, name=None,
                     validate_indices=True, max_norm=None) -> Tensor:
    """Return rows ``ids`` of an embedding table, which may be sharded (TF1 semantics).

    Args:
        params: one table, a list of shards (same dims after the first), or a
            PartitionedVariable (its parts are the shards).
        ids: int32/int64 ids of any shape; the result has shape ids.shape + row shape.
        partition_strategy: with several shards, "mod" puts id on shard ``id % n`` at row
            ``id // n``; "div" gives each shard a contiguous range of ids, the first
            ``vocab % n`` shards one id more (the slicing a partitioner makes, so use "div"
            for a PartitionedVariable to address the rows of its full value). None: the
            PartitionedVariable's own ``lookup_strategy`` if it has one (TrainingMode's
            tables: "div"), else "mod" (TensorFlow's default). A checkpoint of a table
            looked up with "div" restores into any number of parts; with "mod", only into
            as many parts as it was saved from (other counts give an error, not rows of
            other ids).
        max_norm: None, or a bound on each looked-up row's L2 norm: a row whose norm is
            larger comes back scaled down to it (the table itself is unchanged), as
            TensorFlow clips it; the gradient goes through the clipping.

    Each shard is read by a gather colocated with it, so on a ps only the selected rows
    travel, and the gradient for each shard is an IndexedSlices of those rows.

    Raises:
        InvalidArgumentError: no params, an unknown strategy, or (when run) an id out of
            range, naming the op that met it.
    """
    if partition_strategy is None:
        partition_strategy = getattr(params, "lookup_strategy", None) or "mod"
    if partition_strategy not in ("mod", "div"):
        raise errors.InvalidArgumentError(
            f"embedding_lookup: unrecognized partition_strategy {partition_strategy!r}: "
            "expected 'mod' or 'div'")
    if params is None:
        raise errors.InvalidArgumentError("embedding_lookup: params must be given")
    if callable(getattr(params, "get_variable_list", None)):   # a PartitionedVariable
        params = params.get_variable_list()
    params = list(params) if isinstance(params, (list, tuple)) else [params]
    if not params:
        raise errors.InvalidArgumentError("embedding_lookup: need at least one param")
    if len(params) > 1:
        _mark_lookup(params, partition_strategy)
    graph = get_default_graph()
    with graph.name_scope(name or "embedding_lookup") as scope:
        ids = convert_to_tensor(ids, name="ids")
        # A Variable's value is its "read", colocated with it: colocating with that
        # places ops next to the variable.
        tables = [convert_to_tensor(p, name="params") for p in params]
        if len(tables) == 1:
            with graph.colocate_with(tables[0]):
                result = _clipped(gather(tables[0], ids, name=scope), tables[0], max_norm,
                                  scope)
            # The result itself is not tied to the table's device.
            return control_ops.identity(result)
        return _sharded_lookup(graph, tables, ids, partition_strategy, scope,
                               _table_name(params), max_norm)


def _clipped(rows, table, max_norm, scope):
    """``rows`` gathered from ``table``, each scaled to an L2 norm of at most ``max_norm``.

    A row is what one id selects (the table's dimensions after the first), so the norm
    runs over the last ``table rank - 1`` axes of ``rows``, whatever the ids' shape; a
    1-D table's rows are single numbers, clipped by their absolute value, as TensorFlow.
    """
    if max_norm is None:
        return rows
    if table.shape.ndims is None:
        raise errors.InvalidArgumentError(
            f"embedding_lookup '{scope[:-1]}': max_norm needs the table's rank when the "
            f"graph is built, got table '{table.name}' of unknown shape")
    row_axes = list(range(1 - table.shape.ndims, 0))
    return clip_ops.clip_by_norm(rows, max_norm, axes=row_axes)


def _mark_lookup(params, strategy) -> None:
    """Record on the parts of a partitioned table how ids address them, for the Saver;
    refuse a table looked up both ways (the same id would read two different rows)."""
    infos = [getattr(p, "_save_slice_info", None) for p in params]
    if any(i is None for i in infos) or len({i.full_name for i in infos}) != 1:
        return              # separate variables, each saved whole under its own name
    if any(i.lookup not in ("", strategy) for i in infos):
        raise errors.InvalidArgumentError(
            f"embedding_lookup: table '{infos[0].full_name}' is looked up with "
            f"partition_strategy={strategy!r} here and {infos[0].lookup!r} elsewhere: an id "
            "would read a different row in each; use one strategy for a table")
    for info in infos:
        info.lookup = strategy


def _table_name(params) -> str:
    """What the user calls a table: its full name when it is a partitioned variable."""
    info = getattr(params[0], "_save_slice_info", None)
    if info is not None:
        return info.full_name
    return ", ".join(getattr(getattr(p, "op", None), "name", "?") for p in params)


def _sharded_lookup(graph, tables, ids, strategy, scope, table_name, max_norm):
    n = len(tables)
    element = tables[0].shape[1:]
    for t in tables[1:]:
        if not element.is_compatible_with(t.shape[1:]):
            raise errors.InvalidArgumentError(
                f"embedding_lookup '{scope[:-1]}': every shard must have the same row shape, "
                f"got {', '.join(str(x.shape) for x in tables)}")
        element = element.merge_with(t.shape[1:])
    vocab = _vocab_size(graph, tables, ids.dtype, scope)
    flat_ids = apply_op("CheckTableIds", [array_ops.reshape(ids, [-1]),
                                          convert_to_tensor(vocab, dtype=ids.dtype)],
                        {"table": table_name, "parts": n}, name="check_ids").outputs[0]
    positions = math_ops.range_(array_ops.size(flat_ids))
    if strategy == "mod":
        shard = math_ops.floormod(flat_ids, n)
        rows = math_ops.floordiv(flat_ids, n)
    else:
        per_shard = vocab // n
        extras = vocab % n
        # The first ``extras`` shards hold per_shard + 1 ids, the others per_shard.
        shard = math_ops.maximum(math_ops.floordiv(flat_ids, per_shard + 1),
                                 math_ops.floordiv(flat_ids - extras, per_shard))
        rows = math_ops.where(math_ops.less(shard, extras),
                              math_ops.floormod(flat_ids, per_shard + 1),
                              math_ops.floormod(flat_ids - extras, per_shard))
    shard = math_ops.cast(shard, "int32")
    shard_rows = data_flow_ops.dynamic_partition(rows, shard, n)
    shard_positions = data_flow_ops.dynamic_partition(positions, shard, n)
    gathered = []
    for table, table_rows in zip(tables, shard_rows):
        with graph.colocate_with(table):
            gathered.append(_clipped(gather(table, table_rows), table, max_norm, scope))
    merged = data_flow_ops.dynamic_stitch(shard_positions, gathered, name=scope)
    if ids.shape.is_fully_defined() and element.is_fully_defined():
        return array_ops.reshape(merged, ids.shape.as_list() + element.as_list())
    if element.is_fully_defined():
        element_dims = constant(np.asarray(element.as_list(), dtype=np.int32))
    else:
        with graph.colocate_with(tables[0]):
            element_dims = indexing_ops.slice(math_ops.shape(tables[0]), [1], [-1])
    out = array_ops.reshape(merged, array_ops.concat([math_ops.shape(ids), element_dims], 0))
    if ids.shape.ndims is not None and element.ndims is not None:
        out.set_shape(ids.shape.as_list() + element.as_list())
    return out


def _vocab_size(graph, tables, dtype, scope):
    """Return the total row count of the shards: a Python int when known statically."""
    dims = [t.shape[0] if t.shape.ndims else None for t in tables]
    if all(d is not None for d in dims):
        vocab = sum(dims)
        if vocab < len(tables):
            raise errors.InvalidArgumentError(
                f"embedding_lookup '{scope[:-1]}': a sharded table needs at least one row "
                f"per shard, got {vocab} rows over {len(tables)} shards")
        return vocab
    counts = []
    for t, d in zip(tables, dims):
        if d is not None:
            counts.append(constant(d, dtype=dtype))
        else:
            with graph.colocate_with(t):
                counts.append(math_ops.cast(
                    apply_op("GatherFirst", [math_ops.shape(t)]).outputs[0], dtype))
    return math_ops.add_n(counts)
