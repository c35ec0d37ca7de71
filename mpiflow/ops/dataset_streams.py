"""The numpy engine behind ``tf.data`` iterators: which examples each ``get_next`` returns.

A dataset of in-memory arrays is a source of N examples and a pipeline of stages
(shuffle, batch, repeat, take, skip, shard, cache). The engine never touches the data:
every stage transforms a stream of example *indices*, chunk by chunk, and ``get_next``
gathers the arrays at the indices of one item with a single ``np.take`` per array. So the
cost per step is one fancy-indexing per component, and no Python loop runs per example.

A stream yields int64 chunks of shape ``(m,) + item_shape``: an item is one index
(shape ``()``), a batch of them (``(b,)``), a batch of batches, ... A partial batch is
padded with -1 to the full batch size, so all items of a stream share one shape and any
stage can follow any other; ``dense_indices`` strips the padding when the item is read.

Each stage is registered under the name the graph's pipeline attr uses (``STAGES``); a
pipeline is plain data, ``[["shuffle", 100, seed, seed2, True], ["batch", 32, False]]``,
so the iterator ops that carry it can be shipped to another rank like any op.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors

# Indices the source hands out at a time: bounds the memory of a pass over a huge or
# repeated dataset while keeping per-chunk Python work negligible.
SOURCE_CHUNK = 1 << 16
PAD = -1

STAGES = {}


def _stage(kind: str):
    def register(cls):
        STAGES[kind] = cls
        cls.kind = kind
        return cls
    return register


class Source:
    """The examples 0..n-1, once per pass."""

    def __init__(self, n: int):
        self.n = n

    def chunks(self):
        for start in range(0, self.n, SOURCE_CHUNK):
            yield np.arange(start, min(self.n, start + SOURCE_CHUNK), dtype=np.int64)


@_stage("repeat")
class Repeat:
    """The upstream's passes one after another, ``count`` times (< 0: forever). Each pass
    is a new pass upstream, so a shuffle before the repeat reshuffles every epoch."""

    def __init__(self, upstream, count):
        self.upstream, self.count = upstream, int(count)

    def chunks(self):
        done = 0
        while self.count < 0 or done < self.count:
            produced = False
            for chunk in self.upstream.chunks():
                if len(chunk):
                    produced = True
                    yield chunk
            done += 1
            if not produced:        # an empty pass repeated forever would never end
                return


@_stage("take")
class Take:
    """The first ``count`` items of a pass (< 0: all)."""

    def __init__(self, upstream, count):
        self.upstream, self.count = upstream, int(count)

    def chunks(self):
        left = self.count
        if left == 0:
            return
        for chunk in self.upstream.chunks():
            if 0 <= left <= len(chunk):
                yield chunk[:left]
                return
            yield chunk
            if left > 0:
                left -= len(chunk)


@_stage("skip")
class Skip:
    """A pass without its first ``count`` items (< 0: without any)."""

    def __init__(self, upstream, count):
        self.upstream, self.count = upstream, int(count)

    def chunks(self):
        left = self.count
        for chunk in self.upstream.chunks():
            if left < 0:
                continue
            if left >= len(chunk):
                left -= len(chunk)
                continue
            yield chunk[left:]
            left = 0


@_stage("shard")
class Shard:
    """Items ``index``, ``index + num_shards``, ... of a pass: one worker's share."""

    def __init__(self, upstream, num_shards, index):
        self.upstream, self.num_shards, self.index = upstream, int(num_shards), int(index)

    def chunks(self):
        position = 0
        for chunk in self.upstream.chunks():
            first = (self.index - position) % self.num_shards
            position += len(chunk)
            if first < len(chunk):
                yield chunk[first::self.num_shards]


