"""``mf.summary``: scalar and histogram summaries, written for TensorBoard with tensorboardX.

mpiflow has no string dtype, so a summary is not a serialized ``Summary`` proto made by an
op. It is a ``Summary``: a namedtuple of the tensors to record whose class carries the kind
("scalar" or "histogram") and tag of each one. ``Session.run`` flattens a namedtuple to its
tensors and rebuilds the same class with their values, so the result of
``sess.run(merged)`` still knows every tag, and ``FileWriter.add_summary(result, step)``
turns it into tensorboardX records::

    mf.summary.scalar("loss", loss)
    merged = mf.summary.merge_all()
    writer = mf.summary.FileWriter("logs")
    writer.add_summary(sess.run(merged), step)

``merge`` only concatenates bundles (no op runs), and a summary costs a step nothing but
the fetch of its tensors. Owns summaries, the event-file writer and reader; tensorboardX is
imported only when a writer or reader is made. Does not import ``mpiflow.train``.
"""

from __future__ import annotations

import re
import struct
import threading
from typing import Iterator, NamedTuple

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Graph, GraphKeys, Tensor, get_default_graph
from mpiflow.ops.constant_ops import convert_to_tensor


class SummarySpec(NamedTuple):
    """What one entry of a summary records: its kind and its TensorBoard tag."""

    kind: str
    tag: str


class Summary(tuple):
    """A fetchable bundle of summary tensors (or, once run, of their values).

    Each bundle has its own subclass whose ``specs`` give the kind and tag of every entry;
    being a namedtuple (it has ``_fields``), it comes back from ``Session.run`` as the same
    class holding numpy values.
    """

    __slots__ = ()
    _specs: tuple = ()
    _fields: tuple = ()

    def __new__(cls, *values):
        if len(values) != len(cls._specs):
            raise errors.InvalidArgumentError(
                f"Summary with tags {list(cls.tags)} holds {len(cls._specs)} values, got "
                f"{len(values)}")
        return tuple.__new__(cls, values)

    @property
    def specs(self) -> tuple:
        return self._specs

    @property
    def tags(self) -> tuple:
        return tuple(s.tag for s in self._specs)

    def items(self):
        """Return ``(SummarySpec, tensor or value)`` pairs."""
        return zip(self._specs, self)

    def is_evaluated(self) -> bool:
        """Return whether this holds values (the result of ``Session.run``), not tensors."""
        return not any(isinstance(v, Tensor) for v in self)

    def __repr__(self):
        entries = ", ".join(f"{s.kind} {s.tag!r}" for s in self._specs)
        state = "values" if self.is_evaluated() else "tensors"
        return f"<mf.summary.Summary of {state}: {entries}>"


def _make_summary(specs, values) -> Summary:
    specs = tuple(SummarySpec(*s) for s in specs)
    cls = type("Summary", (Summary,), {
        "__slots__": (), "_specs": specs,
        "_fields": tuple(f"value_{i}" for i in range(len(specs))),
        "__module__": __name__})
    return cls(*values)


KINDS = ("scalar", "histogram")


def _add(kind: str, name: str, tensor, collections, check) -> Summary:
    tensor = convert_to_tensor(tensor)
    graph = tensor.graph
    tag = graph.unique_name(name)
    if not (tensor.dtype.is_floating or tensor.dtype.is_integer or tensor.dtype.is_bool):
        raise errors.InvalidArgumentError(
            f"mf.summary.{kind}('{tag}') needs a numeric tensor, got '{tensor.name}' of "
            f"dtype {tensor.dtype.name}")
    check(tag, tensor)
    summary = _make_summary([SummarySpec(kind, tag)], [tensor])
    for key in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        graph.add_to_collection(key, summary)
    return summary


def _check_scalar(tag, tensor):
    if tensor.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"mf.summary.scalar('{tag}') needs a scalar: expected shape (), got "
            f"'{tensor.name}' of shape {tensor.shape}")


def scalar(name: str, tensor, collections=None, family=None) -> Summary:
    """Record the scalar ``tensor`` under tag ``name`` (prefixed by the name scope).

    Args:
        name: the tag; made unique in the graph as op names are (``loss``, ``loss_1``).
        tensor: a numeric scalar Tensor or Variable.
        collections: graph collections to add the summary to (default [SUMMARIES]).
        family: optional tag prefix (TensorBoard groups tags by it).

    Returns:
        a ``Summary`` to fetch with ``Session.run`` or merge.

    Raises:
        InvalidArgumentError: the tensor is not numeric or not a scalar.
    """
    return _add("scalar", f"{family}/{name}" if family else name, tensor, collections,
                _check_scalar)


