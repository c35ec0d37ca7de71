"""Saver in one process: round trips, the state file, max_to_keep, resharding of
partitioned variables, optimizer slots, and the errors of damaged or interrupted
checkpoints."""

import json
import re
import os
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import io_ops
from mpiflow.train import saver as saver_module

FULL = np.arange(70, dtype=np.float32).reshape(14, 5) / 7

CASES = [  # name, value
    ("f32", np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)),
    ("f64_scalar", np.float64(-2.5)),
    ("f16", np.array([0.5, -1.25], dtype=np.float16)),
    ("i8", np.array([-128, 0, 127], dtype=np.int8)),
    ("i16", np.array([[-7], [300]], dtype=np.int16)),
    ("i32_scalar", np.int32(123456)),
    ("i64", np.arange(8, dtype=np.int64).reshape(2, 2, 2) - 2 ** 40),
    ("u8", np.array([0, 255, 17], dtype=np.uint8)),
    ("flags", np.array([True, False, True])),
    ("empty", np.zeros((0, 3), dtype=np.float32)),
    ("bf16", np.array([0.5, -1.25, 3e38], dtype=ml_dtypes.bfloat16)),
]


def _values(sess, variables):
    return sess.run([mf.convert_to_tensor(v) for v in variables])


def _emb(parts, name="emb", initializer=None):
    """An embedding [14, 5]: ``parts`` partitions, or None for a plain variable."""
    partitioner = mf.fixed_size_partitioner(parts) if parts else None
    return mf.get_variable(name, [14, 5], partitioner=partitioner,
                           initializer=initializer or mf.constant_initializer(FULL))


def _saved(tmp_path, build, step=None, **saver_kwargs):
    """Build with ``build()`` in a fresh graph, initialise, save; return (prefix, values)."""
    with mf.Graph().as_default():
        variables = build()
        saver = mf.train.Saver(**saver_kwargs)
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            values = _values(sess, variables)
            prefix = saver.save(sess, str(tmp_path / "model"), global_step=step)
    return prefix, values


def _restored(prefix, build):
    """Build with ``build()`` in a fresh graph, restore ``prefix``; return the values."""
    with mf.Graph().as_default():
        variables = build()
        saver = mf.train.Saver()
        with mf.Session() as sess:
            saver.restore(sess, prefix)
            return _values(sess, variables)


# -- round trips -------------------------------------------------------------------------

def test_round_trip_of_every_dtype_and_shape_including_scalars(tmp_path):
    def build(scale):
        return [mf.Variable(np.asarray(v) * np.asarray(scale).astype(np.asarray(v).dtype),
                            name=n) for n, v in CASES]
    prefix, saved = _saved(tmp_path, lambda: build(1))
    got = _restored(prefix, lambda: build(0))
    for (name, value), s, g in zip(CASES, saved, got):
        np.testing.assert_array_equal(g, value, err_msg=name)
        assert np.asarray(g).dtype == np.asarray(value).dtype and np.shape(g) == np.shape(value)
    assert dict(mf.train.list_variables(prefix))["i16"] == [2, 1]
    np.testing.assert_array_equal(mf.train.load_variable(prefix, "i64"), CASES[6][1])


def test_save_returns_the_prefix_with_the_global_step_suffix(tmp_path):
    step = mf.train.get_or_create_global_step()
    v = mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    padded = mf.train.Saver(pad_step_number=True)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(step.assign(42))
        base = str(tmp_path / "model.ckpt")
        assert saver.save(sess, base) == base
        assert saver.save(sess, base, global_step=7) == base + "-7"
        assert saver.save(sess, base, global_step=np.int64(8)) == base + "-8"
        assert saver.save(sess, base, global_step=step) == base + "-42"
        assert saver.save(sess, base, global_step=v.value() * 3) == base + "-3"
        assert padded.save(sess, base, global_step=step) == base + "-00000042"
    for suffix in ("", "-7", "-42", "-3", "-00000042"):
        assert mf.train.checkpoint_exists(base + suffix)
    assert mf.train.latest_checkpoint(str(tmp_path)) == base + "-00000042"


def test_var_list_as_dict_saves_under_the_given_names(tmp_path):
    a = mf.Variable([1.0, 2.0], name="a")
    pv = _emb(2)
    saver = mf.train.Saver({"renamed": a, "table": pv})
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "m"))
    assert [n for n, _ in mf.train.list_variables(prefix)] == ["renamed", "table"]
    np.testing.assert_array_equal(mf.train.load_variable(prefix, "table"), FULL)


