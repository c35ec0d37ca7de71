"""Role assignment and node layout over fake host lists (no MPI)."""

import pytest

from mpiflow import config
from mpiflow.comm.cluster import (
    Layout, Role, _Waiter, check_launch_size, default_num_ps, describe_layout, local_ranks,
    node_indices, roles_for)
from mpiflow.errors import DeadlineExceededError, FailedPreconditionError, InvalidArgumentError


def jobs(roles):
    """Return roles as compact strings, e.g. ['ps0', 'worker0', ...], for readable asserts."""
    return [f"{job}{task}" for job, task in roles]


def test_block_makes_the_first_ranks_ps_and_the_rest_workers_in_rank_order():
    roles = roles_for(["a", "a", "b", "b"], 2, "block")
    assert jobs(roles) == ["ps0", "ps1", "worker0", "worker1"]
    assert all(isinstance(r, Role) for r in roles)


def test_block_is_the_default_policy():
    assert roles_for(["a", "b", "c"], 1) == roles_for(["a", "b", "c"], 1, "block")


def test_zero_ps_makes_every_rank_a_worker():
    assert jobs(roles_for(["a", "a", "a"], 0, "spread")) == ["worker0", "worker1", "worker2"]
    assert jobs(roles_for(["solo"], 0)) == ["worker0"]


def test_spread_over_two_hosts_in_blocks_puts_one_ps_per_node_first():
    hosts = ["a", "a", "a", "b", "b", "b"]
    assert jobs(roles_for(hosts, 2, "spread")) == [
        "ps0", "worker0", "worker1", "ps1", "worker2", "worker3"]
    assert jobs(roles_for(hosts, 3, "spread")) == [
        "ps0", "ps2", "worker0", "ps1", "worker1", "worker2"]


def test_spread_over_two_interleaved_hosts():
    hosts = ["a", "b", "a", "b"]
    assert jobs(roles_for(hosts, 2, "spread")) == ["ps0", "ps1", "worker0", "worker1"]
    assert jobs(roles_for(hosts, 3, "spread")) == ["ps0", "ps1", "ps2", "worker0"]


def test_spread_over_three_hosts_with_uneven_rank_counts():
    # a: ranks 0,1,2,3   b: rank 4   c: ranks 5,6
    hosts = ["a", "a", "a", "a", "b", "c", "c"]
    assert jobs(roles_for(hosts, 3, "spread")) == [
        "ps0", "worker0", "worker1", "worker2", "ps1", "ps2", "worker3"]
    # Second round: b has no second rank, so after a's and c's second ranks comes a's third.
    assert jobs(roles_for(hosts, 5, "spread")) == [
        "ps0", "ps3", "worker0", "worker1", "ps1", "ps2", "ps4"]
    assert jobs(roles_for(hosts, 6, "spread")) == [
        "ps0", "ps3", "ps5", "worker0", "ps1", "ps2", "ps4"]


def test_spread_numbers_nodes_by_their_first_rank_not_by_name():
    hosts = ["z", "y", "z", "y", "x"]
    assert jobs(roles_for(hosts, 3, "spread")) == ["ps0", "ps1", "worker0", "worker1", "ps2"]


def test_spread_on_one_host_equals_block():
    hosts = ["only"] * 5
    for num_ps in range(5):
        assert roles_for(hosts, num_ps, "spread") == roles_for(hosts, num_ps, "block")


def test_every_rank_gets_exactly_one_task_and_task_indices_are_dense():
    hosts = ["a", "b", "c", "a", "b", "a", "a"]
    for policy in ("block", "spread"):
        for num_ps in range(len(hosts)):
            roles = roles_for(hosts, num_ps, policy)
            ps = sorted(t for j, t in roles if j == "ps")
            workers = sorted(t for j, t in roles if j == "worker")
            assert ps == list(range(num_ps)), (policy, num_ps)
            assert workers == list(range(len(hosts) - num_ps)), (policy, num_ps)


