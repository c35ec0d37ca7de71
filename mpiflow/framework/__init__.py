"""Graph-building core: dtypes, device specs, Graph/Operation/Tensor, scopes.

Pure data and bookkeeping; imports nothing of mpiflow outside ``framework`` except
``mpiflow.errors``.
"""
