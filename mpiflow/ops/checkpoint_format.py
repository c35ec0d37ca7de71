"""The checkpoint file format: shard files, the index, slice specs, atomic writes.

A checkpoint with prefix ``P`` is ``P.index.json`` plus one ``P.shard-KKKKK-of-NNNNN.npz``
per shard. A shard is an uncompressed ``np.savez`` archive: one array per saved piece under
a sanitized key, and ``manifest``, the UTF-8 JSON (as uint8) of what each key holds
(checkpoint name, slice spec, dtype, shape). The index maps every checkpoint name to its
pieces ``{file, key, slice, shape, dtype}``; a piece is the whole tensor (slice "") or one
slice of it (TensorFlow's slice spec, e.g. "10 4 0,5:-": full shape, then ``start,length``
or ``-`` per dimension), so a variable can be read back under any other partitioning.

Every file is written to a temporary name in its directory, flushed, fsynced and renamed
over the final name, so a reader sees the old file or the new one, never a torn one.
Everything is read with ``allow_pickle=False``. Owns no ops (``io_ops`` does) and imports
only the framework and errors.
"""

from __future__ import annotations

import difflib
import errno
import glob
import json
import os
import re
import socket
import uuid
import zipfile
import zlib

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes

FORMAT = "mpiflow-checkpoint"
FORMAT_VERSION = 1
INDEX_SUFFIX = ".index.json"
MANIFEST_KEY = "manifest"
_SHARD_PATTERN = ".shard-{:05d}-of-{:05d}.npz"
_SHARD_GLOB = ".shard-?????-of-?????.npz"
TEMP_MARK = ".tmp-"          # temporary files: <final name>.tmp-<pid>-<random>


# -- names -------------------------------------------------------------------------------

def index_path(prefix: str) -> str:
    return prefix + INDEX_SUFFIX


def shard_path(prefix: str, shard: int, num_shards: int) -> str:
    return prefix + _SHARD_PATTERN.format(shard, num_shards)


def shard_glob(prefix: str) -> str:
    """A glob pattern matching every shard file of ``prefix`` (``prefix`` escaped)."""
    return glob.escape(prefix) + _SHARD_GLOB


def temp_glob(prefix: str) -> str:
    """A glob pattern matching temporary files that writes to ``prefix`` left behind."""
    return glob.escape(prefix) + ".*" + TEMP_MARK + "*"


def encode_path(path: str) -> np.ndarray:
    """Return ``path`` as the uint8 tensor value (its UTF-8 bytes) that path inputs take."""
    if not isinstance(path, (str, os.PathLike)):
        raise errors.InvalidArgumentError(
            f"A checkpoint path must be a str or os.PathLike, got {type(path).__name__}")
    return np.frombuffer(os.fspath(path).encode("utf-8"), dtype=np.uint8).copy()


def decode_path(value, op=None) -> str:
    """Invert ``encode_path``; an empty or non-UTF-8 value is an InvalidArgumentError."""
    raw = np.ascontiguousarray(value, dtype=np.uint8).tobytes()
    try:
        path = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.op_error(errors.InvalidArgumentError, "Checkpoint path is not UTF-8", op,
                              got=repr(raw[:80])) from None
    if not path:
        raise errors.op_error(errors.InvalidArgumentError, "Checkpoint path is empty", op)
    return path


def sanitize_key(index: int, name: str) -> str:
    """An npz member name for piece ``index`` of ``name``: unique, readable, no '/'."""
    return f"{index}_{re.sub(r'[^0-9A-Za-z_.-]+', '_', name)[:80]}"


# -- slice specs -------------------------------------------------------------------------