@pytest.mark.parametrize("num_ps", [4, 5])
def test_as_many_ps_as_ranks_leaves_no_worker_and_names_the_layout(num_ps):
    with pytest.raises(InvalidArgumentError) as info:
        roles_for(["a", "a", "b", "b"], num_ps, "spread")
    message = str(info.value)
    assert f"no worker left: 4 ranks, {num_ps} ps" in message
    assert "2 nodes" in message and "a: ranks 0-1" in message and "b: ranks 2-3" in message


@pytest.mark.parametrize("num_ps", [-1, 1.5, "2", None, True])
def test_bad_number_of_ps_is_refused_naming_the_layout(num_ps):
    with pytest.raises(InvalidArgumentError) as info:
        roles_for(["a", "a", "a"], num_ps)
    assert "3 ranks on 1 node" in str(info.value) and repr(num_ps) in str(info.value)


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(InvalidArgumentError) as info:
        roles_for(["a", "b"], 1, "round_robin")
    message = str(info.value)
    assert "'round_robin'" in message and "'block'" in message and "'spread'" in message
    assert "2 ranks on 2 nodes" in message


def test_node_indices_follow_first_rank_and_local_ranks_count_within_a_node():
    hosts = ["b", "a", "b", "c", "a", "b"]
    assert node_indices(hosts) == [0, 1, 0, 2, 1, 0]
    assert local_ranks(hosts) == ([0, 0, 1, 0, 1, 2], [3, 2, 3, 1, 2, 3])


def test_describe_layout_compresses_rank_ranges_and_truncates_many_nodes():
    assert describe_layout(["a", "a", "a", "b"]) == "4 ranks on 2 nodes (a: ranks 0-2; b: ranks 3)"
    assert describe_layout(["a", "b", "a"]) == "3 ranks on 2 nodes (a: ranks 0,2; b: ranks 1)"
    many = describe_layout([f"n{i}" for i in range(10)], limit=2)
    assert many.startswith("10 ranks on 10 nodes (n0: ranks 0; n1: ranks 1; 8 more nodes")


def test_default_num_ps_is_one_with_two_or_more_ranks():
    assert [default_num_ps(n) for n in (1, 2, 3, 64)] == [0, 1, 1, 1]


def test_layout_from_hosts_gives_this_ranks_view():
    layout = Layout(["a", "b", "a", "a"], rank=3)
    assert (layout.rank, layout.size, layout.host) == (3, 4, "a")
    assert layout.nodes == (0, 1, 0, 0) and layout.num_nodes == 2
    assert (layout.node, layout.local_rank, layout.local_size) == (0, 2, 3)
    assert layout.local_ranks == (0, 0, 1, 2) and layout.local_sizes == (3, 1, 3, 3)


def test_layout_tells_apart_nodes_that_report_the_same_host_name():
    # Containers often all call themselves "localhost"; the node keys (host, shared-memory
    # domain) still tell them apart, and messages label the second one by its first rank.
    layout = Layout(["localhost"] * 4, rank=0,
                    node_keys=[("localhost", 0), ("localhost", 0), ("localhost", 2),
                               ("localhost", 2)])
    assert layout.nodes == (0, 0, 1, 1) and layout.local_ranks == (0, 1, 0, 1)
    assert jobs(layout.assign_roles(2, "spread")) == ["ps0", "worker0", "ps1", "worker1"]
    assert "localhost@rank2: ranks 2-3" in layout.describe()


def test_layout_refuses_a_rank_outside_the_hosts():
    with pytest.raises(InvalidArgumentError, match=r"expected a rank in \[0, 2\), got 2"):
        Layout(["a", "b"], rank=2)


def test_assign_roles_takes_ps_and_policy_from_config_when_not_given():
    layout = Layout(["a", "a", "b", "b"])
    cfg = config.Config(env={"MPIFLOW_PS": "2", "MPIFLOW_PS_POLICY": "spread"})
    assert jobs(layout.assign_roles(config=cfg)) == ["ps0", "worker0", "ps1", "worker1"]
    assert jobs(layout.assign_roles(1, config=cfg)) == ["ps0", "worker0", "worker1", "worker2"]
    assert jobs(layout.assign_roles(2, "block", config=cfg)) == [
        "ps0", "ps1", "worker0", "worker1"]


