"""Read checkpoints: the index and the shards' contents (each cached by file identity),
and any slice of a saved tensor.

A tensor is assembled from whatever pieces were saved (whole, or slices of another
partitioning): each piece that meets the wanted box is copied in with one numpy slice
assignment. A shard's manifest and the position of every piece in it are read once per
file, and a piece is then read straight from its place, so restoring N variables reads
each file's directory once, not N times. Files are loaded with ``allow_pickle=False`` and
checked against the index: a shard of another save, a piece whose CRC-32 differs, or any
damage is a DataLossError naming the file; a missing name a NotFoundError listing close
names; a shape or dtype that differs from the variable's an InvalidArgumentError.
"""

from __future__ import annotations

import difflib
import json
import os
import struct
import threading
import zipfile
import zlib

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.ops.checkpoint_format import (
    FORMAT, FORMAT_VERSION, MANIFEST_KEY, SliceSpec, digest, index_path, os_error)


def _intersection(a: SliceSpec, b: SliceSpec):
    """(index into a's array, index into b's array, elements) of where a and b meet."""
    lo = np.maximum(a.start, b.start).astype(np.int64)
    hi = np.minimum(np.add(a.start, a.length), np.add(b.start, b.length)).astype(np.int64)
    if np.any(hi <= lo):
        return None
    in_a = tuple(slice(int(l - s), int(h - s)) for l, h, s in zip(lo, hi, a.start))
    in_b = tuple(slice(int(l - s), int(h - s)) for l, h, s in zip(lo, hi, b.start))
    return in_a, in_b, int(np.prod(hi - lo))


class _FileCache:
    """Parsed files by identity (inode, mtime, size): restoring N variables parses each
    file once, and a replaced file is parsed again. Kernels may run on several threads,
    hence the lock."""

    def __init__(self, parse, size: int):
        self._parse = parse
        self._size = size
        self._entries = {}
        self._lock = threading.Lock()

    def get(self, path: str, what: str, op=None):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise errors.op_error(errors.NotFoundError,
                                  f"Checkpoint {what} '{path}' does not exist", op) from None
        except OSError as exc:
            raise os_error(exc, f"Cannot read checkpoint {what} '{path}'", op) from exc
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._entries.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        parsed = self._parse(path, op)
        with self._lock:
            if len(self._entries) >= self._size:
                self._entries.pop(next(iter(self._entries)))
            self._entries[path] = (identity, parsed)
        return parsed


def read_index(prefix: str, op=None) -> dict:
    """Return the index of checkpoint ``prefix``.

    Raises:
        NotFoundError: there is no index file.
        DataLossError: the index is truncated, not JSON, or not an mpiflow index.
    """
    return _INDEXES.get(index_path(prefix), "index", op)


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
            isinstance(index.get("version"), int) and isinstance(index.get("tensors"), dict)
            and _pieces_well_formed(index["tensors"])):
        raise errors.op_error(errors.DataLossError, f"Checkpoint index '{path}' is corrupted: "
                              f"it is not an {FORMAT} index", op)
    if index["version"] > FORMAT_VERSION:
        raise errors.op_error(errors.UnimplementedError, f"Checkpoint index '{path}' has a "
                              "newer format version", op, expected=f"<= {FORMAT_VERSION}",
                              got=index["version"])
    return index


def _pieces_well_formed(tensors: dict) -> bool:
    for pieces in tensors.values():
        if not isinstance(pieces, list) or not pieces:
            return False
        for p in pieces:
            if not (isinstance(p, dict) and isinstance(p.get("file"), str) and
                    os.path.basename(p["file"]) == p["file"] and
                    isinstance(p.get("key"), str) and isinstance(p.get("slice"), str) and
                    isinstance(p.get("dtype"), str) and isinstance(p.get("shape"), list)):
                return False
    return True


def saved_key(index: dict, prefix: str, name: str, fallback: str = "", op=None) -> str:
    """Return the key the checkpoint holds ``name`` under: ``name``, else ``fallback``
    (a variable's ``_restore_fallback``: a mode with one copy of it saved the other key);
    the one place that decides, for the Saver's pre-check and for the restore kernel.

    Raises:
        NotFoundError: neither is saved; the message lists the closest keys.
    """
    tensors = index["tensors"]
    if name in tensors:
        return name
    if fallback and fallback in tensors:
        return fallback
    close = difflib.get_close_matches(name, list(tensors), n=3, cutoff=0.5)
    hint = f" (close keys: {', '.join(repr(c) for c in close)})" if close else ""
    also = f" (nor '{fallback}', read in its place)" if fallback else ""
    raise errors.op_error(errors.NotFoundError, f"Key '{name}'{also} not found in "
                          f"checkpoint '{prefix}'{hint}", op)


