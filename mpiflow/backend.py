"""The one place that chooses numpy or cupy for a device, binds a rank's GPU and moves
arrays between host and device.

Kernels receive ``xp`` from here and never import an array library themselves; no module
but this one imports cupy. On a machine without cupy (or without a GPU) nothing of cupy
is imported and asking for a GPU array module is an error that says why; a job that
places nothing on a GPU never imports cupy at all (binding is lazy).

GPU binding: each rank takes GPU ``local_rank % gpus`` of its node (``MPIFLOW_GPU``
overrides) as its ``/device:GPU:0``; ``/device:GPU:K`` is the K-th GPU after it, so one
rank per node with several GPUs addresses them all as TensorFlow does, and several ranks
per node each get their own. The CUDA device is per thread, so whoever runs kernels calls
``activate_gpu`` first (a cheap check when it is already current).
"""

from __future__ import annotations

import ctypes
import errno
import math
import mmap
import os
import sys
import threading

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


def cupy_version() -> str | None:
    """cupy's version where it works here (None: ``gpu_reason()`` says why not)."""
    cupy = _load_cupy()
    return None if cupy is None else cupy.__version__


def gpu_available() -> bool:
    """Return whether cupy imports and sees at least one GPU."""
    return _load_cupy() is not None


_gpu_count = []


def gpu_count() -> int:
    """Return the number of GPUs cupy sees (0 without cupy or a GPU); asked once."""
    if not _gpu_count:
        cupy = _load_cupy()
        _gpu_count.append(0 if cupy is None else int(cupy.cuda.runtime.getDeviceCount()))
    return _gpu_count[0]


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


def elementwise_fuser(xp):
    """``xp``'s function that compiles a Python formula of ufunc calls into one kernel
    (``cupy.fuse``), or None for numpy, which has none."""
    return getattr(xp, "fuse", None) if xp is not numpy else None


def to_host(array):
    """Return ``array`` as a numpy array (a copy only when it lives on a GPU)."""
    if isinstance(array, numpy.ndarray) or _cupy is None:
        return array
    return _cupy.asnumpy(array) if isinstance(array, _cupy.ndarray) else array


def is_device_array(array) -> bool:
    return _cupy is not None and isinstance(array, _cupy.ndarray)


def read_only(array):
    """Return ``array`` as a kernel that must not write it sees it: a numpy array as a
    read-only view (a write raises at once); anything else as is (cupy arrays have no
    read-only flag: ``snapshot`` and ``unchanged`` check them after the kernel)."""
    if type(array) is numpy.ndarray and array.flags.writeable:
        view = array.view()
        view.flags.writeable = False
        return view
    return array


def snapshot(array):
    """Return a copy of ``array`` if it is a GPU array (to compare after a kernel), else
    None."""
    return array.copy() if is_device_array(array) else None


def unchanged(array, copy) -> bool:
    """Whether GPU ``array`` still holds the values ``copy`` (from ``snapshot``) holds;
    NaNs in the same places count as unchanged."""
    return bool(_cupy.array_equal(array, copy, equal_nan=array.dtype.kind in "fc"))


# -- host buffers ------------------------------------------------------------------------

# Host buffers of a huge page's size and more start on a huge-page boundary, in a mapping
# of their own that asks for transparent huge pages: the kernel backs only whole aligned
# 2 MiB ranges with them (numpy asks for them too, but its arrays start anywhere), and
# MPI's shared-memory path moves a buffer on huge pages about three times as fast as one
# on 4 KiB pages (1-16 MiB, MPICH; benchmarks/ps_throughput.py). Buffers from half a huge
# page on get a whole one (at most 1 MiB unused, never more than the buffer's own size);
# smaller ones stay with numpy.
HUGE_PAGE_BYTES = 2 << 20
HUGE_PAGE_MIN_BYTES = HUGE_PAGE_BYTES // 2
_HUGE_PAGES_ASKABLE = hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_PRIVATE")
# What decides the speed is the sender's pages (MPICH reads them from the other process):
# a 256 KiB message leaves huge pages about 2.5 times as fast as 4 KiB pages, a 64 KiB one
# 1.6 times (MPICH 5, mpi4py alone; the raw columns of benchmarks/ps_throughput.py at
# 1 MiB in 4 variables). So a buffer that lasts (a variable's, a pooled one) from
# SHARED_HUGE_PAGE_MIN_BYTES to half a huge page is carved out of a huge page it shares
# with others. Smaller payloads ride inline (copied into a frame): pages do not matter.
SHARED_HUGE_PAGE_MIN_BYTES = 64 << 10
_CARVE_ALIGN = 4096