def test_a_partition_part_given_alone_under_a_dict_name_is_saved_whole(tmp_path):
    # TF1 scripts write {v.op.name: v for v in tf.global_variables()}: each part of a
    # partitioned variable is then its own tensor of the part's shape, as in TensorFlow
    # (list_variables recorded from TF 2.21's tf.compat.v1: [('emb/part_0', [7, 5]),
    # ('emb/part_1', [7, 5])]); it was saved as a slice of the full [14, 5] under each
    # part's name, which read back as a DataLossError ('does not cover slice').
    _emb(2)
    saver = mf.train.Saver({v.op.name: v for v in mf.global_variables()})
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "m"))
    assert mf.train.list_variables(prefix) == [("emb/part_0", [7, 5]),
                                              ("emb/part_1", [7, 5])]
    np.testing.assert_array_equal(mf.train.load_variable(prefix, "emb/part_1"), FULL[7:])
    with mf.Graph().as_default():
        alone = mf.Variable(np.zeros((7, 5), np.float32), name="alone")
        with mf.Session() as sess:
            mf.train.Saver({"emb/part_1": alone}).restore(sess, prefix)
            np.testing.assert_array_equal(sess.run(alone), FULL[7:])
    with mf.Graph().as_default():
        parts = list(_emb(2, initializer=mf.zeros_initializer()))
        with mf.Session() as sess:
            mf.train.Saver({v.op.name: v for v in parts}).restore(sess, prefix)
            np.testing.assert_array_equal(np.concatenate(sess.run(parts)), FULL)


def test_saver_rejects_duplicates_and_non_variables():
    a = mf.Variable(1.0, name="a")
    with pytest.raises(mf.errors.InvalidArgumentError, match="'a' appears in var_list more"):
        mf.train.Saver([a, a])
    with pytest.raises(mf.errors.InvalidArgumentError, match="two variables would be saved"):
        mf.train.Saver([mf.Variable(np.zeros((14, 5)), name="emb"), _emb(2)])
    with pytest.raises(mf.errors.InvalidArgumentError, match="expected Variables"):
        mf.train.Saver([a.value()])
    with pytest.raises(mf.errors.InvalidArgumentError, match="No variables to save"):
        mf.train.Saver([])



def test_a_saver_with_nothing_to_save_writes_nothing_and_restores_nothing(tmp_path):
    # As TensorFlow's: save returns None and leaves no checkpoint or state file (an empty
    # checkpoint named latest would hide the real ones of the directory from a restart);
    # restore does nothing, whatever the path.
    saver = mf.train.Saver(allow_empty=True)
    with mf.Session() as sess:
        assert saver.save(sess, str(tmp_path / "m"), global_step=3) is None
        assert saver.restore(sess, str(tmp_path / "never-saved")) is None
    assert os.listdir(tmp_path) == []
    assert saver.last_checkpoints == [] and mf.train.latest_checkpoint(str(tmp_path)) is None
    with pytest.raises(ValueError, match="No variables to save"):
        mf.train.Saver(var_list=[], allow_empty=False)


def test_save_and_restore_take_a_monitored_session_and_run_no_hook(tmp_path):
    # TensorFlow refuses a MonitoredSession with TypeError ('sess' must be a Session);
    # mpiflow runs the save on its raw session, so the hooks see no step and a save
    # after the stop was requested works.
    mf.Variable(2.0, name="v")
    step = mf.train.get_or_create_global_step()
    train = mf.assign_add(step, 1)
    saver = mf.train.Saver()

    class Counter(mf.train.SessionRunHook):
        runs = 0

        def after_run(self, run_context, run_values):
            Counter.runs += 1

    hooks = [Counter(), mf.train.StopAtStepHook(last_step=1)]
    with mf.train.MonitoredTrainingSession(hooks=hooks, progress_bar=False) as sess:
        while not sess.should_stop():
            sess.run(train)
        prefix = saver.save(sess, str(tmp_path / "m"), global_step=step)
        saver.restore(sess, prefix)
    assert prefix == str(tmp_path / "m-1") and Counter.runs == 1
    assert mf.train.load_variable(prefix, "v") == 2.0
    with pytest.raises(mf.errors.FailedPreconditionError, match="MonitoredSession is closed"):
        saver.save(sess, str(tmp_path / "late"))


# -- state file and max_to_keep --------------------------------------------------------------

def test_max_to_keep_deletes_the_oldest_after_updating_the_state_file(tmp_path):
    mf.Variable(np.ones(3), name="v")
    saver = mf.train.Saver(max_to_keep=2)
    base = str(tmp_path / "model")
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for step in range(5):
            saver.save(sess, base, global_step=step)
    assert saver.last_checkpoints == [base + "-3", base + "-4"]
    assert sorted(re.sub(r"\.[0-9a-f]{16}\.npz$", ".<id>.npz", f)
                  for f in os.listdir(tmp_path)) == [
        "checkpoint", "model-3.index.json", "model-3.shard-00000-of-00001.<id>.npz",
        "model-4.index.json", "model-4.shard-00000-of-00001.<id>.npz"]
    text = (tmp_path / "checkpoint").read_text()
    assert text.startswith('model_checkpoint_path: "model-4"\n'
                           'all_model_checkpoint_paths: "model-3"\n'
                           'all_model_checkpoint_paths: "model-4"\n')
    state = mf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == base + "-4"
    assert state.all_model_checkpoint_paths == [base + "-3", base + "-4"]
    assert len(state.all_model_checkpoint_timestamps) == 2
    assert mf.train.latest_checkpoint(str(tmp_path)) == base + "-4"


