"""Everything that touches MPI (and nothing that knows a graph); filled by the ps runtime."""
