"""Event files for TensorBoard: ``FileWriter`` writes summaries' values, the graph, run
metadata and session logs; ``summary_iterator`` reads the records back, checking their
checksums.

Records are tensorboardX's protocol buffers (scalars built by its summary functions,
histograms here with TensorFlow's buckets, images as TensorFlow's PNGs), framed by its ``EventsWriter`` in the calling
thread. tensorboardX is imported only when a writer or reader is made.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from mpiflow import errors
from mpiflow.framework.graph import Graph, get_default_graph
from mpiflow.summary import images
from mpiflow.summary.summaries import Summary


def _tensorboardx():
    try:
        import tensorboardX
    except ImportError as exc:
        raise errors.UnimplementedError(
            f"mf.summary needs tensorboardX to write or read event files ({exc}): "
            "pip install 'tensorboardX>=2.6'") from None
    return tensorboardX


@functools.lru_cache(maxsize=1)
def _bucket_limits() -> np.ndarray:
    """TensorFlow's default histogram buckets, by their right edges: the largest negative
    float, then +-1e-12 growing by 10% up to 1e20 and 0, then the largest float (so a
    value beyond +-1e20, a diverging model's, is counted in the first or last bucket)."""
    edges = []
    edge = 1e-12
    while edge < 1e20:
        edges.append(edge)
        edge *= 1.1
    largest = float(np.finfo(np.float64).max)
    return np.array([-largest] + [-e for e in reversed(edges)] + [0.0] + edges + [largest])


def _scalar_proto(tag, value):
    array = np.asarray(value)
    if array.size != 1:
        raise errors.InvalidArgumentError(
            f"Summary scalar '{tag}': expected one value, got an array of shape "
            f"{array.shape}")
    return _tensorboardx().summary.scalar(tag, float(array.reshape(())))


def _histogram_proto(tag, value):
    """The histogram of ``value`` as TensorFlow's histogram op records it.

    A value goes to the first bucket whose limit (right edge) is above it. As in
    TensorFlow's records, only the buckets that hold values are listed, each run of empty
    buckets as one empty bucket at the run's last limit, so a record holds a few dozen
    buckets, not the 1,500 of the default range. An empty ``value`` gives TensorFlow's
    empty histogram (no values, one empty bucket, min and max the largest floats).
    NaN or infinite values are refused with TensorFlow's error (its histogram op raises
    it): their bins, minimum, maximum and sum would be NaN, which TensorBoard cannot
    draw, so a diverged model would go unnoticed."""
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    finite = np.isfinite(array)
    if not finite.all():
        what = "Nan in summary histogram" if np.isnan(array).any() else \
            "Infinity in Histogram"
        raise errors.InvalidArgumentError(
            f"{what} for: {tag} ({int(array.size - finite.sum())} of its {array.size} "
            "values are not finite)")
    limits = _bucket_limits()
    index = np.minimum(np.searchsorted(limits, array, side="right"), limits.size - 1)
    counts = np.bincount(index, minlength=limits.size).astype(np.float64)
    # A bucket is listed if it holds values or ends a run of empty ones.
    holds = counts > 0
    keep = holds.copy()
    keep[:-1] |= holds[1:]
    keep[-1] = True
    largest = float(limits[-1])
    pb = _tensorboardx().proto.summary_pb2
    with np.errstate(over="ignore"):     # values near the largest float: inf, as in TF
        sum_squares = float(np.dot(array, array))
    histo = pb.HistogramProto(
        min=float(array.min()) if array.size else largest,
        max=float(array.max()) if array.size else -largest,
        num=float(array.size), sum=float(array.sum()),
        sum_squares=sum_squares,
        bucket_limit=limits[keep].tolist(), bucket=counts[keep].tolist())
    return pb.Summary(value=[pb.Summary.Value(tag=tag, histo=histo)])


def _image_proto(tag, value, max_outputs):
    """The first ``max_outputs`` images of ``value`` as TensorFlow's image summary op
    records them: uint8 pixels (see ``images.to_uint8``) as PNG files, tagged
    "tag/image" where ``max_outputs`` is 1, else "tag/image/<i>"."""
    batch = images.check_images(tag, value)[:max_outputs]
    pb = _tensorboardx().proto.summary_pb2
    values = []
    for i, one in enumerate(batch):
        pixels = images.to_uint8(one)
        height, width, channels = pixels.shape
        picture = pb.Summary.Image(height=height, width=width, colorspace=channels,
                                   encoded_image_string=images.encode_png(pixels))
        values.append(pb.Summary.Value(
            tag=f"{tag}/image" if max_outputs == 1 else f"{tag}/image/{i}", image=picture))
    return pb.Summary(value=values)


# kind -> (SummarySpec, value) -> Summary protocol buffer
_PROTOS = {"scalar": lambda spec, value: _scalar_proto(spec.tag, value),
           "histogram": lambda spec, value: _histogram_proto(spec.tag, value),
           "image": lambda spec, value: _image_proto(spec.tag, value, spec.max_outputs)}

# TF1's event protocol buffers, as a script builds them itself (``tf.Summary(value=[
# tf.Summary.Value(tag="accuracy", simple_value=acc)])`` for a value computed in Python,
# ``tf.SessionLog(status=tf.SessionLog.START)``): tensorboardX's, which write the same
# records. Top-level names of ``mf`` (``mf.summary.Summary`` is mpiflow's bundle).
EVENT_PROTOS = {"Summary": "summary_pb2", "SessionLog": "event_pb2", "Event": "event_pb2"}


def event_proto(name: str):
    """The protocol buffer class ``tf.<name>`` of ``EVENT_PROTOS`` (imports tensorboardX)."""
    _tensorboardx()
    import importlib
    return getattr(importlib.import_module(f"tensorboardX.proto.{EVENT_PROTOS[name]}"),
                   name)


class FileWriter:
    """Write summaries (and the graph) to an event file in ``logdir`` for TensorBoard.

    Records are written in this thread with tensorboardX's ``EventsWriter``. (tensorboardX's ``SummaryWriter`` hands them to a thread
    through a queue, so its ``flush`` does not guarantee they are on disk.) Writes are
    buffered and reach the file on ``flush``/``close``, when ``max_queue`` records are
    pending or ``flush_secs`` have passed since the last flush, and at exit.

    Args:
        logdir: the directory (created if needed); each writer, and each ``reopen``,
            makes a new event file, ``events.out.tfevents.<seconds>.<host>.<pid><suffix>``
            (``<pid>.<n>`` for a second one of this process in the same second).
        graph: optional ``mf.Graph`` to write, so TensorBoard shows it.
        max_queue, flush_secs, filename_suffix: as in TensorFlow's FileWriter.
    """

    def __init__(self, logdir, graph: Graph | None = None, max_queue: int = 10,
                 flush_secs: float = 120, filename_suffix: str = ""):
        tbx = _tensorboardx()
        self._event_pb2 = tbx.proto.event_pb2
        self._logdir = str(logdir)
        self._filename_suffix = filename_suffix or ""
        self._events = self._open_events_file()
        self._max_queue = max_queue
        self._flush_secs = flush_secs
        self._pending = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self._lock = threading.Lock()
        _OPEN_WRITERS.add(self)
        if graph is not None:
            self.add_graph(graph)

    def _open_events_file(self):
        """Open a new event file, ``events.out.tfevents.<seconds>.<host>.<pid>[.<n>]
        <suffix>``. The process id after the host name: ranks of one host that open
        writers on one directory in the same second (a chief and its elastic successor)
        get two files. ``.<n>`` where this process already has a file of that name (a
        second writer of the directory, or ``reopen``, in the same second), which
        opening the name again would empty."""
        from tensorboardX.event_file_writer import EventsWriter
        os.makedirs(self._logdir, exist_ok=True)
        prefix = os.path.join(self._logdir, "events")
        with _FILE_NAMES_LOCK:
            # tensorboardX names the file from these, as TensorFlow does.
            stem = f"{prefix}.out.tfevents.{str(time.time())[:10]}.{socket.gethostname()}"
            count = 0
            while True:
                suffix = f".{os.getpid()}{f'.{count}' if count else ''}" \
                    f"{self._filename_suffix}"
                if not os.path.exists(stem + suffix):
                    break
                count += 1
            return EventsWriter(prefix, suffix)

    def get_logdir(self) -> str:
        return self._logdir

    def reopen(self) -> None:
        """Open a new event file in the log directory after ``close``, for more events;
        does nothing if the writer is open."""
        with self._lock:
            if not self._closed:
                return
            self._events = self._open_events_file()
            self._closed = False
            self._pending = 0
            self._last_flush = time.monotonic()
        _OPEN_WRITERS.add(self)

    def add_event(self, event, global_step=None, walltime=None) -> None:
        """Write an ``Event`` protocol buffer, stamped with the step and the time."""
        event.wall_time = time.time() if walltime is None else walltime
        if global_step is not None:
            event.step = int(global_step)
        with self._lock:
            if self._closed:
                raise errors.FailedPreconditionError(
                    f"FileWriter for {self._logdir} is closed: call reopen() to write "
                    "to a new event file there")
            self._events.write_event(event)
            self._pending += 1
            if self._pending >= self._max_queue or \
                    time.monotonic() - self._last_flush >= self._flush_secs:
                self._flush_locked()

    def add_summary(self, summary, global_step=None, walltime=None) -> None:
        """Write the value of a summary, i.e. what ``Session.run(summary)`` returned.

        Also accepts a TensorBoard ``Summary`` protocol buffer (e.g. from tensorboardX),
        or one serialized to bytes (``tf.Summary(...).SerializeToString()``).

        Raises:
            InvalidArgumentError: ``summary`` is the unevaluated Summary (tensors), or not
                a summary at all, or an entry has a kind with no writer.
        """
        if isinstance(summary, (bytes, bytearray)):
            # A serialized Summary, as TensorFlow's writer takes one.
            from google.protobuf.message import DecodeError
            parsed = _tensorboardx().proto.summary_pb2.Summary()
            try:
                parsed.ParseFromString(bytes(summary))
            except DecodeError as exc:
                raise errors.InvalidArgumentError(
                    f"FileWriter.add_summary: the {len(summary)} bytes given are not a "
                    f"serialized Summary protocol buffer ({exc})") from None
            summary = parsed
        if hasattr(summary, "SerializeToString"):
            self.add_event(self._event_pb2.Event(summary=summary), global_step, walltime)
            return
        if not isinstance(summary, Summary):
            raise errors.InvalidArgumentError(
                f"FileWriter.add_summary expects the result of sess.run(summary) for a "
                f"summary from mf.summary, got {type(summary).__name__}")
        if not summary.is_evaluated():
            raise errors.InvalidArgumentError(
                f"FileWriter.add_summary got the summary tensors {list(summary.tags)}, not "
                "their values: pass the result of sess.run(summary)")
        proto = None
        for spec, value in summary.items():
            make = _PROTOS.get(spec.kind)
            if make is None:
                raise errors.InvalidArgumentError(
                    f"Summary '{spec.tag}' has kind {spec.kind!r}: expected one of "
                    f"{sorted(_PROTOS)}")
            part = make(spec, value)
            if proto is None:
                proto = part
            else:
                proto.value.extend(part.value)
        if proto is not None:
            self.add_event(self._event_pb2.Event(summary=proto), global_step, walltime)

    def add_scalar(self, tag: str, value, global_step=None, walltime=None) -> None:
        """Write one scalar under ``tag`` (a value computed in Python, not a graph op)."""
        self.add_summary(_scalar_proto(tag, value), global_step, walltime)

    def add_histogram(self, tag: str, values, global_step=None, walltime=None) -> None:
        """Write the distribution of ``values`` under ``tag``."""
        self.add_summary(_histogram_proto(tag, values), global_step, walltime)

    def add_graph(self, graph: Graph, global_step=None) -> None:
        """Write ``graph``'s ops (name, type, inputs, device) as a GraphDef for TensorBoard."""
        from tensorboardX.proto import graph_pb2, node_def_pb2
        nodes = [node_def_pb2.NodeDef(name=n["name"], op=n["op"], input=n["input"],
                                      device=n.get("device", ""))
                 for n in graph.as_graph_def()["node"]]
        graph_def = graph_pb2.GraphDef(node=nodes).SerializeToString()
        self.add_event(self._event_pb2.Event(graph_def=graph_def), global_step)

    def add_run_metadata(self, run_metadata, tag: str, global_step=None) -> None:
        """Write the step statistics of a traced ``Session.run`` (its ``RunMetadata``,
        ``RunOptions(trace_level=FULL_TRACE)``) under ``tag``, for TensorBoard's graph tab
        (compute time per node of the session run ``tag``).

        Raises:
            InvalidArgumentError: ``run_metadata`` is not a ``RunMetadata``, or
                ``tag`` is not a string.
        """
        if not hasattr(run_metadata, "step_stats"):
            raise errors.InvalidArgumentError(
                f"FileWriter.add_run_metadata expects the tf.RunMetadata a traced "
                f"Session.run filled, got {type(run_metadata).__name__}")
        if not isinstance(tag, str):
            raise errors.InvalidArgumentError(
                f"FileWriter.add_run_metadata: tag must be a string, got {tag!r}")
        tagged = self._event_pb2.TaggedRunMetadata(
            tag=tag, run_metadata=_run_metadata_bytes(run_metadata.step_stats))
        self.add_event(self._event_pb2.Event(tagged_run_metadata=tagged), global_step)

    def add_session_log(self, status, global_step=None) -> None:
        """Write a SessionLog event: "start", "stop" or "checkpoint", or a
        ``tf.SessionLog`` protocol buffer (TF1's argument).

        A "start" at step N makes TensorBoard drop events of this directory past step N
        written before it, so a job restarted from a checkpoint draws no stale tail.
        """
        session_log = self._event_pb2.SessionLog
        if hasattr(status, "SerializeToString"):
            proto = session_log()
            proto.ParseFromString(status.SerializeToString())
            self.add_event(self._event_pb2.Event(session_log=proto), global_step)
            return
        codes = {"start": session_log.START, "stop": session_log.STOP,
                 "checkpoint": session_log.CHECKPOINT}
        if status not in codes:
            raise errors.InvalidArgumentError(
                f"FileWriter.add_session_log: status must be one of {sorted(codes)} or a "
                f"tf.SessionLog, got {status!r}")
        event = self._event_pb2.Event(session_log=session_log(status=codes[status]))
        self.add_event(event, global_step)

    def _flush_locked(self) -> None:
        self._events.flush()
        self._pending = 0
        self._last_flush = time.monotonic()

    def flush(self) -> None:
        """Write every record added so far to the event file."""
        with self._lock:
            if not self._closed:
                self._flush_locked()

    def close(self) -> None:
        """Flush and close the event file; closing again does nothing."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._events.close()
        _OPEN_WRITERS.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<mf.summary.FileWriter {self._logdir!r}>"


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1              # int64 fields: two's complement, as protobuf
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value) -> bytes:
    """One protobuf field: an integer (varint) or bytes/str (length-delimited)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _run_metadata_bytes(step_stats) -> bytes:
    """A serialized ``RunMetadata`` protocol buffer holding ``step_stats`` (mpiflow's
    spans, see ``RunMetadata``) as ``StepStats``: one ``DeviceStepStats`` per device
    (this rank's, "" where a span names none), a ``NodeExecStats`` per span (node name,
    start and duration in microseconds). tensorboardX has no RunMetadata class, so the
    few fields are encoded here."""
    devices: dict = {}
    for span in step_stats:
        start = int(span.get("ts", 0)) // 1000
        duration = int(span.get("dur", 0)) // 1000
        name = str(span.get("name", ""))
        args = span.get("args") or {}
        label = f"{name} = {args.get('type', span.get('cat', ''))}()"
        node = (_field(1, name) + _field(2, start) + _field(3, 0) + _field(4, duration) +
                _field(5, duration) + _field(8, label))
        device = str(args.get("device", ""))
        devices.setdefault(device, []).append(node)
    dev_stats = b"".join(
        _field(1, _field(1, device) + b"".join(_field(2, node) for node in nodes))
        for device, nodes in devices.items())
    return _field(1, dev_stats)


_OPEN_WRITERS: weakref.WeakSet = weakref.WeakSet()
_FILE_NAMES_LOCK = threading.Lock()


@atexit.register
def _flush_open_writers() -> None:
    for writer in list(_OPEN_WRITERS):
        writer.flush()


class FileWriterCache:
    """One FileWriter per log directory, shared by the hooks of a process."""

    _writers: ClassVar[dict] = {}
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
