"""``mf.summary``: scalar, histogram and image summaries, written for TensorBoard with
tensorboardX.

mpiflow has no string dtype, so a summary is not a serialized ``Summary`` proto made by an
op. It is a ``Summary``: a namedtuple of the tensors to record whose class carries the kind
("scalar", "histogram" or "image") and tag of each one. ``Session.run`` flattens a
namedtuple to its tensors and rebuilds the same class with their values, so the result of
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

from mpiflow import unsupported
from mpiflow.summary.event_file import (
    EVENT_PROTOS, FileWriter, FileWriterCache, event_proto, summary_iterator)
from mpiflow.summary.summaries import (
    KINDS, Summary, SummarySpec, histogram, image, merge, merge_all, scalar)

__all__ = ["EVENT_PROTOS", "KINDS", "FileWriter", "FileWriterCache", "Summary", "SummarySpec",
           "event_proto", "histogram", "image", "merge", "merge_all", "scalar",
           "summary_iterator"]

__getattr__ = unsupported.namespace_getattr(__name__, "tf.summary")
