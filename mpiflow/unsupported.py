"""The error a TF1 script meets when it uses a name mpiflow does not have.

Owns the one message for every namespace: each public module (``mf``, ``mf.train``,
``mf.nn``, ``mf.data``, ``mf.summary``, ...) ends with the line

    __getattr__ = unsupported.namespace_getattr(__name__, "tf.train")

Python calls a module's ``__getattr__`` only for names the module lacks, so what exists
is untouched and a missing public name fails with ``UnsupportedAPIError``: it says which
``tf.`` name is missing, what to do instead where there is a known alternative, and
points to the page listing what mpiflow supports. A script run under ``--as-tensorflow``
thus fails at the line that uses the name, not somewhere later with a bare
``AttributeError``. The error is an ``AttributeError`` so ``hasattr``, ``getattr`` with
a default and ``from x import y`` (which retries a submodule import) behave as for any
missing attribute; private and dunder names (``__path__``, ``_pytest...``, which tools
probe) get the plain ``AttributeError`` Python would have raised.

Imports nothing of mpiflow but ``mpiflow.errors``.
"""

from __future__ import annotations

import difflib
import sys

from mpiflow import errors

DOC_PAGE = "docs/tf1_api.md"

# What to do instead, for the names TF1 scripts reach for most. A name a hint is given for
# covers everything under it (tf.contrib.layers falls under tf.contrib).
HINTS = {
    "tf.cond": "graphs have no control flow; compute both branches and pick with tf.where",
    "tf.case": "graphs have no control flow; compute the branches and pick with tf.where",
    "tf.while_loop": "graphs have no control flow; unroll the loop in Python",
    "tf.map_fn": "graphs have no control flow; write the function on the whole batch",
    "tf.scan": "graphs have no control flow; unroll the loop in Python",
    "tf.contrib": "look for the core TF1 name of what you need (tf.layers, tf.train, ...); "
                  "tf.contrib.layers.l2_regularizer and l1_regularizer are "
                  "tf.layers.l2_regularizer and l1_regularizer here, "
                  "tf.contrib.opt.DropStaleGradientOptimizer is "
                  "tf.train.DropStaleGradientOptimizer",
    "tf.estimator": "write the loop with tf.train.MonitoredTrainingSession and hooks",
    "tf.keras": "build the model with tf.layers or tf.nn and tf.get_variable",
    "tf.nn.rnn_cell": "recurrent cells need tf.while_loop, which mpiflow graphs do not have",
    "tf.nn.dynamic_rnn": "recurrent cells need tf.while_loop, which mpiflow graphs do not have",
    "tf.nn.static_rnn": "recurrent cells are not provided; unroll the cell in Python",
    "tf.py_func": "a graph must be plain data to be shipped to other ranks, so it cannot "
                  "hold Python functions",
    "tf.string": "mpiflow has no string dtype",
    "tf.io": "mpiflow has no string dtype or file readers; load arrays with numpy and use "
             "tf.data.Dataset.from_tensor_slices",
    "tf.FIFOQueue": "use tf.data.Dataset.from_tensor_slices on arrays in memory",
    "tf.RandomShuffleQueue": "use tf.data.Dataset.from_tensor_slices(...).shuffle(...)",
    "tf.train.batch": "use tf.data.Dataset.from_tensor_slices(...).batch(...)",
    "tf.train.shuffle_batch": "use tf.data.Dataset.from_tensor_slices(...).shuffle(...)"
                              ".batch(...)",
    "tf.train.string_input_producer": "use tf.data.Dataset.from_tensor_slices on arrays",
    "tf.train.start_queue_runners": "queue runners are not provided; use tf.data",
    "tf.data.Dataset.filter": "mpiflow's datasets pick rows of in-memory arrays by index, "
                              "so no predicate drops elements on the way: select the rows "
                              "with numpy first (x[mask]) and use "
                              "tf.data.Dataset.from_tensor_slices",
    "tf.data.Dataset.from_generator": "a graph must be plain data to be shipped to other "
                                      "ranks, so it cannot hold a Python generator: collect "
                                      "its elements into numpy arrays and use "
                                      "tf.data.Dataset.from_tensor_slices",
    "tf.data.Dataset.padded_batch": "pad the arrays to one shape with numpy first, then "
                                    "use tf.data.Dataset.batch",
    "tf.data.Dataset.flat_map": "build the flattened arrays with numpy first and use "
                                "tf.data.Dataset.from_tensor_slices",
    "tf.data.Dataset.interleave": "build the interleaved arrays with numpy first and use "
                                  "tf.data.Dataset.from_tensor_slices",
    "tf.data.Dataset.unbatch": "reshape the arrays with numpy first and use "
                               "tf.data.Dataset.from_tensor_slices",
    "tf.data.experimental.shuffle_and_repeat": "use dataset.shuffle(buffer_size, seed)"
                                               ".repeat(count)",
    "tf.data.experimental.map_and_batch": "dataset.map(fn).batch(n) (fn runs per element), "
                                          "or, faster, dataset.batch(n).map(fn) with a "
                                          "function written for a batch",
    "tf.data.TFRecordDataset": "mpiflow has no string dtype; read the records with numpy "
                               "and use tf.data.Dataset.from_tensor_slices",
    "tf.data.TextLineDataset": "mpiflow has no string dtype; read the file with numpy and "
                               "use tf.data.Dataset.from_tensor_slices",
}
# TF1's optimizer mpiflow lacks: a near name (AdagradOptimizer for AdagradDAOptimizer) is
# no answer, the list of those it has is.
HINTS["tf.train.AdagradDAOptimizer"] = (
    "mpiflow's optimizers are tf.train.GradientDescentOptimizer, MomentumOptimizer, "
    "AdagradOptimizer, AdadeltaOptimizer, RMSPropOptimizer, AdamOptimizer, FtrlOptimizer, "
    "ProximalAdagradOptimizer and ProximalGradientDescentOptimizer; another can be written "
    "as a subclass of tf.train.Optimizer (_create_slots, _apply_dense, _apply_sparse)")
