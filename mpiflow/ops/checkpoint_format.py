"""The checkpoint file format: names, slice specs, atomic writes, shards and the index.

A checkpoint with prefix ``P`` is ``P.index.json`` plus one
``P.shard-KKKKK-of-NNNNN.<save id>.npz`` per shard. A shard is an uncompressed
``np.savez`` archive: one array per saved piece under a sanitized key, and ``manifest``,
the UTF-8 JSON (as uint8) of what each key holds (checkpoint name, slice spec, dtype,
shape, CRC-32 of its bytes) and of the save it belongs to. The index maps every checkpoint
name to its pieces ``{file, key, slice, shape, dtype, crc32}``; a piece is the whole tensor
(slice "") or one slice of it (TensorFlow's slice spec, e.g. "10 4 0,5:-": full shape,
then ``start,length`` or ``-`` per dimension), so a variable can be read back under any
other partitioning.

A checkpoint is one unit: every save has its own id, in its shards' names and manifests
and in the index, which is written last. A save to a prefix that already holds a
checkpoint writes its shards beside the old ones and replaces the index in one rename, so
the old checkpoint stays whole until the new one is, and a reader can tell a shard of
another save (or a damaged piece) and refuse it. Every file is written to a temporary
name in its directory, flushed, fsynced and renamed over the final name, so a reader sees
the old file or the new one, never a torn one. Reading lives in ``checkpoint_reader``; the
ops in ``io_ops``. Imports only the framework and errors.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import socket
import time
import uuid
import zlib

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes

FORMAT = "mpiflow-checkpoint"
FORMAT_VERSION = 2           # 2: save ids and CRC-32 digests (1 is still read)
INDEX_SUFFIX = ".index.json"
MANIFEST_KEY = "manifest"
_SHARD_GLOB = ".shard-?????-of-?????*.npz"
TEMP_MARK = ".tmp-"          # temporary files: <final name>.tmp-<pid>-<random>
SAVING_SUFFIX = ".saving"    # <prefix>.<save id>.saving: a save in progress (mark_saving)
_SAVING_GLOB = "." + "[0-9a-f]" * 16 + SAVING_SUFFIX
# A save's marker written on another host (whose process cannot be looked up) counts as a
# save in progress for this long: its files are then a dead save's leftovers.
STALE_SAVE_S = 6 * 3600.0


# -- names -------------------------------------------------------------------------------

def index_path(prefix: str) -> str:
    return prefix + INDEX_SUFFIX


def new_save_id() -> str:
    """A fresh identity for one save (hex, in the shards' names and the index)."""
    return uuid.uuid4().hex[:16]


def shard_path(prefix: str, shard: int, num_shards: int, save_id: str = "") -> str:
    """The file of shard ``shard`` of a save (format 1 had no save id in the name)."""
    tag = f".{save_id}" if save_id else ""
    return f"{prefix}.shard-{shard:05d}-of-{num_shards:05d}{tag}.npz"


def shard_glob(prefix: str) -> str:
    """A glob pattern matching every shard file of ``prefix`` (``prefix`` escaped)."""
    return glob.escape(prefix) + _SHARD_GLOB


def temp_glob(prefix: str) -> str:
    """A glob pattern matching temporary files that writes to ``prefix`` left behind."""
    return glob.escape(prefix) + ".*" + TEMP_MARK + "*"


def remove_save(prefix: str, save_id: str) -> None:
    """Delete the shards save ``save_id`` of ``prefix`` wrote (a save that failed)."""
    for path in glob.glob(shard_glob(prefix)):
        if not path.endswith(f".{save_id}.npz"):
            continue
        try:
            os.remove(path)
        except OSError:
            pass


def mark_saving(prefix: str, save_id: str) -> str:
    """Announce save ``save_id`` of ``prefix`` to the other processes that save into its
    directory (another job, a second worker saving too): a small file naming this host and
    process, beside the shards, kept until the save ends. Their clean-up passes over the
    files of a save so marked while it lives. Returns the marker's path."""
    path = f"{prefix}.{save_id}{SAVING_SUFFIX}"
    data = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode("utf-8")
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise os_error(exc, f"Cannot write checkpoint file '{path}'") from exc
    return path


def unmark_saving(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _live_saves(directory: str, before: float) -> list:
    """The markers (``mark_saving``) in ``directory`` of saves that may still be running;
    the markers of dead ones (written before ``before``) are deleted."""
    live, now, host = [], time.time(), socket.gethostname()
    for marker in glob.glob(os.path.join(glob.escape(directory), "*" + _SAVING_GLOB)):
        try:
            written = os.path.getmtime(marker)
            with open(marker, "rb") as f:
                writer = json.loads(f.read().decode("utf-8"))
            pid = int(writer["pid"])
            dead = now - written > STALE_SAVE_S or \
                (writer["host"] == host and not _process_exists(pid))
        except FileNotFoundError:
            continue                    # that save just ended
        except (OSError, ValueError, KeyError, TypeError):
            dead = False                # being written, or not ours to judge: leave it
            written = now
        if not dead:
            live.append(os.path.basename(marker)[:-len(SAVING_SUFFIX)])
        elif written < before:
            unmark_saving(marker)
    return live


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True                     # someone else's process
    return True


def remove_leftovers(directory: str, before: float, keep=(), own: str = "") -> None:
    """Delete what dead saves left in ``directory``: temporary files, and shards no index
    names (written before ``before``, a time: a save in progress is left alone); never a
    path in ``keep``, nor a file of a save another process is making there (its marker,
    ``mark_saving``, names a live process, or is younger than ``STALE_SAVE_S`` where
    written on another host). ``own`` is the id of the save cleaning up, which it passes
    by."""
    indexed = set(keep)
    damaged = []                # prefixes whose index cannot be read: keep their shards
    for index in glob.glob(os.path.join(glob.escape(directory), "*" + INDEX_SUFFIX)):
        try:
            with open(index, "rb") as f:
                named = json.loads(f.read().decode("utf-8")).get("shards", [])
            indexed.update(os.path.join(directory, n) for n in named if isinstance(n, str))
        except (OSError, ValueError, AttributeError, TypeError):
            damaged.append(os.path.basename(index)[:-len(INDEX_SUFFIX)] + ".shard-")
    live = [m for m in _live_saves(directory, before) if not own or not m.endswith(own)]
    # A live save's shards and their temporaries carry its id; its index's temporary and
    # the state file's, written at its end, carry only its prefix and the directory.
    live_ids = [f".{marker[-16:]}.npz" for marker in live]
    live_indexes = [marker[:-17] + INDEX_SUFFIX + TEMP_MARK for marker in live]
    candidates = glob.glob(os.path.join(glob.escape(directory), "*" + TEMP_MARK + "*")) + \
        glob.glob(os.path.join(glob.escape(directory), "*" + _SHARD_GLOB))
    for path in candidates:
        name = os.path.basename(path)
        if path in indexed or not _LEFTOVER.search(name) or \
                any(name.startswith(prefix) for prefix in damaged + live_indexes) or \
                any(save in name for save in live_ids) or \
                (live and name.startswith("checkpoint" + TEMP_MARK)):
            continue
        try:
            if os.path.getmtime(path) < before:
                os.remove(path)
        except OSError:
            pass                # gone already, or not ours to remove


# What mpiflow's saves write, and nothing a user might keep beside them: a shard of a save
# (with its id), or a temporary file of a shard, an index or the state file.
_LEFTOVER = re.compile(r"(\.shard-\d{5}-of-\d{5}\.[0-9a-f]{16}\.npz"
                       r"|\.shard-\d{5}-of-\d{5}(\.[0-9a-f]{16})?\.npz\.tmp-\d+-[0-9a-f]{8}"
                       r"|\.index\.json\.tmp-\d+-[0-9a-f]{8}|^checkpoint\.tmp-\d+-[0-9a-f]{8})$")


def digest(array: np.ndarray) -> int:
    """CRC-32 of ``array``'s bytes in C order (what a shard stores)."""
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8))

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

    __slots__ = ("full_shape", "length", "start")

    def __init__(self, full_shape, start, length):
        self.full_shape = [int(d) for d in full_shape]
        self.start = [int(s) for s in start]
        self.length = [int(n) for n in length]

    @classmethod
    def whole(cls, shape) -> SliceSpec:
        shape = [int(d) for d in shape]
        return cls(shape, [0] * len(shape), shape)

    @classmethod
    def parse(cls, spec: str) -> SliceSpec:
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
    def of(cls, spec: str, shape) -> SliceSpec:
        """The box of a piece saved with ``spec`` ("" = whole) and shape ``shape``."""
        return cls.parse(spec) if spec else cls.whole(shape)

    def __str__(self):
        full = " ".join(str(d) for d in self.full_shape)
        return full + " " + ":".join(f"{s},{n}" for s, n in zip(self.start, self.length))


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

