"""The nesting of a dataset's elements: tuples, namedtuples and dicts of tensors.

``flatten`` turns an element into its leaves and a template that ``pack`` fills back, as
TF's ``nest`` does for ``tf.data``: tuples and dicts are structure (dict keys in sorted
order), anything else is a leaf. A list is a leaf too, as in ``tf.data``, where
``from_tensor_slices([1, 2, 3])`` is one tensor and not three. Templates are plain
tuples, so two elements have the same structure when their templates are equal.
"""

from __future__ import annotations

from mpiflow import errors

LEAF = "leaf"


def flatten(value):
    """Return ``(leaves, template)`` of ``value``."""
    leaves = []
    return leaves, _flatten(value, leaves)


def _flatten(value, leaves):
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            raise errors.InvalidArgumentError(
                f"Dataset element dicts need sortable keys, got {list(value)!r}") from None
        return ("dict", type(value), tuple((k, _flatten(value[k], leaves)) for k in keys))
    if isinstance(value, tuple):
        return ("tuple", type(value), tuple(_flatten(v, leaves) for v in value))
    leaves.append(value)
    return LEAF


def flatten_up_to(template, value) -> list:
    """The leaves of ``value`` where ``template`` has leaves, taking whatever sits there
    whole: shapes given as tuples, ``(None, 2)``, stay one shape.

    Raises:
        InvalidArgumentError: ``value`` is not nested as ``template``.
    """
    if template == LEAF:
        return [value]
    kind, _, children = template
    if kind == "dict":
        if not isinstance(value, dict) or sorted(value) != [k for k, _ in children]:
            raise errors.InvalidArgumentError(
                f"expected a dict with keys {[k for k, _ in children]}, got {value!r}")
        return [leaf for k, child in children for leaf in flatten_up_to(child, value[k])]
    if not isinstance(value, (tuple, list)) or len(value) != len(children):
        raise errors.InvalidArgumentError(
            f"expected a tuple of {len(children)} items, got {value!r}")
    return [leaf for child, v in zip(children, value) for leaf in flatten_up_to(child, v)]


def pack(template, leaves):
    """Return the element of structure ``template`` holding ``leaves`` in order."""
    it = iter(leaves)
    out = _pack(template, it)
    if next(it, None) is not None:
        raise errors.InvalidArgumentError("pack: more leaves than the structure holds")
    return out


def _pack(template, it):
    if template == LEAF:
        return next(it)
    kind, cls, children = template
    if kind == "dict":
        return cls((k, _pack(child, it)) for k, child in children)
    values = [_pack(child, it) for child in children]
    return cls(*values) if hasattr(cls, "_fields") else cls(values)


def describe(template) -> str:
    """The structure for error messages: ``(x, {'a': x})``."""
    if template == LEAF:
        return "x"
    kind, cls, children = template
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {describe(c)}" for k, c in children) + "}"
    inner = ", ".join(describe(c) for c in children)
    return f"({inner},)" if len(children) == 1 else f"({inner})"
