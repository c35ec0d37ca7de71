"""``tf.data.experimental``: ``AUTOTUNE``, which TF1 scripts pass to ``map`` and
``prefetch``. mpiflow gathers each element inside the step that asks for it, so both take
it and need no tuning; the rest of the namespace is not provided.
"""

from mpiflow import unsupported

# TF's value: "let the runtime choose" for num_parallel_calls and buffer_size.
AUTOTUNE = -1

__getattr__ = unsupported.namespace_getattr(__name__, "tf.data.experimental")
