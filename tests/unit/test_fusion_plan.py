"""Fusion buckets: the plan (pure), and FusedAllreduce's rounds on a 1-rank communicator."""

import numpy as np
import pytest
from mpi4py import MPI

from mpiflow.comm.buckets import FusedAllreduce, TensorSpec, plan_buckets
from mpiflow.comm.collectives import select
from mpiflow.errors import FailedPreconditionError, InvalidArgumentError

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def names(buckets):
    return [list(b.names) for b in buckets]


def test_tensors_fill_buckets_up_to_the_threshold_in_the_given_order():
    specs = [TensorSpec(f"t{i}", F32, 40) for i in range(5)]
    buckets = plan_buckets(specs, threshold_bytes=100)
    assert names(buckets) == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert [b.index for b in buckets] == [0, 1, 2]
    assert buckets[0].offsets == (0, 10) and buckets[0].sizes == (10, 10)
    assert [b.nbytes for b in buckets] == [80, 80, 40]


def test_a_tensor_exactly_at_the_threshold_fits_and_a_larger_one_is_alone():
    specs = [TensorSpec("a", F32, 100), TensorSpec("b", F32, 104), TensorSpec("c", F32, 4)]
    assert names(plan_buckets(specs, 100)) == [["a"], ["b"], ["c"]]


def test_dtypes_and_devices_never_share_a_bucket():
    specs = [TensorSpec("a", F32, 8), TensorSpec("b", F64, 8),
             TensorSpec("c", F32, 8, "/device:GPU:0"), TensorSpec("d", F32, 8),
             TensorSpec("e", F64, 8)]
    buckets = plan_buckets(specs, 1 << 20)
    assert names(buckets) == [["c"], ["a", "d"], ["b", "e"]]
    assert [b.dtype for b in buckets] == [F32, F32, F64]
    assert buckets[0].device == "/device:GPU:0" and buckets[1].device == ""


def test_buckets_are_ordered_by_when_their_last_tensor_arrives():
    specs = [TensorSpec("small", F32, 8), TensorSpec("huge", F32, 4000),
             TensorSpec("other", F64, 8), TensorSpec("small2", F32, 8)]
    assert names(plan_buckets(specs, 100)) == [["huge"], ["other"], ["small", "small2"]]


def test_threshold_zero_means_no_fusion_and_empty_tensors_are_planned():
    specs = [TensorSpec("a", F32, 8), TensorSpec("empty", F32, 0), TensorSpec("b", F32, 8)]
    assert names(plan_buckets(specs, 0)) == [["a"], ["empty"], ["b"]]
    assert plan_buckets([], 100) == []


def test_plans_are_identical_for_identical_specs():
    specs = [TensorSpec(f"g/{i}", (F32, F64)[i % 2], 4 * 8 * (i + 1)) for i in range(40)]
    assert plan_buckets(specs, 256) == plan_buckets(list(specs), 256)


@pytest.mark.parametrize("specs,text", [
    ([TensorSpec("a", F32, 8), TensorSpec("a", F32, 8)], "'a' is listed twice"),
    ([TensorSpec("a", F64, 12)], "12 bytes is not a whole number of float64"),
])
def test_bad_specs_are_rejected(specs, text):
    with pytest.raises(InvalidArgumentError, match=text):
        plan_buckets(specs, 100)


def fused(threshold=64, **options):
    specs = [TensorSpec("a", F32, 16), TensorSpec("b", F32, 16), TensorSpec("c", F32, 16),
             TensorSpec("d", F32, 16), TensorSpec("big", F32, 400)]
    return FusedAllreduce(MPI.COMM_SELF, specs, threshold_bytes=threshold, **options)


def test_add_returns_the_bucket_handle_when_its_last_tensor_is_in():
    f = fused(threshold=32)
    x = {n: np.full(4, i, np.float32) for i, n in enumerate("abcd")}
    assert f.add("a", x["a"]) is None
    handle = f.add("b", x["b"])
    assert handle is not None and handle.bucket.names == ("a", "b")
    result = handle.wait()
    assert set(result) == {"a", "b"} and (result["b"] == 1).all()


