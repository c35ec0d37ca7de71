"""TensorShape: a static shape whose rank or dimensions may be unknown (None)."""

from __future__ import annotations

import operator

import numpy as np

from mpiflow import errors


class TensorShape:
    """A static shape: ``None`` for unknown rank, ``None`` entries for unknown dims."""

    __slots__ = ("_dims",)

    def __init__(self, dims=None):
        if isinstance(dims, TensorShape):
            dims = dims._dims
        if dims is None:
            self._dims = None
        else:
            try:
                self._dims = tuple(_dimension(d) for d in dims)
            except TypeError:
                raise errors.InvalidArgumentError(
                    f"Invalid shape {dims!r}: expected a list of ints or None (a float, bool "
                    "or string is not a dimension)") from None
            if any(d is not None and d < 0 for d in self._dims):
                raise errors.InvalidArgumentError(
                    f"Invalid shape {list(dims)!r}: dimensions must be >= 0 or None")

    @property
    def dims(self):
        return None if self._dims is None else list(self._dims)

    @property
    def ndims(self):
        return None if self._dims is None else len(self._dims)

    rank = ndims

    def as_list(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("as_list() is not defined on an unknown shape")
        return list(self._dims)

    def as_tuple(self):
        """Return the dims as a tuple, or None when the rank is unknown."""
        return self._dims

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d
        return n

    def is_compatible_with(self, other) -> bool:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def admits(self, array_shape: tuple) -> bool:
        """Whether an array of ``array_shape`` (an array's own shape: a tuple of ints >= 0)
        fits this shape: ``is_compatible_with`` without building a TensorShape of it, for
        the checks every step makes (each feed, each assignment)."""
        dims = self._dims
        if dims is None:
            return True
        if len(dims) != len(array_shape):
            return False
        for want, have in zip(dims, array_shape):
            if want is not None and want != have:
                return False
        return True

    def merge_with(self, other) -> "TensorShape":
        """Return the most specific shape compatible with both; raise if incompatible."""
        other = as_shape(other)
        if not self.is_compatible_with(other):
            raise errors.InvalidArgumentError(f"Shapes {self} and {other} are incompatible")
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def __len__(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("len() of a shape with unknown rank")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("Cannot iterate over a shape with unknown rank")
        return iter(self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except errors.InvalidArgumentError:
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self):
        return hash(self._dims)

    def __repr__(self):
        return f"TensorShape({self.dims!r})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        return "(" + ", ".join("?" if d is None else str(d) for d in self._dims) + \
            ("," if len(self._dims) == 1 else "") + ")"


def _dimension(d):
    """One dimension: a whole number (or None / -1 for unknown); 2.5 must not become 2."""
    if d is None:
        return None
    if isinstance(d, (bool, np.bool_)):
        raise TypeError("a bool is not a dimension")
    value = getattr(d, "value", d)          # a Dimension
    if value is None:
        return None
    value = operator.index(value)
    return None if value == -1 else value


def as_shape(shape) -> TensorShape:
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(ndims=None) -> TensorShape:
    return TensorShape(None if ndims is None else [None] * ndims)