def read_slice(prefix: str, name: str, spec: str, dtype, shape, op=None,
               lookup: str = "", fallback: str = "") -> np.ndarray:
    """Assemble the ``spec`` slice of checkpoint tensor ``name`` from its saved pieces.

    Args:
        spec: the slice of the full tensor wanted ("" = the whole tensor).
        dtype: the DType wanted.
        shape: the shape wanted (a list with None for unknown dimensions, or None).
        lookup: how a table's parts are addressed now: "mod:<parts>" or "div:<parts>"
            for a part of a table, "" for a plain variable, None to read the saved pieces
            as they are (``load_variable``: no graph, no parts).
        fallback: the tensor read where the checkpoint has no ``name`` ("": none).

    Raises:
        NotFoundError: ``name`` or one of its shard files is missing.
        InvalidArgumentError: the saved dtype or full shape differs from the one wanted,
            or a table looked up with "mod" (when saved or now) changes its part count.
        DataLossError: a shard or the index is corrupted, or does not cover the slice.
    """
    index = read_index(prefix, op)
    name = saved_key(index, prefix, name, fallback, op)
    pieces = index["tensors"][name]
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
    _check_mod_layout(pieces, boxes, want, lookup, name, prefix, op)
    out = np.empty(want.length, dtype=dtype.np_dtype)
    covered = 0
    for piece, box in zip(pieces, boxes):
        meet = _intersection(want, box)
        if meet is None:
            continue
        into, outof, count = meet
        out[into] = _load_piece(prefix, index, piece, name, op)[outof]
        covered += count
    if covered != out.size:
        raise errors.op_error(errors.DataLossError, f"Checkpoint '{prefix}' does not cover "
                              f"slice {want} of '{name}'", op,
                              expected=f"{out.size} elements", got=covered)
    return out


def _check_mod_layout(pieces, boxes, want, lookup, name, prefix, op) -> None:
    """Refuse to move a "mod"-addressed table between part counts.

    With partition_strategy="mod", id k lives in part k % n at row k // n: the rows of a
    part are not a range of the full variable, so copying ranges into another number of
    parts would hand every id another id's row. Either side looked up with "mod" must
    then have the very parts of the other.
    """
    if lookup is None:
        return
    saved = next((p["lookup"] for p in pieces if p.get("lookup")), "")
    saved_way, now_way = saved.split(":")[0], lookup.split(":")[0]
    if "mod" not in (saved_way, now_way):
        return
    same_part = any(b.start == want.start and b.length == want.length for b in boxes)
    saved_parts = len(pieces)
    # No lookup recorded now: one whole variable is one part; of a table split in parts
    # that nothing looks up the count is not known here, but a part that is one of the
    # saved parts, as each of them must be, restores as it was.
    whole = list(want.length) == list(want.full_shape)
    wanted_parts = int(lookup.split(":")[1]) if lookup else (1 if whole else None)
    if same_part and "div" not in (saved_way, now_way) and \
            wanted_parts in (saved_parts, None):
        return
    ways = f"'{saved_way or 'none'}' when saved, '{now_way or 'none'}' now"
    into = "other parts" if wanted_parts is None else f"{wanted_parts} part(s)"
    raise errors.op_error(
        errors.InvalidArgumentError, f"Cannot restore table '{name}' from checkpoint "
        f"'{prefix}' saved in {saved_parts} part(s) into {into} (lookups: "
        f"{ways}): with partition_strategy='mod' an id's row depends on the number of parts, "
        "so each id would get another id's row; restore into the same parts with the same "
        "lookup, or look the table up with partition_strategy='div' (TrainingMode's tables "
        "do), whose checkpoints restore into any number of parts", op,
        expected=f"{saved_parts} part(s) looked up as saved", got=into)


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


class _Shard:
    """What one shard file holds: its manifest, its pieces by key, and where each piece's
    array starts in the file (None where it is not stored plainly)."""

    __slots__ = ("entries", "manifest", "offsets", "path")

    def __init__(self, path, manifest, offsets):
        self.path = path
        self.manifest = manifest
        self.entries = {e.get("key"): e for e in manifest.get("tensors", ())
                        if isinstance(e, dict)}
        self.offsets = offsets

    def read(self, key: str) -> np.ndarray:
        offset = self.offsets.get(key)
        if offset is None:                  # compressed, or written by other means
            with np.load(self.path, allow_pickle=False) as npz:
                return npz[key]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return np.lib.format.read_array(f, allow_pickle=False)


