"""Gradient buckets: many small allreduces become a few, one per bucket buffer (what
Horovod calls tensor fusion; not to be confused with ``runtime.kernel_fusion``, which
fuses GPU kernels).

``plan_buckets`` cuts a list of tensors, in an order every rank agrees on, into buckets:
tensors of one dtype and device fill a buffer up to the threshold, and a tensor larger
than the threshold is a bucket of its own. ``FusedAllreduce`` packs each bucket's tensors
into a reused buffer as they are added and starts the bucket's allreduce as soon as its
last tensor is in, so the reduction of early buckets overlaps the computation of the
tensors of later ones.

Order: every rank must build the same plan (same specs in the same order; the graph
runtime uses graph order or sorted names). Buckets start strictly in plan order, so the
ranks' collectives match even when tensors are added in a different order on each rank;
tensors added in plan order start each bucket the moment it is complete.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from mpiflow import backend, errors
from mpiflow import config as config_lib
from mpiflow.comm.collectives import Strategies
from mpiflow.comm.collectives.base import Handle


class TensorSpec(NamedTuple):
    """One tensor to fuse: its name, dtype, size in bytes and device ('' = host)."""

    name: str
    dtype: np.dtype
    nbytes: int
    device: str = ""


class Bucket(NamedTuple):
    """One fusion buffer: its tensors and where each lies in it (in elements)."""

    index: int
    dtype: np.dtype
    device: str
    names: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return (self.offsets[-1] + self.sizes[-1]) * self.dtype.itemsize if self.names else 0

    def layout_digest(self) -> str:
        """A short digest of which tensors the bucket holds, in which order and sizes: in
        the name its cross-rank check compares, so ranks whose buckets hold other tensors
        with the same total size (variables made in another order, a gradient missing on
        one rank) are refused instead of summing one rank's tensor into another's."""
        layout = "\0".join(f"{n}\1{size}" for n, size in zip(self.names, self.sizes))
        return hashlib.blake2b(layout.encode(), digest_size=4).hexdigest()

    def describe(self) -> str:
        """Its tensors, for an error: ``a (4 elements), b (12 elements)``."""
        shown = [f"{n} ({size} elements)" for n, size in zip(self.names[:8], self.sizes)]
        more = f" and {len(self.names) - 8} more" if len(self.names) > 8 else ""
        return ", ".join(shown) + more


def plan_buckets(specs: Iterable[TensorSpec], threshold_bytes: int) -> list[Bucket]:
    """Return the buckets of ``specs`` (taken in the given, agreed order).

    Tensors are grouped by (dtype, device); each group fills buckets of at most
    ``threshold_bytes`` in order; a tensor larger than the threshold (every tensor when it
    is 0) is a bucket of its own. Buckets are listed in the order they become complete
    when the tensors are added in ``specs`` order (by the position of their last tensor).

    Raises:
        InvalidArgumentError: a name appears twice, or a size is not a whole number of
            elements of its dtype.
    """
    groups: dict[tuple[np.dtype, str], list] = {}  # key -> [names, sizes, bytes]
    last: dict[tuple[np.dtype, str], int] = {}     # key -> position of its last tensor
    done: list[tuple[int, tuple]] = []             # (position of last tensor, members)
    seen: set[str] = set()

    def close(key):
        names, sizes, _ = groups.pop(key)
        done.append((last[key], (key, names, sizes)))

    for position, spec in enumerate(specs):
        spec = TensorSpec(*spec)
        dtype = np.dtype(spec.dtype)
        if spec.name in seen:
            raise errors.InvalidArgumentError(f"Tensor '{spec.name}' is listed twice for fusion")
        seen.add(spec.name)
        if spec.nbytes < 0 or spec.nbytes % dtype.itemsize:
            raise errors.InvalidArgumentError(
                f"Tensor '{spec.name}': {spec.nbytes} bytes is not a whole number of "
                f"{dtype.name} elements")
        key = (dtype, spec.device)
        size = spec.nbytes // dtype.itemsize
        if spec.nbytes > threshold_bytes:
            done.append((position, (key, [spec.name], [size])))
            continue
        if key in groups and groups[key][2] + spec.nbytes > threshold_bytes:
            close(key)
        group = groups.setdefault(key, [[], [], 0])
        group[0].append(spec.name)
        group[1].append(size)
        group[2] += spec.nbytes
        last[key] = position
    for key in list(groups):
        close(key)
    done.sort(key=lambda item: item[0])
    buckets = []
    for index, (_, (key, names, sizes)) in enumerate(done):
        offsets = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64))).tolist()
        buckets.append(Bucket(index, key[0], key[1], tuple(names),
                              tuple(int(o) for o in offsets), tuple(sizes)))
    return buckets


class BucketHandle:
    """The allreduce of one bucket: ``test()``, ``wait()``, ``result`` (name -> array)."""

    def __init__(self, fused: FusedAllreduce, bucket: Bucket):
        self.bucket = bucket
        self._fused = fused
        self._inner: Handle | None = None
        self._result = None

    @property
    def started(self) -> bool:
        return self._inner is not None

    def test(self) -> bool:
        """Advance the bucket's allreduce; return whether it is done (and unpacked)."""
        if self._result is not None:
            return True
        try:
            if self._inner is None or not self._inner.test():
                return False
        except errors.InvalidArgumentError as exc:
            raise self._refused(exc) from exc
        self._result = self._fused._unpack(self.bucket, self._inner.result)
        return True

    def wait(self, timeout: float | None = None) -> dict:
        """Complete the bucket's allreduce; return ``{name: reduced array}``.

        Raises:
            FailedPreconditionError: the bucket cannot start, because tensors of it or of
                a bucket before it were not added (the message names them).
        """
        if self._inner is None:
            raise errors.FailedPreconditionError(
                f"Fused allreduce '{self._fused.name}': bucket {self.bucket.index} cannot "
                f"start yet; tensors not added: {self._fused.missing(self.bucket.index)}")
        try:
            self._inner.wait(timeout)
        except errors.InvalidArgumentError as exc:
            raise self._refused(exc) from exc
        self.test()
        return self._result

    def _refused(self, exc) -> errors.InvalidArgumentError:
        """The cross-rank check's error, with what this rank's bucket holds."""
        return errors.InvalidArgumentError(
            f"{exc.message}. On this rank, bucket {self.bucket.index} of fused allreduce "
            f"'{self._fused.name}' holds {self.bucket.describe()} (every rank must fuse the "
            "same tensors in the same order: build the same variables, in the same order, "
            "with a gradient for each on every rank)")

    @property
    def result(self) -> dict:
        if self._result is None:
            raise errors.FailedPreconditionError(
                f"Fused allreduce '{self._fused.name}': bucket {self.bucket.index} is not "
                f"complete; call wait()")
        return self._result