def test_keep_checkpoint_every_n_hours_spares_checkpoints_pushed_out(tmp_path):
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver(max_to_keep=1, keep_checkpoint_every_n_hours=1e-9)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        for step in range(3):
            saver.save(sess, str(tmp_path / "model"), global_step=step)
    assert all(mf.train.checkpoint_exists(str(tmp_path / f"model-{s}")) for s in range(3))
    assert saver.last_checkpoints == [str(tmp_path / "model-2")]


def test_write_state_false_and_recover_last_checkpoints(tmp_path):
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver(max_to_keep=2)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        saver.save(sess, str(tmp_path / "model"), global_step=1, write_state=False)
        assert mf.train.latest_checkpoint(str(tmp_path)) is None
        assert saver.last_checkpoints == []
        saver.save(sess, str(tmp_path / "model"), global_step=2)
        other = mf.train.Saver(max_to_keep=2)
        state = mf.train.get_checkpoint_state(str(tmp_path))
        other.recover_last_checkpoints(state.all_model_checkpoint_paths + ["gone"])
        assert other.last_checkpoints == [str(tmp_path / "model-2")]


def test_latest_checkpoint_without_a_state_file_is_none(tmp_path):
    assert mf.train.latest_checkpoint(str(tmp_path)) is None
    assert mf.train.latest_checkpoint(str(tmp_path / "missing")) is None
    assert mf.train.get_checkpoint_state(str(tmp_path)) is None
    assert not mf.train.checkpoint_exists(str(tmp_path / "model"))


def test_latest_checkpoint_is_none_when_the_named_checkpoint_is_gone(tmp_path):
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model-9"\n')
    assert mf.train.get_checkpoint_state(str(tmp_path)).model_checkpoint_path == \
        str(tmp_path / "model-9")
    assert mf.train.latest_checkpoint(str(tmp_path)) is None


@pytest.mark.parametrize("text,what", [
    ("model_checkpoint_path: model-1\n", "line 1"),
    ('model_checkpoint_path: "a"\nmodel_checkpoint_path: "b"\n', "appears 2 times"),
    ('all_model_checkpoint_paths: "a"\n', "no model_checkpoint_path"),
    ('bogus_field: "a"\n', "line 1"),
])
def test_a_malformed_state_file_is_rejected_naming_it(tmp_path, text, what):
    (tmp_path / "checkpoint").write_text(text)
    with pytest.raises(mf.errors.DataLossError) as info:
        mf.train.latest_checkpoint(str(tmp_path))
    assert str(tmp_path / "checkpoint") in str(info.value) and what in str(info.value)


def test_state_file_paths_round_trip_escapes(tmp_path):
    odd = str(tmp_path / 'we"ird\\näme')
    mf.train.update_checkpoint_state(str(tmp_path), odd)
    assert mf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == [odd]


# -- partitioned variables and slots ----------------------------------------------------------

@pytest.mark.parametrize("saved_parts,restored_parts", [
    (2, 3), (2, 1), (2, None), (3, 2), (None, 3), (3, 3)])
def test_partitioned_variable_restores_into_any_partitioning(tmp_path, saved_parts,
                                                            restored_parts):
    prefix, (saved,) = _saved(tmp_path, lambda: [_emb(saved_parts)])
    np.testing.assert_array_equal(saved, FULL)
    (got,) = _restored(prefix, lambda: [_emb(restored_parts, initializer=mf.zeros_initializer())])
    np.testing.assert_array_equal(got, FULL)


def test_restore_slice_assembles_any_box_from_the_saved_pieces(tmp_path):
    prefix, _ = _saved(tmp_path, lambda: [_emb(3)])
    filename = io_ops.path_tensor()
    box = io_ops.restore_slice(filename, "emb", "14 5 3,8:1,3", mf.float32, [8, 3])
    with mf.Session() as sess:
        got = sess.run(box, {filename: io_ops.encode_path(prefix)})
    np.testing.assert_array_equal(got, FULL[3:11, 1:4])


def _checkpoint_values(prefix) -> dict:
    return {n: mf.train.load_variable(prefix, n) for n, _ in mf.train.list_variables(prefix)}


