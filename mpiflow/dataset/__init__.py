"""``tf.data`` for arrays in memory: ``Dataset``, ``Iterator`` and the TF1 functions on
them. ``mf.data`` (``mpiflow/data.py``) re-exports these beside its loaders.

Owns the Python side: datasets as plain descriptions (``dataset``), their element
structure (``structure``) and the iterators that turn them into ops (``iterator``). The
ops and the numpy engine that picks each item are in ``ops.iterator_ops`` and
``ops.dataset_streams``.
"""

from mpiflow.dataset import experimental
from mpiflow.dataset.dataset import Dataset
from mpiflow.dataset.experimental import AUTOTUNE
from mpiflow.dataset.iterator import Iterator

__all__ = ["AUTOTUNE", "Dataset", "Iterator", "experimental", "get_output_classes",
           "get_output_shapes", "get_output_types", "make_initializable_iterator",
           "make_one_shot_iterator"]


def make_one_shot_iterator(dataset: Dataset) -> Iterator:
    """TF1's ``tf.data.make_one_shot_iterator(dataset)``."""
    return dataset.make_one_shot_iterator()


def make_initializable_iterator(dataset: Dataset, shared_name=None) -> Iterator:
    """TF1's ``tf.data.make_initializable_iterator(dataset)``."""
    return dataset.make_initializable_iterator(shared_name)


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes


def get_output_classes(dataset_or_iterator):
    return dataset_or_iterator.output_classes