class _Slot:
    """Where one tensor goes: its bucket, its view of the bucket's buffer, this round's
    array and output."""

    __slots__ = (
        "array",
        "bucket",
        "dtype",
        "index",
        "name",
        "needed",
        "out",
        "round",
        "shaped",
        "size",
        "start",
        "view",
    )

    def __init__(self, name: str, bucket: Bucket, start: int, size: int, view):
        # ``view`` stays flat (``buffer_view``); ``shaped`` is it in the shape last added.
        self.name, self.bucket, self.size, self.dtype, self.view, self.shaped = \
            name, bucket, size, bucket.dtype, view, view
        self.start = start
        self.index, self.needed = bucket.index, len(bucket.names)
        self.round = -1
        self.array = self.out = None


class FusedAllreduce:
    """Allreduce a fixed list of tensors through fusion buffers, one collective per bucket.

    Each round, every tensor of ``specs`` is given once with ``add``; a bucket's allreduce
    starts when its last tensor is in (and the buckets before it have started). Once every
    bucket of a round has completed, the next ``add`` begins a new round that reuses the
    buffers. A producer that writes a tensor straight into ``buffer_view(name)`` and adds
    that view saves both copies (the result is then that view).

    Args:
        comm: the communicator of the ranks taking part.
        specs: ``TensorSpec``s (or tuples) in the order every rank agrees on.
        algorithm: a strategy name or "auto" (chosen per bucket).
        op: "sum" or "average".
        threshold_bytes: bucket size (default MPIFLOW_FUSION_THRESHOLD_BYTES).
        check: run the cross-rank check for every bucket.
        name: prefix of the buckets' names in checks and errors.
        half_on_wire: half-float buckets move as they are (``Collective.allreduce_async``).
    """

    def __init__(self, comm, specs: Iterable[TensorSpec], *, algorithm: str = "auto",
                 op: str = "sum", threshold_bytes: int | None = None, check: bool = True,
                 name: str = "fused", config: config_lib.Config | None = None,
                 half_on_wire: bool = False):
        self.comm = comm
        self.half_on_wire = half_on_wire
        self.config = config or config_lib.default()
        if threshold_bytes is None:
            threshold_bytes = self.config.get("MPIFLOW_FUSION_THRESHOLD_BYTES")
        self.buckets = plan_buckets(specs, threshold_bytes)
        self.algorithm, self.op, self.check, self.name = algorithm, op, check, name
        self._buffers = []
        self._slots: dict[str, _Slot] = {}
        for bucket in self.buckets:
            buffer = None
            if len(bucket.names) > 1:
                # One buffer per bucket, made once and reused every round; with all
                # buckets of a round in flight together each needs its own.
                xp = backend.array_module(bucket.device)
                buffer = xp.empty(bucket.nbytes // bucket.dtype.itemsize, dtype=bucket.dtype)
            self._buffers.append(buffer)
            for name_, start, size in zip(bucket.names, bucket.offsets, bucket.sizes):
                view = None if buffer is None else buffer[start:start + size]
                self._slots[name_] = _Slot(name_, bucket, start, size, view)
        self._members = [[self._slots[n] for n in b.names] for b in self.buckets]
        # Each bucket's name and strategy, found once: a round pays for neither again.
        self._bucket_names = [f"{name.rstrip('/')}/bucket{b.index} "
                              f"(tensors #{b.layout_digest()})" for b in self.buckets]
        self._strategies = Strategies(comm, self.config)
        self._round = 0
        self._new_round()

    def _new_round(self) -> None:
        self._round += 1
        self._given = [0] * len(self.buckets)
        self._handles = [BucketHandle(self, b) for b in self.buckets]
        self._next_start = 0

    def _refuse_out(self, name: str, array, out) -> None:
        """Say why ``out`` cannot take the reduced tensor as it is (``add`` found it so)."""
        if type(out) is not type(array):
            got = type(out).__name__
        elif out.shape != array.shape or out.dtype != array.dtype:
            got = f"{type(out).__name__} {out.dtype}{list(out.shape)}"
        else:
            got = f"{type(out).__name__} {out.dtype}{list(out.shape)} (read-only)"
        raise errors.InvalidArgumentError(
            f"Fused allreduce '{self.name}': tensor '{name}' got a bad out, expected a "
            f"writable {type(array).__name__} {array.dtype}{list(array.shape)}, got {got}")

    def buffer_view(self, name: str):
        """Return the part of the fusion buffer that holds tensor ``name`` (flat, whatever
        shape it was added in), or None for a tensor that is a bucket of its own."""
        return self._slot(name).view

    def add(self, name: str, array, out=None) -> BucketHandle | None:
        """Give tensor ``name``; return its bucket's handle if this completed the bucket.

        Args:
            array: the tensor (its dtype and size as in its spec).
            out: where the reduced tensor goes; ``array`` itself for in place. Without
                it the result is new memory: a view of one copy made for the tensors of
                its bucket given without an out (a result kept keeps that copy).

        Raises:
            InvalidArgumentError: unknown name, wrong dtype or size, or given twice in a
                round that is still in flight.
        """
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slot(name)            # raises, listing the known names
        if slot.round == self._round:
            self._next_round(name)
        # This method is the per-tensor cost of fusion: keep it to checks that cost a
        # comparison each, a copy and a count.
        try:
            fits = array.size == slot.size and (array.dtype is slot.dtype or
                                                array.dtype == slot.dtype)
        except AttributeError:
            fits = False
        if not fits:
            got = f"{array.dtype} with {array.size} elements" if hasattr(array, "dtype") \
                else f"a {type(array).__name__} (a numpy or cupy array is needed)"
            raise errors.InvalidArgumentError(
                f"Fused allreduce '{self.name}': tensor '{name}' expected "
                f"{slot.dtype.name} with {slot.size} elements, got {got}")
        if out is not None and out is not array and not (
                type(out) is type(array) and out.shape == array.shape and
                out.dtype == array.dtype and getattr(out.flags, "writeable", True)):
            self._refuse_out(name, array, out)      # cupy arrays have no writeable flag
        slot.round = self._round
        slot.array = array
        slot.out = out
        view = slot.shaped
        if view is not None and array is not view:
            if array is slot.view:          # the flat view itself: nothing to copy
                slot.shaped = array
            else:
                if view.shape != array.shape:
                    view = slot.shaped = slot.view.reshape(array.shape)
                view[...] = array
        given = self._given
        index = slot.index
        given[index] += 1
        if given[index] == slot.needed:
            self._start_ready()
            return self._handles[index]
        return None

    def _next_round(self, name: str) -> None:
        try:
            complete = self._round_complete()
        except errors.MpiflowError as exc:
            # Said as what it is: the last round's error (its wait is long over), not a
            # new one of this round.
            raise type(exc)(f"Fused allreduce '{self.name}': tensor '{name}' begins a new "
                            f"round, but the last round failed, and a fused allreduce does "
                            f"not go on after a failed round: {exc}") from exc
        if not complete:
            raise errors.InvalidArgumentError(
                f"Fused allreduce '{self.name}': tensor '{name}' given twice while its "
                f"round is in flight")
        self._new_round()

    def handles(self) -> list[BucketHandle]:
        """Return this round's bucket handles, in plan order."""
        return list(self._handles)

    def wait_all(self, timeout: float | None = None) -> dict:
        """Complete every bucket of the round; return ``{name: reduced array}``."""
        results: dict = {}
        for handle in self._handles:
            results.update(handle.wait(timeout))
        return results

    def missing(self, up_to: int | None = None) -> list[str]:
        """Return the tensors not added yet this round (in buckets ``<= up_to``)."""
        last = len(self.buckets) - 1 if up_to is None else up_to
        return [n for b in self.buckets[:last + 1] for n in b.names
                if self._slots[n].round != self._round]

    # -- internals -------------------------------------------------------------------------
    def _slot(self, name: str) -> _Slot:
        slot = self._slots.get(name)
        if slot is None:
            known = sorted(self._slots)
            raise errors.InvalidArgumentError(
                f"Fused allreduce '{self.name}': unknown tensor '{name}'; known: "
                f"{known[:10]}{' ...' if len(known) > 10 else ''}")
        return slot

    def _round_complete(self) -> bool:
        return all(h.started and h.test() for h in self._handles)

    def _start_ready(self) -> None:
        # Plan order on every rank: a complete bucket waits for the ones before it.
        while self._next_start < len(self.buckets):
            bucket = self.buckets[self._next_start]
            if self._given[bucket.index] < len(bucket.names):
                return
            buffer = self._buffers[bucket.index]
            if buffer is None:
                slot = self._slots[bucket.names[0]]
                send, dest = slot.array, slot.out
            else:
                send = dest = buffer
            collective = self._strategies.get(self.algorithm, send)
            self._handles[bucket.index]._inner = collective.allreduce_async(
                send, self.op, dest, name=self._bucket_names[bucket.index],
                check=self.check, half_on_wire=self.half_on_wire)
            self._next_start += 1

    def _unpack(self, bucket: Bucket, reduced) -> dict:
        buffer = self._buffers[bucket.index]
        if buffer is None:
            return {bucket.names[0]: reduced}
        members = self._members[bucket.index]
        # The tensors given without an out become views of one copy of the part of the
        # buffer they span: one copy for the bucket, where one per tensor cost more in
        # Python and allocation than in bytes (200 tensors of 4 KiB: 1 us each).
        low = high = None
        for slot in members:
            if slot.out is None and slot.array is not slot.shaped:
                if low is None:
                    low = slot.start
                high = slot.start + slot.size
        copy = None if low is None else buffer[low:high].copy()
        results = {}
        for slot in members:
            out = slot.out
            if out is None:
                if slot.array is slot.shaped:   # the view itself was given: it is the result
                    out = slot.array
                else:
                    out = copy[slot.start - low:slot.start - low + slot.size]
                    if slot.shaped.ndim != 1:
                        out = out.reshape(slot.shaped.shape)
            elif out is not slot.shaped:
                out[...] = slot.shaped
            results[slot.name] = out
            slot.array = slot.out = None
        return results
