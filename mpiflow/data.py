"""Input helpers: load real data, shard it by worker, shuffle and batch it; and ``mf.data``.

Owns data loading for examples, tests and training scripts: scikit-learn's bundled 8x8
digits (no download), MNIST from the IDX or ``mnist.npz`` files a user already has, and the
numpy-only ``shard`` / ``batches`` helpers, which need no graph. It is also TF1's
``tf.data`` namespace: ``Dataset``, ``Iterator`` and the iterator functions are
re-exported from ``mpiflow.dataset``, which owns them. Imports nothing else of mpiflow but
``mpiflow.errors`` and ``mpiflow.unsupported``.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Generator, Sequence
from typing import Union

import numpy as np

from mpiflow import errors, unsupported
from mpiflow.dataset import (  # noqa: F401  (tf.data's names)
    AUTOTUNE,
    Dataset,
    Iterator,
    experimental,
    get_output_classes,
    get_output_shapes,
    get_output_types,
    make_initializable_iterator,
    make_one_shot_iterator,
)

Arrays = Union[np.ndarray, Sequence[np.ndarray]]

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_MNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """Return scikit-learn's 8x8 digits split into train and test sets.

    The digits ship inside scikit-learn, so examples and tests get real data without a
    download. The split is a seeded shuffle, so every rank that calls this with the same seed
    sees the same split and can shard it without communicating.

    Args:
        test_fraction: share of the 1,797 examples kept for the test set, in [0, 1).
        seed: seed of the shuffle before the split.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: images flattened to float32 ``[n, 64]`` in
        [0, 1], labels int64 ``[n]`` in 0..9.

    Raises:
        InvalidArgumentError: ``test_fraction`` outside [0, 1).
        ImportError: scikit-learn is not installed.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise errors.InvalidArgumentError(
            f"load_digits: expected test_fraction in [0, 1), got {test_fraction!r}")
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError as e:
        raise ImportError("load_digits needs scikit-learn: pip install 'mpiflow[examples]'") from e
    bunch = sklearn_load_digits()
    # Pixel values are integers 0..16.
    x = np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)
    y = np.asarray(bunch.target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    num_test = int(round(len(x) * test_fraction))
    test, train = order[:num_test], order[num_test:]
    return x[train], y[train], x[test], y[test]


def load_mnist(path: str | os.PathLike, flatten: bool = True):
    """Return MNIST from the standard IDX files or an ``mnist.npz`` a user already has.

    mpiflow never downloads data (cluster nodes often have no internet), so this reads
    what is on disk. ``path`` is either a directory holding the four IDX files
    (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
    ``t10k-labels-idx1-ubyte``, each optionally ``.gz``) or ``mnist.npz``, or the path of an
    ``.npz`` file with keys ``x_train``, ``y_train``, ``x_test``, ``y_test``. IDX files win
    when a directory has both.

    Args:
        path: directory or ``.npz`` file.
        flatten: return images as ``[n, 784]`` (True) or ``[n, 28, 28]`` (False).

    Returns:
        ``(x_train, y_train, x_test, y_test)``: float32 images in [0, 1] (integer pixels are
        divided by 255; float pixels are kept as stored), int64 labels.

    Raises:
        NotFoundError: no such path, or a file is missing (the message names it).
        InvalidArgumentError: a bad magic number, wrong rank, or mismatched image and label
            counts (the message names the file).
        DataLossError: a file shorter than its header says.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        found = {key: _find_idx(path, name) for key, name in _MNIST_FILES.items()}
        if all(found.values()):
            arrays = {key: read_idx(file) for key, file in found.items()}
            source = found
        elif os.path.isfile(os.path.join(path, "mnist.npz")):
            return load_mnist(os.path.join(path, "mnist.npz"), flatten=flatten)
        else:
            missing = next(name for key, name in _MNIST_FILES.items() if not found[key])
            raise errors.NotFoundError(
                f"load_mnist: {os.path.join(path, missing)}[.gz] not found, and no mnist.npz "
                f"in {path}")
    elif os.path.isfile(path):
        arrays = _read_npz(path)
        source = dict.fromkeys(arrays, path)
    else:
        raise errors.NotFoundError(f"load_mnist: no such file or directory: {path}")

    out = []
    for split in ("train", "test"):
        xkey, ykey = f"x_{split}", f"y_{split}"
        x, y = arrays[xkey], arrays[ykey]
        if x.ndim != 3 or y.ndim != 1:
            raise errors.InvalidArgumentError(
                f"load_mnist: expected images [n, rows, cols] and labels [n], got {xkey} "
                f"{list(x.shape)} ({source[xkey]}) and {ykey} {list(y.shape)} ({source[ykey]})")
        if len(x) != len(y):
            raise errors.InvalidArgumentError(
                f"load_mnist: {len(x)} images in {source[xkey]} but {len(y)} labels in "
                f"{source[ykey]}")
        out += [_scale_images(x, flatten), y.astype(np.int64)]
    return tuple(out)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Return the array stored in one IDX file, gzip-compressed or not.

    IDX is the format MNIST ships in: a magic number ``0x0000TTDD`` (type code, number of
    dimensions), the dimensions as big-endian int32, then the data. Compression is detected
    from the file's first bytes, not its name, so a renamed file still reads.

    Raises:
        NotFoundError: the file does not exist.
        InvalidArgumentError: a bad magic number (the message names the file).
        DataLossError: the file is shorter than its header says.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError as e:
        raise errors.NotFoundError(f"read_idx: no such file: {path}") from e
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise errors.DataLossError(f"read_idx: corrupt gzip data in {path}: {e}") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        magic = raw[:4].hex() or "(empty file)"
        raise errors.InvalidArgumentError(
            f"read_idx: bad magic number 0x{magic} in {path}: expected 0x0000TTDD with type "
            f"code TT in {{08, 09, 0b, 0c, 0d, 0e}} and DD dimensions")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise errors.DataLossError(
            f"read_idx: {path} ends inside its header: expected {header} bytes, got {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header < count * dtype.itemsize:
        raise errors.DataLossError(
            f"read_idx: {path} is truncated: shape {list(shape)} needs "
            f"{count * dtype.itemsize} data bytes, got {len(raw) - header}")
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header)
    # astype copies, so the result is writable and in native byte order.
    return data.astype(dtype.newbyteorder("=")).reshape(shape)


def shard(arrays: Arrays, num_shards: int, index: int) -> Arrays:
    """Return worker ``index``'s contiguous share of the examples, all shards of equal size.

    Each shard has ``n // num_shards`` examples and the last ``n % num_shards`` are dropped:
    equal shards give every worker the same number of steps per epoch, so no worker waits at
    a sync barrier or collective for a peer that has one more batch. Shuffle before sharding
    (``load_digits`` does) if the data is ordered. Shards are views, not copies.

    Args:
        arrays: one array, or a sequence of arrays with the same first dimension.
        num_shards: number of workers.
        index: this worker's index, in ``[0, num_shards)``.

    Returns:
        The shard of each array, in the same structure (one array or a tuple).

    Raises:
        InvalidArgumentError: bad ``num_shards`` or ``index``, arrays of different lengths,
            or fewer examples than shards.
    """
    single = isinstance(arrays, np.ndarray)
    items = [arrays] if single else [np.asarray(a) for a in arrays]
    if not items:
        raise errors.InvalidArgumentError("shard: expected at least one array, got none")
    if num_shards < 1 or not 0 <= index < num_shards:
        raise errors.InvalidArgumentError(
            f"shard: expected num_shards >= 1 and 0 <= index < num_shards, got "
            f"num_shards={num_shards}, index={index}")
    n = _common_length("shard", items)
    size = n // num_shards
    if size == 0:
        raise errors.InvalidArgumentError(
            f"shard: expected at least num_shards={num_shards} examples, got {n}")
    out = tuple(a[index * size:(index + 1) * size] for a in items)
    return out[0] if single else out


def batches(x: np.ndarray, y: np.ndarray | None, batch_size: int, shuffle: bool = True,
            seed: int | None = None,
            drop_remainder: bool = True
            ) -> Generator[tuple[np.ndarray, np.ndarray | None], None, None]:
    """Yield ``(x_batch, y_batch)`` pairs covering one epoch.

    ``drop_remainder=True`` (the default) skips a last partial batch so every step sees the
    same shapes and every worker runs the same number of steps. Pass a different ``seed``
    each epoch for a new order that is still reproducible; ``seed=None`` draws fresh entropy.

    Args:
        x: inputs, first dimension = examples.
        y: labels with the same first dimension, or None (then ``y_batch`` is None).
        batch_size: examples per batch, >= 1.
        shuffle: visit the examples in a random order (True) or in stored order.
        seed: seed of the shuffle.
        drop_remainder: skip the last batch when it is smaller than ``batch_size``.

    Raises:
        InvalidArgumentError: ``batch_size`` < 1, or ``x`` and ``y`` of different lengths.
    """
    if batch_size < 1:
        raise errors.InvalidArgumentError(f"batches: expected batch_size >= 1, got {batch_size}")
    n = _common_length("batches", [x] if y is None else [x, y])
    order = np.random.default_rng(seed).permutation(n) if shuffle else None
    stop = n - n % batch_size if drop_remainder else n
    for start in range(0, stop, batch_size):
        if order is None:
            part = slice(start, start + batch_size)
        else:
            part = order[start:start + batch_size]
        yield x[part], (None if y is None else y[part])


def _common_length(caller: str, arrays: Sequence[np.ndarray]) -> int:
    lengths = [len(a) for a in arrays]
    if len(set(lengths)) != 1:
        raise errors.InvalidArgumentError(
            f"{caller}: expected arrays with the same number of examples, got lengths {lengths}")
    return lengths[0]


def _find_idx(directory: str, name: str) -> str | None:
    for candidate in (name, name + ".gz"):
        file = os.path.join(directory, candidate)
        if os.path.isfile(file):
            return file
    return None


def _read_npz(path: str) -> dict:
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise errors.InvalidArgumentError(f"load_mnist: {path} is not a readable .npz: {e}") from e
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise errors.InvalidArgumentError(
            f"load_mnist: expected an .npz archive with keys {list(_NPZ_KEYS)}, got a single "
            f"array in {path}")
    with npz:
        missing = [key for key in _NPZ_KEYS if key not in npz.files]
        if missing:
            raise errors.InvalidArgumentError(
                f"load_mnist: {path} lacks keys {missing}: expected {list(_NPZ_KEYS)}, "
                f"got {sorted(npz.files)}")
        try:
            return {key: npz[key] for key in _NPZ_KEYS}
        except ValueError as e:  # object arrays, refused without pickle
            raise errors.InvalidArgumentError(f"load_mnist: cannot read {path}: {e}") from e


def _scale_images(x: np.ndarray, flatten: bool) -> np.ndarray:
    if np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float32) / np.float32(255.0)
    else:
        x = x.astype(np.float32)
    return x.reshape(len(x), -1) if flatten else x


__getattr__ = unsupported.namespace_getattr(__name__, "tf.data")
