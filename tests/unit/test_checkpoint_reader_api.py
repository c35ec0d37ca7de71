"""tf.train.NewCheckpointReader and load_checkpoint on mpiflow's sharded checkpoints: every
tensor under its full name and shape (a partitioned variable whole, its parts spread over
ps shards), values, dtypes, agreement with list_variables/load_variable, and errors that
name the checkpoint and the tensor."""

import json
from pathlib import Path

import numpy as np
import pytest

import mpiflow as mf

TABLE = np.arange(70, dtype=np.float32).reshape(14, 5)


@pytest.fixture
def saved(tmp_path):
    """A checkpoint with a table split in 3 parts over 2 ps shards, and plain variables."""
    with mf.device(mf.train.replica_device_setter(ps_tasks=2)):
        mf.get_variable("emb", initializer=TABLE, partitioner=mf.fixed_size_partitioner(3))
        mf.Variable(np.arange(4, dtype=np.int64).reshape(2, 2), name="counts")
        mf.Variable(np.float64(2.5), name="scale")
        step = mf.train.get_or_create_global_step()
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        sess.run(mf.assign(step, 7))
        prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
    return prefix


def test_the_reader_shows_whole_variables_under_their_full_names(saved):
    reader = mf.train.NewCheckpointReader(saved)
    shapes = reader.get_variable_to_shape_map()
    assert shapes == {"emb": [14, 5], "counts": [2, 2], "scale": [], "global_step": []}
    assert reader.get_variable_to_dtype_map() == {
        "emb": mf.float32, "counts": mf.int64, "scale": mf.float64, "global_step": mf.int64}
    np.testing.assert_array_equal(reader.get_tensor("emb"), TABLE)
    np.testing.assert_array_equal(reader.get_tensor("counts"), [[0, 1], [2, 3]])
    assert reader.get_tensor("scale") == 2.5 and reader.get_tensor("global_step") == 7
    assert reader.has_tensor("emb")
    assert not reader.has_tensor("emb/part_0")


def test_keys_are_variable_names_as_in_tensorflow_s_reader(saved):
    # TensorFlow's reader: has_tensor("w:0") is False and get_tensor("w:0") a
    # NotFoundError (here one that names the key to use); load_variable drops the ":0".
    reader = mf.train.NewCheckpointReader(saved)
    assert not reader.has_tensor("emb:0") and not reader.has_tensor("scale:0")
    with pytest.raises(mf.errors.NotFoundError, match="use 'scale'"):
        reader.get_tensor("scale:0")
    assert mf.train.load_variable(saved, "scale:0") == 2.5
    assert reader.debug_string() == (b"counts (DT_INT64) [2,2]\nemb (DT_FLOAT) [14,5]\n"
                                     b"global_step (DT_INT64) []\nscale (DT_DOUBLE) []\n")


def test_the_table_parts_were_really_spread_over_shards(saved):
    index = json.loads(Path(saved + ".index.json").read_text())
    assert index["num_shards"] == 2
    assert len({piece["file"] for piece in index["tensors"]["emb"]}) == 2


def test_load_checkpoint_reads_the_newest_checkpoint_of_a_directory(saved, tmp_path):
    reader = mf.train.load_checkpoint(str(tmp_path))
    assert reader.prefix == saved
    np.testing.assert_array_equal(reader.get_tensor("emb"), TABLE)


def test_list_variables_and_load_variable_agree_with_the_reader(saved, tmp_path):
    reader = mf.train.load_checkpoint(saved)
    for where in (saved, str(tmp_path)):
        assert mf.train.list_variables(where) == sorted(
            reader.get_variable_to_shape_map().items())
        for name in reader.get_variable_to_shape_map():
            np.testing.assert_array_equal(mf.train.load_variable(where, name),
                                          reader.get_tensor(name))


def test_a_missing_tensor_names_the_checkpoint_and_the_closest_keys(saved):
    reader = mf.train.NewCheckpointReader(saved)
    with pytest.raises(mf.errors.NotFoundError) as info:
        reader.get_tensor("embb")
    assert "'embb'" in str(info.value) and saved in str(info.value)
    assert "'emb'" in str(info.value)


def test_a_missing_checkpoint_is_a_not_found_error_naming_it(tmp_path):
    missing = str(tmp_path / "nothing.ckpt-3")
    for open_it in (mf.train.NewCheckpointReader, mf.train.load_checkpoint,
                    mf.train.list_variables):
        with pytest.raises(mf.errors.NotFoundError, match="nothing.ckpt-3"):
            open_it(missing)
    with pytest.raises(mf.errors.NotFoundError, match="No checkpoint found in directory"):
        mf.train.load_checkpoint(str(tmp_path))