def test_optimizer_slots_and_accumulators_round_trip(tmp_path):
    def run(parts, restore_from, steps, name):
        """Build with ``parts``, start from a checkpoint (or init), train, save."""
        with mf.Graph().as_default():
            emb = _emb(parts)
            w = mf.get_variable(
                "w", initializer=np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2))
            logits = mf.matmul(mf.convert_to_tensor(emb), w)
            step = mf.train.get_or_create_global_step()
            train = mf.train.AdamOptimizer(0.01).minimize(mf.reduce_sum(mf.square(logits)),
                                                          global_step=step)
            saver = mf.train.Saver()
            with mf.Session() as sess:
                if restore_from:
                    saver.restore(sess, restore_from)
                else:
                    sess.run(mf.global_variables_initializer())
                for _ in range(steps):
                    sess.run(train)
                return saver.save(sess, str(tmp_path / name), global_step=step)

    a3 = run(2, None, 3, "a")
    a4 = run(2, a3, 1, "a")
    b3 = run(3, a3, 0, "b")
    b4 = run(None, a3, 1, "c")
    saved = _checkpoint_values(a3)
    assert {"emb", "emb/Adam", "emb/Adam_1", "w", "w/Adam", "w/Adam_1", "beta1_power",
            "beta2_power", "global_step"} == set(saved)
    assert saved["global_step"] == 3 and saved["emb/Adam"].shape == (14, 5)
    for name, value in _checkpoint_values(b3).items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    # One more step from the restored state is the step the saved state would have taken.
    after = _checkpoint_values(a4)
    for name, value in _checkpoint_values(b4).items():
        np.testing.assert_allclose(value, after[name], rtol=1e-6, err_msg=name)


# -- damaged, missing and interrupted checkpoints ----------------------------------------------

def _shard(directory, prefix, shard=0, num_shards=1):
    """The file of shard ``shard`` of the checkpoint ``prefix`` in ``directory``."""
    (found,) = directory.glob(f"{prefix}.shard-{shard:05d}-of-{num_shards:05d}.*.npz")
    return found


def _plain(tmp_path, step=None):
    return _saved(tmp_path, lambda: [mf.Variable(np.arange(6.0), name="weights")], step=step)


def test_a_truncated_shard_is_data_loss_naming_the_file(tmp_path):
    prefix, _ = _plain(tmp_path)
    shard = _shard(tmp_path, "model")
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(mf.errors.DataLossError, match="truncated or corrupted") as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])
    assert str(shard) in str(info.value)


def test_a_flipped_byte_in_a_shard_is_data_loss(tmp_path):
    prefix, _ = _plain(tmp_path)
    shard = _shard(tmp_path, "model")
    data = bytearray(shard.read_bytes())
    at = data.index(np.arange(6.0).tobytes())
    data[at + 9] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(mf.errors.DataLossError, match=str(shard)):
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])


@pytest.mark.parametrize("damage", ["truncated", "not_an_index", "bad_piece"])
def test_a_corrupted_index_is_data_loss_naming_it(tmp_path, damage):
    prefix, _ = _plain(tmp_path)
    index = tmp_path / "model.index.json"
    text = index.read_text()
    if damage == "truncated":
        index.write_text(text[: len(text) // 2])
    elif damage == "not_an_index":
        index.write_text(json.dumps({"tensors": []}))
    else:
        document = json.loads(text)
        document["tensors"]["weights"][0]["slice"] = "6 0,3"
        index.write_text(json.dumps(document))
    with pytest.raises(mf.errors.DataLossError) as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])
    assert "model" in str(info.value) and "corrupted" in str(info.value)


def test_a_shard_that_does_not_match_the_index_is_data_loss(tmp_path):
    prefix, _ = _plain(tmp_path)
    shard = _shard(tmp_path, "model")
    with np.load(shard, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    members["0_weights"] = members["0_weights"].astype(np.float32)
    np.savez(shard, **members)
    with pytest.raises(mf.errors.DataLossError, match="does not match the index") as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])
    assert str(shard) in str(info.value) and "'dtype': 'float32'" in str(info.value)


def test_a_shape_in_the_index_that_the_shard_does_not_have_is_data_loss(tmp_path):
    prefix, _ = _plain(tmp_path)
    index = tmp_path / "model.index.json"
    document = json.loads(index.read_text())
    document["tensors"]["weights"][0]["shape"] = [7]
    index.write_text(json.dumps(document))
    with pytest.raises(mf.errors.DataLossError, match="does not match the index") as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(7), name="weights")])
    assert "'shape': [6]" in str(info.value)


def test_a_missing_key_is_not_found_naming_the_key_and_close_keys(tmp_path):
    prefix, _ = _plain(tmp_path)
    with pytest.raises(mf.errors.NotFoundError) as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weight")])
    message = str(info.value)
    assert "Key 'weight' not found" in message and prefix in message
    assert "close keys: 'weights'" in message


