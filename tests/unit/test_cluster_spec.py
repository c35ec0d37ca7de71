"""ClusterSpec behaves as TensorFlow's (outputs from seeds/003), plus the task <-> rank map."""

import pytest

import mpiflow as mf
from mpiflow import config
from mpiflow.comm.cluster import Layout
from mpiflow.errors import InvalidArgumentError
from mpiflow.train.cluster_spec import ClusterSpec

PS = ["ps0.example.com:2222", "ps1.example.com:2222"]
WORKERS = ["worker0.example.com:2222", "worker1.example.com:2222", "worker2.example.com:2222"]
SEED = {"ps": PS, "worker": WORKERS}


@pytest.fixture
def cluster():
    return ClusterSpec(SEED)


def test_exported_as_mf_train_cluster_spec():
    assert mf.train.ClusterSpec is ClusterSpec


# --- the seed's documented outputs ------------------------------------------------------

def test_jobs(cluster):
    assert cluster.jobs == ["ps", "worker"]


def test_as_dict_of_dense_jobs_gives_back_the_lists(cluster):
    assert cluster.as_dict() == SEED
    assert cluster.as_dict()["worker"] == WORKERS


def test_job_tasks(cluster):
    assert cluster.job_tasks("worker") == WORKERS


def test_num_tasks(cluster):
    assert cluster.num_tasks("worker") == 3
    assert cluster.num_tasks("ps") == 2


def test_task_address(cluster):
    assert cluster.task_address("worker", 2) == "worker2.example.com:2222"
    assert cluster.task_address("ps", 0) == "ps0.example.com:2222"


def test_task_indices(cluster):
    assert cluster.task_indices("worker") == [0, 1, 2]


def test_as_cluster_def(cluster):
    assert cluster.as_cluster_def() == {"job": [
        {"name": "ps", "tasks": {0: PS[0], 1: PS[1]}},
        {"name": "worker", "tasks": {0: WORKERS[0], 1: WORKERS[1], 2: WORKERS[2]}},
    ]}


def test_local_job_of_the_seed():
    local = ClusterSpec({"local": ["localhost:2222", "localhost:2223"]})
    assert local.jobs == ["local"]
    assert [f"/job:local/task:{i}" for i in local.task_indices("local")] == [
        "/job:local/task:0", "/job:local/task:1"]


# --- TensorFlow's other documented behaviour ---------------------------------------------

def test_jobs_keep_the_order_they_were_given_in_as_tensorflow():
    spec = ClusterSpec({"worker": ["w:1"], "chief": ["c:1"], "ps": ["p:1"]})
    assert spec.jobs == ["worker", "chief", "ps"]
    assert list(spec.as_dict()) == ["worker", "chief", "ps"]
    assert list(ClusterSpec(spec).jobs) == ["worker", "chief", "ps"]
    # TensorFlow's ClusterDef lists its jobs sorted; reading it back keeps that order.
    assert [j["name"] for j in spec.as_cluster_def()["job"]] == ["chief", "ps", "worker"]


def test_sparse_tasks():
    spec = ClusterSpec({"ps": ["ps0:2222", "ps1:2222"],
                        "worker": {1: "worker1:2222", 3: "worker3:2222"}})
    assert spec.as_dict() == {"ps": ["ps0:2222", "ps1:2222"],
                              "worker": {1: "worker1:2222", 3: "worker3:2222"}}
    assert spec.job_tasks("worker") == [None, "worker1:2222", None, "worker3:2222"]
    assert spec.num_tasks("worker") == 2
    assert spec.task_indices("worker") == [1, 3]
    assert spec.task_address("worker", 3) == "worker3:2222"
    assert spec.as_cluster_def()["job"][1] == {
        "name": "worker", "tasks": {1: "worker1:2222", 3: "worker3:2222"}}


def test_dict_tasks_that_happen_to_be_dense_read_back_as_a_list():
    spec = ClusterSpec({"worker": {1: "b:1", 0: "a:1"}, "ps": ("p:1",)})
    assert spec.as_dict() == {"ps": ["p:1"], "worker": ["a:1", "b:1"]}