class SliceSpec:
    """One box of a full tensor: ``full_shape``, ``start`` and ``length`` per dimension."""

    __slots__ = ("full_shape", "start", "length")

    def __init__(self, full_shape, start, length):
        self.full_shape = [int(d) for d in full_shape]
        self.start = [int(s) for s in start]
        self.length = [int(n) for n in length]

    @classmethod
    def whole(cls, shape) -> "SliceSpec":
        shape = [int(d) for d in shape]
        return cls(shape, [0] * len(shape), shape)

    @classmethod
    def parse(cls, spec: str) -> "SliceSpec":
        """Parse TensorFlow's "d0 d1 ... s0,n0:s1,n1:..." (``-`` = the whole dimension)."""
        parts = spec.split(" ")
        try:
            full = [int(d) for d in parts[:-1]]
            boxes = parts[-1].split(":")
            if len(boxes) != len(full) or not full:
                raise ValueError("one start,length (or '-') per dimension")
            start, length = [], []
            for box, dim in zip(boxes, full):
                if box == "-":
                    start.append(0)
                    length.append(dim)
                else:
                    s, n = box.split(",")
                    start.append(int(s))
                    length.append(int(n))
        except ValueError as exc:
            raise errors.InvalidArgumentError(
                f"Malformed slice spec {spec!r}: expected TensorFlow's 'd0 d1 ... "
                f"s0,n0:s1,n1:...' ({exc})") from None
        if any(d < 0 or s < 0 or n < 0 or s + n > d
               for d, s, n in zip(full, start, length)):
            raise errors.InvalidArgumentError(
                f"Slice spec {spec!r} reaches outside its full shape {full}")
        return cls(full, start, length)

    @classmethod
    def of(cls, spec: str, shape) -> "SliceSpec":
        """The box of a piece saved with ``spec`` ("" = whole) and shape ``shape``."""
        return cls.parse(spec) if spec else cls.whole(shape)

    def __str__(self):
        full = " ".join(str(d) for d in self.full_shape)
        return full + " " + ":".join(f"{s},{n}" for s, n in zip(self.start, self.length))


def _intersection(a: SliceSpec, b: SliceSpec):
    """(index into a's array, index into b's array, elements) of where a and b meet."""
    lo = np.maximum(a.start, b.start).astype(np.int64)
    hi = np.minimum(np.add(a.start, a.length), np.add(b.start, b.length)).astype(np.int64)
    if np.any(hi <= lo):
        return None
    in_a = tuple(slice(int(l - s), int(h - s)) for l, h, s in zip(lo, hi, a.start))
    in_b = tuple(slice(int(l - s), int(h - s)) for l, h, s in zip(lo, hi, b.start))
    return in_a, in_b, int(np.prod(hi - lo))


# -- atomic writes -----------------------------------------------------------------------

def atomic_write(path: str, write, op=None) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it to ``path``.

    The data is flushed and fsynced before the rename and the directory after it, so a
    crash leaves the previous ``path`` (or none) and at worst a stray temporary file.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        # os.open with 0o666 (not mkstemp's 0o600): the file gets the umask's permissions.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_directory(directory)
    except OSError as exc:
        raise os_error(exc, f"Cannot write checkpoint file '{path}'", op) from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return          # some filesystems do not open directories; the rename stands
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_OS_ERRORS = {errno.ENOENT: errors.NotFoundError, errno.EACCES: errors.PermissionDeniedError,
              errno.EPERM: errors.PermissionDeniedError, errno.EROFS: errors.PermissionDeniedError,
              errno.ENOSPC: errors.ResourceExhaustedError,
              errno.EDQUOT: errors.ResourceExhaustedError}


def os_error(exc: OSError, what: str, op=None) -> errors.OpError:
    """Turn an OSError into the mpiflow error of its kind (TensorFlow's mapping)."""
    cls = _OS_ERRORS.get(exc.errno, errors.UnknownError)
    return errors.op_error(cls, f"{what}: {exc.strerror or exc}", op)


def write_json(path: str, document: dict, op=None) -> None:
    data = json.dumps(document, indent=1, sort_keys=True).encode("utf-8")
    atomic_write(path, lambda f: f.write(data), op)


# -- shards ------------------------------------------------------------------------------

def write_shard(prefix: str, shard: int, num_shards: int, names, slices, arrays,
                op=None) -> bytes:
    """Write one shard file of ``prefix`` atomically; return its manifest (JSON bytes)."""
    path = shard_path(prefix, shard, num_shards)
    members, entries = {}, []
    for i, (name, spec, array) in enumerate(zip(names, slices, arrays)):
        key = sanitize_key(i, name)
        members[key] = array
        entries.append({"key": key, "name": name, "slice": spec,
                        "dtype": dtypes.from_numpy(array).name, "shape": list(array.shape)})
    manifest = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "shard": shard,
                           "num_shards": num_shards, "file": os.path.basename(path),
                           "writer": {"host": socket.gethostname(), "pid": os.getpid()},
                           "tensors": entries}, sort_keys=True).encode("utf-8")
    members[MANIFEST_KEY] = np.frombuffer(manifest, dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **members), op)
    return manifest