def test_a_missing_key_read_by_the_op_is_not_found_too(tmp_path):
    prefix, _ = _plain(tmp_path)
    filename = io_ops.path_tensor()
    value = io_ops.restore_slice(filename, "wieghts", "", mf.float64, [6])
    with mf.Session() as sess, pytest.raises(mf.errors.NotFoundError, match="'weights'"):
        sess.run(value, {filename: io_ops.encode_path(prefix)})


def test_a_shape_or_dtype_mismatch_is_invalid_argument_naming_both(tmp_path):
    prefix, _ = _plain(tmp_path)
    with pytest.raises(mf.errors.InvalidArgumentError) as info:
        _restored(prefix, lambda: [mf.Variable(np.zeros(5), name="weights")])
    assert "expected shape [5], got shape [6]" in str(info.value)
    with pytest.raises(mf.errors.InvalidArgumentError, match="expected float32, got float64"):
        _restored(prefix, lambda: [mf.Variable(np.zeros(6, np.float32), name="weights")])


def test_restore_of_a_missing_checkpoint_names_the_path(tmp_path):
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    with mf.Session() as sess, pytest.raises(mf.errors.NotFoundError) as info:
        saver.restore(sess, str(tmp_path / "nothing-3"))
    assert "not a valid checkpoint" in str(info.value)
    assert str(tmp_path / "nothing-3.index.json") in str(info.value)
    # TensorFlow's Saver raises a ValueError there: code that catches one still does.
    assert isinstance(info.value, ValueError)


# -- init_from_checkpoint ----------------------------------------------------------------------
# Which variables start from which tensors, and which maps are refused, as TF 2.21's
# tf.compat.v1 did on the same maps: 'old/w' = 0..5, 'old/b' = ones, 'old/emb' the
# [14, 5] FULL in 2 parts, 'top' = 7.

W0 = np.arange(6, dtype=np.float32).reshape(2, 3)


def _pretrained(tmp_path) -> str:
    with mf.Graph().as_default():
        with mf.variable_scope("old"):
            mf.get_variable("w", initializer=W0)
            mf.get_variable("b", [3], initializer=mf.ones_initializer())
            _emb(2)
        mf.get_variable("top", [], initializer=mf.constant_initializer(7.0))
        saver = mf.train.Saver()
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            return saver.save(sess, str(tmp_path / "pretrained"), global_step=3)


def _fine_tuned(assignment_map, ckpt, scope="new", emb_parts=3, extra=True):
    """Build the new model, map it onto ``ckpt``, initialize; return its values by name."""
    with mf.Graph().as_default():
        with mf.variable_scope(scope):
            mf.get_variable("w", [2, 3], initializer=mf.zeros_initializer())
            mf.get_variable("b", [3], initializer=mf.zeros_initializer())
            emb = _emb(emb_parts, initializer=mf.zeros_initializer())
            if extra:
                mf.get_variable("extra", [], initializer=mf.constant_initializer(-1.0))
        mf.train.init_from_checkpoint(
            ckpt, assignment_map() if callable(assignment_map) else assignment_map)
        return _initialized_values(emb, scope)


def _initialized_values(emb, scope) -> dict:
    """Every variable's value after the initializers ran, by name; the partitioned
    ``emb`` whole, as ``<scope>/emb``."""
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        got = {v.op.name: sess.run(v) for v in mf.global_variables()
               if v._save_slice_info is None}
        got[f"{scope}/emb"] = sess.run(mf.convert_to_tensor(emb))
        return got


def test_init_from_checkpoint_maps_a_scope_onto_another_partitioning_included(tmp_path):
    got = _fine_tuned({"old/": "new/"}, _pretrained(tmp_path), extra=False)
    np.testing.assert_array_equal(got["new/w"], W0)
    np.testing.assert_array_equal(got["new/b"], np.ones(3))
    np.testing.assert_array_equal(got["new/emb"], FULL)     # saved in 2 parts, now 3


def test_init_from_checkpoint_maps_single_names_and_leaves_the_rest_to_their_initializers(
        tmp_path):
    prefix = _pretrained(tmp_path)
    got = _fine_tuned({"old/w": "new/w", "top": "new/extra"}, str(tmp_path))  # a directory
    np.testing.assert_array_equal(got["new/w"], W0)
    assert got["new/extra"] == 7.0
    np.testing.assert_array_equal(got["new/b"], np.zeros(3))
    np.testing.assert_array_equal(got["new/emb"], np.zeros((14, 5)))
    got = _fine_tuned({"old/emb": "new/emb"}, prefix, emb_parts=None)   # into one whole
    np.testing.assert_array_equal(got["new/emb"], FULL)


