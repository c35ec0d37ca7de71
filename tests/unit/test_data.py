"""Tests of mpiflow.data: loaders, IDX reading, sharding and batching."""

import gzip
import struct

import numpy as np
import pytest

from mpiflow import data, errors


def write_idx(path, array, type_code=0x08, compress=False):
    """Write ``array`` as an IDX file by hand (independent of the reader under test)."""
    dtype = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4"}[type_code]
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + np.asarray(array, dtype=dtype).tobytes()
    with (gzip.open if compress else open)(path, "wb") as f:
        f.write(raw)


def tiny_mnist(rng, n_train=6, n_test=4):
    return (rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
            rng.integers(0, 10, n_train, dtype=np.uint8),
            rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
            rng.integers(0, 10, n_test, dtype=np.uint8))


def write_mnist_dir(directory, arrays, compress=False):
    suffix = ".gz" if compress else ""
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    for name, array in zip(names, arrays):
        write_idx(directory / (name + suffix), array, compress=compress)


def assert_mnist_matches(loaded, arrays, flatten=True):
    x_train, y_train, x_test, y_test = loaded
    for got, want in [(x_train, arrays[0]), (x_test, arrays[2])]:
        assert got.dtype == np.float32
        expected = want.astype(np.float32) / 255
        np.testing.assert_allclose(got, expected.reshape(len(want), -1) if flatten else expected)
    for got, want in [(y_train, arrays[1]), (y_test, arrays[3])]:
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_load_digits_shapes_dtypes_and_ranges():
    x_train, y_train, x_test, y_test = data.load_digits(test_fraction=0.2, seed=0)
    assert x_train.shape[1:] == x_test.shape[1:] == (64,)
    assert len(x_train) == len(y_train) and len(x_test) == len(y_test)
    assert len(x_train) + len(x_test) == 1797
    assert len(x_test) == round(1797 * 0.2)
    assert x_train.dtype == x_test.dtype == np.float32
    assert y_train.dtype == y_test.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() == 1.0
    assert set(np.unique(y_train)) == set(range(10))


def test_load_digits_is_deterministic_per_seed():
    first, again = data.load_digits(seed=3), data.load_digits(seed=3)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    other = data.load_digits(seed=4)
    assert not np.array_equal(first[1], other[1])


def test_load_digits_split_is_disjoint_and_complete():
    from sklearn.datasets import load_digits as sklearn_load_digits

    x_train, _, x_test, _ = data.load_digits(test_fraction=0.25, seed=1)
    all_x = np.concatenate([x_train, x_test])
    reference = sklearn_load_digits().data.astype(np.float32) / 16
    np.testing.assert_array_equal(np.sort(all_x, axis=0), np.sort(reference, axis=0))


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_load_digits_rejects_bad_test_fraction(fraction):
    with pytest.raises(errors.InvalidArgumentError, match="test_fraction"):
        data.load_digits(test_fraction=fraction)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_load_mnist_reads_idx_files(tmp_path, rng, compress):
    arrays = tiny_mnist(rng)
    write_mnist_dir(tmp_path, arrays, compress=compress)
    assert_mnist_matches(data.load_mnist(tmp_path), arrays)
    assert_mnist_matches(data.load_mnist(str(tmp_path), flatten=False), arrays, flatten=False)


@pytest.mark.parametrize("type_code, dtype", [(0x08, np.uint8), (0x0C, np.int32),
                                              (0x0D, np.float32)])
def test_read_idx_round_trips_each_type(tmp_path, rng, type_code, dtype):
    array = (rng.random((3, 2, 5)) * 100).astype(dtype)
    write_idx(tmp_path / "a.idx", array, type_code=type_code)
    got = data.read_idx(tmp_path / "a.idx")
    assert got.dtype == dtype and got.dtype.isnative
    np.testing.assert_array_equal(got, array)
    got[0, 0, 0] = 1  # writable, not a view of the file's bytes


def test_load_mnist_reads_npz_file_and_directory(tmp_path, rng):
    arrays = tiny_mnist(rng)
    np.savez(tmp_path / "mnist.npz", **dict(zip(["x_train", "y_train", "x_test", "y_test"],
                                               arrays)))
    assert_mnist_matches(data.load_mnist(tmp_path / "mnist.npz"), arrays)
    assert_mnist_matches(data.load_mnist(tmp_path), arrays)


def test_load_mnist_npz_missing_key_names_file_and_key(tmp_path, rng):
    arrays = tiny_mnist(rng)
    np.savez(tmp_path / "mnist.npz", x_train=arrays[0], y_train=arrays[1], x_test=arrays[2])
    with pytest.raises(errors.InvalidArgumentError, match=r"mnist\.npz lacks keys \['y_test'\]"):
        data.load_mnist(tmp_path / "mnist.npz")


