"""mf.summary: summaries are fetchable bundles whose values FileWriter writes as TensorBoard
event files, read back here record by record."""

import glob
import subprocess
import sys

import numpy as np
import pytest

import mpiflow as mf

pytest.importorskip("tensorboardX")


@pytest.fixture(autouse=True)
def _no_cached_writers():
    yield
    mf.summary.FileWriterCache.clear()


def read_events(logdir):
    """Return every Event of every event file in ``logdir``, oldest file first."""
    events = []
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        events.extend(mf.summary.summary_iterator(path))
    return events


def scalars(events):
    """Return {tag: [(step, value)]} of the scalar summaries in ``events``."""
    found = {}
    for event in events:
        for value in event.summary.value:
            if value.HasField("simple_value"):
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


def test_scalar_and_histogram_join_the_summaries_collection_with_scoped_unique_tags():
    x = mf.constant(2.0, name="x")
    w = mf.Variable(np.ones(4, np.float32), name="w")
    with mf.name_scope("train"):
        a = mf.summary.scalar("loss", x)
        b = mf.summary.scalar("loss", x * 2.0)
    h = mf.summary.histogram("w", w)
    other = mf.summary.scalar("aside", x, collections=["mine"])
    assert a.tags == ("train/loss",) and b.tags == ("train/loss_1",)
    # As TensorFlow's, tags avoid op names too: beside the variable "w", "w_1".
    assert h.tags == ("w_1",) and h.specs[0].kind == "histogram"
    assert mf.get_collection(mf.GraphKeys.SUMMARIES) == [a, b, h]
    assert mf.get_collection("mine") == [other]


def test_tags_are_named_as_tensorflow_names_them():
    # Recorded from TensorFlow 2's tf.compat.v1.summary, read back from its event file.
    x = mf.constant(1.0, name="loss")
    tags = [mf.summary.scalar("loss", x).tags[0],           # beside the op "loss"
            mf.summary.scalar("loss (train)", x).tags[0],   # cleaned
            mf.summary.scalar("/lead", x).tags[0],
            mf.summary.scalar("a:b", x, family="my fam").tags[0]]
    with mf.name_scope("sc"):
        tags += [mf.summary.histogram("h", x, family="f").tags[0],
                 mf.summary.histogram("h", x, family="f").tags[0]]
    # The summary's name is reserved, as TensorFlow's summary op's: a later op moves on.
    later = mf.identity(x, name="loss")
    tags.append(mf.summary.scalar("Loss", x).tags[0])
    assert tags == ["loss_1", "loss__train_", "lead", "my_fam/my_fam/a_b", "f/sc/f/h",
                    "f/sc/f/h_1", "Loss_3"]
    assert later.name == "loss_2:0"


def test_running_a_merged_summary_returns_its_values_with_their_tags():
    x = mf.placeholder(mf.float32, [], name="value")
    mf.summary.scalar("x", x)
    mf.summary.histogram("xs", mf.stack([x, x + 1.0]))
    merged = mf.summary.merge_all()
    assert merged.tags == ("x", "xs") and not merged.is_evaluated()
    with mf.Session() as sess:
        value = sess.run(merged, {x: 3.0})
    assert type(value) is type(merged) and value.is_evaluated()
    assert value.tags == ("x", "xs")
    assert float(value[0]) == 3.0 and np.allclose(value[1], [3.0, 4.0])


def test_merge_all_is_none_without_summaries_and_merge_rejects_bad_input():
    assert mf.summary.merge_all() is None
    x = mf.constant(1.0)
    s = mf.summary.scalar("x", x)
    with pytest.raises(mf.errors.InvalidArgumentError, match="at least one summary"):
        mf.summary.merge([])
    with pytest.raises(mf.errors.InvalidArgumentError, match="duplicate tags \\['x'\\]"):
        mf.summary.merge([s, s])
    with pytest.raises(mf.errors.InvalidArgumentError, match="takes summaries"):
        mf.summary.merge([x])


def test_merge_all_of_a_scope_matches_the_summaries_names_as_tensorflow():
    # TF1 filters by the summary op's name, which has no family in front: the summary
    # tagged "F/scope/F/fam" is named "scope/F/fam", so it is in scope "scope", not "F".
    with mf.name_scope("scope"):
        mf.summary.scalar("fam", 1.0, family="F")
        mf.summary.scalar("x", 2.0)
    mf.summary.scalar("y", 3.0, family="scope")         # named "scope/y"
    tags = {scope: (lambda m: None if m is None else list(m.tags))(
        mf.summary.merge_all(scope=scope)) for scope in ("scope", "F", "scope/F", "F/scope")}
    assert tags == {"scope": ["F/scope/F/fam", "scope/x", "scope/scope/y"], "F": None,
                    "scope/F": ["F/scope/F/fam"], "F/scope": None}


