"""The checkpoint state file and checkpoint lookup: latest_checkpoint and friends (TF1).

``{dir}/checkpoint`` is TensorFlow's text format::

    model_checkpoint_path: "model.ckpt-20"
    all_model_checkpoint_paths: "model.ckpt-10"
    all_model_checkpoint_paths: "model.ckpt-20"

mpiflow writes paths relative to the directory (so a checkpoint directory can be moved)
and writes the file atomically; relative paths read back are joined to the directory, as
TensorFlow does. Every path the file names must lie inside its directory: one that
points elsewhere is ignored (with a warning), so a restart never restores from, and the
rotation never deletes, files outside. A checkpoint "exists" when its index file does; it
"verifies" when its index reads and every shard it names is there and of the same save.
``latest_checkpoint`` is the newest that verifies. Reading the saved tensors themselves
without a graph lives in ``checkpoint_utils``.
"""

from __future__ import annotations

import glob
import logging
import os
import re

from mpiflow import errors
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import checkpoint_reader as reader

_LOG = logging.getLogger(__name__)

STATE_FILENAME = "checkpoint"
_FIELDS = {"model_checkpoint_path": str, "all_model_checkpoint_paths": str,
           "all_model_checkpoint_timestamps": float, "last_preserved_timestamp": float}
_LINE = re.compile(r'^\s*(\w+)\s*:\s*(?:"((?:[^"\\]|\\.)*)"|([-+0-9.eE]+|inf|nan))\s*$')
_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b'"': b'"', b"'": b"'", b"\\": b"\\"}


class CheckpointState:
    """What the state file says: the latest checkpoint and the ones still kept."""

    def __init__(self, model_checkpoint_path: str = "", all_model_checkpoint_paths=(),
                 all_model_checkpoint_timestamps=(), last_preserved_timestamp: float = 0.0):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = list(all_model_checkpoint_paths)
        self.all_model_checkpoint_timestamps = list(all_model_checkpoint_timestamps)
        self.last_preserved_timestamp = float(last_preserved_timestamp)

    def __eq__(self, other):
        return isinstance(other, CheckpointState) and vars(self) == vars(other)

    def __repr__(self):
        return (f"CheckpointState(model_checkpoint_path={self.model_checkpoint_path!r}, "
                f"all_model_checkpoint_paths={self.all_model_checkpoint_paths!r})")


def _state_path(checkpoint_dir: str, latest_filename) -> str:
    return os.path.join(checkpoint_dir, latest_filename or STATE_FILENAME)


def _quote(text: str) -> str:
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\t", "\\t").replace("\r", "\\r")
    return f'"{body}"'


def _unquote(body: str) -> str:
    """Undo protobuf text escapes; octal/hex escapes are bytes (non-ASCII UTF-8)."""
    def replace(m):
        code = m.group(1)
        if code in _ESCAPES:
            return _ESCAPES[code]
        return bytes([int(code[1:], 16) if code[:1] == b"x" else int(code, 8) & 0xFF])
    raw = re.sub(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|[ntr\"'\\])", replace,
                 body.encode("utf-8"))
    return raw.decode("utf-8", errors="replace")


def _parse_state(text: str, path: str) -> CheckpointState:
    values = {k: [] for k in _FIELDS}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None or m.group(1) not in _FIELDS or \
                (m.group(2) is None) != (_FIELDS[m.group(1)] is float):
            raise errors.DataLossError(
                f"Checkpoint state file '{path}' is malformed at line {number}: {line!r} "
                f"(expected 'field: value' with field one of {sorted(_FIELDS)})")
        field = m.group(1)
        values[field].append(_unquote(m.group(2)) if m.group(2) is not None
                             else float(m.group(3)))
    for field in ("model_checkpoint_path", "last_preserved_timestamp"):
        if len(values[field]) > 1:
            raise errors.DataLossError(
                f"Checkpoint state file '{path}' is malformed: '{field}' appears "
                f"{len(values[field])} times")
    if not values["model_checkpoint_path"]:
        raise errors.DataLossError(
            f"Checkpoint state file '{path}' is malformed: it has no model_checkpoint_path")
    return CheckpointState(values["model_checkpoint_path"][0],
                           values["all_model_checkpoint_paths"],
                           values["all_model_checkpoint_timestamps"],
                           (values["last_preserved_timestamp"] or [0.0])[0])


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None):
    """Return the ``CheckpointState`` of ``checkpoint_dir``, or None if it has no state file.

    Relative paths in the file are returned joined to ``checkpoint_dir``.

    Raises:
        DataLossError: the state file exists but is malformed (the message names it).
    """
    path = _state_path(checkpoint_dir, latest_filename)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fmt.os_error(exc, f"Cannot read checkpoint state file '{path}'") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.DataLossError(
            f"Checkpoint state file '{path}' is malformed: not UTF-8 text") from None
    state = _parse_state(text, path)

    def inside(p):
        full = p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)
        if is_within(full, checkpoint_dir):
            return full
        _LOG.warning("Ignoring %r in checkpoint state file %s: it lies outside the directory",
                     p, path)
        return ""
    state.model_checkpoint_path = inside(state.model_checkpoint_path)
    state.all_model_checkpoint_paths = [
        p for p in map(inside, state.all_model_checkpoint_paths) if p]
    return state