def test_load_mnist_npz_refuses_pickled_objects(tmp_path):
    objects = np.array([{"a": 1}], dtype=object)
    np.savez(tmp_path / "mnist.npz", x_train=objects, y_train=objects, x_test=objects,
             y_test=objects)
    with pytest.raises(errors.InvalidArgumentError, match="mnist.npz"):
        data.load_mnist(tmp_path / "mnist.npz")


def test_load_mnist_missing_file_is_named(tmp_path, rng):
    write_mnist_dir(tmp_path, tiny_mnist(rng))
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(errors.NotFoundError, match="t10k-labels-idx1-ubyte"):
        data.load_mnist(tmp_path)
    with pytest.raises(errors.NotFoundError, match="no such file or directory"):
        data.load_mnist(tmp_path / "absent")


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_read_idx_bad_magic_number_names_file(tmp_path, compress):
    path = tmp_path / "train-images-idx3-ubyte"
    with (gzip.open if compress else open)(path, "wb") as f:
        f.write(b"\x12\x34\x08\x03" + bytes(16))
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"bad magic number 0x12340803 in .*train-images-idx3-ubyte"):
        data.read_idx(path)


def test_read_idx_truncated_file_is_data_loss(tmp_path):
    path = tmp_path / "short"
    write_idx(path, np.zeros((4, 28, 28), np.uint8))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(errors.DataLossError, match="truncated"):
        data.read_idx(path)


def test_load_mnist_image_label_count_mismatch_names_both_files(tmp_path, rng):
    arrays = list(tiny_mnist(rng))
    arrays[1] = arrays[1][:-1]
    write_mnist_dir(tmp_path, arrays)
    with pytest.raises(errors.InvalidArgumentError,
                       match="6 images in .*train-images.* but 5 labels in .*train-labels"):
        data.load_mnist(tmp_path)


@pytest.mark.parametrize("num_shards", [1, 3, 4, 7])
def test_shard_gives_disjoint_equal_shards_covering_the_data(num_shards):
    x = np.arange(30).reshape(15, 2)
    y = np.arange(15)
    shards = [data.shard((x, y), num_shards, i) for i in range(num_shards)]
    size = 15 // num_shards
    for xs, ys in shards:
        assert len(xs) == len(ys) == size
        np.testing.assert_array_equal(xs[:, 0] // 2, ys)  # rows stay paired
    seen = np.concatenate([ys for _, ys in shards])
    assert len(np.unique(seen)) == len(seen)  # disjoint
    np.testing.assert_array_equal(np.sort(seen), np.arange(size * num_shards))  # covering


def test_shard_keeps_structure_and_returns_views():
    x = np.arange(10)
    part = data.shard(x, 2, 1)
    assert isinstance(part, np.ndarray)
    np.testing.assert_array_equal(part, [5, 6, 7, 8, 9])
    assert np.shares_memory(part, x)
    assert isinstance(data.shard([x, x], 2, 0), tuple)


@pytest.mark.parametrize("arrays, num_shards, index, match", [
    (np.arange(10), 0, 0, "num_shards"),
    (np.arange(10), 2, 2, "index"),
    (np.arange(10), 2, -1, "index"),
    (np.arange(3), 4, 0, "at least num_shards=4 examples, got 3"),
    ((np.arange(3), np.arange(4)), 1, 0, r"lengths \[3, 4\]"),
])
def test_shard_rejects_bad_arguments(arrays, num_shards, index, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        data.shard(arrays, num_shards, index)


def test_batches_sizes_with_and_without_remainder():
    x, y = np.arange(10).reshape(10, 1), np.arange(10)
    sizes = [len(xb) for xb, _ in data.batches(x, y, 4, shuffle=False)]
    assert sizes == [4, 4]
    sizes = [len(xb) for xb, _ in data.batches(x, y, 4, shuffle=False, drop_remainder=False)]
    assert sizes == [4, 4, 2]
    order = np.concatenate([yb for _, yb in data.batches(x, y, 4, shuffle=False,
                                                          drop_remainder=False)])
    np.testing.assert_array_equal(order, np.arange(10))


def test_batches_shuffle_is_seeded_and_keeps_pairs():
    x, y = np.arange(20) * 10, np.arange(20)

    def epoch(seed):
        got = list(data.batches(x, y, 5, seed=seed))
        for xb, yb in got:
            np.testing.assert_array_equal(xb, yb * 10)
        return np.concatenate([yb for _, yb in got])

    np.testing.assert_array_equal(epoch(1), epoch(1))
    assert not np.array_equal(epoch(1), epoch(2))
    assert not np.array_equal(epoch(1), np.arange(20))
    np.testing.assert_array_equal(np.sort(epoch(1)), np.arange(20))


def test_batches_without_labels_yields_none():
    batches = list(data.batches(np.arange(6), None, 3, shuffle=False))
    assert [yb for _, yb in batches] == [None, None]


def test_batches_rejects_bad_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="batch_size"):
        next(data.batches(np.arange(4), np.arange(4), 0))
    with pytest.raises(errors.InvalidArgumentError, match=r"lengths \[4, 3\]"):
        next(data.batches(np.arange(4), np.arange(3), 2))