def _parse_shard(path, op) -> _Shard:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            with archive.open(MANIFEST_KEY + ".npy") as f:
                raw = np.lib.format.read_array(f, allow_pickle=False)
        manifest = json.loads(raw.tobytes().decode("utf-8"))
        offsets = {}
        with open(path, "rb") as f:
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED or \
                        not info.filename.endswith(".npy"):
                    continue
                f.seek(info.header_offset)
                header = f.read(30)
                if len(header) != 30 or header[:4] != b"PK\x03\x04":
                    raise zipfile.BadZipFile(f"bad local header of {info.filename!r}")
                name_length, extra_length = struct.unpack("<HH", header[26:30])
                offsets[info.filename[:-4]] = info.header_offset + 30 + name_length + \
                    extra_length
    except FileNotFoundError:
        raise errors.op_error(errors.NotFoundError, f"Shard file '{path}' does not exist",
                              op) from None
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError, UnicodeDecodeError,
            zlib.error, struct.error) as exc:
        raise _corrupt(path, exc, op) from None
    except OSError as exc:
        raise os_error(exc, f"Cannot read shard file '{path}'", op) from exc
    if not isinstance(manifest, dict):
        raise _corrupt(path, ValueError("its manifest is not a JSON object"), op)
    return _Shard(path, manifest, offsets)


_INDEXES = _FileCache(_parse_index, size=4)
_SHARDS = _FileCache(_parse_shard, size=64)


def check_shard(prefix: str, index: dict, file: str, holding: str = "", op=None) -> _Shard:
    """Return shard ``file`` of checkpoint ``prefix`` after checking it belongs to the save
    its index describes.

    Raises:
        NotFoundError: the file is missing.
        DataLossError: it is damaged, or of another save (a mix of two checkpoints).
    """
    path = os.path.join(os.path.dirname(prefix), file)
    try:
        shard = _SHARDS.get(path, "shard file", op)
    except errors.NotFoundError:
        held = f" (holding '{holding}')" if holding else ""
        raise errors.op_error(errors.NotFoundError, f"Shard file '{path}' of checkpoint "
                              f"'{prefix}'{held} does not exist", op) from None
    save_id = index.get("save_id")
    if save_id is not None and shard.manifest.get("save_id") != save_id:
        raise errors.op_error(
            errors.DataLossError, f"Shard file '{path}' belongs to another save than the "
            f"index of checkpoint '{prefix}' (save {shard.manifest.get('save_id')!r}, not "
            f"{save_id!r}): the checkpoint is a mix of two saves; restore another one", op)
    return shard


def _load_piece(prefix, index, piece, name, op) -> np.ndarray:
    shard = check_shard(prefix, index, piece["file"], name, op)
    path = shard.path
    entry = shard.entries.get(piece["key"])
    try:
        array = _as_saved_dtype(shard.read(piece["key"]), piece["dtype"])
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError, zlib.error) as exc:
        raise _corrupt(path, exc, op) from None
    except OSError as exc:
        raise os_error(exc, f"Cannot read shard file '{path}'", op) from exc
    expected = {"name": name, "slice": piece["slice"], "dtype": piece["dtype"],
                "shape": list(piece["shape"])}
    found = {"name": entry and entry.get("name"), "slice": entry and entry.get("slice"),
             "dtype": _dtype_name(array),
             "shape": list(array.shape)}
    if entry is None or found != expected:
        raise errors.op_error(errors.DataLossError, f"Shard file '{path}' does not match the "
                              f"index of checkpoint '{prefix}' for key '{piece['key']}'", op,
                              expected=expected, got=found)
    if "crc32" in piece and digest(array) != piece["crc32"]:
        raise errors.op_error(
            errors.DataLossError, f"Shard file '{path}' of checkpoint '{prefix}' is damaged: "
            f"the bytes of '{name}' (key '{piece['key']}') do not match their CRC-32 in the "
            "index", op)
    return array


def _as_saved_dtype(array: np.ndarray, name: str) -> np.ndarray:
    """Return ``array`` viewed as the dtype the index names for it.

    An npy file stores ml_dtypes' floats (bfloat16) as a plain void of their size ('|V2'),
    so they load as raw bytes; a view gives back the very bits that were saved.
    """
    if array.dtype.kind != "V" or array.dtype.fields is not None:
        return array
    try:
        saved = dtypes.as_dtype(name).np_dtype
    except errors.InvalidArgumentError:
        return array       # reported as a mismatch with the index by the caller
    if saved.kind != "V" or saved.itemsize != array.dtype.itemsize:
        return array
    return array.view(saved)


def _dtype_name(array) -> str:
    try:
        return dtypes.from_numpy(array).name
    except (errors.MpiflowError, TypeError):
        return str(array.dtype)


def _corrupt(path, exc, op) -> errors.OpError:
    return errors.op_error(errors.DataLossError, f"Shard file '{path}' is truncated or "
                           f"corrupted ({type(exc).__name__}: {exc})", op)