def test_scalar_of_a_vector_is_rejected_with_its_shape():
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"scalar\('v'\) needs a scalar: expected shape \(\), got 'v_in:0'"):
        mf.summary.scalar("v", mf.constant([1.0, 2.0], name="v_in"))


def test_file_writer_writes_scalars_histograms_and_the_graph_readably(tmp_path):
    step_in = mf.placeholder(mf.float32, [], name="s")
    loss = mf.multiply(step_in, 0.5, name="half")
    mf.summary.scalar("loss", loss)
    mf.summary.histogram("spread", mf.stack([loss, loss + 1.0, loss + 2.0]))
    merged = mf.summary.merge_all()
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path, graph=sess.graph) as writer:
        for step in (0, 10, 20):
            writer.add_summary(sess.run(merged, {step_in: float(step)}), global_step=step)
        writer.add_scalar("lr", 0.1, global_step=20)
    events = read_events(tmp_path)
    assert events[0].file_version.startswith("brain.Event")
    graph_events = [e for e in events if e.graph_def]
    assert len(graph_events) == 1
    assert scalars(events) == {"loss": [(0, 0.0), (10, 5.0), (20, 10.0)],
                               "lr": [(20, pytest.approx(0.1))]}
    histograms = [(e.step, v.histo) for e in events for v in e.summary.value
                  if v.tag == "spread"]
    assert [s for s, _ in histograms] == [0, 10, 20]
    last = histograms[-1][1]
    assert (last.num, last.min, last.max, last.sum) == (3, 10.0, 12.0, 33.0)


def test_the_written_graph_lists_the_ops_with_their_inputs(tmp_path):
    from tensorboardX.proto.graph_pb2 import GraphDef
    a = mf.constant(1.0, name="a")
    mf.add(a, a, name="twice")
    with mf.summary.FileWriter(tmp_path, graph=mf.get_default_graph()):
        pass
    graph_def = GraphDef()
    graph_def.ParseFromString(next(e.graph_def for e in read_events(tmp_path) if e.graph_def))
    nodes = {n.name: n for n in graph_def.node}
    assert nodes["twice"].op == "Add"
    assert list(nodes["twice"].input) == ["a:0", "a:0"]


def test_add_summary_rejects_the_summary_tensors_themselves(tmp_path):
    s = mf.summary.scalar("x", mf.constant(1.0))
    with mf.summary.FileWriter(tmp_path) as writer:
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"got the summary tensors \['x'\], not their values"):
            writer.add_summary(s, 0)
        with pytest.raises(mf.errors.InvalidArgumentError, match="expects the result of"):
            writer.add_summary(np.float32(1.0), 0)


def test_session_log_start_is_written_for_tensorboard_restarts(tmp_path):
    with mf.summary.FileWriter(tmp_path) as writer:
        writer.add_session_log("start", 7)
        with pytest.raises(mf.errors.InvalidArgumentError, match="status must be one of"):
            writer.add_session_log("begin", 7)
    logs = [e for e in read_events(tmp_path) if e.HasField("session_log")]
    assert [(e.step, e.session_log.status) for e in logs] == [(7, 1)]


def test_tf1_event_protocol_buffers_write_values_computed_in_python(tmp_path):
    # TF1 scripts log what they compute in Python (an evaluation's accuracy) with
    # tf.Summary protos, and mark restarts with tf.SessionLog ones.
    with mf.summary.FileWriter(tmp_path) as writer:
        writer.add_session_log(mf.SessionLog(status=mf.SessionLog.START), 3)
        writer.add_summary(mf.Summary(value=[mf.Summary.Value(tag="accuracy",
                                                              simple_value=0.75)]), 3)
        writer.add_event(mf.Event(summary=mf.Summary(
            value=[mf.Summary.Value(tag="loss", simple_value=0.5)])), 4)
    events = read_events(tmp_path)
    assert scalars(events) == {"accuracy": [(3, 0.75)], "loss": [(4, 0.5)]}
    logs = [e for e in events if e.HasField("session_log")]
    assert [(e.step, e.session_log.status) for e in logs] == [(3, 1)]