def test_task_index_keys_may_be_digit_strings_as_from_json():
    assert ClusterSpec({"worker": {"0": "a:1", "2": "c:1"}}).task_indices("worker") == [0, 2]


def test_empty_job_and_empty_cluster():
    spec = ClusterSpec({"ps": [], "worker": ["w:1"]})
    assert spec.as_dict() == {"ps": {}, "worker": ["w:1"]}
    assert spec.num_tasks("ps") == 0 and spec.job_tasks("ps") == []
    assert bool(spec)
    assert not ClusterSpec({})
    assert repr(ClusterSpec({})) == "ClusterSpec({})"


def test_copy_from_another_cluster_spec_is_equal_and_independent(cluster):
    copy = ClusterSpec(cluster)
    assert copy == cluster and copy is not cluster
    assert copy.as_dict() == cluster.as_dict()
    assert copy.rank_of("worker", 1) == cluster.rank_of("worker", 1)


def test_equality():
    a = ClusterSpec({"ps": ["p:1"], "worker": ["w:1", "w:2"]})
    assert a == ClusterSpec({"worker": ["w:1", "w:2"], "ps": ["p:1"]})
    assert a == ClusterSpec({"ps": {0: "p:1"}, "worker": {1: "w:2", 0: "w:1"}})
    assert not a != ClusterSpec({"ps": ["p:1"], "worker": ["w:1", "w:2"]})
    assert a != ClusterSpec({"ps": ["p:1"], "worker": ["w:1"]})
    assert a != ClusterSpec({"ps": ["p:1"], "worker": ["w:1", "w:3"]})
    assert a != ClusterSpec({"ps": ["p:1"], "chief": ["w:1", "w:2"]})
    assert a == {"ps": ["p:1"], "worker": ["w:1", "w:2"]}
    assert a != {"ps": "not a list"}
    assert a != 42 and a != "ClusterSpec"


def test_repr_reads_like_the_constructor(cluster):
    assert repr(cluster) == f"ClusterSpec({{'ps': {PS!r}, 'worker': {WORKERS!r}}})"
    sparse = ClusterSpec({"worker": {2: "w:2"}})
    assert repr(sparse) == "ClusterSpec({'worker': {2: 'w:2'}})"


def test_bytes_names_and_addresses_are_decoded():
    spec = ClusterSpec({b"worker": [b"w:1"]})
    assert spec.jobs == ["worker"] and spec.task_address("worker", 0) == "w:1"


def test_cluster_def_round_trip(cluster):
    sparse = ClusterSpec({"ps": ["p:1"], "worker": {1: "w:1", 4: "w:4"}})
    for spec in (cluster, sparse, ClusterSpec({})):
        assert ClusterSpec.from_cluster_def(spec.as_cluster_def()) == spec


# --- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda c: c.num_tasks("chief"),
    lambda c: c.task_indices("chief"),
    lambda c: c.job_tasks("chief"),
    lambda c: c.task_address("chief", 0),
    lambda c: c.rank_of("chief", 0),
])
def test_unknown_job_names_the_job_and_lists_the_jobs(cluster, call):
    with pytest.raises(InvalidArgumentError) as info:
        call(cluster)
    message = str(info.value)
    assert "'chief'" in message and "'ps'" in message and "'worker'" in message


def test_unknown_job_is_also_a_value_error_as_in_tensorflow(cluster):
    with pytest.raises(ValueError):
        cluster.num_tasks("chief")


def test_unknown_job_in_an_empty_cluster_says_there_are_none():
    with pytest.raises(InvalidArgumentError, match=r"'worker'.*\(no jobs\)"):
        ClusterSpec({}).task_indices("worker")


@pytest.mark.parametrize("index", [3, -1, 100])
def test_task_index_out_of_range_names_job_index_and_task_count(cluster, index):
    for call in (cluster.task_address, cluster.rank_of):
        with pytest.raises(InvalidArgumentError) as info:
            call("worker", index)
        message = str(info.value)
        assert f"No task {index} in job 'worker' (3 tasks)" in message
        assert "[0, 3)" in message


