"""``tf.data.Iterator``: the ops that read a dataset, and the element they return.

An iterator is an ``IteratorAnchor`` op plus, colocated with it, the ops that start it
(``initializer``, ``make_initializer``) and read it (``get_next``), all naming one
resource (see ``ops.iterator_ops``). Its state is per session in one process and per
task in a cluster; each ``get_next()`` call makes one more reading op, and running it
advances the iterator, as in TF.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from mpiflow import errors
from mpiflow.dataset import functions, structure
from mpiflow.framework.dtypes import as_dtype
from mpiflow.framework.graph import Tensor, get_default_graph
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.ops import iterator_ops


class Plan(NamedTuple):
    """What an iterator needs of a dataset (``Dataset._plan()``)."""

    arrays: tuple
    slices: bool
    template: object        # the element before ``maps`` (what the engine makes)
    specs: tuple
    stages: tuple
    maps: tuple             # map functions after the last batch, run in the graph
    element_maps: list      # the ``maps`` attr: traced maps the engine runs per element
    traced: object          # ``maps`` traced (functions.Traced), the error, or None
    level: int              # how many batches come before ``maps``

    def final(self):
        """(template, specs) of an element after every map, or None where ``maps``
        could not be traced."""
        if not self.maps:
            return self.template, self.specs
        if isinstance(self.traced, functions.Traced):
            return self.traced.template, self.traced.specs
        return None


def _pipeline(stages) -> list:
    return [list(stage) for stage in stages]


class Iterator:
    """Reads the elements of a dataset into the graph (TF1's ``tf.data.Iterator``)."""

    def __init__(self, anchor, shared_name: str, template, specs, maps=(), one_shot=None,
                 mapped=None):
        self._anchor = anchor
        self._shared_name = shared_name
        self._template = template
        self._specs = tuple(specs)
        self._maps = tuple(maps)
        self._one_shot = one_shot            # the Plan a one-shot GetNext carries
        self._initializer = None
        self._mapped = mapped                # (template, specs) after the maps, once known

    @classmethod
    def _new(cls, template, specs, shared_name, name, plan=None, one_shot=False):
        shared_name = shared_name or f"{name}_{uuid.uuid4().hex[:16]}"
        types = [dt for dt, _ in specs]
        shapes = [shape for _, shape in specs]
        anchor = iterator_ops.iterator_anchor(shared_name, types, shapes, name=name)
        if plan is None:
            return cls(anchor, shared_name, template, specs)
        return cls(anchor, shared_name, template, specs, plan.maps,
                   plan if one_shot else None, plan.final() if plan.maps else None)

    @classmethod
    def one_shot(cls, plan: Plan) -> Iterator:
        """An iterator that starts itself on its first ``get_next`` (data: constants)."""
        for i, t in enumerate(plan.arrays):
            if t.op.type != "Const":
                raise errors.InvalidArgumentError(
                    f"make_one_shot_iterator: array {i} of the dataset ('{t.name}') comes "
                    f"from a {t.op.type} op, not a constant: a one-shot iterator holds its "
                    "data from the start; use make_initializable_iterator() and run its "
                    "initializer (feeding placeholders there)")
        return cls._new(plan.template, plan.specs, None, "OneShotIterator", plan, True)

    @classmethod
    def initializable(cls, plan: Plan, shared_name=None) -> Iterator:
        """An iterator started (and restarted) by running its ``initializer``."""
        iterator = cls._new(plan.template, plan.specs, shared_name, "Iterator", plan)
        iterator._initializer = iterator._init_op(plan, None)
        return iterator

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None,
                       output_classes=None) -> Iterator:
        """An iterator of elements of this structure, started on any dataset of it by
        ``make_initializer(dataset)`` (one ``get_next`` for a train and a test set)."""
        type_leaves, template = structure.flatten(output_types)
        types = [as_dtype(t) for t in type_leaves]
        if output_shapes is None:
            shapes = [TensorShape(None)] * len(types)
        else:
            try:
                shape_leaves = structure.flatten_up_to(template, output_shapes)
            except errors.InvalidArgumentError as exc:
                raise errors.InvalidArgumentError(
                    "Iterator.from_structure: output_shapes do not have the structure of "
                    f"output_types {structure.describe(template)}: {exc.message}") from None
            shapes = [TensorShape(s) for s in shape_leaves]
        return Iterator._new(template, list(zip(types, shapes)), shared_name, "Iterator")

    # -- ops -----------------------------------------------------------------------------------
    @property
    def initializer(self):
        """The op that (re)starts an initializable iterator."""
        if self._initializer is None:
            kind = "a one-shot iterator" if self._one_shot else "an iterator made by " \
                "from_structure (use make_initializer(dataset))"
            raise errors.InvalidArgumentError(f"Iterator.initializer: {kind} has none")
        return self._initializer

    def make_initializer(self, dataset, name=None):
        """Return an op that starts this iterator on ``dataset`` (same structure and
        dtypes; shapes compatible with the iterator's). Every map of the dataset runs in
        the engine here, also one after the last batch, since the iterator's ``get_next``
        is shared between datasets."""
        plan = getattr(dataset, "_plan", None)
        if not callable(plan):
            raise errors.InvalidArgumentError(
                f"make_initializer: expected a Dataset, got {type(dataset).__name__}")
        plan = plan()
        if self._maps:
            raise errors.UnimplementedError(
                "make_initializer on an iterator made by a mapped dataset's "
                "make_initializable_iterator(): its get_next applies that dataset's maps; "
                "make the iterator with Iterator.from_structure(ds.output_types, "
                "ds.output_shapes)")
        element_maps = list(plan.element_maps)
        if plan.maps:
            traced = plan.traced
            if not isinstance(traced, functions.Traced):
                raise type(traced)(f"make_initializer: {traced.message}") from traced
            element_maps.append(traced.attr(plan.level))
        template, specs = plan.final()
        if template != self._template:
            raise errors.InvalidArgumentError(
                f"make_initializer: the dataset's elements {structure.describe(template)}"
                f" do not have the iterator's structure {structure.describe(self._template)}")
        for i, ((dt, shape), (want_dt, want_shape)) in enumerate(zip(specs, self._specs)):
            if dt is not want_dt or not shape.is_compatible_with(want_shape):
                raise errors.InvalidArgumentError(
                    f"make_initializer: array {i} of the dataset is {dt.name} {shape}, the "
                    f"iterator expects {want_dt.name} {want_shape}")
        return self._init_op(plan, name, element_maps)

    def _init_op(self, plan: Plan, name, element_maps=None):
        # A fed array is copied when the iterator starts: the caller may reuse its buffer.
        copy = [t.op.type != "Const" for t in plan.arrays]
        with get_default_graph().colocate_with(self._anchor):
            return iterator_ops.iterator_init(
                self._shared_name, plan.arrays, [t.dtype for t in plan.arrays],
                _pipeline(plan.stages), plan.slices, copy,
                plan.element_maps if element_maps is None else element_maps, name=name)

    def get_next(self, name=None):
        """Return the next element, as tensors nested like the dataset's elements; each
        run of them advances the iterator, and past the end raises OutOfRangeError."""
        types = [dt for dt, _ in self._specs]
        shapes = [shape for _, shape in self._specs]
        with get_default_graph().colocate_with(self._anchor):
            if self._one_shot is not None:
                plan = self._one_shot
                outputs = iterator_ops.iterator_get_next(
                    self._shared_name, types, shapes, plan.arrays, _pipeline(plan.stages),
                    plan.slices, plan.element_maps, name=name)
            else:
                outputs = iterator_ops.iterator_get_next(self._shared_name, types, shapes,
                                                         name=name)
        element = structure.pack(self._template, outputs)
        for fn in self._maps:
            element = functions.call(fn, element)
        if self._maps:
            leaves, template = structure.flatten(element)
            self._mapped = (template, [(t.dtype, t.shape) for t in leaves])
        return element

    # -- what an element is ----------------------------------------------------------------
    def _spec(self, what: str):
        if not self._maps:
            return self._template, self._specs
        if self._mapped is None:
            raise errors.UnimplementedError(
                f"Iterator.{what} of a dataset mapped by a function that reads tensors of "
                "the graph is known once get_next() has run it: call get_next() first")
        return self._mapped

    @property
    def output_types(self):
        template, specs = self._spec("output_types")
        return structure.pack(template, [dt for dt, _ in specs])

    @property
    def output_shapes(self):
        template, specs = self._spec("output_shapes")
        return structure.pack(template, [shape for _, shape in specs])

    @property
    def output_classes(self):
        template, specs = self._spec("output_classes")
        return structure.pack(template, [Tensor for _ in specs])


