"""Collective strategies in one process: the selection rule, argument errors, 1-rank results.

Multi-rank behaviour is in tests/comm/test_collectives.py.
"""

import os

import numpy as np
import pytest
from mpi4py import MPI

from mpiflow import backend, config
from mpiflow.comm import collectives
from mpiflow.comm.collectives import (
    ALLREDUCE,
    MpiCollective,
    NcclCollective,
    RingCollective,
    explain_auto,
    get_collective,
    select,
)
from mpiflow.comm.collectives.state import TIGHT_POLL_S, CommState
from mpiflow.errors import FailedPreconditionError, InvalidArgumentError
from mpiflow.framework import dtypes

COMM = MPI.COMM_SELF
KiB = 1 << 10


def test_candidates_are_ordered_nccl_ring_mpi():
    assert ALLREDUCE == [NcclCollective, RingCollective, MpiCollective]
    assert [c.name for c in ALLREDUCE] == ["nccl", "ring", "mpi"]


def test_naming_nccl_without_it_raises_with_the_reason():
    if backend.nccl_module()[0] is not None:
        pytest.skip("NCCL is usable here")
    with pytest.raises(InvalidArgumentError) as info:
        get_collective("nccl", COMM, np.zeros(4))
    message = str(info.value)
    assert "'nccl' is not enabled" in message
    assert "cupy.cuda.nccl not importable" in message or "no GPU" in message


def test_nccl_refuses_host_arrays_even_where_it_imports(monkeypatch):
    monkeypatch.setattr(backend, "nccl_module", lambda: (object(), ""))
    ok, why = NcclCollective.enabled(COMM, np.zeros(4))
    assert not ok and why == "array is not a cupy array"


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(InvalidArgumentError) as info:
        get_collective("hierarchical", COMM, np.zeros(4))
    assert all(repr(n) in str(info.value) for n in ("nccl", "ring", "mpi", "auto"))