def _histograms_written(tmp_path, cases):
    summaries = {name: mf.summary.histogram(name, mf.constant(values, mf.float64))
                 for name, values in cases.items()}
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        for summary in summaries.values():
            writer.add_summary(sess.run(summary), global_step=1)
    return {v.tag: v.histo for e in read_events(tmp_path) for v in e.summary.value}


def test_histograms_list_tensorflows_buckets_as_its_histogram_op_does(tmp_path):
    # Recorded from TensorFlow 2's tf.compat.v1.summary.histogram: only buckets that hold
    # values, each run of empty ones as one empty bucket at its last limit; values past
    # +-1e20 in the first and last buckets (whose limits are the largest floats).
    largest = np.finfo(np.float64).max
    got = _histograms_written(tmp_path, {
        "mixed": [0.5, 0.5, 1e-13, -1e-13, 0.0, 1.0, 2.0, 2.0, 7.0],
        "huge": [1e25, -1e25, 1.0, 1e20, -3e22],
        "empty": np.zeros([0])})
    mixed = got["mixed"]
    assert list(mixed.bucket) == [0, 1, 2, 0, 2, 0, 1, 0, 2, 0, 1, 0]
    assert list(mixed.bucket_limit) == pytest.approx(
        [-1e-12, 0.0, 1e-12, 0.47069243095356195, 0.51776167404891815, 0.917246389039776,
         1.0089710279437536, 1.9661990955585713, 2.1628190051144287, 6.7878525393626115,
         7.4666377932988732, largest], rel=1e-15)
    assert (mixed.min, mixed.max, mixed.num, mixed.sum, mixed.sum_squares) == \
        (-1e-13, 7.0, 9, 13.0, 58.5)
    huge = got["huge"]
    assert list(huge.bucket) == [0, 2, 0, 1, 0, 2] and huge.num == 5
    assert list(huge.bucket_limit) == pytest.approx(
        [-largest, -9.920775621859783e+19, 0.917246389039776, 1.0089710279437536,
         9.920775621859783e+19, largest], rel=1e-15)
    empty = got["empty"]
    assert (list(empty.bucket), list(empty.bucket_limit)) == ([0], [largest])
    assert (empty.min, empty.max, empty.num) == (largest, -largest, 0)


def test_a_histogram_of_nan_or_infinite_values_is_refused_naming_its_tag(tmp_path):
    # As TensorFlow's histogram op: such a histogram has NaN bounds TensorBoard cannot
    # draw. A scalar may be NaN (TensorBoard shows it).
    v = mf.placeholder(mf.float32, [3])
    mf.summary.histogram("w", v)
    mf.summary.scalar("first", v[0])
    merged = mf.summary.merge_all()
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        for bad, what in ((np.nan, "Nan in summary histogram"),
                          (np.inf, "Infinity in Histogram")):
            with pytest.raises(mf.errors.InvalidArgumentError,
                               match=rf"{what} for: w \(1 of its 3 values are not finite\)"):
                writer.add_summary(sess.run(merged, {v: [1.0, bad, 2.0]}), 1)
        writer.add_summary(sess.run(merged, {v: [1.0, 1.0, 2.0]}), 2)
        writer.add_scalar("nan", np.nan, 3)
    found = scalars(read_events(tmp_path))
    assert found["first"] == [(2, 1.0)] and np.isnan(found["nan"][0][1]), found


def test_each_writer_and_each_reopen_writes_its_own_event_file(tmp_path):
    # In one second, one process: a second writer of the directory, and a writer
    # reopened after close, each get a file of their own instead of emptying the first.
    first, second = mf.summary.FileWriter(tmp_path), mf.summary.FileWriter(tmp_path)
    first.add_scalar("a", 1.0, 1)
    second.add_scalar("b", 2.0, 1)
    first.close()
    second.close()
    first.reopen()
    first.add_scalar("c", 3.0, 2)
    first.reopen()                       # open already: nothing happens
    first.close()
    with pytest.raises(mf.errors.FailedPreconditionError, match="closed: call reopen"):
        first.add_scalar("d", 4.0, 3)
    files = sorted(glob.glob(f"{tmp_path}/events.out.tfevents.*"))
    tags = sorted(tuple(v.tag for e in mf.summary.summary_iterator(path)
                        for v in e.summary.value) for path in files)
    assert tags == [("a",), ("b",), ("c",)]


