"""``tf.data.Dataset`` over arrays in memory: a description, turned into ops by iterators.

A ``Dataset`` is immutable plain data: the tensors holding its arrays (constants made
from numpy values, or any tensor for an initializable iterator, e.g. a placeholder fed at
initialization), whether examples are their slices or the arrays whole, the pipeline of
stages (shuffle, batch, repeat, take, skip, shard, cache) that the iterator ops carry as an
attr and ``ops.dataset_streams`` runs, and the static dtype and shape of each array of an
element. No op is made until an iterator is.

``map`` traces its function at once on one element in a graph of its own
(``dataset.functions``), which gives the mapped element's dtypes and shapes. A map that a
``batch`` follows runs per element, as in TF: the iterator's ops carry its traced graph
and the engine applies it to each element before stacking the batch
(``ops.dataset_maps``). A map after the last batch runs in the graph on what ``get_next``
returns, a whole batch at once (cheaper, and the same thing there); it may read tensors of
the graph, which a per-element map may not. Both are exact because the stages between a
map and the next batch only pick, reorder or repeat elements, which commutes with a map.
A ``cache`` after a map keeps which elements come in which order, not the map's values,
so a random map (data augmentation) draws anew each epoch where TF would replay the first
epoch's draws.
"""

from __future__ import annotations

import numbers

import numpy as np

from mpiflow import errors, unsupported
from mpiflow.dataset import functions, structure
from mpiflow.dataset.iterator import Iterator, Plan
from mpiflow.framework.dtypes import as_dtype
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.per_graph import PerGraph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import array_ops
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.ops.registry import const_value

# Shuffles made so far in each graph: with only a graph seed, each shuffle still gets a
# seed of its own (TF's op seeds count ops, and a Dataset makes none until iterated).
_SHUFFLES = PerGraph(lambda: [0])


def _static_int(value, what: str) -> int:
    """A Python int from ``value`` (an int, a numpy int or a constant tensor)."""
    if isinstance(value, Tensor):
        found = const_value(value)
        if found is None or np.ndim(found) != 0:
            raise errors.UnimplementedError(
                f"Dataset.{what}: expected a Python int or a scalar constant; mpiflow builds "
                "the pipeline when the iterator is made, so a computed or fed value is not "
                "supported")
        value = found.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise errors.InvalidArgumentError(f"Dataset.{what}: expected an int, got {value!r}")
    return int(value)


def _count(value, what: str, allow_all: bool = False) -> int:
    """A count >= 1, or >= 0 and -1 (meaning "all") with ``allow_all``."""
    value = _static_int(value, what)
    if value < (-1 if allow_all else 1):
        lowest = "-1 (all) or >= 0" if allow_all else ">= 1"
        raise errors.InvalidArgumentError(f"Dataset.{what}: expected {lowest}, got {value}")
    return value


def _missing(name: str, known):
    """The error for a ``tf.data.Dataset`` method mpiflow lacks (``Dataset.zip``,
    ``ds.filter``): an ``UnsupportedAPIError`` saying what to do instead, not a bare
    ``AttributeError``; private and dunder names get the plain one."""
    if name.startswith("_"):
        return AttributeError(f"'Dataset' has no attribute {name!r}", name=name)
    return errors.UnsupportedAPIError(unsupported.message(f"tf.data.Dataset.{name}", known))


class _DatasetType(type):
    def __getattr__(cls, name):
        raise _missing(name, vars(cls))


