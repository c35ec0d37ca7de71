"""The one place that chooses numpy or cupy for a device.

Kernels receive ``xp`` from here and never import an array library themselves; no module
but this one imports cupy. On a machine without cupy (or without a GPU) nothing of cupy
is imported and asking for a GPU array module is an error that says why.
"""

from __future__ import annotations

import numpy

from mpiflow import errors

_cupy = None
_cupy_error = None


def _load_cupy():
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy  # noqa: PLC0415  (the only cupy import in mpiflow)
            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception as exc:  # ImportError, or CUDA present but no device/driver
            _cupy_error = f"{type(exc).__name__}: {exc}"
    return _cupy


def gpu_available() -> bool:
    """Return whether cupy imports and sees at least one GPU."""
    return _load_cupy() is not None


def device_type(device: str) -> str:
    """Return 'GPU' or 'CPU' for a canonical device string ('' means CPU)."""
    return "GPU" if "/device:GPU" in (device or "") else "CPU"


def array_module(device: str = ""):
    """Return the array module (numpy or cupy) that runs kernels placed on ``device``."""
    if device_type(device) == "CPU":
        return numpy
    cupy = _load_cupy()
    if cupy is None:
        raise errors.PlacementError(
            f"Device {device} needs cupy and a GPU, which are not available here "
            f"({_cupy_error}); install mpiflow[cuda12] or place the op on a CPU")
    return cupy


def to_host(array):
    """Return ``array`` as a numpy array (a copy only when it lives on a GPU)."""
    if isinstance(array, numpy.ndarray) or _cupy is None:
        return array
    return _cupy.asnumpy(array) if isinstance(array, _cupy.ndarray) else array


def is_device_array(array) -> bool:
    return _cupy is not None and isinstance(array, _cupy.ndarray)
