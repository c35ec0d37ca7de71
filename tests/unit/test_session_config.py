"""ConfigProto and RunOptions: every field works or says once that it has no effect."""

import logging

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import backend, errors
from mpiflow.runtime import placement, session_options


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(session_options, "_WARNED", set())


def _gpu_op():
    one = mf.constant(1.0)
    with mf.device("/gpu:0"):
        return mf.add(one, one, name="on_gpu")


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_soft_placement_runs_gpu_ops_on_the_cpu_of_an_in_process_session():
    y = _gpu_op()
    with mf.Session(config=mf.ConfigProto(allow_soft_placement=True)) as sess:
        assert sess.run(y) == 2.0
    with mf.Session() as sess, pytest.raises(errors.PlacementError, match="GPU"):
        sess.run(y)


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_a_gpu_op_without_a_gpu_is_refused_naming_the_op_and_soft_placement():
    y = _gpu_op()
    with mf.Session() as sess, pytest.raises(
            errors.PlacementError,
            match=r"Cannot place op 'on_gpu' \(Add\) on /device:GPU:0: it needs cupy and a "
                  r"GPU.*allow_soft_placement=True"):
        sess.run(y)


def test_device_count_hides_gpus_and_soft_placement_moves_their_ops_to_the_cpu():
    y = _gpu_op()
    hidden = mf.ConfigProto(device_count={"GPU": 0})
    with mf.Session(config=hidden) as sess, \
            pytest.raises(errors.PlacementError, match=r"'on_gpu'.*device_count"):
        sess.run(y)
    soft = mf.ConfigProto(device_count={"GPU": 0}, allow_soft_placement=True)
    with mf.Session(config=soft) as sess:
        assert sess.run(y) == 2.0


def test_device_filters_refuse_an_op_placed_outside_them():
    cluster = mf.train.ClusterSpec({"ps": ["p:1"], "worker": ["w:1", "w:2"]})
    with mf.device("/job:worker/task:1"):
        other = mf.constant(1.0, name="other_worker")
    with mf.device("/job:ps/task:0"):
        on_ps = mf.constant(2.0, name="on_ps")
    config = mf.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
    placer = placement.Placer(mf.get_default_graph(), cluster, "worker", 0, config)
    assert placer.device_of(on_ps.op).to_string() == "/job:ps/replica:0/task:0/device:CPU:0"
    with pytest.raises(errors.PlacementError, match=r"'other_worker'.*device_filters"):
        placer.device_of(other.op)


def test_intra_op_threads_limit_this_processes_blas(monkeypatch):
    calls = []
    monkeypatch.setattr(backend, "limit_blas_threads", calls.append)
    mf.Session(config=mf.ConfigProto(intra_op_parallelism_threads=3)).close()
    mf.Session(config=mf.ConfigProto()).close()
    assert calls == [3]


def test_settings_without_an_effect_warn_once(caplog):
    quiet = [mf.ConfigProto(gpu_options={"allow_growth": True}), mf.ConfigProto()]
    noisy = [mf.ConfigProto(inter_op_parallelism_threads=4),
             mf.ConfigProto(gpu_options={"per_process_gpu_memory_fraction": 0.5}),
             mf.ConfigProto(device_count={"CPU": 8})]
    with caplog.at_level(logging.WARNING, logger="mpiflow"):
        for config in quiet + noisy + noisy:
            mf.Session(config=config).close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    for field in ("inter_op_parallelism_threads", "gpu_options", "device_count"):
        assert sum(field in m for m in messages) == 1


@pytest.mark.parametrize("bad", [{"intra_op_parallelism_threads": -1},
                                 {"inter_op_parallelism_threads": 1.5},
                                 {"device_count": {"GPU": -1}},
                                 {"operation_timeout_in_ms": "10"}])
def test_bad_config_values_are_refused_naming_the_field(bad):
    with pytest.raises(errors.InvalidArgumentError, match=next(iter(bad))):
        mf.ConfigProto(**bad)


def test_run_metadata_gets_the_partition_graph_when_asked():
    x = mf.placeholder(mf.float32, [2])
    y = mf.reduce_sum(x * 2.0, name="total")
    unused = mf.constant(5.0, name="unused")
    meta = mf.RunMetadata()
    with mf.Session() as sess:
        sess.run(y, {x: np.ones(2)}, run_metadata=meta)
        assert meta.partition_graphs == []
        sess.run(y, {x: np.ones(2)}, options=mf.RunOptions(output_partition_graphs=True),
                 run_metadata=meta)
    (graph_def,) = meta.partition_graphs
    names = {node["name"] for node in graph_def["node"]}
    assert "total" in names and unused.op.name not in names
    assert graph_def["device"] == "/job:localhost/replica:0/task:0"