def test_run_metadata_of_a_traced_step_is_written_for_tensorboards_graph_tab(tmp_path):
    config_pb2 = pytest.importorskip("tensorboard.compat.proto.config_pb2")
    x = mf.constant(2.0, name="x")
    y = mf.square(x, name="y")
    metadata = mf.RunMetadata()
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        sess.run(y, options=mf.RunOptions(trace_level=mf.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        writer.add_run_metadata(metadata, "step001", global_step=1)
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match="add_run_metadata expects the tf.RunMetadata"):
            writer.add_run_metadata({"step_stats": []}, "step002")
    (event,) = [e for e in read_events(tmp_path) if e.HasField("tagged_run_metadata")]
    assert (event.step, event.tagged_run_metadata.tag) == (1, "step001")
    parsed = config_pb2.RunMetadata.FromString(event.tagged_run_metadata.run_metadata)
    nodes = [n for d in parsed.step_stats.dev_stats for n in d.node_stats]
    assert [(n.node_name, n.timeline_label) for n in nodes] == \
        [("x", "x = Const()"), ("y", "y = Square()")]
    span = metadata.step_stats[1]
    assert nodes[1].all_start_micros == span["ts"] // 1000
    assert nodes[1].op_end_rel_micros == span["dur"] // 1000


def test_add_summary_takes_a_serialized_summary_as_tensorflows_writer_does(tmp_path):
    proto = mf.Summary(value=[mf.Summary.Value(tag="accuracy", simple_value=0.75)])
    with mf.summary.FileWriter(tmp_path) as writer:
        writer.add_summary(proto.SerializeToString(), 3)
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match="not a serialized Summary protocol buffer"):
            writer.add_summary(b"\xff\xff", 4)
    assert scalars(read_events(tmp_path)) == {"accuracy": [(3, 0.75)]}


def test_file_writer_cache_keeps_one_writer_per_directory(tmp_path):
    first = mf.summary.FileWriterCache.get(tmp_path / "a")
    assert mf.summary.FileWriterCache.get(tmp_path / "a") is first
    assert mf.summary.FileWriterCache.get(tmp_path / "b") is not first


def test_summary_iterator_detects_a_corrupted_record(tmp_path):
    with mf.summary.FileWriter(tmp_path) as writer:
        writer.add_scalar("x", 1.0, 0)
    path, = glob.glob(f"{tmp_path}/events.out.tfevents.*")
    data = bytearray(open(path, "rb").read())
    data[-6] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(mf.errors.DataLossError, match="Corrupt record data"):
        list(mf.summary.summary_iterator(path))


def test_importing_mpiflow_does_not_import_tensorboardx():
    # Every MPI rank imports mpiflow; only a rank that writes summaries pays for tensorboardX.
    code = "import sys, mpiflow; print('tensorboardX' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_tensorboard_itself_reads_the_logged_scalars(tmp_path):
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="TensorBoard is in the test extra: pip install '.[test]'")
    x = mf.placeholder(mf.float32, [])
    mf.summary.scalar("loss", x)
    merged = mf.summary.merge_all()
    writer = mf.summary.FileWriter(str(tmp_path))
    with mf.Session() as sess:
        for step in range(3):
            writer.add_summary(sess.run(merged, {x: 1.5 * step}), step)
    writer.close()
    events = accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    assert events.Tags()["scalars"] == ["loss"]
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(0, 0.0), (1, 1.5),
                                                                   (2, 3.0)]


# -- images ------------------------------------------------------------------------------------
def _decoded_images(logdir):
    """Return [(step, tag, (height, width, colorspace), pixels as nested lists)] of the
    image summaries in ``logdir``, each PNG decoded by Pillow (TensorBoard's test extra)."""
    import io
    image_module = pytest.importorskip("PIL.Image")
    found = []
    for event in read_events(logdir):
        for value in event.summary.value:
            if value.HasField("image"):
                image = value.image
                png = image_module.open(io.BytesIO(image.encoded_image_string))
                assert png.size == (image.width, image.height)
                pixels = np.asarray(png).reshape(image.height, image.width, -1)
                found.append((event.step, value.tag,
                              (image.height, image.width, image.colorspace), pixels.tolist()))
    return found


