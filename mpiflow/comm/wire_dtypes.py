"""numpy dtypes as the comm layer names and sums them: wire names and the half floats.

mpiflow's dtype table is ``framework/dtypes.py``; comm may not import the framework, so the
two facts about dtypes it needs are kept here. bfloat16 (``ml_dtypes.bfloat16``) is a numpy
dtype of kind 'V' whose ``dtype.str`` ('<V2') names a plain 2-byte void, so a header carries
its name instead. float16 and bfloat16 have no MPI datatype, so collectives that reduce
through MPI or numpy sum them in float32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# Extension floats (ml_dtypes) by the name that travels for them.
_EXTENSION = {"bfloat16": np.dtype(ml_dtypes.bfloat16)}
_NAMES = {dtype: name for name, dtype in _EXTENSION.items()}

HALF_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def wire_name(dtype) -> str:
    """Return the text a header carries for ``dtype`` (``dtype.str``, or the name of an
    ml_dtypes float), which ``from_wire`` turns back into the same dtype."""
    dtype = np.dtype(dtype)
    return _NAMES.get(dtype, dtype.str)


def from_wire(text: str) -> np.dtype:
    """Return the dtype ``wire_name`` gave ``text`` for.

    Raises:
        TypeError: ``text`` names no dtype (as ``np.dtype`` raises).
    """
    found = _EXTENSION.get(text)
    return found if found is not None else np.dtype(text)


def is_floating(dtype) -> bool:
    """Whether ``dtype`` is a float: numpy's (kind 'f') or bfloat16."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in _NAMES


def is_numeric(dtype) -> bool:
    """Whether ``dtype`` is bool, an integer, a float (bfloat16 included) or complex."""
    dtype = np.dtype(dtype)
    return dtype.kind in "biufc" or dtype in _NAMES
