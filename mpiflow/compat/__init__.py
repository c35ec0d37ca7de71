"""``mf.compat``: ``tf.compat.v1`` is mpiflow itself, whose API is TensorFlow 1's.

So a script written for ``import tensorflow.compat.v1 as tf`` runs with ``mf.compat.v1``
(and under ``python -m mpiflow.run --as-tensorflow``, unchanged).
"""

import mpiflow as v1  # noqa: F401  (the namespace itself)
from mpiflow import unsupported

__getattr__ = unsupported.namespace_getattr(__name__, "tf.compat")
