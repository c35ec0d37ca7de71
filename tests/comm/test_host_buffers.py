"""Host buffers that MPI moves often live on huge pages (MPI sends from them about 2.5
times as fast): large ones start on a huge-page boundary in a mapping of their own,
lasting mid-sized ones (variables, pooled buffers) share huge pages. They stay ordinary
numpy arrays in every way a kernel or a user can see: views of them keep them alive and
counted, so a reused pooled buffer is never one somebody still reads."""

import gc
import itertools
import mmap
import sys
import weakref

import numpy as np
import pytest

from mpiflow import backend

MiB = 1 << 20


@pytest.mark.parametrize("shape", [(MiB // 4,), (512, 784), (3 * MiB // 8, 2), (5 * MiB,)])
def test_a_buffer_from_half_a_huge_page_on_starts_on_a_huge_page(shape):
    array = backend.host_empty(shape, np.float32)
    assert array.shape == shape and array.dtype == np.float32
    assert array.ctypes.data % backend.HUGE_PAGE_BYTES == 0
    assert array.flags.c_contiguous and array.flags.writeable
    array.fill(3)
    assert float(array.sum()) == 3 * array.size


def test_a_small_buffer_is_a_plain_numpy_array():
    array = backend.host_empty((1000,), np.float64)
    assert array.flags.owndata and array.shape == (1000,)


def test_a_large_array_of_python_objects_is_a_plain_numpy_array():
    # A string variable's buffer: numpy keeps object arrays out of raw mappings.
    array = backend.host_empty((MiB,), np.dtype(object))
    assert array.flags.owndata and array.shape == (MiB,)


def test_a_view_of_a_large_buffer_keeps_the_buffer_itself_referenced():
    array = backend.host_empty((1024, 1024), np.float32)
    before = sys.getrefcount(array)
    views = [array[1:], array.reshape(-1), array.T, array.view(np.int32), memoryview(array)]
    assert sys.getrefcount(array) == before + len(views)


@pytest.mark.parametrize("nbytes", [256 << 10, 4 * MiB])
def test_the_receive_pool_hands_out_again_only_what_nobody_references(nbytes):
    pool = backend.HostBufferPool()
    shape, dtype = (nbytes // 4,), np.dtype(np.float32)
    first = pool.empty(shape, dtype)
    address = first.ctypes.data
    kept = first[10:20]            # the user keeps a slice of a fetched value
    del first
    second = pool.empty(shape, dtype)
    assert second.ctypes.data != address
    kept[:] = 7                    # still its own memory: nothing overwrote it
    del second
    del kept
    third = pool.empty(shape, dtype)       # nobody holds the first one any more
    assert third.ctypes.data == address and _pooled(pool, third)
    assert pool.empty(shape, dtype).ctypes.data != address


def test_a_large_variable_is_set_into_its_own_aligned_copy():
    import mpiflow as mf
    from mpiflow.runtime.resources import ResourceStore

    with mf.Graph().as_default():
        v = mf.Variable(mf.zeros([1024, 512]), name="big")
    store = ResourceStore()
    value = np.full((1024, 512), 2.0, np.float32)
    store.ref(v.op).set(value)
    buffer = store.buffers[v.op.name]
    assert buffer.ctypes.data % backend.HUGE_PAGE_BYTES == 0
    value[:] = 5                   # the variable holds a copy, not the array it was given
    assert np.all(buffer == 2.0)


def test_an_owned_value_placed_as_a_buffer_would_be_is_kept_others_are_copied():
    import mpiflow as mf
    from mpiflow.runtime.resources import ResourceStore

    def kept(value, shape):
        with mf.Graph().as_default():
            v = mf.Variable(mf.zeros(list(shape)), name="v")
        store = ResourceStore()
        return store.ref(v.op).set(value, owned=True) is value

    assert kept(backend.host_empty((1024, 512), np.float32), (1024, 512))
    assert kept(np.ones(1000, np.float32), (1000,))        # small: pages do not matter
    if backend._HUGE_PAGES_ASKABLE:
        # A plain large array sits on small pages; a mid-sized one belongs in a shared
        # huge page; a view is not the whole array: each is copied where a buffer goes.
        assert not kept(np.ones((1024, 512), np.float32), (1024, 512))
        assert not kept(np.ones(64 << 10, np.float32), (64 << 10,))
    assert not kept(backend.host_empty((2048, 512), np.float32)[::2], (1024, 512))
    assert not kept(backend.host_empty((1024, 512), np.float64), (1024, 512))   # dtype


def _huge_page_of(array) -> int:
    return array.ctypes.data // backend.HUGE_PAGE_BYTES


@pytest.mark.parametrize("shape", [(16 << 10,), (300, 300), (MiB // 4 - 1,)])
def test_a_lasting_mid_sized_buffer_lies_within_one_huge_page(shape):
    array = backend.lasting_host_empty(shape, np.float32)
    assert array.shape == shape and array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % 4096 == 0
    last = array.ctypes.data + array.nbytes - 1
    assert last // backend.HUGE_PAGE_BYTES == _huge_page_of(array)
    assert isinstance(array.base, mmap.mmap)
    array.fill(2)
    assert float(array.sum()) == 2 * array.size


def test_lasting_mid_sized_buffers_share_a_huge_page_and_never_overlap():
    arrays = [backend.lasting_host_empty((64 << 10,), np.uint8) for _ in range(40)]
    pages = [_huge_page_of(a) for a in arrays]
    assert len(set(pages)) < len(arrays)            # 32 of 64 KiB fit in one page
    spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    for i, a in enumerate(arrays):
        a.fill(i)
    assert all(np.all(a == i) for i, a in enumerate(arrays))


def test_lasting_buffers_outside_the_shared_range_are_as_host_empty_makes_them():
    small = backend.lasting_host_empty((1000,), np.float32)
    assert small.flags.owndata
    large = backend.lasting_host_empty((MiB // 4,), np.float32)
    assert large.ctypes.data % backend.HUGE_PAGE_BYTES == 0
    objects = backend.lasting_host_empty((64 << 10,), np.dtype(object))
    assert objects.flags.owndata


def test_a_shared_huge_page_goes_when_the_last_array_carved_from_it_does():
    # Fill the page being carved, so that the next carve starts a page of its own.
    first = backend.lasting_host_empty((64 << 10,), np.uint8)
    page = weakref.ref(first.base)
    others = []
    while _huge_page_of(others[-1] if others else first) == _huge_page_of(first):
        others.append(backend.lasting_host_empty((64 << 10,), np.uint8))
    view = first[10:20]
    del first, others[:-1]
    gc.collect()
    assert page() is not None                       # a view of one array still holds it
    del view
    gc.collect()
    assert page() is None


def test_outgoing_buffers_are_pooled_on_huge_pages():
    first = backend.outgoing_empty((512, 512), np.float32)      # 1 MiB
    assert first.ctypes.data % backend.HUGE_PAGE_BYTES == 0
    assert _pooled(backend._outgoing, first)
    address = first.ctypes.data
    del first
    again = backend.outgoing_empty([512, 512], np.float32)
    assert again.ctypes.data == address and _pooled(backend._outgoing, again)


def _pooled(pool, array) -> bool:
    """Whether ``array`` is a view of a buffer ``pool`` keeps (not a fresh allocation that
    the allocator happened to place where a freed one was)."""
    return any(array.base is buffer for held in pool._free.values() for buffer in held)


def test_sizes_that_vary_from_step_to_step_share_a_few_pooled_buffers():
    # The rows of a lookup: a different count each step, never one buffer kept per count.
    pool = backend.HostBufferPool()
    for rows in range(300, 400):
        rows_array = pool.empty((rows, 64), np.float32)
        assert rows_array.shape == (rows, 64) and rows_array.dtype == np.float32
        rows_array.fill(rows)
        del rows_array
    # 100 shapes, 4 size classes (eight between two powers of two): one buffer each.
    assert pool.held_bytes <= 4 * 400 * 64 * 4 * 9 // 8


def test_a_pooled_buffer_is_handed_out_again_as_any_shape_of_its_size_class():
    pool = backend.HostBufferPool()
    first = pool.empty((300, 64), np.float32)
    address = first.ctypes.data
    kept = first.reshape(-1)[:5]
    del first
    assert pool.empty((301, 64), np.float32).ctypes.data != address    # a view lives
    del kept
    again = pool.empty((150, 128), np.int32)
    assert again.ctypes.data == address and again.shape == (150, 128)
    assert _pooled(pool, again)


def test_the_pool_keeps_no_more_than_its_byte_budget():
    pool = backend.HostBufferPool(max_bytes=1 << 20)
    live = [pool.empty((64 << 10,), np.float32) for _ in range(8)]      # 256 KiB each
    assert pool.held_bytes <= 1 << 20
    assert all(a.shape == (64 << 10,) for a in live)


def test_reference_counts_tell_the_pool_who_holds_a_buffer_here():
    assert backend._reference_counts_tell_owners()


def test_where_reference_counts_would_mislead_the_pool_it_reuses_nothing(monkeypatch):
    monkeypatch.setattr(backend, "_POOLS_REUSE", False)
    pool = backend.HostBufferPool()
    arrays = [pool.empty((MiB // 4,), np.float32) for _ in range(3)]
    assert all(a.shape == (MiB // 4,) for a in arrays)
    assert pool.held_bytes == 0 and not any(pool._free.values())    # nothing kept