class Dataset(metaclass=_DatasetType):
    """A sequence of elements of in-memory arrays (TF1's ``tf.data.Dataset``).

    Make one with ``from_tensor_slices``, ``from_tensors`` or ``range``; read it with
    ``make_one_shot_iterator()`` or ``make_initializable_iterator()``.
    """

    def __init__(self, arrays, slices, template, specs, stages=(), maps=(), infinite=False,
                 element_maps=(), traced=None):
        self._arrays = tuple(arrays)        # the tensors of the data
        self._slices = bool(slices)         # examples are their slices (else each whole)
        # The element before the maps since the last batch: its nesting
        # (dataset.structure) and (DType, TensorShape) per component.
        self._template = template
        self._specs = tuple(specs)
        self._stages = tuple(stages)        # the pipeline: plain-data stage specs
        self._maps = tuple(maps)            # map functions since the last batch
        # Those maps traced as one (functions.Traced), or the error tracing raised.
        self._traced = traced
        # (level, Traced) of the maps before a batch, which the engine runs per element.
        self._element_maps = tuple(element_maps)
        self._infinite = bool(infinite)

    def _then(self, stage, specs=None, infinite=None) -> Dataset:
        return Dataset(self._arrays, self._slices, self._template,
                       self._specs if specs is None else specs, self._stages + (stage,),
                       self._maps, self._infinite if infinite is None else infinite,
                       self._element_maps, self._traced)

    def _level(self) -> int:
        """How many batches the element is made of (the depth a map here applies at)."""
        return sum(stage[0] == "batch" for stage in self._stages)

    def _mapped(self, what: str) -> functions.Traced:
        """The maps since the last batch, traced; raises what tracing them raised."""
        if isinstance(self._traced, Exception):
            raise type(self._traced)(f"{what}: {self._traced.message}") from self._traced
        return self._traced

    # -- sources ---------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors) -> Dataset:
        """The slices of ``tensors`` along their first dimension, one element each.

        ``tensors``: an array or tensor, or a tuple or dict (nested as you like) of them,
        all with the same first dimension.
        """
        leaves, template = structure.flatten(tensors)
        arrays = _as_tensors(leaves, "from_tensor_slices")
        firsts = set()
        for i, t in enumerate(arrays):
            if t.shape.ndims == 0:
                raise errors.InvalidArgumentError(
                    f"Dataset.from_tensor_slices: array {i} ('{t.name}') is a scalar: "
                    "expected a tensor with a first dimension to slice")
            if t.shape.ndims is not None and t.shape[0] is not None:
                firsts.add(t.shape[0])
        if len(firsts) > 1:
            raise errors.InvalidArgumentError(
                "Dataset.from_tensor_slices: expected arrays with the same first dimension, "
                f"got shapes {[str(t.shape) for t in arrays]}")
        specs = [(t.dtype, TensorShape(None if t.shape.ndims is None
                                       else t.shape.as_list()[1:])) for t in arrays]
        return Dataset(arrays, True, template, specs)

    @staticmethod
    def from_tensors(tensors) -> Dataset:
        """One element: ``tensors`` whole (an array, or a tuple or dict of them)."""
        leaves, template = structure.flatten(tensors)
        arrays = _as_tensors(leaves, "from_tensors")
        return Dataset(arrays, False, template, [(t.dtype, t.shape) for t in arrays])

    @staticmethod
    def range(*args, output_type=None) -> Dataset:
        """The values of ``range(*args)`` (start, stop, step as Python's), int64 unless
        ``output_type`` says otherwise."""
        dtype = np.int64 if output_type is None else as_dtype(output_type).np_dtype
        bounds = [_static_int(a, "range") for a in args]
        return Dataset.from_tensor_slices(np.arange(*bounds).astype(dtype))

    @staticmethod
    def zip(datasets) -> Dataset:
        """The elements of ``datasets`` (a tuple or dict of datasets, nested as you like)
        side by side, as many as the shortest has.

        mpiflow zips sources: datasets made by ``from_tensor_slices`` or ``range``, before
        any stage or ``map`` (zip first, then shuffle, batch, ...). Constant arrays are cut
        to the shortest; fed arrays must have one length (checked at initialization).
        """
        parts, outer = structure.flatten(datasets)
        _sources(parts, "zip")
        if not isinstance(datasets, (tuple, dict)):
            raise errors.InvalidArgumentError(
                f"Dataset.zip: expected a tuple or dict of datasets, got {datasets!r}")
        shortest = min((n for n in map(_length, parts) if n is not None), default=None)
        arrays, specs = [], []
        for part in parts:
            arrays += [_cut(t, shortest) for t in part._arrays]
            specs += part._specs
        return Dataset(arrays, True, _nest(outer, iter(p._template for p in parts)), specs)

    def concatenate(self, dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s (same structure, dtypes and element
        shapes). As ``zip``, mpiflow concatenates sources, before any stage or ``map``."""
        _sources([self, dataset], "concatenate")
        if dataset._template != self._template:
            raise errors.InvalidArgumentError(
                f"Dataset.concatenate: elements {structure.describe(dataset._template)} do "
                f"not have this dataset's structure {structure.describe(self._template)}")
        specs = []
        for i, ((dt, shape), (other_dt, other_shape)) in enumerate(
                zip(self._specs, dataset._specs)):
            if dt is not other_dt or not shape.is_compatible_with(other_shape):
                raise errors.InvalidArgumentError(
                    f"Dataset.concatenate: array {i} is {dt.name} {shape} here and "
                    f"{other_dt.name} {other_shape} in the other dataset: expected the same "
                    "dtype and compatible element shapes")
            specs.append((dt, shape.merge_with(other_shape)))
        arrays = []
        for a, b in zip(self._arrays, dataset._arrays):
            values = const_value(a), const_value(b)
            if any(v is None for v in values):
                arrays.append(array_ops.concat([a, b], 0))
            else:                   # still constants: a one-shot iterator can read them
                arrays.append(convert_to_tensor(np.concatenate(values)))
        return Dataset(arrays, True, self._template, specs)

    # -- transformations -------------------------------------------------------------------
    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None) -> Dataset:
        """Shuffle with a buffer of ``buffer_size`` elements (>= the dataset's size: a
        uniform shuffle). Seeded from (graph seed, ``seed``) as TF's random ops are;
        unseeded, every initialization draws a new order."""
        size = _count(buffer_size, "shuffle(buffer_size)")
        graph = get_default_graph()
        graph_seed, op_seed = graph.op_seeds(seed)
        if graph_seed is not None and seed is None:
            counter = _SHUFFLES.of(graph)
            op_seed += counter[0]
            counter[0] += 1
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        return self._then(("shuffle", size, graph_seed, op_seed, reshuffle))

    def batch(self, batch_size, drop_remainder=False) -> Dataset:
        """Group ``batch_size`` consecutive elements into one; the last group may be
        smaller (its static batch dimension is then None) unless ``drop_remainder``."""
        size = _count(batch_size, "batch(batch_size)")
        first = size if drop_remainder else None
        template, specs, element_maps = self._template, self._specs, self._element_maps
        if self._maps:          # they run per element, in the engine
            traced = self._mapped("Dataset.batch after Dataset.map")
            template, specs = traced.template, traced.specs
            element_maps += ((self._level(), traced),)
        specs = [(dt, TensorShape(None) if shape.ndims is None
                  else TensorShape([first] + shape.as_list())) for dt, shape in specs]
        return Dataset(self._arrays, self._slices, template, specs,
                       self._stages + (("batch", size, bool(drop_remainder)),), (),
                       self._infinite, element_maps)

    def repeat(self, count=None) -> Dataset:
        """Repeat the dataset ``count`` times (None or -1: forever), reshuffling each
        pass where a shuffle comes before."""
        count = -1 if count is None else _count(count, "repeat(count)", allow_all=True)
        return self._then(("repeat", count), infinite=self._infinite or count < 0)

    def take(self, count) -> Dataset:
        """The first ``count`` elements (-1: all)."""
        count = _count(count, "take(count)", allow_all=True)
        return self._then(("take", count), infinite=self._infinite and count < 0)

    def skip(self, count) -> Dataset:
        """All but the first ``count`` elements (-1: none)."""
        count = _count(count, "skip(count)", allow_all=True)
        if count < 0 and self._infinite:
            raise errors.InvalidArgumentError(
                "Dataset.skip(-1) of an infinite dataset (after repeat()) would never end")
        return self._then(("skip", count))

    def shard(self, num_shards, index) -> Dataset:
        """Elements ``index``, ``index + num_shards``, ...: one worker's share."""
        num_shards = _count(num_shards, "shard(num_shards)")
        index = _static_int(index, "shard(index)")
        if not 0 <= index < num_shards:
            raise errors.InvalidArgumentError(
                f"Dataset.shard: expected 0 <= index < num_shards, got index={index}, "
                f"num_shards={num_shards}")
        return self._then(("shard", num_shards, index))

    def cache(self, filename="") -> Dataset:
        """Keep the first complete pass and replay it in every later pass of the same
        iterator (after ``repeat``): a shuffle before the cache is drawn once, as in TF.
        The data is in memory already, so a ``filename`` is refused; a map before the
        cache still runs at each ``get_next`` (see the module docstring)."""
        if filename:
            raise errors.UnimplementedError(
                f"Dataset.cache(filename={filename!r}): mpiflow's datasets are arrays in "
                "memory, which it does not write to files; use cache() to keep a pass in "
                "memory")
        return self._then(("cache",))

    def prefetch(self, buffer_size=None) -> Dataset:
        """The same dataset: elements are gathered inside the step that asks for them,
        from memory, so there is nothing to prefetch."""
        return self

    def map(self, map_func, num_parallel_calls=None) -> Dataset:
        """Apply ``map_func`` to each element: to the components as separate arguments
        when the element is a tuple, else to the element. It is traced now, on one
        element in a graph of its own, and runs per element where a ``batch`` follows;
        after the last batch it runs in the graph on each batch (see the module
        docstring). Per element it costs one function call each (about 6 ms per batch
        of 128 MNIST-sized elements for a simple parse function): map after batching
        where the function is right on a batch, for speed."""
        if not callable(map_func):
            raise errors.InvalidArgumentError(
                f"Dataset.map: map_func must be callable, got {map_func!r}")
        maps = self._maps + (map_func,)
        try:
            traced = functions.trace(maps, self._template, self._specs,
                                     get_default_graph().seed)
        except errors.UnimplementedError as exc:   # needed only where no batch follows
            traced = exc
        return Dataset(self._arrays, self._slices, self._template, self._specs,
                       self._stages, maps, self._infinite, self._element_maps, traced)

    # -- what an element is ----------------------------------------------------------------
    @property
    def output_types(self):
        template, specs = self._element("output_types")
        return structure.pack(template, [dt for dt, _ in specs])

    @property
    def output_shapes(self):
        template, specs = self._element("output_shapes")
        return structure.pack(template, [shape for _, shape in specs])

    @property
    def output_classes(self):
        template, specs = self._element("output_classes")
        return structure.pack(template, [Tensor for _ in specs])

    def _element(self, what: str):
        """(template, specs) of an element, after every map."""
        if not self._maps:
            return self._template, self._specs
        traced = self._mapped(f"Dataset.{what} (ask the iterator after get_next() instead)")
        return traced.template, traced.specs

    # -- iterators ---------------------------------------------------------------------------
    def make_one_shot_iterator(self) -> Iterator:
        """An iterator over this dataset that starts by itself on its first get_next and
        cannot be restarted. The data must be constants (numpy values)."""
        return Iterator.one_shot(self._plan())

    def make_initializable_iterator(self, shared_name=None) -> Iterator:
        """An iterator with an ``initializer`` op that (re)starts it; the data may be any
        tensors, e.g. placeholders fed when the initializer runs."""
        return Iterator.initializable(self._plan(), shared_name)

    def _plan(self) -> Plan:
        return Plan(self._arrays, self._slices, self._template, self._specs, self._stages,
                    self._maps, [traced.attr(level) for level, traced in self._element_maps],
                    self._traced, self._level())

    def __getattr__(self, name):
        raise _missing(name, vars(Dataset))

    def __iter__(self):
        raise errors.UnimplementedError(
            "A Dataset is not iterable in a graph: get its elements with "
            "dataset.make_one_shot_iterator().get_next() and Session.run")

    def __repr__(self):
        kinds = ", ".join(stage[0] for stage in self._stages) or "no stages"
        maps = len(self._element_maps) + len(self._maps)
        return (f"<Dataset {structure.describe(self._template)} of "
                f"{[f'{dt.name}{shape}' for dt, shape in self._specs]}: {kinds}"
                f"{f', {maps} map(s)' if maps else ''}>")


def _sources(parts, what: str) -> None:
    """Refuse what ``zip`` and ``concatenate`` cannot join: their datasets are joined as
    arrays, so each must be a source of slices with no stage or map yet."""
    for i, part in enumerate(parts):
        if not isinstance(part, Dataset):
            raise errors.InvalidArgumentError(
                f"Dataset.{what}: expected datasets, got {type(part).__name__} at {i}")
        if part._stages or part._maps or part._element_maps or not part._slices:
            raise errors.UnimplementedError(
                f"Dataset.{what}: dataset {i} is {part!r}: mpiflow joins the arrays of "
                "datasets made by from_tensor_slices or range, so join them before any "
                "stage (shuffle, batch, ...) or map, and apply those to the result")


def _length(dataset):
    """The number of elements of a source dataset, where its shapes say it."""
    for t in dataset._arrays:
        if t.shape.ndims is not None and t.shape[0] is not None:
            return t.shape[0]
    return None


def _cut(t: Tensor, length):
    """``t``'s first ``length`` slices: zip stops at the shortest dataset, as TF's."""
    if length is None or t.shape.ndims is None or t.shape[0] in (None, length):
        return t
    value = const_value(t)
    if value is None:
        raise errors.InvalidArgumentError(
            f"Dataset.zip: '{t.name}' has {t.shape[0]} elements and another dataset "
            f"{length}: cut the fed arrays to one length first")
    return convert_to_tensor(value[:length])


def _nest(template, inner):
    """``template`` (the nesting of the zipped datasets) with each leaf replaced by the
    next dataset's element template."""
    if template == structure.LEAF:
        return next(inner)
    kind, cls, children = template
    if kind == "dict":
        return kind, cls, tuple((k, _nest(child, inner)) for k, child in children)
    return kind, cls, tuple(_nest(child, inner) for child in children)


def _as_tensors(leaves, what: str) -> list:
    if not leaves:
        raise errors.InvalidArgumentError(f"Dataset.{what}: expected at least one array")
    out = []
    for i, leaf in enumerate(leaves):
        try:
            out.append(convert_to_tensor(leaf, name=f"component_{i}"))
        except errors.InvalidArgumentError as exc:
            raise errors.InvalidArgumentError(
                f"Dataset.{what}: array {i} cannot be made a tensor: {exc.message}") from None
    return out
