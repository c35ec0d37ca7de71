"""Summaries: fetchable bundles of tensors whose class knows each one's kind and tag.

mpiflow has no string dtype, so a summary is not a serialized ``Summary`` proto made by an
op: ``scalar``/``histogram``/``image`` add a one-entry ``Summary`` (a namedtuple of
tensors) to the SUMMARIES collection, and ``merge`` concatenates them. Owns the summary records; writes
nothing (see ``event_file``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Graph, GraphKeys, Tensor, get_default_graph
from mpiflow.ops.constant_ops import convert_to_tensor
from mpiflow.summary.images import IMAGE_DTYPES


class SummarySpec(NamedTuple):
    """What one entry of a summary records: its kind and its TensorBoard tag (for an
    image summary, its images' tags begin with it), for images ``max_outputs``, and the
    name TensorFlow's summary op would have (the tag without the family prefixed,
    "scope/family/name"), which ``merge_all(scope=...)`` matches."""

    kind: str
    tag: str
    max_outputs: int = 0
    name: str = ""


class Summary(tuple):
    """A fetchable bundle of summary tensors (or, once run, of their values).

    Each bundle has its own subclass whose ``specs`` give the kind and tag of every entry;
    being a namedtuple (it has ``_fields``), it comes back from ``Session.run`` as the same
    class holding numpy values.
    """

    __slots__ = ()
    _specs: tuple = ()
    _fields: tuple = ()

    def __new__(cls, *values):
        if len(values) != len(cls._specs):
            raise errors.InvalidArgumentError(
                f"Summary with tags {list(cls.tags)} holds {len(cls._specs)} values, got "
                f"{len(values)}")
        return tuple.__new__(cls, values)

    @property
    def specs(self) -> tuple:
        return self._specs

    @property
    def tags(self) -> tuple:
        return tuple(s.tag for s in self._specs)

    def items(self):
        """Return ``(SummarySpec, tensor or value)`` pairs."""
        return zip(self._specs, self)

    def is_evaluated(self) -> bool:
        """Return whether this holds values (the result of ``Session.run``), not tensors."""
        return not any(isinstance(v, Tensor) for v in self)

    def __repr__(self):
        entries = ", ".join(f"{s.kind} {s.tag!r}" for s in self._specs)
        state = "values" if self.is_evaluated() else "tensors"
        return f"<mf.summary.Summary of {state}: {entries}>"


def _make_summary(specs, values) -> Summary:
    specs = tuple(SummarySpec(*s) for s in specs)
    cls = type("Summary", (Summary,), {
        "__slots__": (), "_specs": specs,
        "_fields": tuple(f"value_{i}" for i in range(len(specs))),
        "__module__": __name__})
    return cls(*values)


KINDS = ("scalar", "histogram", "image")


# Characters a tag may not hold (TensorFlow's rule): each becomes "_".
_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")


def _clean_tag(name: str) -> str:
    """Return ``name`` with characters a tag may not hold replaced by "_" and no leading
    "/", as TensorFlow cleans the names of its summaries."""
    return _INVALID_TAG_CHARACTERS.sub("_", str(name)).lstrip("/")


def _summary_tag(graph: Graph, name: str, family) -> tuple:
    """Return the tag of a summary ``name`` and the name of its op, as TensorFlow names
    them.

    ``[family/]name`` is made a unique name under the name scope (suffixed ``_N`` where an
    op or another summary already has it, and reserved, so a later op "loss" becomes
    "loss_1", as next to TensorFlow's summary op); ``family`` is prefixed once more, so
    that TensorBoard groups the tag under it: "family/scope/family/name" (the op's name
    is "scope/family/name").
    """
    name = _clean_tag(name)
    family = _clean_tag(family) if family else None
    base = graph.unique_name(f"{family}/{name}" if family else name)
    return (f"{family}/{base}" if family else base), base


def _add(kind: str, name: str, family, tensor, collections, check,
         max_outputs: int = 0) -> Summary:
    tensor = convert_to_tensor(tensor)
    graph = tensor.graph
    tag, op_name = _summary_tag(graph, name, family)
    if not (tensor.dtype.is_floating or tensor.dtype.is_integer or tensor.dtype.is_bool):
        raise errors.InvalidArgumentError(
            f"mf.summary.{kind}('{tag}') needs a numeric tensor, got '{tensor.name}' of "
            f"dtype {tensor.dtype.name}")
    tensor = check(tag, tensor)
    summary = _make_summary([SummarySpec(kind, tag, max_outputs, op_name)], [tensor])
    for key in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        graph.add_to_collection(key, summary)
    return summary


def _check_scalar(tag, tensor):
    if tensor.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"mf.summary.scalar('{tag}') needs a scalar: expected shape (), got "
            f"'{tensor.name}' of shape {tensor.shape}")
    return tensor


def scalar(name: str, tensor, collections=None, family=None) -> Summary:
    """Record the scalar ``tensor`` under tag ``name`` (prefixed by the name scope).

    Args:
        name: the tag, under the name scope; a second "loss", or one beside an op named
            "loss", gets "loss_1"; characters other than letters, digits, "_", "-", "."
            and "/" become "_".
        tensor: a numeric scalar Tensor or Variable.
        collections: graph collections to add the summary to (default [SUMMARIES]).
        family: optional tag prefix (TensorBoard groups tags by it), put before the
            name scope: "family/scope/family/name", as TensorFlow's.

    Returns:
        a ``Summary`` to fetch with ``Session.run`` or merge.

    Raises:
        InvalidArgumentError: the tensor is not numeric or not a scalar.
    """
    return _add("scalar", name, family, tensor, collections, _check_scalar)


def histogram(name: str, values, collections=None, family=None) -> Summary:
    """Record the distribution of ``values`` (any numeric shape) under tag ``name``."""
    return _add("histogram", name, family, values, collections, lambda tag, tensor: tensor)


def image(name: str, tensor, max_outputs: int = 3, collections=None,
          family=None) -> Summary:
    """Record the first ``max_outputs`` images of ``tensor`` ``[batch, height, width,
    channels]`` (1, 3 or 4 channels: grayscale, RGB, RGBA), as PNG images in TensorBoard.

    As TensorFlow's: the tags are "name/image" where ``max_outputs`` is 1, else
    "name/image/0", "name/image/1", ... (under the name scope and ``family`` as
    ``scalar``'s); uint8 images are written as they are, float images (float16, float32,
    float64) each scaled by itself: values that are all >= 0 so that the largest is 255,
    others so that the largest absolute value is 127 with 0 at 128; a pixel with a NaN or
    infinite value is red. Only the images written are fetched with the summary.

    Raises:
        InvalidArgumentError: another dtype, a shape that is not 4-D with 1, 3 or 4
            channels, or ``max_outputs`` below 1 (when the summary is written: images
            of another shape, or without pixels).
    """
    if isinstance(max_outputs, bool) or not isinstance(max_outputs, (int, np.integer)) or \
            max_outputs < 1:
        raise errors.InvalidArgumentError(
            f"mf.summary.image('{name}'): max_outputs must be an int >= 1, got "
            f"{max_outputs!r}")

    def check(tag, tensor):
        if tensor.dtype.name not in IMAGE_DTYPES:
            raise errors.InvalidArgumentError(
                f"mf.summary.image('{tag}') needs images of dtype {' or '.join(IMAGE_DTYPES)}"
                f", got '{tensor.name}' of dtype {tensor.dtype.name}")
        shape = tensor.shape
        if shape.ndims is not None and (shape.ndims != 4 or shape.as_list()[-1] not in
                                        (None, 1, 3, 4)):
            raise errors.InvalidArgumentError(
                f"mf.summary.image('{tag}') needs images [batch, height, width, channels] "
                f"with 1, 3 or 4 channels, got '{tensor.name}' of shape {shape}")
        return tensor[:int(max_outputs)]

    return _add("image", name, family, tensor, collections, check, int(max_outputs))


def merge(inputs, collections=None, name=None) -> Summary:
    """Return one ``Summary`` holding every entry of ``inputs`` (a list of Summaries).

    Raises:
        InvalidArgumentError: ``inputs`` is empty, holds something that is not a
            Summary, or two entries have the same tag.
    """
    inputs = list(inputs)
    if not inputs:
        raise errors.InvalidArgumentError("mf.summary.merge needs at least one summary")
    specs, tensors = [], []
    for item in inputs:
        if not isinstance(item, Summary):
            raise errors.InvalidArgumentError(
                f"mf.summary.merge takes summaries made by mf.summary.scalar/histogram/"
                f"image/merge, got {item!r}")
        for spec, tensor in item.items():
            specs.append(spec)
            tensors.append(tensor)
    tags = [s.tag for s in specs]
    duplicates = sorted({t for t in tags if tags.count(t) > 1})
    if duplicates:
        raise errors.InvalidArgumentError(
            f"mf.summary.merge: duplicate tags {duplicates}: each tag may appear once")
    merged = _make_summary(specs, tensors)
    graph = next((t.graph for t in tensors if isinstance(t, Tensor)), None)
    for key in collections or ():
        (graph or get_default_graph()).add_to_collection(key, merged)
    return merged


def merge_all(key: str = GraphKeys.SUMMARIES, scope=None, name=None) -> Summary | None:
    """Merge every summary in collection ``key`` of the default graph; None if there is none.

    ``scope``: only the summaries whose name matches this regular expression at its start,
    as TensorFlow filters its summary ops by name: the tag, but without a ``family``
    prefixed ("scope/family/loss" for the tag "family/scope/family/loss").
    """
    graph = get_default_graph()
    found = [s for s in graph.get_collection(key) if isinstance(s, Summary)]
    if scope is not None:
        pattern = re.compile(scope)
        found = [s for s in found
                 if any(pattern.match(spec.name or spec.tag) for spec in s.specs)]
    return merge(found) if found else None