def test_assign_roles_defaults_to_one_ps_in_block_order():
    layout = Layout(["a", "b", "a"])
    assert jobs(layout.assign_roles(config=config.Config(env={}))) == [
        "ps0", "worker0", "worker1"]
    assert jobs(Layout(["a"]).assign_roles(config=config.Config(env={}))) == ["worker0"]


def test_assign_roles_reports_a_malformed_environment():
    with pytest.raises(InvalidArgumentError, match="MPIFLOW_PS.*'abc'"):
        Layout(["a", "a"]).assign_roles(config=config.Config(env={"MPIFLOW_PS": "abc"}))


def test_error_from_environment_values_says_they_came_from_the_environment():
    cfg = config.Config(env={"MPIFLOW_PS": "4", "MPIFLOW_PS_POLICY": "spread"})
    with pytest.raises(InvalidArgumentError) as info:
        Layout(["a", "a", "b", "b"]).assign_roles(config=cfg)
    message = str(info.value)
    assert "no worker left: 4 ranks, 4 ps" in message
    assert "from the environment: MPIFLOW_PS=4, MPIFLOW_PS_POLICY=spread" in message
    with pytest.raises(InvalidArgumentError) as info:
        Layout(["a", "b"]).assign_roles(2, "block", config=cfg)
    assert "from the environment" not in str(info.value)


class NeverDone:
    """An MPI request stand-in whose Test never succeeds."""

    def __init__(self):
        self.tests = 0

    def Test(self):  # noqa: N802 (mpi4py's name)
        self.tests += 1
        return False


def test_layout_wait_raises_deadline_exceeded_naming_the_wait_and_the_timeout():
    cfg = config.Config(env={"MPIFLOW_TIMEOUT": "0.05", "MPIFLOW_POLL_MAX_SLEEP_US": "2000"})
    request = NeverDone()
    with pytest.raises(DeadlineExceededError) as info:
        _Waiter(cfg, "rank 1 of 4").wait(request, "gathering host names (Iallgather)")
    message = str(info.value)
    assert "rank 1 of 4 waited" in message and "gathering host names" in message
    assert "MPIFLOW_TIMEOUT=0.05 s" in message
    # The back-off sleeps (1 us doubling to 2 ms) keep the number of polls small.
    assert 5 < request.tests < 60


def test_a_launch_whose_processes_each_started_mpi_alone_is_stopped():
    # srun without the PMI of the MPI library (--mpi=none where MPICH needs pmi2): every
    # task is a job of one rank, which would train alone as its own chief.
    srun = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}
    with pytest.raises(FailedPreconditionError) as raised:
        check_launch_size(1, srun)
    message = str(raised.value)
    assert message.startswith("The launcher started this process as rank 1 of 4 "
                              "(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=4), but MPI made a job "
                              "of 1 rank(s) of it"), message
    assert "srun --mpi=pmi2" in message
    assert raised.value.brief
    # Another MPI's mpirun than mpi4py's: its variables say 2, MPI says 1.
    with pytest.raises(FailedPreconditionError, match="OMPI_COMM_WORLD_SIZE=2.*mpiexec"):
        check_launch_size(1, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})


def test_launch_sizes_that_match_or_are_not_given_pass():
    check_launch_size(4, {"PMI_RANK": "3", "PMI_SIZE": "4", "SLURM_PROCID": "0",
                          "SLURM_STEP_NUM_TASKS": "1"})     # mpiexec under srun: PMI's
    check_launch_size(4, {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4",
                          "PMIX_RANK": "2"})
    # A PMIx launcher (no size) in a batch script: Slurm's variables are the script's.
    check_launch_size(4, {"PMIX_RANK": "3", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"})
    # A batch script's own shell (SLURM_PROCID=0, no step), or no launcher at all.
    check_launch_size(1, {"SLURM_PROCID": "0", "SLURM_NTASKS": "8"})
    check_launch_size(1, {})