@_stage("batch")
class Batch:
    """Consecutive items grouped by ``size``; a last, partial group padded with -1, or
    dropped with ``drop_remainder``."""

    def __init__(self, upstream, size, drop_remainder):
        self.upstream, self.size, self.drop = upstream, int(size), bool(drop_remainder)

    def chunks(self):
        size, carry = self.size, None
        for chunk in self.upstream.chunks():
            if carry is not None and len(carry):
                chunk = np.concatenate([carry, chunk])
            whole = len(chunk) // size * size
            if whole:
                yield chunk[:whole].reshape((whole // size, size) + chunk.shape[1:])
            carry = chunk[whole:]
        if carry is not None and len(carry) and not self.drop:
            padded = np.full((1, size) + carry.shape[1:], PAD, dtype=np.int64)
            padded[0, :len(carry)] = carry
            yield padded


@_stage("cache")
class Cache:
    """The upstream's first complete pass, kept and replayed by every later pass: TF's
    in-memory cache, which freezes the order a shuffle before it drew. A pass not read to
    its end (a ``take`` after the cache) is not kept, as TF discards a partial cache. The
    data is in memory already, so only the indices are kept: 8 bytes per example."""

    def __init__(self, upstream):
        self.upstream, self._kept = upstream, None

    def chunks(self):
        if self._kept is not None:
            yield from self._kept
            return
        seen = []
        for chunk in self.upstream.chunks():
            seen.append(chunk)
            yield chunk
        self._kept = seen


@_stage("shuffle")
class Shuffle:
    """TF's buffered shuffle: a buffer of ``buffer_size`` items; each output is a uniform
    draw from the buffer, whose slot the next input item takes; at the end of the input
    the buffer is emptied in random order. A buffer at least as large as a pass gives a
    uniform permutation of it.

    The draws of a whole chunk are made at once: the item that comes out of slot j at
    step k is the input written to j at the last earlier step that drew j, or, with none
    in this chunk, what j held before the chunk. Sorting the draws by slot (stably, so by
    step within a slot) puts each step right after its predecessor on the same slot.
    """

    def __init__(self, upstream, buffer_size, seed, seed2, reshuffle_each_iteration):
        self.upstream, self.size = upstream, int(buffer_size)
        # Seeded: the same orders again after each initialization of the iterator.
        seeds = None if seed is None and seed2 is None else [int(seed or 0), int(seed2 or 0)]
        self._rng = np.random.default_rng(seeds)
        self._reshuffle = bool(reshuffle_each_iteration)
        self._fixed = None if self._reshuffle else int(self._rng.integers(2 ** 63))

    def chunks(self):
        rng = self._rng if self._reshuffle else np.random.default_rng(self._fixed)
        slots, filled = None, 0
        for chunk in self.upstream.chunks():
            if filled < self.size:
                n = min(self.size - filled, len(chunk))
                slots = _grown(slots, filled + n, self.size, chunk.shape[1:])
                slots[filled:filled + n] = chunk[:n]
                filled += n
                chunk = chunk[n:]
            if len(chunk):
                yield self._replace(rng, slots, chunk)
        if filled:
            yield slots[:filled][rng.permutation(filled)]

    def _replace(self, rng, slots, incoming):
        drawn = rng.integers(0, self.size, size=len(incoming))
        order = np.argsort(drawn, kind="stable")
        by_slot = drawn[order]
        repeat = by_slot[1:] == by_slot[:-1]          # order[i + 1] follows order[i] on a slot
        out = slots[drawn]
        later, earlier = order[1:][repeat], order[:-1][repeat]
        out[later] = incoming[earlier]
        last = np.append(~repeat, True)                # the final write to each drawn slot
        slots[by_slot[last]] = incoming[order[last]]
        return out


def _grown(slots, need: int, most: int, item_shape) -> np.ndarray:
    """``slots`` with room for ``need`` items: a buffer grows with what it holds, doubling
    up to ``most``, as a buffer far larger than the data (``shuffle(10**10)``, to shuffle
    "everything") is legal and must not be allocated whole."""
    have = 0 if slots is None else len(slots)
    if need <= have:
        return slots
    grown = np.empty((min(most, max(need, 2 * have)),) + tuple(item_shape), dtype=np.int64)
    if have:
        grown[:have] = slots
    return grown


def build(n: int, pipeline) -> object:
    """The stream of the examples 0..n-1 through ``pipeline`` (a list of stage specs).

    Raises:
        InvalidArgumentError: a stage that is not registered.
    """
    stream = Source(n)
    for spec in pipeline:
        kind, params = spec[0], list(spec[1:])
        stage = STAGES.get(kind)
        if stage is None:
            raise errors.InvalidArgumentError(
                f"Unknown dataset stage {kind!r}: expected one of {sorted(STAGES)}")
        stream = stage(stream, *params)
    return stream


def dense_indices(item: np.ndarray, op=None) -> np.ndarray:
    """The example indices of one item, padding removed: a scalar for one example, an
    array of shape (b1, b2, ...) for (nested) batches.

    Raises:
        InvalidArgumentError: a batch of batches whose inner batches differ in size (a
            partial batch batched with whole ones), which no array can hold.
    """
    if item.ndim == 0:
        return item
    if item.ndim == 1:
        return item[item != PAD]
    used = (item != PAD).reshape(len(item), -1).any(axis=1)
    rows = [dense_indices(row, op) for row in item[used]]
    sizes = [row.shape for row in rows]
    if any(s != sizes[0] for s in sizes):
        bad = next(i for i, s in enumerate(sizes) if s != sizes[0])
        raise errors.op_error(
            errors.InvalidArgumentError, "Cannot batch elements of different shapes (a "
            "partial batch batched with whole ones: use batch(..., drop_remainder=True) "
            "for the inner batch)", op, expected=f"every element of shape {list(sizes[0])}",
            got=f"element {bad} of shape {list(sizes[bad])}")
    return np.stack(rows) if rows else np.empty((0,) + item.shape[1:], dtype=np.int64)