def write_shard(prefix: str, save_id: str, shard: int, num_shards: int, names, slices,
                lookups, arrays, op=None) -> bytes:
    """Write one shard file of save ``save_id`` to ``prefix`` atomically; return its
    manifest (JSON bytes).

    ``lookups``: per array, "mod:<parts>" for a part of a table looked up with "mod"
    (kept in the manifest and the index as the piece's "lookup"), else "".
    """
    path = shard_path(prefix, shard, num_shards, save_id)
    members, entries = {}, []
    lookups = list(lookups) or [""] * len(names)
    for i, (name, spec, lookup, array) in enumerate(zip(names, slices, lookups, arrays)):
        key = sanitize_key(i, name)
        members[key] = array
        entry = {"key": key, "name": name, "slice": spec, "crc32": digest(array),
                 "dtype": dtypes.from_numpy(array).name, "shape": list(array.shape)}
        if lookup:
            entry["lookup"] = lookup
        entries.append(entry)
    manifest = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "shard": shard,
                           "num_shards": num_shards, "file": os.path.basename(path),
                           "save_id": save_id,
                           "writer": {"host": socket.gethostname(), "pid": os.getpid()},
                           "tensors": entries}, sort_keys=True).encode("utf-8")
    members[MANIFEST_KEY] = np.frombuffer(manifest, dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **members), op)
    return manifest


def index_document(manifests, mpiflow_version: str, save_id: str) -> dict:
    """Build the index of save ``save_id`` from the manifests its shards returned.

    Raises:
        InternalError: a manifest of another save (the shards and the save disagree).
    """
    tensors, files = {}, []
    for raw in manifests:
        manifest = json.loads(bytes(raw).decode("utf-8"))
        if manifest.get("save_id") != save_id:
            raise errors.InternalError(
                f"Shard '{manifest.get('file')}' reports save {manifest.get('save_id')!r} "
                f"while save {save_id!r} was being indexed")
        files.append(manifest["file"])
        for entry in manifest["tensors"]:
            piece = {"file": manifest["file"], "key": entry["key"], "slice": entry["slice"],
                     "shape": entry["shape"], "dtype": entry["dtype"],
                     "crc32": entry["crc32"]}
            if entry.get("lookup"):
                piece["lookup"] = entry["lookup"]
            tensors.setdefault(entry["name"], []).append(piece)
    return {"format": FORMAT, "version": FORMAT_VERSION, "mpiflow_version": mpiflow_version,
            "save_id": save_id, "saved_at": time.time(), "num_shards": len(files),
            "shards": sorted(files), "tensors": tensors}