def test_image_summaries_are_pngs_with_tensorflows_tags_and_pixels(tmp_path):
    # What TensorFlow 1's tf.summary.image writes for the same images: uint8 as they are;
    # floats scaled per image (all >= 0: largest -> 255; else largest |value| -> 127 and
    # 0 -> 128; truncated), NaN/inf pixels red (255 in grayscale); "/image" alone where
    # max_outputs is 1, else "/image/<i>" for the first max_outputs images.
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3, 1) * 0.5
    b = (np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3) - 5) * 0.25
    c = np.array([[[[0.2], [np.nan]], [[np.inf], [0.5]]]], np.float32)
    d = np.arange(16, dtype=np.uint8).reshape(2, 1, 2, 4) * 30
    rgb = np.array([[[[0.5, np.nan, 0.1], [1, 1, 1]]]], np.float32)
    images = mf.placeholder(mf.float32, [None, 2, 3, 1], name="images")
    with mf.name_scope("sc"):
        mf.summary.image("a", images, max_outputs=3)
        mf.summary.image("b", b, max_outputs=1)
        mf.summary.image("c", c)
        mf.summary.image("d", d, max_outputs=1, family="fam")
        mf.summary.image("e", np.zeros((1, 1, 2, 1), np.float32))
        mf.summary.image("f", np.array([[[[0.25], [-0.5]]]], np.float64))
        mf.summary.image("h", np.full((1, 1, 2, 1), 0.3, np.float16))
        mf.summary.image("rgb", rgb)
    merged = mf.summary.merge_all()
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        writer.add_summary(sess.run(merged, {images: a}), global_step=7)
    assert _decoded_images(tmp_path) == [
        (7, "sc/a/image/0", (2, 3, 1), [[[0], [51], [102]], [[153], [204], [255]]]),
        (7, "sc/a/image/1", (2, 3, 1), [[[139], [162], [185]], [[208], [231], [255]]]),
        (7, "sc/b/image", (2, 2, 3), [[[22, 43, 64], [85, 106, 128]],
                                      [[149, 170, 191], [212, 233, 255]]]),
        (7, "sc/c/image/0", (2, 2, 1), [[[102], [255]], [[255], [255]]]),
        (7, "fam/sc/fam/d/image", (1, 2, 4), [[[0, 30, 60, 90], [120, 150, 180, 210]]]),
        (7, "sc/e/image/0", (1, 2, 1), [[[0], [0]]]),
        (7, "sc/f/image/0", (1, 2, 1), [[[191], [1]]]),
        (7, "sc/h/image/0", (1, 2, 1), [[[255], [255]]]),
        (7, "sc/rgb/image/0", (1, 2, 3), [[[255, 0, 0], [255, 255, 255]]])]


def test_tensorboard_itself_shows_the_image_summaries(tmp_path):
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="TensorBoard is in the test extra: pip install '.[test]'")
    batch = mf.placeholder(mf.uint8, [None, 4, 5, 3])
    mf.summary.image("inputs", batch, max_outputs=2)
    merged = mf.summary.merge_all()
    pixels = np.random.default_rng(0).integers(0, 256, (5, 4, 5, 3), dtype=np.uint8)
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        for step in (0, 10):
            writer.add_summary(sess.run(merged, {batch: pixels}), step)
    events = accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    assert events.Tags()["images"] == ["inputs/image/0", "inputs/image/1"]
    assert [(e.step, e.width, e.height) for e in events.Images("inputs/image/1")] == [
        (0, 5, 4), (10, 5, 4)]
    assert _decoded_images(tmp_path)[1][3] == pixels[1].tolist()


@pytest.mark.parametrize("make,words", [
    (lambda: mf.summary.image("ints", mf.zeros([1, 2, 2, 1], mf.int32)),
     "needs images of dtype uint8 or float16 or float32 or float64, got 'zeros:0' of "
     "dtype int32"),
    (lambda: mf.summary.image("flat", mf.zeros([2, 2, 1])),
     r"needs images \[batch, height, width, channels\] with 1, 3 or 4 channels"),
    (lambda: mf.summary.image("two", mf.zeros([1, 2, 2, 2])), "with 1, 3 or 4 channels"),
    (lambda: mf.summary.image("none", mf.zeros([1, 2, 2, 1]), max_outputs=0),
     "max_outputs must be an int >= 1, got 0"),
])
def test_image_summaries_refuse_what_tensorflows_refuses(make, words):
    with pytest.raises(mf.errors.InvalidArgumentError, match=words):
        make()


def test_images_of_a_shape_known_only_when_run_are_checked_when_written(tmp_path):
    images = mf.placeholder(mf.float32, None)
    summary = mf.summary.image("late", images)
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        value = sess.run(summary, {images: np.zeros((1, 2, 2, 2), np.float32)})
        with pytest.raises(mf.errors.InvalidArgumentError,
                           match=r"Summary image 'late': Tensor must be 4-D with last dim 1, "
                                 r"3, or 4, not \[1,2,2,2\]"):
            writer.add_summary(value, 1)
