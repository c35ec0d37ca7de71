"""Where the ranks of an ``mpiflow launch`` reach it: loopback only when every rank runs
on this host, else this host's name (no MPI)."""

import socket

import pytest

from mpiflow.launch import _advertised, _parse

LOCAL = ("127.0.0.1", "127.0.0.1")
ANY = (socket.gethostname(), "0.0.0.0")


def advertised(*launch_args, launcher="mpich", **environ):
    return _advertised(_parse([*launch_args, "train.py"]), launcher, environ)


@pytest.mark.parametrize("launcher_args", [
    "-f hosts", "-hostfile hosts", "-machinefile hosts", "-host node1,node2",
    "-hosts node1,node2", "--hostfile hosts", "--host node1:2,node2:2", "-H node1,node2",
    "--hostfile=hosts", "-launcher ssh -machinefile /shared/machines -genv A b"])
def test_a_host_option_of_the_mpi_launcher_makes_the_ranks_reach_this_hosts_name(
        launcher_args):
    assert advertised("--launcher-args", launcher_args) == ANY


@pytest.mark.parametrize("environ", [
    {"HYDRA_HOST_FILE": "/shared/hosts"}, {"PBS_NODEFILE": "/var/spool/pbs/aux/1"},
    {"SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "4"},
    {"OMPI_MCA_orte_default_hostfile": "hosts"}])
def test_a_host_list_the_mpi_launcher_reads_from_its_environment_counts_too(environ):
    # An allocation of several nodes: hydra and Open MPI's mpirun place ranks on them.
    assert advertised("--launcher", "mpiexec", **environ) == ANY


def test_a_launch_on_this_host_only_listens_on_loopback():
    assert advertised() == LOCAL
    assert advertised("--launcher-args", "-genv UCX_TLS tcp,self -bind-to core") == LOCAL
    assert advertised(SLURM_JOB_ID="5", SLURM_JOB_NUM_NODES="1") == LOCAL
    assert advertised("--hosts", "node1:4,node2:4") == ANY
    assert advertised(launcher="srun") == ANY
    assert advertised("--address", "10.0.0.5") == ("10.0.0.5", "0.0.0.0")


@pytest.mark.parametrize("launcher_args", [
    "-hostfile hosts", "-hosts node1:2,node2:2", "--hostfile=hosts", "-np 4", "-h"])
def test_launcher_args_that_start_with_a_dash_reach_the_mpi_launcher(launcher_args):
    # argparse would take "-hostfile hosts" for its own -h, and "--hostfile=hosts" for an
    # option it does not know; the program's own arguments stay the program's.
    args = _parse(["-n", "4", "--launcher-args", launcher_args, "--ps", "1", "train.py",
                   "--launcher-args", "-x", "-n", "2"])
    assert args.launcher_args == launcher_args
    assert args.ranks == 4 and args.ps == 1
    assert args.command == ["train.py", "--launcher-args", "-x", "-n", "2"]