def test_a_complete_bucket_waits_for_the_buckets_planned_before_it():
    f = fused(threshold=32)
    later = f.add("c", np.ones(4, np.float32)) or f.add("d", np.ones(4, np.float32))
    assert later is not None and not later.started
    with pytest.raises(FailedPreconditionError, match=r"tensors not added: \['a', 'b'\]"):
        later.wait()
    f.add("a", np.zeros(4, np.float32))
    f.add("b", np.zeros(4, np.float32))
    f.add("big", np.arange(100, dtype=np.float32))
    results = f.wait_all()
    assert later.started and sorted(results) == ["a", "b", "big", "c", "d"]
    assert (results["big"] == np.arange(100)).all()


def test_rounds_reuse_the_buffers_and_outputs_can_be_in_place():
    f = fused(op="average")
    view = f.buffer_view("a")
    assert f.buffer_view("big") is None
    for step in range(3):
        arrays = {n: np.full(4, step + i, np.float32) for i, n in enumerate("abcd")}
        arrays["big"] = np.full((10, 10), step, np.float32)
        for name, array in arrays.items():
            f.add(name, array, out=array)
        results = f.wait_all()
        assert all(results[n] is arrays[n] for n in arrays)
        assert (arrays["c"] == step + 2).all() and arrays["big"].shape == (10, 10)
    assert f.buffer_view("a").base is view.base


def test_a_tensor_written_into_its_buffer_view_is_not_copied():
    f = fused()
    for name in "abcd":
        view = f.buffer_view(name)
        view[...] = 7
        f.add(name, view, out=view)
    f.add("big", np.zeros(100, np.float32))
    results = f.wait_all()
    assert results["a"] is f.buffer_view("a") and (results["d"] == 7).all()


def test_a_buffer_view_given_without_out_is_the_result_and_stays_flat():
    f = fused()
    for step in range(2):
        for name in "ab":
            view = f.buffer_view(name)
            view[...] = step
            f.add(name, view)                    # no out: the result is the view itself
        f.add("c", np.full((2, 2), 3, np.float32))       # shaped: copied in, result new
        f.add("d", np.full(4, 4, np.float32), out=f.buffer_view("d"))
        f.add("big", np.zeros(100, np.float32))
        results = f.wait_all()
        assert results["a"] is f.buffer_view("a") and (results["b"] == step).all()
        assert results["c"].shape == (2, 2) and (results["c"] == 3).all()
        assert not np.shares_memory(results["c"], f.buffer_view("c"))   # the caller's own
        assert results["d"] is f.buffer_view("d") and (results["d"] == 4).all()
        assert f.buffer_view("c").shape == (4,)           # flat whatever was added
    f.add("c", f.buffer_view("c"), out=np.empty(4, np.float32))   # flat after shaped
    for name in ("a", "b", "d"):
        f.add(name, np.ones(4, np.float32))
    f.add("big", np.zeros(100, np.float32))
    assert (f.wait_all()["c"] == 3).all()


def test_results_given_without_out_share_one_copy_that_later_rounds_leave_alone():
    f = fused()
    kept = []
    for step in range(3):
        f.add("a", np.full(4, step, np.float32))
        f.add("b", f.buffer_view("b"))                      # the view: no copy for it
        f.add("c", np.full((2, 2), 10 + step, np.float32))
        f.add("d", np.full(4, 20 + step, np.float32), out=np.empty(4, np.float32))
        f.add("big", np.zeros(100, np.float32))
        results = f.wait_all()
        kept.append(results)
        assert results["a"].base is results["c"].base is not None    # one copy for both
        assert not np.shares_memory(results["a"], f.buffer_view("a"))
        assert results["b"] is f.buffer_view("b") and results["c"].shape == (2, 2)
    for step, results in enumerate(kept):           # later rounds wrote the buffers only
        assert (results["a"] == step).all() and (results["c"] == 10 + step).all()
        assert (results["d"] == 20 + step).all()