def test_init_from_checkpoint_takes_variables_lists_of_parts_and_the_root(tmp_path):
    prefix = _pretrained(tmp_path)
    got = _fine_tuned(lambda: {
        "old/w": next(v for v in mf.global_variables() if v.op.name == "new/w"),
        "old/emb": [v for v in mf.global_variables() if v.op.name.startswith("new/emb/")]},
        prefix)
    np.testing.assert_array_equal(got["new/w"], W0)
    np.testing.assert_array_equal(got["new/emb"], FULL)
    got = _fine_tuned({"/": "/"}, prefix, scope="old", extra=False)
    np.testing.assert_array_equal(got["old/w"], W0)
    np.testing.assert_array_equal(got["old/emb"], FULL)


@pytest.mark.parametrize("assignment_map,message", [
    ({"old/nope": "new/w"}, r"tensor 'old/nope' is not in checkpoint .*holds: old/b"),
    ({"old/b": "new/w"}, (r"shape of variable 'new/w' \(\[2, 3\]\) does not match tensor "
                          r"'old/b' \(\[3\]\)")),
    ({"old/w": "new/nothing"}, r"'new/nothing' is no variable .* must map a scope to a scope"),
    ({"old/": "new"}, r"must map a scope to a scope, both ending in '/'"),
    ({"old/": "new/"}, r"tensor 'old/extra' \(for variable 'new/extra' of scope 'new/'"),
])
def test_init_from_checkpoint_refuses_a_map_that_does_not_fit_naming_it(
        tmp_path, assignment_map, message):
    # TensorFlow raises a ValueError in each case: InvalidArgumentError is one.
    with pytest.raises(mf.errors.InvalidArgumentError, match=message):
        _fine_tuned(assignment_map, _pretrained(tmp_path))


def test_init_from_checkpoint_of_no_checkpoint_is_not_found(tmp_path):
    with pytest.raises(mf.errors.NotFoundError, match="not found"):
        _fine_tuned({"old/w": "new/w"}, str(tmp_path / "nope"))


def test_init_from_checkpoint_starts_a_monitored_session_unless_it_has_its_own_checkpoint(
        tmp_path):
    prefix = _pretrained(tmp_path)

    def train(steps):
        with mf.Graph().as_default():
            step = mf.train.get_or_create_global_step()
            with mf.variable_scope("new"):
                w = mf.get_variable("w", [2, 3], initializer=mf.zeros_initializer())
            mf.train.init_from_checkpoint(prefix, {"old/w": "new/w"})
            op = mf.group(mf.assign_add(w, np.ones((2, 3), np.float32)),
                          mf.assign_add(step, 1))
            with mf.train.MonitoredTrainingSession(
                    checkpoint_dir=str(tmp_path / "run"), save_checkpoint_steps=100,
                    progress_bar=False, log_step_count_steps=None) as sess:
                for _ in range(steps):
                    sess.run(op)
                return sess.run(w)
    np.testing.assert_array_equal(train(2), W0 + 2)
    np.testing.assert_array_equal(train(1), W0 + 3)    # resumed from run/, not pretrained


def test_a_latest_filename_with_a_directory_is_refused_before_anything_is_written(tmp_path):
    # As TensorFlow's Saver.save (ValueError "'latest_filename' must not contain path
    # components"); the checkpoint used to be written and the state file then failed
    # with a NotFoundError.
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        with pytest.raises(mf.errors.InvalidArgumentError, match="must not contain path"):
            saver.save(sess, str(tmp_path / "m"), latest_filename="sub/state")
    assert os.listdir(tmp_path) == []


def test_save_into_a_missing_directory_is_an_error(tmp_path):
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                             match="doesn't exist"):
        sess.run(mf.global_variables_initializer())
        saver.save(sess, str(tmp_path / "no" / "model"))


@pytest.mark.parametrize("failing", [".shard-", ".index.json"])
def test_a_save_interrupted_before_the_rename_keeps_the_previous_checkpoint(
        tmp_path, monkeypatch, failing):
    v = mf.Variable(np.arange(6.0), name="weights")
    saver = mf.train.Saver()
    real_replace = os.replace

    def replace(src, dst):
        if failing in os.fspath(dst):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        first = saver.save(sess, str(tmp_path / "model"), global_step=1)
        state_before = (tmp_path / "checkpoint").read_text()
        sess.run(v.assign(np.zeros(6)))
        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(mf.errors.ResourceExhaustedError, match="No space left"):
            saver.save(sess, str(tmp_path / "model"), global_step=2)
        monkeypatch.undo()
        assert mf.train.latest_checkpoint(str(tmp_path)) == first
        assert (tmp_path / "checkpoint").read_text() == state_before
        assert not mf.train.checkpoint_exists(str(tmp_path / "model-2"))
        assert not [f for f in os.listdir(tmp_path) if fmt.TEMP_MARK in f]
        saver.restore(sess, mf.train.latest_checkpoint(str(tmp_path)))
        np.testing.assert_array_equal(sess.run(v), np.arange(6.0))