def histogram(name: str, values, collections=None, family=None) -> Summary:
    """Record the distribution of ``values`` (any numeric shape) under tag ``name``."""
    return _add("histogram", f"{family}/{name}" if family else name, values, collections,
                lambda tag, tensor: None)


def merge(inputs, collections=None, name=None) -> Summary:
    """Return one ``Summary`` holding every entry of ``inputs`` (a list of Summaries).

    Raises:
        InvalidArgumentError: ``inputs`` is empty, holds something that is not a
            Summary, or two entries have the same tag.
    """
    inputs = list(inputs)
    if not inputs:
        raise errors.InvalidArgumentError("mf.summary.merge needs at least one summary")
    specs, tensors = [], []
    for item in inputs:
        if not isinstance(item, Summary):
            raise errors.InvalidArgumentError(
                f"mf.summary.merge takes summaries made by mf.summary.scalar/histogram/"
                f"merge, got {item!r}")
        for spec, tensor in item.items():
            specs.append(spec)
            tensors.append(tensor)
    tags = [s.tag for s in specs]
    duplicates = sorted({t for t in tags if tags.count(t) > 1})
    if duplicates:
        raise errors.InvalidArgumentError(
            f"mf.summary.merge: duplicate tags {duplicates}: each tag may appear once")
    merged = _make_summary(specs, tensors)
    graph = next((t.graph for t in tensors if isinstance(t, Tensor)), None)
    for key in collections or ():
        (graph or get_default_graph()).add_to_collection(key, merged)
    return merged


def merge_all(key: str = GraphKeys.SUMMARIES, scope=None, name=None) -> Summary | None:
    """Merge every summary in collection ``key`` of the default graph; None if there is none."""
    graph = get_default_graph()
    found = [s for s in graph.get_collection(key) if isinstance(s, Summary)]
    if scope is not None:
        pattern = re.compile(scope)
        found = [s for s in found if any(pattern.match(t) for t in s.tags)]
    return merge(found) if found else None


# -- writing ---------------------------------------------------------------------------------
def _tensorboardx():
    try:
        import tensorboardX
    except ImportError as exc:
        raise errors.UnimplementedError(
            f"mf.summary needs tensorboardX to write or read event files ({exc}): "
            "pip install 'tensorboardX>=2.6'") from None
    return tensorboardX


def _write_scalar(writer, tag, value, step, walltime):
    array = np.asarray(value)
    if array.size != 1:
        raise errors.InvalidArgumentError(
            f"Summary scalar '{tag}': expected one value, got an array of shape "
            f"{array.shape}")
    writer.add_scalar(tag, float(array.reshape(())), step, walltime)


def _write_histogram(writer, tag, value, step, walltime):
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.size == 0:
        return  # TensorBoard cannot show an empty histogram; TF writes none either
    writer.add_histogram(tag, array, step, walltime=walltime)


_WRITERS = {"scalar": _write_scalar, "histogram": _write_histogram}