def test_misuse_is_reported():
    f = fused()
    with pytest.raises(InvalidArgumentError, match="unknown tensor 'zz'"):
        f.add("zz", np.zeros(4, np.float32))
    with pytest.raises(InvalidArgumentError, match="expected float32 with 4 elements"):
        f.add("a", np.zeros(5, np.float32))
    f.add("a", np.zeros(4, np.float32))
    with pytest.raises(InvalidArgumentError, match="'a' given twice"):
        f.add("a", np.zeros(4, np.float32))
    assert f.missing() == ["b", "c", "d", "big"]


@pytest.mark.parametrize("out,text", [
    (np.zeros(4, np.int32), r"bad out, expected a writable ndarray float32\[4\], got .*int32"),
    (np.zeros((3, 4), np.float32), r"got ndarray float32\[3, 4\]"),
    (np.zeros(5, np.float32), r"got ndarray float32\[5\]"),
    (np.zeros(0, np.float32), r"got ndarray float32\[0\]"),
    ([0.0] * 4, r"expected a writable ndarray float32\[4\], got list"),
], ids=["dtype", "shape", "size", "empty", "not an array"])
def test_a_bad_out_is_refused_when_given_and_the_tensor_can_be_given_again(out, text):
    f = fused()          # 'a' shares a bucket: its out was written only at the end
    with pytest.raises(InvalidArgumentError, match=text):
        f.add("a", np.ones(4, np.float32), out=out)
    f.add("a", np.ones(4, np.float32))
    assert f.missing() == ["b", "c", "d", "big"]


def test_a_read_only_out_and_a_value_that_is_not_an_array_are_refused():
    f = fused()
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match=r"got ndarray float32\[4\] \(read-only\)"):
        f.add("a", np.ones(4, np.float32), out=read_only)
    with pytest.raises(InvalidArgumentError, match="got a list \\(a numpy or cupy array"):
        f.add("a", [1.0, 2.0, 3.0, 4.0])


def test_the_threshold_knob_reaches_the_buckets_of_an_allreduce_optimizer(monkeypatch):
    import types

    import mpiflow as mf
    from mpiflow.ops import collective_ops
    from mpiflow.runtime.group_collectives import GroupCollectives

    x = mf.placeholder(mf.float32, [None, 4])
    w = [mf.get_variable(f"w{i}", [4]) for i in range(4)]
    loss = mf.reduce_sum(sum(x * v for v in w))
    mf.train.AllreduceOptimizer(mf.train.GradientDescentOptimizer(0.1)).minimize(loss)
    waits = [op for op in mf.get_default_graph().get_operations()
             if op.type == "CollectiveFusedWait"]
    assert len(waits) == 1 and waits[0].get_attr("threshold_bytes") is None
    service = types.SimpleNamespace(groups={"worker": MPI.COMM_SELF}, rank=0)
    env = types.SimpleNamespace(resource=lambda name, make: make())
    env.collectives = lambda g: GroupCollectives(env, service, g)
    ctx = types.SimpleNamespace(attrs=waits[0]._attrs, env=env)
    monkeypatch.setenv("MPIFLOW_FUSION_THRESHOLD_BYTES", "32")      # two 16-byte grads each
    assert len(collective_ops._fusion(ctx).buckets) == 2
    monkeypatch.setenv("MPIFLOW_FUSION_THRESHOLD_BYTES", "0")       # no fusion
    assert len(collective_ops._fusion(ctx).buckets) == 4


def test_each_bucket_finds_its_strategy_once_for_every_round(monkeypatch):
    from mpiflow.comm import collectives

    found = []

    def counting_select(name, comm, array, config=None):
        found.append(array.nbytes)
        return select(name, comm, array, config)
    monkeypatch.setattr(collectives, "select", counting_select)
    f = fused()
    for step in range(3):
        for name in "abcd":
            f.add(name, np.full(4, step, np.float32))
        f.add("big", np.full(100, step, np.float32))
        results = f.wait_all()
        assert (results["c"] == step).all() and (results["big"] == step).all()
    assert sorted(found) == [64, 400]       # the fused bucket of a..d, and big alone