@pytest.mark.parametrize("threshold,nbytes,expected", [
    (0, 64 << 20, MpiCollective),          # 0: auto never takes the ring
    (1 << 20, (1 << 20) - 4, MpiCollective),
    (1 << 20, 1 << 20, RingCollective),
    (1 << 20, 64 << 20, RingCollective),
])
def test_auto_takes_the_ring_for_host_arrays_from_its_threshold(threshold, nbytes, expected):
    cfg = config.Config(env={"MPIFLOW_RING_MIN_BYTES": str(threshold)})
    array = np.empty(nbytes // 4, np.float32)
    assert select("auto", COMM, array, cfg) is expected
    assert isinstance(get_collective("auto", COMM, array, cfg), expected)


class _Ranks:
    """A communicator's size, all that auto's ring threshold asks of it."""

    def __init__(self, size):
        self.size = size

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("ranks,nbytes,takes_ring", [
    (2, (512 << 10) - 4, False),
    (2, 512 << 10, True),               # a pair: the ring's two steps win from 512 KiB
    (3, 512 << 10, False),
    (4, (4 << 20) - 4, False),
    (4, 4 << 20, True),                 # more ranks: from 4 MiB
    (1, 4 << 20, True),
])
def test_unset_the_rings_threshold_is_512_kib_between_two_ranks_and_4_mib_among_more(
        ranks, nbytes, takes_ring):
    unset = config.Config(env={})
    array = np.empty(nbytes // 4, np.float32)
    ok, why = RingCollective.preferred(_Ranks(ranks), array, unset)
    assert ok is takes_ring
    if not takes_ring:
        assert why == (f"{nbytes} bytes is below the ring's "
                       f"{collectives.ring.ring_min_bytes(ranks)} on {ranks} ranks "
                       "(MPIFLOW_RING_MIN_BYTES unset)")
    # a threshold that is set holds whatever the ranks
    assert RingCollective.preferred(_Ranks(ranks), array, config.Config(
        env={"MPIFLOW_RING_MIN_BYTES": str(8 << 20)}))[0] is False


def test_auto_takes_nccl_first_for_gpu_arrays(monkeypatch):
    _fake_gpu_with_nccl(monkeypatch)
    assert select("auto", COMM, np.zeros(4, np.float32)) is NcclCollective


def _fake_gpu_with_nccl(monkeypatch, local_ranks=1):
    monkeypatch.setattr(backend, "nccl_module", lambda: (type("nccl", (), {
        "NCCL_FLOAT32": 7})(), ""))
    monkeypatch.setattr(backend, "is_device_array", lambda array: True)
    monkeypatch.setattr(backend, "gpu_count", lambda: 1)
    monkeypatch.setattr(backend, "_local_rank", [0, local_ranks])


def test_the_registry_alone_decides_where_a_collective_runs(monkeypatch):
    """What a plan places on the GPU is what "auto" then reduces there, and only that."""
    _fake_gpu_with_nccl(monkeypatch)
    assert collectives.runs_on_gpu("auto", [np.dtype(np.float32)])
    assert select("auto", COMM, np.zeros(4, np.float32)) is NcclCollective
    # A dtype NCCL has no type for stays on the host, where "auto" does not take NCCL.
    assert not collectives.runs_on_gpu("auto", [np.dtype(np.float32), np.dtype(np.int16)])
    assert not NcclCollective.preferred(COMM, np.zeros(4, np.int16), config.default())[0]
    # An algorithm named outright runs where it says: the GPU for NCCL, the host otherwise.
    assert collectives.runs_on_gpu("nccl", [np.dtype(np.int16)])
    assert not collectives.runs_on_gpu("ring", [np.dtype(np.float32)])


def test_broadcast_and_allgather_copy_gpu_arrays_with_nccl_and_host_arrays_with_mpi(
        monkeypatch):
    """They have no algorithm: placed on the GPU by the "auto" rule, NCCL copies there."""
    assert collectives.copy_algorithm(np.zeros(4, np.float32)) == "mpi"
    _fake_gpu_with_nccl(monkeypatch)
    gpu_array = np.zeros(4, np.float32)       # a device array, as the fake backend says
    assert collectives.copy_algorithm(gpu_array) == "nccl"
    assert select(collectives.copy_algorithm(gpu_array), COMM, gpu_array) is NcclCollective


def test_ranks_sharing_a_gpu_keep_collectives_off_nccl_and_say_why(monkeypatch):
    _fake_gpu_with_nccl(monkeypatch, local_ranks=2)
    assert not collectives.runs_on_gpu("auto", [np.dtype(np.float32)])
    with pytest.raises(InvalidArgumentError, match="share a GPU"):
        select("nccl", COMM, np.zeros(4, np.float32))


def test_a_plan_places_collective_kernels_by_the_registry(monkeypatch):
    import mpiflow as mf
    from mpiflow.ops.registry import get_op_def
    from mpiflow.runtime.plan_compiler import kernel_device

    gpu = "/job:worker/replica:0/task:0/device:GPU:0"
    graph = mf.Graph()
    with graph.as_default(), mf.device(gpu):
        x = mf.placeholder(mf.float32, [4])
        auto = mf.all_reduce(x)
        named_ring = mf.all_reduce(x, algorithm="ring")
    for monkeypatched_ranks, where in ((1, gpu), (2, "")):
        _fake_gpu_with_nccl(monkeypatch, local_ranks=monkeypatched_ranks)
        assert kernel_device(auto.op, get_op_def(auto.op.type)) == where
        assert kernel_device(named_ring.op, get_op_def(named_ring.op.type)) == ""


def test_auto_explains_each_candidate():
    cfg = config.Config(env={"MPIFLOW_RING_MIN_BYTES": "4096"})
    text = explain_auto(COMM, np.zeros(10, np.float32), cfg)
    assert "ring: 40 bytes is below MPIFLOW_RING_MIN_BYTES=4096" in text
    assert text.endswith("mpi: yes")


def test_default_rule_is_documented_with_measurements():
    assert "MPIFLOW_RING_MIN_BYTES" in collectives.__doc__
    assert "MB/s" in collectives.__doc__


@pytest.fixture(params=["mpi", "ring"])
def strategy(request):
    return get_collective(request.param, COMM, np.zeros(1))


@pytest.mark.parametrize("dtype", [d.np_dtype for d in dtypes.ALL], ids=str)
@pytest.mark.parametrize("n", [0, 1, 1009])
def test_one_rank_allreduce_is_the_input(strategy, dtype, n):
    x = (np.arange(n) % 5).astype(dtype)
    assert np.array_equal(strategy.allreduce(x), x)
    out = np.empty_like(x)
    assert strategy.allreduce(x, out=out) is out and np.array_equal(out, x)
    if dtype.kind == "f":
        assert np.array_equal(strategy.allreduce(x.copy(), "average"), x)


def test_one_rank_broadcast_and_allgather(strategy):
    x = np.arange(6, dtype=np.int16).reshape(3, 2)
    assert strategy.broadcast(x) is x
    assert np.array_equal(strategy.allgather(x), x)
    assert strategy.allgather(np.zeros((0, 4))).shape == (0, 4)


def test_result_before_completion_says_to_wait(strategy):
    handle = strategy.allreduce_async(np.ones(8), name="w")
    with pytest.raises(FailedPreconditionError, match="allreduce 'w'.*call wait"):
        _ = handle.result
    assert (handle.wait() == 1).all() and handle.test()


@pytest.mark.parametrize("call,text", [
    (lambda c: c.allreduce(np.ones(3), op="max"), "unknown reduction 'max'"),
    (lambda c: c.allreduce(np.ones(3, np.int32), op="average"), "needs a floating dtype"),
    (lambda c: c.allreduce(np.ones(3, np.complex64)), "unsupported dtype complex64"),
    (lambda c: c.allreduce(np.ones(3), out=np.ones(4)), "bad out, expected a C-contiguous"),
    (lambda c: c.allreduce(np.ones(3), out=np.ones(3, np.float32)), "bad out"),
    (lambda c: c.allreduce(np.ones((3, 2)), out=np.ones((2, 3)).T),
     r"bad out.*got ndarray float64\[3, 2\] \(not C-contiguous\)"),
    (lambda c: c.allreduce(np.ones(3), out=np.ones(3, ">f8")),
     r"bad out.*\(byte order >f8, expected <f8\)"),
    (lambda c: _overlapping(c, 0, 4, 2, 6), "out overlaps the input array; pass out=array"),
    (lambda c: _overlapping(c, 0, 4, 0, 4), "out overlaps the input array"),
    (lambda c: c.allreduce([1.0, 2.0]), "expected a numpy or cupy array, got list"),
    (lambda c: c.allreduce(np.ones(3), name=5), "name must be a str or None, got int 5"),
    (lambda c: c.allreduce(np.ones(3), name=["g"]), r"got list \['g'\]"),
    (lambda c: c.broadcast(np.ones(3), name=b"g"), "name must be a str or None, got bytes"),
    (lambda c: c.allgather(np.ones(3), name=1.5), "name must be a str or None, got float"),
    (lambda c: c.broadcast(np.ones(3), root=1), r"bad root 1, expected a rank in \[0, 1\)"),
    (lambda c: c.allgather(np.float64(1.0)), "needs an array with a first dimension"),
])
def test_bad_arguments_raise_naming_the_call(strategy, call, text):
    with pytest.raises(InvalidArgumentError, match=text) as info:
        call(strategy)
    assert f"({strategy.name}," in str(info.value) or f"({strategy.name})" in str(info.value)


@pytest.mark.parametrize("name", ["auto", "mpi", "ring"])
def test_choosing_a_collective_for_something_that_is_not_an_array_says_so(name):
    with pytest.raises(InvalidArgumentError, match="expected a numpy or cupy array, got list"):
        get_collective(name, COMM, [1.0])


def _overlapping(collective, start, stop, out_start, out_stop):
    base = np.ones(8)
    return collective.allreduce(base[start:stop], out=base[out_start:out_stop])


def test_a_root_only_reads_its_array_whatever_its_layout(strategy):
    source = _read_only(np.arange(12.0).reshape(3, 4)[:, ::2])     # strided, read-only
    assert strategy.broadcast(source, root=0) is source
    assert source.tolist() == [[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]


def _in_place(collective, view):
    return collective.allreduce(view, out=view)


def _read_only(array):
    array.flags.writeable = False
    return array


@pytest.mark.parametrize("call,text", [
    (lambda c, ro: c.allreduce(ro, out=ro), r"the array \(in place\) is read-only"),
    (lambda c, ro: _in_place(c, ro[::2]), r"the array \(in place\) is read-only"),
    (lambda c, ro: c.allreduce(np.ones(4), out=ro), "the out is read-only"),
    (lambda c, ro: c.allreduce_async(ro, out=ro), r"the array \(in place\) is read-only"),
], ids=["in place", "in place strided", "out", "async"])
def test_a_read_only_result_buffer_is_refused_before_anything_moves(strategy, call, text):
    with pytest.raises(InvalidArgumentError, match=text):
        call(strategy, _read_only(np.ones(4)))
    assert strategy.allreduce(_read_only(np.ones(4))).tolist() == [1.0] * 4   # input only


def test_a_broadcast_into_a_read_only_array_is_refused_on_the_ranks_it_writes(strategy):
    source = _read_only(np.arange(4.0))
    assert strategy.broadcast(source, root=0) is source      # the root only reads it
    strategy.rank, strategy.size = 1, 2                        # as a rank that receives
    with pytest.raises(InvalidArgumentError, match=r"broadcast.*on rank 1 of 2: the array "
                                                   r"\(the broadcast's result\) is read-only"):
        strategy.broadcast(source, root=0)


def test_float16_average_is_computed_in_float32():
    ring = get_collective("ring", COMM, np.zeros(1))
    x = np.array([65504, 1e-4, 3.0], dtype=np.float16)
    assert np.array_equal(ring.allreduce(x, "average"), x)


def test_collectives_on_one_communicator_share_its_state():
    comm = COMM.Dup()
    try:
        a = get_collective("mpi", comm, np.zeros(1))
        b = get_collective("ring", comm, np.zeros(1))
        assert a.state is b.state
        assert a.allreduce(np.ones(2)).sum() == 2 and b.allreduce(np.ones(2)).sum() == 2
    finally:
        comm.Free()


@pytest.mark.parametrize("variables, expected", [
    ({"MPI_LOCALNRANKS": "3"}, 3),                       # MPICH's mpiexec
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "5"}, 5),            # Open MPI's
    ({}, 1),
    ({"MPI_LOCALNRANKS": "many"}, 1),
])
def test_ranks_on_a_node_before_the_rank_service_are_what_the_launcher_says(
        monkeypatch, variables, expected):
    monkeypatch.setattr(backend, "_local_rank", [0, None])
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert backend.ranks_on_node() == expected
    backend.set_local_rank(0, 7)            # the rank service's layout has the last word
    assert backend.ranks_on_node() == 7


@pytest.mark.parametrize("ranks, crowded", [(2, False), (3, True)])
def test_a_node_with_more_ranks_than_processors_is_crowded_and_waits_yield_at_once(
        monkeypatch, ranks, crowded):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(backend, "_local_rank", [0, ranks])
    monkeypatch.setattr(backend, "_node_cpus", [None])     # no layout gathered yet
    assert backend.node_crowded() is crowded
    state = CommState(COMM)
    assert state.tight_poll_s == (0.0 if crowded else TIGHT_POLL_S)


def test_a_blocking_allreduce_of_one_request_runs_without_the_stage_objects():
    """The plan of an MPI sum is one Iallreduce, posted by the express run itself; an
    average, or a float16 sum widened to float32, keeps its steps."""
    collective = MpiCollective(COMM)
    x = np.arange(6, dtype=np.float32)
    out = np.empty_like(x)
    assert collective.allreduce(x, out=out) is out
    np.testing.assert_array_equal(out, x * COMM.Get_size())
    plans = list(collective._plans.values())
    assert plans[-1].request is not None and plans[-1].request_what == "MPI_Iallreduce"
    collective.allreduce(x, op="average", out=out)
    collective.allreduce(x.astype(np.float16))
    assert [plan.request is None for plan in collective._plans.values()] == [
        False, True, True]
    np.testing.assert_array_equal(collective.allreduce(x, op="average"), x)


def test_a_process_group_picks_each_kind_of_call_once_and_keeps_its_strategy(monkeypatch):
    """Kernels call a group's collectives every step with the same arrays: the strategy
    auto picks for each kind and size is found once, and one strategy object of each
    class serves every call (it keeps what it learnt of each call's signature)."""
    import types

    from mpiflow.runtime import group_collectives

    monkeypatch.setenv("MPIFLOW_RING_MIN_BYTES", str(4 * KiB))
    asked = []

    def counting_select(name, comm, array, config=None):
        asked.append((name, array.nbytes))
        return select(name, comm, array, config)
    monkeypatch.setattr(collectives, "select", counting_select)
    made = []

    def counting_init(cls):
        init = cls.__init__

        def counted(self, *args, **kwargs):
            made.append(cls.name)
            init(self, *args, **kwargs)
        return counted
    for cls in (MpiCollective, RingCollective):
        monkeypatch.setattr(cls, "__init__", counting_init(cls))
    service = types.SimpleNamespace(groups={"worker": COMM}, rank=0)
    group = group_collectives.GroupCollectives(types.SimpleNamespace(), service, "worker")
    small = np.arange(16, dtype=np.float32)
    large = np.arange(4 * KiB, dtype=np.float32)
    other_small = np.arange(8, dtype=np.float64)
    for step in range(3):
        for i, array in enumerate((small, large, other_small)):
            handle = group.allreduce_async(array * (step + 1), "sum", "auto", f"t{i}")
            assert (handle.wait() == array * (step + 1)).all()
            assert ("(ring," if array is large else "(mpi,") in handle.label
        assert (group.broadcast_async(small, 0, "b").wait() == small).all()
    assert asked == [("auto", 64), ("auto", 16 * KiB), ("auto", 64), ("mpi", 64)]
    assert sorted(made) == ["mpi", "ring"]


def test_a_failed_check_names_each_ranks_tensor_not_a_hash_of_it():
    from mpiflow.comm.collectives.check import describe_mismatch, make_record
    records = np.stack([make_record("allreduce", name, "mpi", "sum", 0, np.float32, (3,))
                        for name in ("grad/w0", "grad/w1", "grad/w1")])
    problem = describe_mismatch(records, names=["grad/w0", "grad/w1", "grad/w1"])
    assert problem == ("ranks disagree on the tensor name: 'grad/w0' on rank 0; "
                       "'grad/w1' on ranks 1-2")
    # Without the names (a caller that has none), the hashes stand in.
    assert "name #" in describe_mismatch(records)