def test_missing_sparse_task_lists_the_existing_indices():
    spec = ClusterSpec({"worker": {1: "w:1", 3: "w:3"}})
    with pytest.raises(InvalidArgumentError) as info:
        spec.task_address("worker", 2)
    message = str(info.value)
    assert "No task 2 in job 'worker' (2 tasks)" in message and "[1, 3]" in message


def test_non_integer_task_index_is_refused(cluster):
    with pytest.raises(InvalidArgumentError, match="No task '1' in job 'worker'"):
        cluster.task_address("worker", "1")


@pytest.mark.parametrize("bad", [None, ["ps:1"], "ps:1", 3, [("ps", ["p:1"])]])
def test_constructor_refuses_what_is_not_a_dict_or_cluster_spec(bad):
    with pytest.raises(InvalidArgumentError, match="Bad cluster for ClusterSpec"):
        ClusterSpec(bad)


@pytest.mark.parametrize("tasks", ["w:1", 3, None, {"w:1"}])
def test_tasks_of_the_wrong_type_name_the_job(tasks):
    with pytest.raises(InvalidArgumentError, match="Bad tasks for job 'worker'"):
        ClusterSpec({"worker": tasks})


@pytest.mark.parametrize("address", [2222, None, ["w", 1]])
def test_address_of_the_wrong_type_names_job_and_task(address):
    with pytest.raises(InvalidArgumentError, match="Bad address of task 1 in job 'worker'"):
        ClusterSpec({"worker": ["w:0", address]})


@pytest.mark.parametrize("index", [-1, "x", 1.5, None, True])
def test_task_index_of_the_wrong_type_names_the_job(index):
    with pytest.raises(InvalidArgumentError, match="Bad task index in job 'worker'"):
        ClusterSpec({"worker": {index: "w:1"}})


@pytest.mark.parametrize("name", [1, "", "a/b", " ps", None])
def test_bad_job_names_are_refused(name):
    with pytest.raises(InvalidArgumentError, match="Bad job name"):
        ClusterSpec({name: ["h:1"]})


def test_duplicate_job_names_are_refused():
    with pytest.raises(InvalidArgumentError, match="Duplicate job name 'ps'"):
        ClusterSpec({"ps": ["a:1"], b"ps": ["b:1"]})
    with pytest.raises(InvalidArgumentError, match="Duplicate job name 'ps' in cluster def"):
        ClusterSpec.from_cluster_def({"job": [{"name": "ps", "tasks": {0: "a:1"}},
                                              {"name": "ps", "tasks": {0: "b:1"}}]})


def test_duplicate_task_index_is_refused():
    with pytest.raises(InvalidArgumentError, match="Duplicate task 1 in job 'worker'"):
        ClusterSpec({"worker": {1: "a:1", "1": "b:1"}})


@pytest.mark.parametrize("bad", [{}, {"job": "ps"}, {"job": [{"tasks": {}}]}, ["job"]])
def test_malformed_cluster_def_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match="Bad cluster def"):
        ClusterSpec.from_cluster_def(bad)


# --- tasks and ranks ----------------------------------------------------------------------

def test_tasks_not_from_mpi_take_ranks_ps_then_chief_then_worker_then_other_jobs():
    spec = ClusterSpec({"worker": ["w0", "w1"], "evaluator": ["e0"], "chief": ["c0"],
                        "ps": ["p0", "p1"], "aux": ["x0"]})
    expected = [("ps", 0), ("ps", 1), ("chief", 0), ("worker", 0), ("worker", 1),
                ("aux", 0), ("evaluator", 0)]
    assert [tuple(spec.task_of_rank(r)) for r in range(spec.num_ranks)] == expected
    assert [spec.rank_of(job, task) for job, task in expected] == list(range(7))


def test_sparse_tasks_take_consecutive_ranks():
    spec = ClusterSpec({"ps": {2: "p2"}, "worker": {1: "w1", 5: "w5"}})
    assert spec.num_ranks == 3
    assert (spec.rank_of("ps", 2), spec.rank_of("worker", 1), spec.rank_of("worker", 5)) == (
        0, 1, 2)
    assert spec.task_of_rank(2) == ("worker", 5)
    assert spec.task_of_rank(2).task_index == 5


