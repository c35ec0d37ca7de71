"""Whether GPU tensors go to MPI directly: the answer of the loaded libmpi or the env
override, and what the transport does with it.

No GPU is needed: the library is asked for real (the pip MPICH answers "no"), and the
transport's choices are checked with a stand-in for device arrays, which records whether
a payload went to MPI as it is or through a pinned host copy, and whether a receive was
landed in device memory.
"""

import numpy as np
import pytest

from mpiflow import backend
from mpiflow.comm import cuda_aware
from tests.comm.loopback import send_to_self

MPI = pytest.importorskip("mpi4py.MPI")


@pytest.fixture(autouse=True)
def fresh_answer(monkeypatch):
    """Each test asks again (the answer is cached per process)."""
    monkeypatch.setattr(cuda_aware, "_answer", [])


def test_the_library_this_process_loaded_is_asked():
    path = cuda_aware._loaded_libmpi()
    assert path is not None and "libmpi" in path
    assert cuda_aware.query_library() is False      # the pip MPICH has no CUDA support
    assert cuda_aware.cuda_aware_mpi() is False
    assert cuda_aware.describe().startswith("no (the library says so")


@pytest.mark.parametrize("choice,answer", [("1", True), ("0", False)])
def test_the_override_decides_without_asking_the_library(monkeypatch, choice, answer):
    monkeypatch.setenv("MPIFLOW_CUDA_AWARE_MPI", choice)
    monkeypatch.setattr(cuda_aware, "query_library", lambda: pytest.fail("library asked"))
    assert cuda_aware.cuda_aware_mpi() is answer
    assert cuda_aware.describe() == \
        f"{'yes' if answer else 'no'} (MPIFLOW_CUDA_AWARE_MPI={choice})"


class _DeviceArrays:
    """Stand-in for cupy: "device" arrays are numpy arrays of this subclass."""

    class Array(np.ndarray):
        pass

    def __init__(self, monkeypatch):
        self.events = []
        monkeypatch.setattr(backend, "is_device_array",
                            lambda a: isinstance(a, _DeviceArrays.Array))
        monkeypatch.setattr(backend, "ready_for_mpi", self._direct)
        monkeypatch.setattr(backend, "staged_for_send", self._staged)
        monkeypatch.setattr(backend, "device_empty", self._device_empty)

    def _direct(self, array):
        self.events.append("direct")
        return np.ascontiguousarray(array)

    def _staged(self, array):
        self.events.append("staged")
        return np.array(array)

    def _device_empty(self, shape, dtype):
        self.events.append("device receive")
        return np.empty(shape, dtype).view(_DeviceArrays.Array)


def _round_trip(to_gpu):
    payload = np.arange(6, dtype=np.float32).view(_DeviceArrays.Array)
    return send_to_self([payload], to_gpu=to_gpu).arrays[0]


@pytest.mark.parametrize("choice", ["1", "0"])
def test_gpu_payloads_go_to_mpi_directly_only_where_mpi_is_cuda_aware(monkeypatch, choice):
    monkeypatch.setenv("MPIFLOW_CUDA_AWARE_MPI", choice)
    device = _DeviceArrays(monkeypatch)
    got = _round_trip(to_gpu=True)
    np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32))
    if choice == "1":
        assert device.events == ["direct", "device receive"]
        assert isinstance(got, _DeviceArrays.Array)
    else:       # staged through host memory both ways; the Recv op uploads it after
        assert device.events == ["staged"]
        assert not isinstance(got, _DeviceArrays.Array)


def test_a_payload_for_a_host_consumer_is_received_in_host_memory(monkeypatch):
    monkeypatch.setenv("MPIFLOW_CUDA_AWARE_MPI", "1")
    device = _DeviceArrays(monkeypatch)
    got = _round_trip(to_gpu=False)
    assert device.events == ["direct"]
    assert not isinstance(got, _DeviceArrays.Array)
