"""The one place that chooses numpy or cupy for a device.

Kernels receive ``xp`` from here and never import an array library themselves; no module
but this one imports cupy. On a machine without cupy (or without a GPU) nothing of cupy
is imported and asking for a GPU array module is an error that says why.
"""

from __future__ import annotations

import ctypes
import os

import numpy

from mpiflow import config, errors

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


def gpu_count() -> int:
    """Return the number of GPUs cupy sees (0 without cupy or a GPU)."""
    cupy = _load_cupy()
    return 0 if cupy is None else int(cupy.cuda.runtime.getDeviceCount())


def gpu_reason() -> str:
    """Why GPU kernels are unavailable here ('' when they are available)."""
    _load_cupy()
    return _cupy_error or ""


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


_nccl = []


def nccl_module():
    """Return ``(cupy.cuda.nccl, "")``, or ``(None, reason)`` where it cannot be used.

    The reason is ``"cupy.cuda.nccl not importable (...)"`` when cupy or its NCCL binding
    is missing, ``"no GPU (...)"`` when the module imports but no device is visible.
    Collectives call this instead of importing cupy themselves.
    """
    if not _nccl:
        try:
            from cupy.cuda import nccl  # noqa: PLC0415  (cupy stays inside backend.py)
        except Exception as exc:  # ImportError, or a broken CUDA install raising anything
            _nccl[:] = [None, f"cupy.cuda.nccl not importable ({type(exc).__name__}: {exc})"]
        else:
            if _load_cupy() is None:
                _nccl[:] = [None, f"no GPU ({_cupy_error})"]
            else:
                _nccl[:] = [nccl, ""]
    return _nccl[0], _nccl[1]


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_host_memory_kept = []


def keep_host_memory() -> bool:
    """Ask glibc to keep freed large host buffers for reuse (once per process).

    numpy allocates every large array with malloc, which maps fresh pages for each and
    unmaps them when freed, so a training step that allocates the same activations,
    gradients and received tensors every time pays the page faults again every step
    (very costly on virtual machines). Raising the mmap and trim thresholds makes freed
    blocks stay in the heap, the way a framework's caching allocator would. Off with
    MPIFLOW_HOST_MEMORY_CACHE=0; a no-op where the C library is not glibc.
    """
    if _host_memory_kept:
        return _host_memory_kept[0]
    done = False
    if config.get("MPIFLOW_HOST_MEMORY_CACHE"):
        try:
            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            mallopt = None
        if mallopt is not None:
            done = bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and \
                bool(mallopt(_M_TRIM_THRESHOLD, 1 << 31))
    _host_memory_kept.append(done)
    return done


_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                     "BLIS_NUM_THREADS")
_thread_limits = []


def share_cpu_cores(ranks_on_node: int) -> int:
    """Limit this rank's BLAS threads to its share of the node's cores; return the limit.

    Several ranks on one node each running BLAS with one thread per core oversubscribe
    the node many times over, and a step gets several times slower. The share is
    MPIFLOW_CPU_THREADS when set, else cores // ranks on the node; nothing is changed
    when the user already chose with OMP_NUM_THREADS or a BLAS variable (0 is returned).
    """
    threads = config.get("MPIFLOW_CPU_THREADS")
    if not threads:
        if any(os.environ.get(v) for v in _THREAD_VARIABLES):
            return 0
        threads = max(1, (os.cpu_count() or 1) // max(1, ranks_on_node))
    from threadpoolctl import threadpool_limits  # noqa: PLC0415  (only when ranks start)
    _thread_limits[:] = [threadpool_limits(limits=threads, user_api="blas")]
    return threads
