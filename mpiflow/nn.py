"""``mf.nn``: neural-network ops under TensorFlow's ``tf.nn`` names."""

from mpiflow.ops.sparse_ops import embedding_lookup  # noqa: F401
