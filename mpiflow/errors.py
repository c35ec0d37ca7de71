"""Exception classes of mpiflow, named after TensorFlow's so users' habits carry over.

Owns the error hierarchy, the one message template every layer uses:
``"<what> in op 'name' (Type) on <device>: expected <X>, got <Y>"``, a list of names cut
short (``first_of``), and the one check of an integer argument with a lower bound
(``integer_at_least``).
Imports nothing of mpiflow.
"""

from __future__ import annotations

import numbers
import re


class MpiflowError(Exception):
    """Base class of every error mpiflow raises on purpose."""


class OpError(MpiflowError):
    """An error tied to an operation (or to the runtime acting for one).

    Made as ``Error(message, op=None)``, or with TensorFlow's arguments,
    ``Error(node_def, op, message)``, as TF1 code raises them (an input function that
    raises ``OutOfRangeError(None, None, "end of input")`` to end training cleanly).

    Attributes:
        op: the ``Operation`` involved, or None when the error is not tied to one.
        message: the text without the op prefix.
        node_def: TensorFlow's node description, where it was given (else None).
    """

    error_code = "UNKNOWN"

    def __init__(self, message=None, op=None, *tensorflow_message, node_def=None):
        if tensorflow_message:          # TensorFlow's (node_def, op, message)
            node_def, message = message, tensorflow_message[0]
        self.node_def = node_def
        self.op = op
        self.message = message
        super().__init__(message)


class CancelledError(OpError):
    error_code = "CANCELLED"


class UnknownError(OpError):
    error_code = "UNKNOWN"


class InvalidArgumentError(OpError, ValueError):
    """Bad input: a shape, dtype, attr or value that the op cannot accept.

    Also a ``ValueError`` so code written for TensorFlow's build-time ``ValueError``
    keeps catching it.
    """

    error_code = "INVALID_ARGUMENT"


class DeadlineExceededError(OpError):
    """A wait ran past its timeout; the message names who was waited for and on what."""

    error_code = "DEADLINE_EXCEEDED"


class NotFoundError(OpError):
    error_code = "NOT_FOUND"


class AlreadyExistsError(OpError):
    error_code = "ALREADY_EXISTS"


class PermissionDeniedError(OpError):
    error_code = "PERMISSION_DENIED"


class ResourceExhaustedError(OpError):
    error_code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(OpError):
    """The system is not in the state the op needs (e.g. an uninitialized variable)."""

    error_code = "FAILED_PRECONDITION"


class AbortedError(OpError):
    error_code = "ABORTED"


class OutOfRangeError(OpError):
    error_code = "OUT_OF_RANGE"


class UnimplementedError(OpError, NotImplementedError):
    error_code = "UNIMPLEMENTED"


class InternalError(OpError):
    error_code = "INTERNAL"


class UnavailableError(OpError):
    """A peer (rank) is lost or unreachable."""

    error_code = "UNAVAILABLE"


class DataLossError(OpError):
    error_code = "DATA_LOSS"


class CheckpointNotFoundError(NotFoundError, ValueError):
    """No checkpoint at the path a restore was given. Also a ``ValueError``, which
    TensorFlow's ``Saver.restore`` raises there, so code written for it keeps catching
    it."""


class FeedConflictError(InvalidArgumentError, RuntimeError):
    """One tensor fed twice in a monitored session's run (by two hooks, or by a hook and
    the caller). Also a ``RuntimeError``, which TensorFlow's ``MonitoredSession`` raises
    there, so code written for it keeps catching it."""


class PlacementError(InvalidArgumentError):
    """An op asked for a device that the cluster cannot provide."""


class UnsupportedAPIError(MpiflowError, AttributeError):
    """A TF1 name mpiflow does not provide (``tf.contrib``, ``tf.train.Foo``).

    An ``AttributeError`` so ``hasattr``, ``getattr(module, name, default)`` and
    ``from module import name`` keep working as for any missing attribute.
    """


class RemoteError(MpiflowError):
    """An error raised on another rank, carried back with its rank, role, host and traceback."""

    def __init__(self, message: str, rank: int | None = None, role: str | None = None,
                 host: str | None = None, remote_traceback: str | None = None):
        self.rank = rank
        self.role = role
        self.host = host
        self.remote_traceback = remote_traceback
        super().__init__(message)


def first_of(names, most: int = 8) -> str:
    """``"a, b, c"``, or the first ``most`` of ``names`` and ``"and N more"``: a message
    that names every rank of a large job would be the size of the job."""
    names = list(names)
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(map(str, names[:most])) + more


def integer_at_least(value, minimum: int, what: str, hint: str = "") -> int:
    """``value`` as an int, where it is an integer (numpy's too, never a bool) of at least
    ``minimum``; else InvalidArgumentError: "``what`` must be an int >= ``minimum``
    ``hint``, got ...". The one check of every integer argument with a lower bound."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidArgumentError(f"{what} must be an int >= {minimum}{hint}, got {value!r}")
    return int(value)


def describe_op(op) -> str:
    """Return ``"op 'name' (Type) on device"`` for use inside error messages."""
    if op is None:
        return "no op"
    text = f"op '{op.name}' ({op.type})"
    if getattr(op, "device", ""):
        text += f" on {op.device}"
    return text


def op_error(cls, what: str, op=None, expected=None, got=None):
    """Build ``cls`` with the project's message template.

    Args:
        cls: the error class (an ``OpError`` subclass).
        what: what went wrong, e.g. ``"Shape mismatch"``.
        op: the operation (or None at build time before the op exists).
        expected, got: optional descriptions appended as ``expected X, got Y``.
    """
    text = what
    if op is not None:
        text += f" in {describe_op(op)}"
    details = []
    if expected is not None:
        details.append(f"expected {expected}")
    if got is not None:
        details.append(f"got {got}")
    if details:
        text += ": " + ", ".join(details)
    return cls(text, op)


# Exceptions a kernel raises on bad runtime input (shapes that only meet at run time,
# out-of-range indices) are the caller's fault: InvalidArgumentError naming the op.
KERNEL_INPUT_ERRORS = (ValueError, IndexError, TypeError, ArithmeticError)


# numpy's words for shapes that meet only at run time and do not broadcast, and the
# shapes they name: said as TensorFlow says it ("Incompatible shapes: [5,1] vs. [4,1]").
_NOT_BROADCAST = re.compile(r"operands could not be broadcast together with shapes "
                            r"((?:\([\d, ]*\) ?)+)")
_SHAPE = re.compile(r"\(([\d, ]*)\)")


def _kernel_message(exc: BaseException) -> str:
    found = _NOT_BROADCAST.search(str(exc)) if isinstance(exc, ValueError) else None
    if found:
        shapes = ["[" + dims.replace(" ", "").rstrip(",") + "]"
                  for dims in _SHAPE.findall(found.group(1))]
        return "Incompatible shapes: " + " vs. ".join(shapes)
    return f"{type(exc).__name__}: {exc}"


def kernel_error(exc: BaseException, op) -> "OpError":
    """The OpError to raise for ``exc``, raised by the kernel of ``op``."""
    if isinstance(exc, OpError):
        return exc
    if isinstance(exc, MemoryError):
        return op_error(ResourceExhaustedError, f"Out of memory ({exc})", op)
    cls = InvalidArgumentError if isinstance(exc, KERNEL_INPUT_ERRORS) else InternalError
    return op_error(cls, _kernel_message(exc), op)
