"""The messages ranks exchange: each kind checked on arrival before anything runs, and
errors as they travel from the rank that raised them to the rank that asked.

A message is a msgpack header (``k`` names its kind) and raw arrays. What each kind must
carry is declared once, beside its handler, in the rank service's table of ``Kind``s;
``check_message`` holds a decoded header to it.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import NamedTuple

from mpiflow import errors

INT, OPT_INT, STR = (int,), (int, type(None)), (str,)
STRS = "a list of str"        # a field holding a list of strings
_MISSING = object()


class Kind(NamedTuple):
    """One kind of message: field -> accepted types, how many arrays (a number, or the
    name of the list field that has one entry per array), and its handler
    ``handler(service, source, header, arrays)``."""

    fields: dict
    arrays: int | str
    handler: Callable


def _field_ok(value, types) -> bool:
    if types is STRS:
        return type(value) is list and all(type(v) is str for v in value)
    return type(value) in types


def _describe(types) -> str:
    return types if types is STRS else " or ".join(t.__name__ for t in types)


def check_message(header: dict, num_arrays: int, sender: str, rank: int, kinds: dict) -> str:
    """Return the kind of a decoded message after checking it against ``kinds``.

    Raises:
        DataLossError: unknown kind, a missing or mistyped field, or the wrong number of
            arrays; the message names the sender and the field. Nothing is executed.
    """
    kind = header.get("k")
    schema = kinds.get(kind) if isinstance(kind, str) else None
    if schema is None:
        raise errors.DataLossError(
            f"Rank {rank} got a message of unknown kind {kind!r} from {sender}: expected "
            f"one of {sorted(kinds)}")
    for name, types in schema.fields.items():
        value = header.get(name, _MISSING)
        if value is _MISSING or not _field_ok(value, types):
            raise errors.DataLossError(
                f"Rank {rank} got a malformed '{kind}' message from {sender}: field "
                f"{name!r} should be {_describe(types)}, got "
                f"{'nothing' if value is _MISSING else repr(value)[:80]}")
    expected = len(header[schema.arrays]) if isinstance(schema.arrays, str) else schema.arrays
    if num_arrays != expected:
        raise errors.DataLossError(
            f"Rank {rank} got a malformed '{kind}' message from {sender}: {num_arrays} "
            f"arrays, expected {expected}")
    return kind


def error_header(exc, step, handle, rank: int, who: str, host: str) -> dict:
    """The ``err`` message telling a client that ``exc`` was raised here."""
    op = getattr(exc, "op", None)
    return {"k": "err", "s": step, "h": handle, "cls": type(exc).__name__,
            "msg": getattr(exc, "message", None) or str(exc),
            "op": getattr(op, "name", None), "rank": rank, "who": who, "host": host,
            "tb": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}


def rebuild_error(h: dict) -> errors.OpError:
    """Turn an ``err`` message into the same mpiflow error class, naming the remote rank."""
    cls = getattr(errors, str(h.get("cls")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.OpError)):
        cls = errors.UnknownError
    exc = cls(f"{h['msg']} [raised on {h['who']}, host {h['host']}]")
    exc.__cause__ = errors.RemoteError(h["msg"], rank=h["rank"], role=h["who"],
                                       host=h["host"], remote_traceback=h["tb"])
    return exc