class FileWriter:
    """Write summaries (and the graph) to an event file in ``logdir`` for TensorBoard.

    Args:
        logdir: the directory (created if needed); each writer makes a new event file.
        graph: optional ``mf.Graph`` to write, so TensorBoard shows it.
        max_queue, flush_secs, filename_suffix: as tensorboardX's ``SummaryWriter``.
    """

    def __init__(self, logdir, graph: Graph | None = None, max_queue: int = 10,
                 flush_secs: float = 120, filename_suffix: str = ""):
        self._logdir = str(logdir)
        self._writer = _tensorboardx().SummaryWriter(
            logdir=self._logdir, max_queue=max_queue, flush_secs=flush_secs,
            filename_suffix=filename_suffix)
        if graph is not None:
            self.add_graph(graph)

    def get_logdir(self) -> str:
        return self._logdir

    def add_summary(self, summary, global_step=None, walltime=None) -> None:
        """Write the value of a summary, i.e. what ``Session.run(summary)`` returned.

        Also accepts a tensorboardX/TensorBoard ``Summary`` protocol buffer.

        Raises:
            InvalidArgumentError: ``summary`` is the unevaluated Summary (tensors), or not
                a summary at all, or an entry has a kind with no writer.
        """
        step = None if global_step is None else int(global_step)
        if hasattr(summary, "SerializeToString"):
            self._writer.file_writer.add_summary(summary, step, walltime)
            return
        if not isinstance(summary, Summary):
            raise errors.InvalidArgumentError(
                f"FileWriter.add_summary expects the result of sess.run(summary) for a "
                f"summary from mf.summary, got {type(summary).__name__}")
        if not summary.is_evaluated():
            raise errors.InvalidArgumentError(
                f"FileWriter.add_summary got the summary tensors {list(summary.tags)}, not "
                "their values: pass the result of sess.run(summary)")
        for spec, value in summary.items():
            write = _WRITERS.get(spec.kind)
            if write is None:
                raise errors.InvalidArgumentError(
                    f"Summary '{spec.tag}' has kind {spec.kind!r}: expected one of "
                    f"{sorted(_WRITERS)}")
            write(self._writer, spec.tag, value, step, walltime)

    def add_scalar(self, tag: str, value, global_step=None, walltime=None) -> None:
        """Write one scalar under ``tag`` (not a graph op; for values computed in Python)."""
        _write_scalar(self._writer, tag, value, global_step, walltime)

    def add_histogram(self, tag: str, values, global_step=None, walltime=None) -> None:
        _write_histogram(self._writer, tag, values, global_step, walltime)

    def add_graph(self, graph: Graph, global_step=None) -> None:
        """Write ``graph``'s ops (name, type, inputs, device) as a GraphDef for TensorBoard."""
        _tensorboardx()
        from tensorboardX.proto import event_pb2, graph_pb2, node_def_pb2
        nodes = [node_def_pb2.NodeDef(name=n["name"], op=n["op"], input=n["input"],
                                      device=n.get("device", ""))
                 for n in graph.as_graph_def()["node"]]
        event = event_pb2.Event(graph_def=graph_pb2.GraphDef(node=nodes).SerializeToString())
        self._writer.file_writer.add_event(event, global_step)

    def add_session_log(self, status: str, global_step=None) -> None:
        """Write a SessionLog event: "start", "stop" or "checkpoint".

        A "start" at step N makes TensorBoard drop events of this directory past step N
        written before it, so a job restarted from a checkpoint draws no stale tail.
        """
        _tensorboardx()
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        codes = {"start": SessionLog.START, "stop": SessionLog.STOP,
                 "checkpoint": SessionLog.CHECKPOINT}
        if status not in codes:
            raise errors.InvalidArgumentError(
                f"FileWriter.add_session_log: status must be one of {sorted(codes)}, got "
                f"{status!r}")
        event = Event(session_log=SessionLog(status=codes[status]))
        self._writer.file_writer.add_event(event, global_step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<mf.summary.FileWriter {self._logdir!r}>"


class FileWriterCache:
    """One FileWriter per log directory, shared by the hooks of a process."""

    _writers: dict = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, logdir) -> FileWriter:
        """Return the writer of ``logdir``, making it (with the default graph) on first use."""
        key = str(logdir)
        with cls._lock:
            writer = cls._writers.get(key)
            if writer is None:
                writer = cls._writers[key] = FileWriter(key, graph=get_default_graph())
            return writer

    @classmethod
    def clear(cls) -> None:
        """Close and forget every cached writer."""
        with cls._lock:
            writers, cls._writers = list(cls._writers.values()), {}
        for writer in writers:
            writer.close()


# -- reading ---------------------------------------------------------------------------------
def summary_iterator(path) -> Iterator:
    """Yield the ``Event`` protocol buffers of one event file, checking each record's CRC.

    Raises:
        DataLossError: a record is truncated or its checksum does not match.
    """
    _tensorboardx()
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c
    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise errors.DataLossError(f"Truncated record header in {path}")
            length, length_crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != length_crc:
                raise errors.DataLossError(f"Corrupt record length in {path}")
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                raise errors.DataLossError(f"Truncated record in {path}")
            if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                raise errors.DataLossError(f"Corrupt record data in {path}")
            event = Event()
            event.ParseFromString(data)
            yield event