# The sorted segment reductions: the unsorted ones take the same ids (sorted or not).
for _reduction in ("sum", "max", "min", "mean", "prod"):
    for _namespace in ("tf", "tf.math"):
        HINTS[f"{_namespace}.segment_{_reduction}"] = (
            f"use tf.math.unsorted_segment_{_reduction}(data, segment_ids, num_segments), "
            f"num_segments being the largest id + 1"
            + ("; an empty segment (an id skipped) holds the dtype's "
               f"{'lowest' if _reduction == 'max' else 'highest'} value there, 0 in "
               f"segment_{_reduction}" if _reduction in ("max", "min") else ""))
# Convolutions mpiflow lacks: a near name (conv1d for conv3d) is no answer, what it has is.
_CONVOLUTIONS = ("mpiflow's convolutions are tf.nn.conv1d, conv2d and conv2d_transpose "
                 "(and tf.layers.conv1d, conv2d, conv2d_transpose)")
for _conv in ("tf.nn.conv3d", "tf.nn.conv3d_transpose", "tf.nn.conv1d_transpose",
              "tf.nn.conv_transpose", "tf.nn.depthwise_conv2d", "tf.nn.separable_conv2d",
              "tf.layers.conv3d", "tf.layers.Conv3D", "tf.layers.conv3d_transpose",
              "tf.layers.Conv3DTranspose", "tf.layers.separable_conv1d",
              "tf.layers.SeparableConv1D", "tf.layers.separable_conv2d",
              "tf.layers.SeparableConv2D"):
    HINTS[_conv] = _CONVOLUTIONS
HINTS["tf.nn.convolution"] = "use tf.nn.conv1d or tf.nn.conv2d (each takes dilations)"
HINTS["tf.nn.atrous_conv2d"] = "use tf.nn.conv2d(value, filters, 1, padding, dilations=rate)"
# Resizes mpiflow lacks: a near name is no answer, the ones it has are.
for _resize in ("tf.image.resize_bicubic", "tf.image.resize_area",
                "tf.image.resize_image_with_pad", "tf.image.crop_and_resize"):
    HINTS[_resize] = ("mpiflow's resizes are tf.image.resize_bilinear and "
                      "resize_nearest_neighbor (tf.image.resize_images with "
                      "ResizeMethod.BILINEAR or NEAREST_NEIGHBOR)")
# Summaries other than scalars, histograms and images: fetch the tensor and hand
# tensorboardX's record of it to the FileWriter, which writes any Summary protocol buffer.
for _kind, _example in (("text", "text('tag', value)"), ("audio", "audio('tag', value)")):
    HINTS[f"tf.summary.{_kind}"] = (
        f"mpiflow's summary ops are tf.summary.scalar, tf.summary.histogram and "
        f"tf.summary.image; fetch the tensor with sess.run and write "
        f"writer.add_summary(tensorboardX.summary.{_example}, step)")


def message(tf_name: str, known=()) -> str:
    """The text of the error for the missing TF1 name ``tf_name`` (e.g. "tf.train.Foo");
    ``known``: the names its namespace has, to point at a near miss (a typo)."""
    hint = _hint(tf_name)
    namespace, _, name = tf_name.rpartition(".")
    close = _near_miss(name, [k for k in known if not k.startswith("_")])
    advice = f": {hint}" if hint else (f" (did you mean {namespace}.{close}?)" if close
                                       else "")
    return (f"mpiflow does not support {tf_name}{advice}. What mpiflow supports of the TF1 "
            f"API, and what it offers instead of the rest, is listed in {DOC_PAGE}")


def _near_miss(name: str, known) -> str | None:
    """The known name ``name`` is a typo of, or None: one within a few edits (a letter
    left out, added, changed or two swapped; one edit per 4 letters, at least one).
    difflib's ratio alone also pairs unrelated short names (round and group, cumsum and
    comm, both 0.6), so it only orders the candidates."""
    limit = max(1, len(name) // 4)
    best = None
    for candidate in known:
        if abs(len(candidate) - len(name)) > limit:
            continue
        distance = _edits(name, candidate)
        if distance <= limit:
            key = (distance, -difflib.SequenceMatcher(None, name, candidate).ratio(),
                   candidate)
            best = min(best, key) if best else key
    return best[2] if best else None


def _edits(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) turning ``a`` into ``b``."""
    before, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            cost = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, row = row, current
    return row[-1]


def _hint(tf_name: str) -> str | None:
    parts = tf_name.split(".")
    for end in range(len(parts), 1, -1):
        hint = HINTS.get(".".join(parts[:end]))
        if hint is not None:
            return hint
    return None


def namespace_getattr(module_name: str, tf_namespace: str):
    """Return the ``__getattr__`` for module ``module_name``, which stands for
    ``tf_namespace`` ("tf", "tf.train", ...) in TF1 scripts."""
    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}",
                                 name=name)
        module = sys.modules.get(module_name)
        raise errors.UnsupportedAPIError(
            message(f"{tf_namespace}.{name}", vars(module) if module is not None else ()))
    return __getattr__
