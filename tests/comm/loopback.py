"""A message sent by this process to itself through ``Transport`` (on a Dup of
COMM_SELF): header, payloads and the transport's choices, without launching ranks."""

from mpiflow.comm.transport import Transport


def send_to_self(arrays, header=None, **send_options):
    """Send ``arrays`` to rank 0 of a private one-rank communicator; return the Message."""
    from mpi4py import MPI
    comm = MPI.COMM_SELF.Dup()
    try:
        link = Transport(comm)
        link.send(0, header or {"k": "t"}, arrays, **send_options)
        message = None
        while message is None:
            message = link.poll()
        link.flush()
    finally:
        comm.Free()
    return message
