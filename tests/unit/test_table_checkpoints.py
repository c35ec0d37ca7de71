"""A checkpoint of an embedding table keeps every id's row, whatever the part count on
restore, where the lookup allows it ("div"); where it cannot ("mod" between different part
counts) the restore is an error naming the table and both counts, never other ids' rows."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors

VOCAB, DIM = 11, 3
IDS = np.arange(VOCAB)


def _table_rows(parts, strategy, checkpoint=None, save_to=None):
    """Build a table in ``parts`` parts (0: one variable), look every id up with
    ``strategy``; restore ``checkpoint`` (or initialize); return the rows (and save)."""
    graph = mf.Graph()
    with graph.as_default():
        mf.set_random_seed(1)
        partitioner = mf.fixed_size_partitioner(parts) if parts else None
        table = mf.get_variable("emb", [VOCAB, DIM], partitioner=partitioner)
        ids = mf.placeholder(mf.int64, [None])
        rows = mf.nn.embedding_lookup(table, ids, partition_strategy=strategy)
        saver = mf.train.Saver()
        with mf.Session() as sess:
            if checkpoint:
                saver.restore(sess, checkpoint)
            else:
                sess.run(mf.global_variables_initializer())
            values = sess.run(rows, {ids: IDS})
            if save_to:
                saver.save(sess, save_to)
    return values


@pytest.mark.parametrize("saved_parts,restored_parts", [(2, 3), (3, 0), (0, 2), (2, 2)])
def test_a_div_table_keeps_every_ids_row_in_any_part_count(tmp_path, saved_parts,
                                                           restored_parts):
    prefix = str(tmp_path / "model")
    before = _table_rows(saved_parts, "div", save_to=prefix)
    after = _table_rows(restored_parts, "div", checkpoint=prefix)
    np.testing.assert_array_equal(after, before)


def test_a_mod_table_restores_into_the_same_part_count(tmp_path):
    prefix = str(tmp_path / "model")
    before = _table_rows(3, "mod", save_to=prefix)
    np.testing.assert_array_equal(_table_rows(3, "mod", checkpoint=prefix), before)


@pytest.mark.parametrize("saved,restored", [((2, "mod"), (3, "mod")), ((2, "mod"), (0, "mod")),
                                            ((0, "mod"), (2, "mod")), ((2, "div"), (2, "mod")),
                                            ((2, "mod"), (3, "div"))])
def test_a_mod_table_between_part_counts_is_refused_naming_it(tmp_path, saved, restored):
    prefix = str(tmp_path / "model")
    _table_rows(*saved, save_to=prefix)
    with pytest.raises(errors.InvalidArgumentError,
                       match=rf"table 'emb'.*saved in {max(saved[0], 1)} part\(s\) into "
                             rf"{max(restored[0], 1)} part\(s\).*'mod'"):
        _table_rows(*restored, checkpoint=prefix)


def _unlooked_table(parts, checkpoint):
    """The ``parts`` of a table that this graph never looks up, restored from
    ``checkpoint``, as one array."""
    graph = mf.Graph()
    with graph.as_default():
        table = mf.get_variable("emb", [VOCAB, DIM],
                                partitioner=mf.fixed_size_partitioner(parts))
        saver = mf.train.Saver()
        with mf.Session() as sess:
            saver.restore(sess, checkpoint)
            return np.concatenate(sess.run(list(table)))


def test_a_mod_table_restores_into_its_own_parts_where_nothing_looks_it_up(tmp_path):
    # No lookup now: each part restores as saved where it is one of the saved parts.
    prefix = str(tmp_path / "model")
    _table_rows(2, "mod", save_to=prefix)
    expected = mf.train.NewCheckpointReader(prefix).get_tensor("emb")
    np.testing.assert_array_equal(_unlooked_table(2, prefix), expected)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"table 'emb'.*saved in 2 part\(s\) into other parts \(lookups: "
                             r"'mod' when saved, 'none' now\)"):
        _unlooked_table(3, prefix)


def test_a_table_looked_up_both_ways_is_refused():
    table = mf.get_variable("emb", [VOCAB, DIM], partitioner=mf.fixed_size_partitioner(2))
    mf.nn.embedding_lookup(table, [1], partition_strategy="div")
    with pytest.raises(errors.InvalidArgumentError, match="'emb' is looked up with"):
        mf.nn.embedding_lookup(table, [1], partition_strategy="mod")


def test_a_table_chooses_its_own_lookup_when_the_caller_does_not():
    table = mf.get_variable("emb", [VOCAB, DIM], partitioner=mf.fixed_size_partitioner(2))
    table.lookup_strategy = "div"
    mf.nn.embedding_lookup(table, [1])
    assert {v._save_slice_info.lookup for v in table} == {"div"}
    other = mf.get_variable("other", [VOCAB, DIM], partitioner=mf.fixed_size_partitioner(2))
    mf.nn.embedding_lookup(other, [1])
    assert {v._save_slice_info.lookup for v in other} == {"mod"}     # TensorFlow's default