def test_checkpoint_files_are_loaded_without_pickle(tmp_path, monkeypatch):
    prefix, _ = _plain(tmp_path)
    calls = []
    real_read = np.lib.format.read_array

    def spy(*args, **kwargs):
        calls.append(kwargs.get("allow_pickle"))
        return real_read(*args, **kwargs)
    monkeypatch.setattr(np.lib.format, "read_array", spy)
    _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])
    assert calls and all(c is False for c in calls)
    monkeypatch.undo()
    shard = _shard(tmp_path, "model")
    with np.load(shard, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    members["0_weights"] = np.array([object()] * 6, dtype=object)
    np.savez(shard, **members)
    with pytest.raises(mf.errors.DataLossError, match="pickle"):
        _restored(prefix, lambda: [mf.Variable(np.zeros(6), name="weights")])


# -- sharding ---------------------------------------------------------------------------------

def test_one_save_shard_per_device_colocated_with_its_variables(tmp_path):
    with mf.device("/job:ps/task:0"):
        a = mf.Variable(np.arange(3.0), name="a")
        c = mf.Variable(np.int32(4), name="c")
    with mf.device("/job:ps/task:1"):
        b = mf.Variable(np.ones((2, 2)), name="b")
    saver = mf.train.Saver()
    shards = [op for op in mf.get_default_graph().get_operations() if op.type == "SaveShard"]
    assert [op.device for op in shards] == [a.device, b.device]
    assert [op.get_attr("names") for op in shards] == [["a", "c"], ["b"]]
    restores = [op for op in mf.get_default_graph().get_operations()
                if op.type == "RestoreSlice"]
    assert [op.device for op in restores] == [a.device, c.device, b.device]
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "m"))
    index = json.loads((tmp_path / "m.index.json").read_text())
    assert index["num_shards"] == 2 and index["mpiflow_version"] == mf.__version__
    assert index["tensors"]["b"][0]["file"] == \
        f"m.shard-00001-of-00002.{index['save_id']}.npz"
    np.testing.assert_array_equal(mf.train.load_variable(prefix, "a"), np.arange(3.0))


def test_unsharded_saver_writes_one_file(tmp_path):
    with mf.device("/job:ps/task:0"):
        mf.Variable(1.0, name="a")
    with mf.device("/job:ps/task:1"):
        mf.Variable(2.0, name="b")
    saver = mf.train.Saver(sharded=False)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        saver.save(sess, str(tmp_path / "m"))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m.index.json",
                                            _shard(tmp_path, "m").name]


def test_a_finalized_graph_can_still_save_and_restore(tmp_path):
    v = mf.Variable(np.arange(4.0), name="v")
    saver = mf.train.Saver()
    init = mf.global_variables_initializer()
    mf.get_default_graph().finalize()
    with mf.Session() as sess:
        sess.run(init)
        prefix = saver.save(sess, str(tmp_path / "m"), global_step=1)
        saver.restore(sess, prefix)
        np.testing.assert_array_equal(sess.run(v), np.arange(4.0))


def test_save_shard_and_restore_slice_check_their_inputs():
    filename = io_ops.path_tensor()
    with pytest.raises(mf.errors.InvalidArgumentError, match="one name and one slice"):
        io_ops.save_shard(filename, filename, [mf.constant(1.0)], ["a", "b"], [""])
    with pytest.raises(mf.errors.InvalidArgumentError, match="uint8"):
        io_ops.restore_slice(mf.constant([1.0]), "a", "", mf.float32)
    with pytest.raises(mf.errors.InvalidArgumentError, match="Malformed slice spec"):
        io_ops.restore_slice(filename, "a", "4 2 0,2", mf.float32, [2, 2])
    with pytest.raises(mf.errors.InvalidArgumentError, match="does not have the shape"):
        io_ops.save_shard(filename, filename, [mf.constant(np.zeros((3, 2)))], ["a"],
                          ["4 2 0,2:0,2"])


def test_checkpoints_handed_to_set_last_checkpoints_are_never_rotated_away(tmp_path):
    # As TensorFlow: they are timed at infinity, so keep_checkpoint_every_n_hours keeps
    # them; the Saver's own rotate as usual.
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver(max_to_keep=2)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        old = [saver.save(sess, str(tmp_path / "old"), global_step=s) for s in (1, 2)]
        keeper = mf.train.Saver(max_to_keep=2)
        keeper.set_last_checkpoints(old)
        new = [keeper.save(sess, str(tmp_path / "new"), global_step=s) for s in (3, 4)]
    assert all(mf.train.checkpoint_exists(p) for p in old + new)
    assert keeper.last_checkpoints == new


