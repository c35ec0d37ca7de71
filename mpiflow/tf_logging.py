"""``mf.logging``: TF1's ``tf.logging``, writing through mpiflow's rank-tagged logger.

A script's ``tf.logging.info("step %d", step)`` prints ``[rank R] INFO mpiflow.script:
step 7``; ``set_verbosity`` sets the level of every mpiflow logger, as TF1's set that of
TensorFlow's.
"""

from __future__ import annotations

import logging as _logging
import sys

from mpiflow import unsupported
from mpiflow.logger import get_logger

DEBUG, INFO, WARN, WARNING, ERROR, FATAL = (_logging.DEBUG, _logging.INFO, _logging.WARNING,
                                            _logging.WARNING, _logging.ERROR,
                                            _logging.CRITICAL)
_SCRIPT = get_logger("mpiflow.script")
_counts: dict = {}


def set_verbosity(level) -> None:
    _logging.getLogger("mpiflow").setLevel(level)


def get_verbosity() -> int:
    return _logging.getLogger("mpiflow").getEffectiveLevel()


def log(level, msg, *args, **kwargs) -> None:
    _SCRIPT.log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs) -> None:
    _SCRIPT.debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs) -> None:
    _SCRIPT.info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs) -> None:
    _SCRIPT.warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs) -> None:
    _SCRIPT.error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs) -> None:
    _SCRIPT.critical(msg, *args, **kwargs)


def vlog(level, msg, *args, **kwargs) -> None:
    """TF1's verbose log: level 1 and up are DEBUG detail."""
    _SCRIPT.debug(msg, *args, **kwargs)


def _count_at_caller(kind: str) -> int:
    """How many times the line calling ``log_every_n``/``log_first_n`` was reached
    before, counted per line as TF1 counts it (not per message: a script often formats
    the message itself, ``"step %d" % step``, which differs at every call)."""
    caller = sys._getframe(2)
    key = (kind, caller.f_code.co_filename, caller.f_lineno)
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    return count


def log_every_n(level, msg, n, *args) -> None:
    """Log ``msg`` the 1st, (n+1)-th, ... time this line is reached."""
    if _count_at_caller("every") % max(1, n) == 0:
        _SCRIPT.log(level, msg, *args)


def log_first_n(level, msg, n, *args) -> None:
    """Log ``msg`` only the first ``n`` times this line is reached."""
    if _count_at_caller("first") < n:
        _SCRIPT.log(level, msg, *args)

__getattr__ = unsupported.namespace_getattr(__name__, "tf.logging")
