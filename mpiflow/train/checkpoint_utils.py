"""Reading a checkpoint's tensors in this process, without a graph or a session (TF1's
``tf.train.NewCheckpointReader``, ``load_checkpoint``, ``list_variables``,
``load_variable``).

A checkpoint shows its tensors as TensorFlow's reader does: each under its full name with
its full shape, however it was saved (one piece, or slices spread over the ps shards of a
partitioned variable). The index and the pieces are read by ``ops.checkpoint_reader``,
the one owner of the file format's reading; ``list_variables`` and ``load_variable`` are
the reader's answers, so the four never disagree.
"""

from __future__ import annotations

import os

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import checkpoint_reader as reader
from mpiflow.train.checkpoint_management import checkpoint_exists, latest_checkpoint

__all__ = ["CheckpointReader", "NewCheckpointReader", "list_variables", "load_checkpoint",
           "load_variable"]


class CheckpointReader:
    """The tensors of checkpoint ``prefix``: names, full shapes, dtypes and values.

    Make it with ``NewCheckpointReader(prefix)`` or ``load_checkpoint(dir_or_prefix)``.
    What the checkpoint holds is read once, when the reader is made; values are read
    when asked for (each shard file's directory once, however many are asked for).
    """

    def __init__(self, prefix: str):
        prefix = os.fspath(prefix)
        if not checkpoint_exists(prefix):
            raise errors.NotFoundError(
                f"Checkpoint '{prefix}' not found: there is no {fmt.index_path(prefix)} "
                "(pass the checkpoint's prefix, e.g. 'ckpt/model.ckpt-100', or a directory "
                "to load_checkpoint)")
        self._prefix = prefix
        tensors = reader.read_index(prefix)["tensors"]
        self._shapes, self._dtypes = {}, {}
        for name, pieces in tensors.items():
            first = pieces[0]
            self._shapes[name] = list(fmt.SliceSpec.of(first["slice"], first["shape"])
                                      .full_shape)
            self._dtypes[name] = dtypes.as_dtype(first["dtype"])

    @property
    def prefix(self) -> str:
        return self._prefix

    def has_tensor(self, name: str) -> bool:
        """Whether the checkpoint holds key ``name``: a variable's name, as TensorFlow's
        reader, so ``has_tensor("w:0")`` (the tensor's name) is False."""
        return name in self._shapes

    def get_tensor(self, name: str) -> np.ndarray:
        """Return the full value of tensor ``name``, assembled from its saved pieces.

        Raises:
            NotFoundError: the checkpoint has no tensor ``name`` (the message names the
                checkpoint and the closest names; for "w:0", the key "w"), or one of its
                shard files is gone.
            DataLossError: a shard is damaged or of another save.
        """
        if name not in self._dtypes:
            if _key(name) in self._dtypes:
                raise errors.NotFoundError(
                    f"Key '{name}' not found in checkpoint '{self._prefix}': keys are "
                    f"variable names, without ':0' (use '{_key(name)}', or var.op.name)")
            reader.saved_key({"tensors": self._shapes}, self._prefix, name)   # raises
        # lookup=None: the pieces as they were saved (a "mod" table keeps its row order).
        return reader.read_slice(self._prefix, name, "", self._dtypes[name], None,
                                 lookup=None)

    def get_variable_to_shape_map(self) -> dict:
        """{name: full shape as a list of ints} of every tensor in the checkpoint."""
        return {name: list(shape) for name, shape in self._shapes.items()}

    def get_variable_to_dtype_map(self) -> dict:
        """{name: mf DType} of every tensor in the checkpoint."""
        return dict(self._dtypes)

    def debug_string(self) -> bytes:
        """One line per tensor, sorted by name, as TensorFlow's reader writes them:
        ``b"name (DT_FLOAT) [2,3]\\n"``."""
        lines = []
        for name in sorted(self._shapes):
            dtype = self._dtypes[name].name
            dims = ",".join(str(d) for d in self._shapes[name])
            lines.append(f"{name} ({_DT_NAMES.get(dtype, 'DT_' + dtype.upper())}) [{dims}]\n")
        return "".join(lines).encode("utf-8")

    def __repr__(self):
        return f"<CheckpointReader '{self._prefix}' with {len(self._shapes)} tensors>"


def NewCheckpointReader(filepattern: str) -> CheckpointReader:  # noqa: N802 (TF1's name)
    """Return a reader of the checkpoint with prefix ``filepattern``.

    Raises:
        NotFoundError: no checkpoint has that prefix.
    """
    return CheckpointReader(filepattern)


def load_checkpoint(ckpt_dir_or_file: str) -> CheckpointReader:
    """Return a reader of a checkpoint given by prefix, or of the newest whole checkpoint
    of a directory.

    Raises:
        NotFoundError: no such checkpoint, or none in the directory.
    """
    ckpt_dir_or_file = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(ckpt_dir_or_file):
        prefix = latest_checkpoint(ckpt_dir_or_file)
        if prefix is None:
            raise errors.NotFoundError(f"No checkpoint found in directory '{ckpt_dir_or_file}'")
        return CheckpointReader(prefix)
    return CheckpointReader(ckpt_dir_or_file)


def list_variables(ckpt_dir_or_file: str) -> list:
    """Return ``[(name, full shape)]`` of every tensor in a checkpoint, sorted by name."""
    shapes = load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map()
    return sorted(shapes.items())


def load_variable(ckpt_dir_or_file: str, name: str) -> np.ndarray:
    """Return the full value of tensor ``name`` (a variable's name; a trailing ":0" is
    dropped, as TensorFlow does) of a checkpoint, assembled from its pieces."""
    return load_checkpoint(ckpt_dir_or_file).get_tensor(_key(name))


# TensorFlow's DataType names where they are not "DT_" + the dtype's name in capitals.
_DT_NAMES = {"float16": "DT_HALF", "float32": "DT_FLOAT", "float64": "DT_DOUBLE"}


def _key(name: str) -> str:
    """A checkpoint key from a tensor name: "w:0" names the tensor of variable "w" (for
    ``load_variable``, which takes either, as TensorFlow's)."""
    return name[:-2] if name.endswith(":0") else name
