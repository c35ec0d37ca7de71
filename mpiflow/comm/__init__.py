"""Everything that touches MPI and nothing that knows a graph: the cluster layout, framed
messages over point-to-point, the rendezvous, the polling back-off, collectives and fusion.

Importing a submodule that needs MPI (transport, collectives) initialises MPI; the package
itself imports none of them, so ``import mpiflow`` stays MPI-free until a Server starts.
"""
