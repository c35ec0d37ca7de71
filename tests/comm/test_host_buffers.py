"""Large host buffers (variables, reused receive buffers) start on a huge-page boundary,
and stay ordinary numpy arrays in every way a kernel or a user can see: views of them
keep them alive and counted, so a reused receive buffer is never one somebody still
reads."""

import sys

import numpy as np
import pytest

from mpiflow import backend
from mpiflow.comm.transport import BufferPool

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
    pool = BufferPool()
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
    assert third.ctypes.data == address
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