@pytest.mark.parametrize("method, given", [
    ("set_last_checkpoints", "model.ckpt-1"),
    ("set_last_checkpoints", ("model.ckpt-1", "model.ckpt-2")),
    ("set_last_checkpoints_with_time", "model.ckpt-1"),
    ("set_last_checkpoints_with_time", (("model.ckpt-1", 1.0),)),
])
def test_set_last_checkpoints_refuses_anything_but_a_list(method, given):
    # TensorFlow asserts a list (AssertionError for a str or a tuple): a prefix given
    # alone was taken letter by letter, ['m', 'o', 'd', ...].
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    with pytest.raises(TypeError, match=rf"{method} takes a list of .*, got "
                                        rf"{type(given).__name__}"):
        getattr(saver, method)(given)
    assert saver.last_checkpoints == []


def test_set_last_checkpoints_refuses_pairs_naming_the_method_that_takes_them():
    mf.Variable(1.0, name="v")
    with pytest.raises(TypeError, match=r"got \('a', 1.0\) in it \(set_last_checkpoints_"
                                        r"with_time takes"):
        mf.train.Saver().set_last_checkpoints([("a", 1.0)])


def test_a_save_reads_its_step_when_its_turn_comes_so_the_latest_is_the_newest(tmp_path):
    # A Supervisor's checkpoint thread and a script's own save can save at once: a step
    # read before waiting for the other save named this later save after an older step
    # (model.ckpt-0 holding step 30's values), and that became the latest checkpoint.
    step = mf.train.get_or_create_global_step()
    advance = step.assign(30)
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        with saver_module._directory_lock(str(tmp_path)):     # another save under way
            waiting = threading.Thread(target=saver.save, args=(sess, str(tmp_path / "m")),
                                       kwargs={"global_step": step})
            waiting.start()
            time.sleep(0.3)
            sess.run(advance)           # the step moves on while this save waits
        waiting.join(10)
    assert mf.train.latest_checkpoint(str(tmp_path)).endswith("m-30")


def _warm_started(ckpt, *args, scope="old", top_trainable=False, **kwargs):
    """The pretrained model's variables (under ``scope``), zeros (top: -1, not trainable
    unless ``top_trainable``), warm-started by ``warm_start(ckpt, ...)``; their values."""
    with mf.Graph().as_default():
        with mf.variable_scope(scope):
            w = mf.get_variable("w", [2, 3], initializer=mf.zeros_initializer())
            mf.get_variable("b", [3], initializer=mf.zeros_initializer())
            emb = _emb(3, initializer=mf.zeros_initializer())
        mf.get_variable("top", [], initializer=mf.constant_initializer(-1.0),
                        trainable=top_trainable)
        mf.train.warm_start(ckpt, *[a(w) if callable(a) else a for a in args], **kwargs)
        return _initialized_values(emb, scope)


def test_warm_start_takes_every_trainable_variable_by_its_name_by_default(tmp_path):
    got = _warm_started(_pretrained(tmp_path))
    np.testing.assert_array_equal(got["old/w"], W0)
    np.testing.assert_array_equal(got["old/b"], np.ones(3))
    np.testing.assert_array_equal(got["old/emb"], FULL)     # saved in 2 parts, now 3
    assert got["top"] == -1.0                               # not trainable: left alone


def test_warm_start_picks_by_pattern_by_list_of_patterns_or_by_variables(tmp_path):
    prefix = _pretrained(tmp_path)
    got = _warm_started(prefix, "old/(w|b)")       # matched at the start of the names
    np.testing.assert_array_equal(got["old/b"], np.ones(3))
    np.testing.assert_array_equal(got["old/emb"], np.zeros((14, 5)))
    got = _warm_started(prefix, ["old/w", "top"])    # a list: among all global variables
    np.testing.assert_array_equal(got["old/w"], W0)
    assert got["top"] == 7.0
    np.testing.assert_array_equal(got["old/b"], np.zeros(3))
    got = _warm_started(prefix, lambda w: [w])
    np.testing.assert_array_equal(got["old/w"], W0)
    np.testing.assert_array_equal(got["old/b"], np.zeros(3))
    got = _warm_started(prefix, None, top_trainable=True)      # None: none
    np.testing.assert_array_equal(got["old/w"], np.zeros((2, 3)))


def test_warm_start_reads_a_renamed_variable_from_its_previous_name(tmp_path):
    got = _warm_started(_pretrained(tmp_path), "new/", scope="new",
                        var_name_to_prev_var_name={"new/w": "old/w", "new/b": "old/b",
                                                   "new/emb": "old/emb"})
    np.testing.assert_array_equal(got["new/w"], W0)
    np.testing.assert_array_equal(got["new/emb"], FULL)


def test_warm_start_refuses_a_misspelt_rename_and_vocabularies_before_changing_anything(
        tmp_path):
    prefix = _pretrained(tmp_path)
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"names \['old/ww'\], which are not among the variables"):
        _warm_started(prefix, var_name_to_prev_var_name={"old/ww": "old/w"})
    with pytest.raises(mf.errors.UnimplementedError, match="var_name_to_vocab_info"):
        _warm_started(prefix, var_name_to_vocab_info={"old/emb": object()})