@pytest.mark.parametrize("rank", [5, -1, "0", None])
def test_rank_outside_the_cluster_names_the_rank_count(cluster, rank):
    with pytest.raises(InvalidArgumentError) as info:
        cluster.task_of_rank(rank)
    assert f"No rank {rank!r}" in str(info.value) and "[0, 5)" in str(info.value)


def test_from_layout_block_addresses_and_ranks():
    spec = ClusterSpec.from_layout(Layout(["n0", "n0", "n1", "n1"]), ps=1, policy="block")
    assert spec.as_dict() == {"ps": ["mpi://n0/0"],
                              "worker": ["mpi://n0/1", "mpi://n1/2", "mpi://n1/3"]}
    assert spec.rank_of("worker", 2) == 3 and spec.task_of_rank(0) == ("ps", 0)
    assert spec.layout.num_nodes == 2


def test_from_layout_spread_keeps_the_rank_of_every_task():
    spec = ClusterSpec.from_layout(Layout(["n0", "n0", "n1", "n1"], rank=2), ps=2,
                                   policy="spread")
    assert spec.as_dict() == {"ps": ["mpi://n0/0", "mpi://n1/2"],
                              "worker": ["mpi://n0/1", "mpi://n1/3"]}
    assert [tuple(spec.task_of_rank(r)) for r in range(4)] == [
        ("ps", 0), ("worker", 0), ("ps", 1), ("worker", 1)]
    assert spec.rank_of("ps", 1) == 2
    copy = ClusterSpec(spec)
    assert copy.rank_of("ps", 1) == 2 and copy.layout is spec.layout


def test_from_layout_reads_ps_and_policy_from_config():
    cfg = config.Config(env={"MPIFLOW_PS": "2", "MPIFLOW_PS_POLICY": "spread"})
    spec = ClusterSpec.from_layout(Layout(["a", "a", "b", "b"]), config=cfg)
    assert spec.task_address("ps", 1) == "mpi://b/2"


def test_from_layout_default_is_one_ps_and_a_single_rank_is_one_worker():
    env = config.Config(env={})
    spec = ClusterSpec.from_layout(Layout(["a", "a", "a"]), config=env)
    assert spec.as_dict() == {"ps": ["mpi://a/0"], "worker": ["mpi://a/1", "mpi://a/2"]}
    single = ClusterSpec.from_layout(Layout(["a"]), config=env)
    assert single.as_dict() == {"worker": ["mpi://a/0"]} and single.jobs == ["worker"]
    assert ClusterSpec.from_layout(Layout(["a"]), ps=0, config=env) == single


def test_from_layout_with_no_worker_left_names_the_layout():
    with pytest.raises(InvalidArgumentError, match="no worker left: 2 ranks, 2 ps"):
        ClusterSpec.from_layout(Layout(["a", "b"]), ps=2)


def test_cluster_spec_takes_its_cluster_def_as_tensorflow_takes_a_cluster_def(cluster):
    assert ClusterSpec(cluster.as_cluster_def()) == cluster
    assert ClusterSpec(cluster.as_cluster_def()).as_dict() == SEED
    # A job that is really named "job" (addresses, not dicts) stays a job.
    assert ClusterSpec({"job": ["a:1"]}).as_dict() == {"job": ["a:1"]}
    assert ClusterSpec({"job": []}).jobs == ["job"]


@pytest.mark.parametrize("protocol", [None, "grpc", "grpc+verbs", "grpc+mpi", "grpc+gdr"])
def test_server_takes_the_protocols_tf1_knows(protocol):
    # The check Server runs first; building a Server here would leave a cluster behind
    # for the later tests (tests/runtime/progs/server_arguments.py runs one with "grpc").
    from mpiflow.train.server import _check_protocol
    _check_protocol(protocol)


@pytest.mark.parametrize("protocol", ["bogus", "", "GRPC", "http"])
def test_server_refuses_a_protocol_tensorflow_does_not_know(protocol):
    # refused before the Server touches MPI or the process's cluster
    with pytest.raises(mf.errors.NotFoundError,
                       match=rf"unknown protocol {protocol!r}: expected None or one of 'grpc'"):
        mf.train.Server({"worker": ["localhost:2222"]}, protocol=protocol)