def index_document(manifests, mpiflow_version: str) -> dict:
    """Build the index of a checkpoint from the manifests its shards returned."""
    tensors, files = {}, []
    for raw in manifests:
        manifest = json.loads(bytes(raw).decode("utf-8"))
        files.append(manifest["file"])
        for entry in manifest["tensors"]:
            tensors.setdefault(entry["name"], []).append(
                {"file": manifest["file"], "key": entry["key"], "slice": entry["slice"],
                 "shape": entry["shape"], "dtype": entry["dtype"]})
    return {"format": FORMAT, "version": FORMAT_VERSION, "mpiflow_version": mpiflow_version,
            "num_shards": len(files), "shards": sorted(files), "tensors": tensors}


# -- reading -----------------------------------------------------------------------------

class _IndexCache:
    """Parsed indexes by file identity: restoring N variables reads the index once, and a
    replaced index (a new inode or mtime) is read again."""

    def __init__(self, size: int = 4):
        self._size = size
        self._entries = {}

    def get(self, path: str, op=None) -> dict:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise errors.op_error(errors.NotFoundError,
                                  f"Checkpoint index '{path}' does not exist", op) from None
        except OSError as exc:
            raise os_error(exc, f"Cannot read checkpoint index '{path}'", op) from exc
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._entries.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        index = _parse_index(path, op)
        if len(self._entries) >= self._size:
            self._entries.pop(next(iter(self._entries)))
        self._entries[path] = (identity, index)
        return index


_INDEX_CACHE = _IndexCache()


def read_index(prefix: str, op=None) -> dict:
    """Return the index of checkpoint ``prefix``.

    Raises:
        NotFoundError: there is no index file.
        DataLossError: the index is truncated, not JSON, or not an mpiflow index.
    """
    return _INDEX_CACHE.get(index_path(prefix), op)


def _parse_index(path: str, op) -> dict:
    try:
        with open(path, "rb") as f:
            index = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        raise os_error(exc, f"Cannot read checkpoint index '{path}'", op) from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise errors.op_error(errors.DataLossError, f"Checkpoint index '{path}' is truncated "
                              f"or corrupted ({exc})", op) from None
    if not (isinstance(index, dict) and index.get("format") == FORMAT and
            isinstance(index.get("tensors"), dict) and _pieces_well_formed(index["tensors"])):
        raise errors.op_error(errors.DataLossError, f"Checkpoint index '{path}' is corrupted: "
                              f"it is not an {FORMAT} index", op)
    if index.get("version", 0) > FORMAT_VERSION:
        raise errors.op_error(errors.UnimplementedError, f"Checkpoint index '{path}' has "
                              "format version", op, expected=f"<= {FORMAT_VERSION}",
                              got=index["version"])
    return index


def _pieces_well_formed(tensors: dict) -> bool:
    for pieces in tensors.values():
        if not isinstance(pieces, list) or not pieces:
            return False
        for p in pieces:
            if not (isinstance(p, dict) and isinstance(p.get("file"), str) and
                    isinstance(p.get("key"), str) and isinstance(p.get("slice"), str) and
                    isinstance(p.get("dtype"), str) and isinstance(p.get("shape"), list)):
                return False
    return True


def find_pieces(index: dict, prefix: str, name: str, op=None) -> list:
    """Return the saved pieces of ``name``; a missing name lists the closest names."""
    pieces = index["tensors"].get(name)
    if pieces is None:
        close = difflib.get_close_matches(name, list(index["tensors"]), n=3, cutoff=0.5)
        hint = f" (close keys: {', '.join(repr(c) for c in close)})" if close else ""
        raise errors.op_error(errors.NotFoundError, f"Key '{name}' not found in checkpoint "
                              f"'{prefix}'{hint}", op)
    return pieces


def read_slice(prefix: str, name: str, spec: str, dtype, shape, op=None) -> np.ndarray:
    """Assemble the ``spec`` slice of checkpoint tensor ``name`` from its saved pieces.

    Args:
        spec: the slice of the full tensor wanted ("" = the whole tensor).
        dtype: the DType wanted.
        shape: the shape wanted (a list with None for unknown dimensions, or None).

    Raises:
        NotFoundError: ``name`` or one of its shard files is missing.
        InvalidArgumentError: the saved dtype or full shape differs from the one wanted.
        DataLossError: a shard or the index is corrupted, or does not cover the slice.
    """
    index = read_index(prefix, op)
    pieces = find_pieces(index, prefix, name, op)
    boxes = [_piece_box(p, prefix, name, op) for p in pieces]
    saved_full = boxes[0].full_shape
    if any(b.full_shape != saved_full for b in boxes):
        raise errors.op_error(errors.DataLossError, f"Checkpoint '{prefix}' holds pieces of "
                              f"'{name}' with different full shapes", op,
                              got=[b.full_shape for b in boxes])
    dtype = dtypes.as_dtype(dtype)
    saved_dtype = pieces[0]["dtype"]
    if any(p["dtype"] != dtype.name for p in pieces):
        raise errors.op_error(errors.InvalidArgumentError, f"Dtype of '{name}' in checkpoint "
                              f"'{prefix}' does not match the variable", op,
                              expected=dtype.name, got=saved_dtype)
    want = _wanted_box(spec, shape, saved_full, name, prefix, op)
    out = np.empty(want.length, dtype=dtype.np_dtype)
    covered = 0
    for piece, box in zip(pieces, boxes):
        meet = _intersection(want, box)
        if meet is None:
            continue
        into, outof, count = meet
        out[into] = _load_piece(prefix, piece, name, op)[outof]
        covered += count
    if covered != out.size:
        raise errors.op_error(errors.DataLossError, f"Checkpoint '{prefix}' does not cover "
                              f"slice {want} of '{name}'", op,
                              expected=f"{out.size} elements", got=covered)
    return out


