"""A transport over this process alone (``COMM_SELF``): what it sends, it receives."""

import pytest

from mpiflow.comm.transport import Transport


@pytest.fixture
def link():
    MPI = pytest.importorskip("mpi4py.MPI")
    comm = MPI.COMM_SELF.Dup()
    yield Transport(comm)
    comm.Free()