def is_within(path: str, directory: str) -> bool:
    """Whether ``path`` lies inside ``directory`` (links resolved)."""
    root = os.path.realpath(directory or ".")
    return os.path.commonpath([root, os.path.realpath(path)]) == root and \
        os.path.realpath(path) != root


def update_checkpoint_state(save_dir: str, model_checkpoint_path: str,
                            all_model_checkpoint_paths=None, latest_filename=None,
                            all_model_checkpoint_timestamps=None,
                            last_preserved_timestamp=None) -> None:
    """Write the state file of ``save_dir`` atomically (paths in it relative to it).

    ``model_checkpoint_path`` is appended to ``all_model_checkpoint_paths`` when it is not
    already its last entry, as TensorFlow does.
    """
    paths = list(all_model_checkpoint_paths or [])
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    stamps = list(all_model_checkpoint_timestamps or [])
    if stamps and len(stamps) != len(paths):
        raise errors.InvalidArgumentError(
            f"update_checkpoint_state: {len(stamps)} timestamps for {len(paths)} checkpoint "
            "paths")
    lines = [f"model_checkpoint_path: {_quote(_relative(model_checkpoint_path, save_dir))}"]
    lines += [f"all_model_checkpoint_paths: {_quote(_relative(p, save_dir))}" for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in stamps]
    if last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {float(last_preserved_timestamp)!r}")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    fmt.atomic_write(_state_path(save_dir, latest_filename), lambda f: f.write(data))


def _relative(path: str, save_dir: str) -> str:
    """``path`` relative to ``save_dir`` when it lies directly in it, else unchanged."""
    if os.path.abspath(os.path.dirname(path) or ".") == os.path.abspath(save_dir or "."):
        return os.path.basename(path)
    return path


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """Return True when a complete checkpoint (its index file) exists at the prefix."""
    return os.path.isfile(fmt.index_path(os.fspath(checkpoint_prefix)))


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None):
    """Return the prefix of the newest checkpoint in ``checkpoint_dir`` that verifies
    (``verify_checkpoint``), or None when there is none.

    The state file names the newest (and the other kept ones); a checkpoint it names that
    is gone or damaged is passed over, with a warning, for the next older one.
    """
    for prefix, problem in checked_candidates(checkpoint_dir, latest_filename):
        if problem is None:
            return prefix
        _LOG.warning("Passing over checkpoint %s: %s", prefix, problem)
    return None


def checkpoint_candidates(checkpoint_dir: str, latest_filename: str | None = None) -> list:
    """Return the checkpoints of ``checkpoint_dir``, newest first: those the state file
    names (its latest first), then the other indexes in the directory, newest first.

    Without a state file there are none (TensorFlow's rule: nothing was saved here). A
    malformed state file leaves the indexes to tell (with a warning).

    Raises:
        DataLossError: the state file is malformed and no index is in the directory.
    """
    found = glob.glob(os.path.join(glob.escape(checkpoint_dir), "*" + fmt.INDEX_SUFFIX))
    found.sort(key=_mtime, reverse=True)
    try:
        state = get_checkpoint_state(checkpoint_dir, latest_filename)
    except errors.DataLossError as exc:
        if not found:
            raise
        _LOG.warning("%s; looking for checkpoints in %s by their index files", exc.message,
                     checkpoint_dir)
        state = CheckpointState()
    if state is None:
        return []
    named = [state.model_checkpoint_path] + state.all_model_checkpoint_paths[::-1]
    out = []
    for prefix in named + [p[:-len(fmt.INDEX_SUFFIX)] for p in found]:
        if prefix and os.path.abspath(prefix) not in {os.path.abspath(p) for p in out}:
            out.append(prefix)
    return out


def checked_candidates(checkpoint_dir: str, latest_filename: str | None = None):
    """Yield ``(prefix, None or why it does not verify)`` for each candidate, newest first."""
    for prefix in checkpoint_candidates(checkpoint_dir, latest_filename):
        yield prefix, verify_checkpoint(prefix)


def verify_checkpoint(prefix: str) -> str | None:
    """Return None if checkpoint ``prefix`` is whole: its index reads and every shard it
    names exists and belongs to the same save; else what is wrong. (Each piece's CRC-32 is
    checked when it is restored.)"""
    try:
        index = reader.read_index(prefix)
        for name in index.get("shards", []):
            reader.check_shard(prefix, index, name)
    except errors.OpError as exc:
        return exc.message
    return None


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def get_checkpoint_mtimes(checkpoint_prefixes) -> list:
    """Return the modification time of each existing checkpoint's index."""
    return [os.path.getmtime(fmt.index_path(p)) for p in checkpoint_prefixes
            if checkpoint_exists(p)]


def remove_checkpoint(checkpoint_prefix: str) -> None:
    """Delete a checkpoint's files: the index first, so it stops existing at once, then
    its shards and any temporary files a killed save of it left."""
    for path in [fmt.index_path(checkpoint_prefix)] + \
            sorted(glob.glob(fmt.shard_glob(checkpoint_prefix))) + \
            sorted(glob.glob(fmt.temp_glob(checkpoint_prefix))):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            _LOG.warning("Ignoring: failed to delete %s: %s", path, exc)