def _piece_box(piece, prefix, name, op) -> SliceSpec:
    try:
        box = SliceSpec.of(piece["slice"], piece["shape"])
    except errors.InvalidArgumentError as exc:
        raise errors.op_error(errors.DataLossError, f"Checkpoint index of '{prefix}' is "
                              f"corrupted for '{name}': {exc.message}", op) from None
    if box.length != [int(d) for d in piece["shape"]]:
        raise errors.op_error(errors.DataLossError, f"Checkpoint index of '{prefix}' is "
                              f"corrupted for '{name}': slice {piece['slice']!r} has shape",
                              op, expected=box.length, got=piece["shape"])
    return box


def _wanted_box(spec, shape, saved_full, name, prefix, op) -> SliceSpec:
    want = SliceSpec.parse(spec) if spec else None
    full = want.full_shape if want is not None else shape
    if full is None:
        full = saved_full
    if len(full) != len(saved_full) or any(
            d is not None and d != s for d, s in zip(full, saved_full)):
        raise errors.op_error(errors.InvalidArgumentError, f"Shape of '{name}' in checkpoint "
                              f"'{prefix}' does not match the variable", op,
                              expected=f"shape {list(full)}", got=f"shape {saved_full}")
    if want is None:
        return SliceSpec.whole(saved_full)
    if shape is not None and len(shape) == len(want.length) and any(
            d is not None and d != n for d, n in zip(shape, want.length)):
        raise errors.op_error(errors.InvalidArgumentError, f"Slice {spec!r} of '{name}' does "
                              "not match the variable", op, expected=f"shape {list(shape)}",
                              got=f"shape {want.length}")
    return want


def _load_piece(prefix, piece, name, op) -> np.ndarray:
    path = os.path.join(os.path.dirname(prefix), piece["file"])
    try:
        with np.load(path, allow_pickle=False) as npz:
            manifest = json.loads(npz[MANIFEST_KEY].tobytes().decode("utf-8"))
            array = npz[piece["key"]]
    except FileNotFoundError:
        raise errors.op_error(errors.NotFoundError, f"Shard file '{path}' of checkpoint "
                              f"'{prefix}' (holding '{name}') does not exist", op) from None
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError, UnicodeDecodeError,
            zlib.error) as exc:
        raise _corrupt(path, exc, op) from None
    except OSError as exc:
        raise os_error(exc, f"Cannot read shard file '{path}'", op) from exc
    if not isinstance(manifest, dict):
        raise _corrupt(path, ValueError("its manifest is not a JSON object"), op)
    entry = next((e for e in manifest.get("tensors", ()) if e.get("key") == piece["key"]), None)
    expected = {"name": name, "slice": piece["slice"], "dtype": piece["dtype"],
                "shape": list(piece["shape"])}
    found = {"name": entry and entry.get("name"), "slice": entry and entry.get("slice"),
             "dtype": _dtype_name(array),
             "shape": list(array.shape)}
    if entry is None or found != expected:
        raise errors.op_error(errors.DataLossError, f"Shard file '{path}' does not match the "
                              f"index of checkpoint '{prefix}' for key '{piece['key']}'", op,
                              expected=expected, got=found)
    return array


def _dtype_name(array) -> str:
    try:
        return dtypes.from_numpy(array).name
    except (errors.MpiflowError, TypeError):
        return str(array.dtype)


def _corrupt(path, exc, op) -> errors.OpError:
    return errors.op_error(errors.DataLossError, f"Shard file '{path}' is truncated or "
                           f"corrupted ({type(exc).__name__}: {exc})", op)