def _huge_page_mapping(nbytes: int):
    """``(mapping, offset)``: an anonymous mapping with ``nbytes`` from ``offset`` on, the
    offset on a huge-page boundary and the whole huge pages from there asked to be huge."""
    mapping = mmap.mmap(-1, max(nbytes, HUGE_PAGE_BYTES) + HUGE_PAGE_BYTES,
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = numpy.frombuffer(mapping, numpy.uint8, count=1).ctypes.data
    offset = -start % HUGE_PAGE_BYTES
    huge = max(nbytes // HUGE_PAGE_BYTES, 1) * HUGE_PAGE_BYTES
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, offset, huge)
    except OSError:
        pass                # huge pages off in this kernel: aligned all the same
    return mapping, offset


class _SharedHugePage:
    """Carves mid-sized buffers out of one huge page after another, page-aligned.

    Only buffers that last are carved (variables', pooled ones): space is never handed
    out twice, and a huge page is unmapped when the last array carved from it is gone
    (each holds the mapping). What a process can leave unused is the rest of the page it
    carves from now, plus what dead arrays left in pages that live ones still hold.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._mapping = None
        self._next = self._end = 0

    def carve(self, nbytes: int):
        """``(mapping, offset)`` of ``nbytes`` (less than half a huge page) of its own."""
        size = -(-nbytes // _CARVE_ALIGN) * _CARVE_ALIGN
        with self._lock:
            if self._mapping is None or self._next + size > self._end:
                self._mapping, self._next = _huge_page_mapping(HUGE_PAGE_BYTES)
                self._end = self._next + HUGE_PAGE_BYTES
            offset = self._next
            self._next += size
            return self._mapping, offset


_shared_huge_page = _SharedHugePage()


def host_empty(shape, dtype) -> numpy.ndarray:
    """Return an uninitialised host array for data that stays (a reused receive buffer):
    from ``HUGE_PAGE_MIN_BYTES`` on, aligned to a huge page and on huge pages where the
    kernel allows them.

    The array owns its mapping directly (its ``base`` is the mapping, not another array),
    so every view of it references it, as views of ``numpy.empty`` arrays do: reference
    counts of it stay true (the receive pool relies on that). Past the first huge page,
    a partial one at the end keeps small pages: no memory is left unused there."""
    dtype = numpy.dtype(dtype)
    nbytes = dtype.itemsize * math.prod(shape)
    if nbytes < HUGE_PAGE_MIN_BYTES or dtype.hasobject or not _HUGE_PAGES_ASKABLE:
        return numpy.empty(shape, dtype)        # (object arrays cannot live in a mapping)
    try:
        mapping, offset = _huge_page_mapping(nbytes)
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
        # Said as numpy.empty says it (a MemoryError, which kernels' errors turn into
        # ResourceExhaustedError), not as mmap's bare "[Errno 12] Cannot allocate memory".
        raise MemoryError(f"Unable to allocate {_amount(nbytes)} for an array with shape "
                          f"{tuple(shape)} and data type {dtype}") from None
    return numpy.ndarray(shape, dtype, buffer=mapping, offset=offset)


def _amount(nbytes: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.3g} {unit}" if unit != "bytes" else f"{nbytes} bytes"
        nbytes /= 1024


def lasting_host_empty(shape, dtype) -> numpy.ndarray:
    """Return an uninitialised host array for a buffer that lasts (a variable's, which
    pulls send from; a pooled one): on huge pages as ``host_empty``'s from half a huge
    page on, and from ``SHARED_HUGE_PAGE_MIN_BYTES`` below that in a huge page shared with
    other lasting buffers (its ``base`` is that page's mapping, so views of it count as
    they do for ``host_empty``'s arrays)."""
    dtype = numpy.dtype(dtype)
    nbytes = dtype.itemsize * math.prod(shape)
    if SHARED_HUGE_PAGE_MIN_BYTES <= nbytes < HUGE_PAGE_MIN_BYTES and \
            not dtype.hasobject and _HUGE_PAGES_ASKABLE:
        mapping, offset = _shared_huge_page.carve(nbytes)
        return numpy.ndarray(shape, dtype, buffer=mapping, offset=offset)
    return host_empty(shape, dtype)


# From here the C library maps every allocation afresh (glibc's largest mmap threshold):
# a mapping of mpiflow's own costs no more. Below it, an array that a kernel makes step
# after step comes warm from the heap, 2-3 times cheaper to make and fill than a fresh
# mapping (2-16 MiB).
FRESHLY_MAPPED_BYTES = 32 << 20


def value_empty(shape, dtype) -> numpy.ndarray:
    """Return an uninitialised host array for a kernel result that may become a
    variable's buffer (an initializer's draw or fill, which ``Assign`` then keeps): where
    a variable's buffer would lie from ``FRESHLY_MAPPED_BYTES`` on (large enough for a
    second copy to matter), from the heap below that."""
    dtype = numpy.dtype(dtype)
    if dtype.itemsize * math.prod(shape) >= FRESHLY_MAPPED_BYTES:
        return host_empty(shape, dtype)
    return numpy.empty(shape, dtype)


def placed_to_last(array) -> bool:
    """Whether host ``array`` is where ``lasting_host_empty`` would have put its bytes (so
    a variable may keep it as its buffer instead of copying it into one): below
    ``SHARED_HUGE_PAGE_MIN_BYTES`` any array is (pages do not matter there); from half a
    huge page on, a whole array of ``host_empty``'s mapping (when huge pages can be asked
    for). Sizes between share a huge page with other buffers: only a copy puts them there."""
    if type(array) is not numpy.ndarray or not array.flags.c_contiguous or \
            not array.flags.writeable or array.dtype.hasobject:
        return False
    if array.nbytes < SHARED_HUGE_PAGE_MIN_BYTES or not _HUGE_PAGES_ASKABLE:
        return array.base is None
    return array.nbytes >= HUGE_PAGE_MIN_BYTES and isinstance(array.base, mmap.mmap) and \
        array.ctypes.data % HUGE_PAGE_BYTES == 0


def _size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to its pool size class: eight classes between two powers of
    two (at most 1/8 more memory than asked), so sizes that vary from step to step (the
    rows of a lookup) share a few buffers instead of keeping one each."""
    step = max((1 << (nbytes.bit_length() - 1)) // 8, 4096)
    return -(-nbytes // step) * step


def _reference_counts_tell_owners() -> bool:
    """Whether ``sys.getrefcount`` counts what the pool's rule assumes (CPython counts a
    loop variable and a call's argument): a buffer somebody else holds reads above 3, one
    only the pool holds reads 3 or less. An interpreter that borrows references counts
    less, and the pool would hand out a buffer still in use: there it keeps nothing."""
    held = [numpy.empty(1)]
    user = held[0]
    for buffer in held:
        with_user = sys.getrefcount(buffer)
    del user
    for buffer in held:
        alone = sys.getrefcount(buffer)
    return with_user > 3 >= alone


_POOLS_REUSE = _reference_counts_tell_owners()


class HostBufferPool:
    """Host buffers reused once nobody holds them any more: warm memory on huge pages.

    An array handed out goes to the graph, to MPI and maybe to the user; the pool keeps
    the buffer under it and gives it out again only when its reference count shows that
    the pool's own reference is the last one (a view of it, the array handed out among
    them, holds a reference), so nothing still in use is ever overwritten. Buffers are
    kept by size class, at most ``max_per_class`` of one class and ``max_bytes`` in all;
    beyond that an array is allocated as ``host_empty`` makes it and goes when its users
    do.
    """

    def __init__(self, max_per_class=4, min_bytes=SHARED_HUGE_PAGE_MIN_BYTES,
                 max_bytes=1 << 30):
        self.max_per_class = max_per_class
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._free = {}

    def empty(self, shape, dtype):
        """Return an array of ``shape`` and ``dtype`` that nobody else references."""
        dtype = numpy.dtype(dtype)
        nbytes = dtype.itemsize * math.prod(shape)
        if nbytes < self.min_bytes or dtype.hasobject:
            return numpy.empty(shape, dtype)
        if not _POOLS_REUSE:
            return host_empty(shape, dtype)
        size = _size_class(nbytes)
        held = self._free.setdefault(size, [])
        for buffer in held:
            # One reference in the list, one as getrefcount's argument, one in ``buffer``:
            # a thread looking at the same buffer at once holds a fourth, so two threads
            # never both take it.
            if sys.getrefcount(buffer) <= 3:
                return buffer[:nbytes].view(dtype).reshape(shape)
        if len(held) >= self.max_per_class or self.held_bytes + size > self.max_bytes:
            return host_empty(shape, dtype)
        buffer = lasting_host_empty((size,), numpy.uint8)
        held.append(buffer)
        self.held_bytes += size
        return buffer[:nbytes].view(dtype).reshape(shape)


# Kernel results that leave the rank in a message (gradients pushed to a ps, rows a ps
# sends back): MPI sends them from huge pages, and the next step finds them warm.
_outgoing = HostBufferPool()


def outgoing_empty(shape, dtype) -> numpy.ndarray:
    """Return an array for a kernel result that a Send takes from this rank."""
    return _outgoing.empty(tuple(shape), dtype)


# -- GPU binding -------------------------------------------------------------------------

_local_rank = [0, None]    # this rank's local rank, and the ranks on its node once known
_node_cpus = [None]        # the processors the job's ranks on this machine may use, once known
# What MPICH's and Open MPI's mpiexec tell each rank: how many they started on its node.
_LAUNCHER_LOCAL_SIZE = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def set_local_rank(local_rank: int, local_size: int = 1,
                   node_cpus: int | None = None) -> None:
    """Record this rank's place on its node, and the processors the job's ranks of its
    machine may run on where known (the rank service calls this once at start, from its
    ``Layout``).

    Nothing of CUDA is touched here: the binding is applied when a GPU is first used.
    """
    _local_rank[:] = [int(local_rank), max(int(local_size), 1)]
    if node_cpus is not None:
        _node_cpus[0] = max(int(node_cpus), 1)


def node_cpus() -> int:
    """The processors the job's ranks on this machine may run on: the union of their
    affinities once the rank service has gathered them (a job given part of a node has
    only its own), the machine's count before."""
    return _node_cpus[0] or os.cpu_count() or 1


def ranks_on_node() -> int:
    """How many ranks of the job share this rank's node: the rank service's count of the
    layout once it has started; before that (collectives used on their own) what the
    launcher says, where it says it; else 1."""
    if _local_rank[1] is not None:
        return _local_rank[1]
    for variable in _LAUNCHER_LOCAL_SIZE:
        try:
            return max(int(os.environ[variable]), 1)
        except (KeyError, ValueError):
            continue
    return 1


def node_crowded() -> bool:
    """Whether this node runs more of the job's ranks than it has processors for them.

    There a rank that polls without yielding holds a core the rank it waits for needs:
    waits yield from the first miss. (The processors of all the job's ranks on the
    machine, ``node_cpus``, not this process's affinity: a launcher that binds each rank
    to a core of its own leaves one core per rank.)
    """
    return ranks_on_node() > node_cpus()


def bound_gpu() -> int | None:
    """Return the GPU (among those this process sees) bound as ``/device:GPU:0``, or None
    where there is none."""
    count = gpu_count()
    if not count:
        return None
    forced = config.get("MPIFLOW_GPU")
    if forced is not None:
        if forced >= count:
            raise errors.PlacementError(
                f"MPIFLOW_GPU={forced} names a GPU this process does not have: it sees "
                f"{count} GPU(s) (0..{count - 1}; CUDA_VISIBLE_DEVICES narrows what it sees)")
        return forced
    return _local_rank[0] % count


def describe_binding() -> str:
    """One line saying which GPU this rank binds and why (for ``mpiflow.info``)."""
    count = gpu_count()
    if not count:
        return f"none ({gpu_reason() or 'no GPU'})"
    gpu = bound_gpu()
    why = ("MPIFLOW_GPU" if config.get("MPIFLOW_GPU") is not None
           else f"local rank {_local_rank[0]} % {count} GPU(s)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f", CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    return f"GPU {gpu} ({why}{seen})"


def physical_gpu(index: int) -> int:
    """Return the GPU that ``/device:GPU:index`` means on this rank."""
    count = gpu_count()
    if index >= count:
        raise errors.PlacementError(
            f"/device:GPU:{index} does not exist here: this rank sees {count} GPU(s)")
    return (bound_gpu() + index) % count


def activate_gpu(physical: int) -> None:
    """Make GPU ``physical`` current in the calling thread (CUDA keeps one per thread)."""
    runtime = _cupy.cuda.runtime
    if runtime.getDevice() != physical:
        runtime.setDevice(physical)


# -- moving arrays ------------------------------------------------------------------------

def to_device(array, physical: int):
    """Return ``array`` on GPU ``physical`` (itself when it is already there).

    A host array goes through a pinned staging buffer and an asynchronous copy: a copy
    from pageable memory would make the host wait for every kernel queued before it, so
    each step's Python could not run ahead of the GPU's work.
    """
    cupy = _cupy
    on_device = isinstance(array, cupy.ndarray)
    if on_device and array.device.id == physical:
        return array
    with cupy.cuda.Device(physical):
        if on_device or numpy.asarray(array).nbytes < _STAGE_MIN_BYTES:
            return cupy.asarray(array)
        return _staging.upload(cupy, numpy.asarray(array))


_STAGE_MIN_BYTES = 1 << 14


class _PinnedStaging:
    """Pinned host buffers for uploads, each reused once its copy's event has passed."""

    def __init__(self, per_key=4):
        self.per_key = per_key
        self.buffers = {}          # (nbytes, device) -> [[host uint8 array, event or None]]

    def upload(self, cupy, array):
        key = (array.nbytes, cupy.cuda.Device().id)
        slots = self.buffers.setdefault(key, [])
        slot = next((s for s in slots if s[1] is None or s[1].done), None)
        if slot is None:
            memory = cupy.cuda.alloc_pinned_memory(array.nbytes)
            slot = [numpy.frombuffer(memory, numpy.uint8, array.nbytes), None]
            if len(slots) < self.per_key:
                slots.append(slot)
        host = slot[0].view(array.dtype).reshape(array.shape)
        numpy.copyto(host, array)
        stream = cupy.cuda.get_current_stream()
        device = cupy.empty(array.shape, array.dtype)
        device.set(host, stream=stream)
        slot[1] = stream.record()
        return device


_staging = _PinnedStaging()


def staged_for_send(array):
    """Return a host copy of device ``array`` in pinned memory, ready for MPI.

    The copy is complete when this returns (the stream that wrote ``array`` is waited
    for), so MPI may read it at once. Pinned pages are recycled by cupy's pinned pool
    when the returned array (which holds them) is dropped after the send completes.
    """
    cupy = _cupy
    nbytes = array.nbytes
    memory = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
    host = numpy.frombuffer(memory, dtype=array.dtype, count=array.size).reshape(array.shape)
    stream = cupy.cuda.get_current_stream()
    _contiguous(array).get(out=host, stream=stream)
    stream.synchronize()
    return host


def upload_into(device_array, host_array) -> None:
    """Copy ``host_array`` into ``device_array`` in place (a variable's buffer stays its
    own), ordered on the current stream before the kernels queued after it."""
    host = numpy.asarray(host_array)
    if not host.flags.c_contiguous:     # (ascontiguousarray would make a 0-d array 1-d)
        host = numpy.ascontiguousarray(host)
    device_array.set(host, stream=_cupy.cuda.get_current_stream())


def ready_for_mpi(array):
    """Return contiguous device ``array`` once its producing kernels are done (MPI reads
    device memory outside CUDA's stream order, so the stream must be drained first)."""
    array = _contiguous(array)
    _cupy.cuda.get_current_stream().synchronize()
    return array


def _contiguous(array):
    # ascontiguousarray would turn a 0-d array into shape (1,)
    return array if array.flags.c_contiguous else _cupy.ascontiguousarray(array)


def device_empty(shape, dtype):
    """Return an uninitialised array on the current GPU."""
    return _cupy.empty(shape, dtype)


def synchronize() -> None:
    """Wait for the current GPU's work (timers and fetches need finished results)."""
    if _cupy is not None:
        _cupy.cuda.get_current_stream().synchronize()


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


def ranks_share_gpus() -> bool:
    """Whether this node runs more ranks than this process sees GPUs, so that some ranks
    bind the same GPU (NCCL, for one, refuses two ranks on one GPU)."""
    count = gpu_count()
    return 0 < count < ranks_on_node()


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


def share_cpu_cores(share: int) -> int:
    """Limit this rank's BLAS threads to its share of the node's cores; return the limit.

    Several ranks on one node each running BLAS with one thread per core oversubscribe
    the node many times over, and a step gets several times slower. The limit is
    MPIFLOW_CPU_THREADS when set, else ``share`` (the layout's ``cpu_threads``: this
    rank's part of the processors it may run on); nothing is changed when the user
    already chose with OMP_NUM_THREADS or a BLAS variable (0 is returned).
    """
    threads = config.get("MPIFLOW_CPU_THREADS")
    if not threads:
        if any(os.environ.get(v) for v in _THREAD_VARIABLES):
            return 0
        threads = max(1, int(share))
    limit_blas_threads(threads)
    return threads


def limit_blas_threads(threads: int) -> None:
    """Let this process's BLAS kernels use at most ``threads`` threads from now on."""
    from threadpoolctl import threadpool_limits  # noqa: PLC0415  (only when asked)
    _thread_limits[:] = [threadpool_limits(limits=threads, user_api="blas")]
