"""A checkpoint is one unit: nothing lost, nothing mixed. Each save has an identity its
shards and index share; a restore refuses a mix and picks the newest whole checkpoint;
paths never leave the checkpoint directory; dead saves' leftovers go; restore reads each
shard's directory once."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops import checkpoint_format as fmt
from mpiflow.ops import checkpoint_reader


def _two_shard_model(scale):
    """Variables on two devices, so a sharded save writes two shards."""
    with mf.device("/job:ps/task:0"):
        a = mf.Variable(np.full(3, scale, np.float32), name="a")
    with mf.device("/job:ps/task:1"):
        big = mf.Variable(np.full((4, 2), 10 * scale, np.float32), name="big")
    return a, big


def _save(directory, scale, prefix="model", **kwargs):
    with mf.Graph().as_default():
        _two_shard_model(scale)
        saver = mf.train.Saver()
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            return saver.save(sess, str(directory / prefix), **kwargs)


def _restore(prefix):
    with mf.Graph().as_default():
        a, big = _two_shard_model(0.0)
        with mf.Session() as sess:
            mf.train.Saver().restore(sess, prefix)
            return sess.run([a, big])


def test_a_save_to_a_fixed_prefix_that_fails_midway_keeps_the_previous_checkpoint(
        tmp_path, monkeypatch):
    prefix = _save(tmp_path, 1.0)
    real_replace, renames = os.replace, []

    def second_shard_fails(src, dst):
        if ".shard-" in os.fspath(dst):
            renames.append(dst)
            if len(renames) == 2:
                raise OSError(28, "No space left on device")
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", second_shard_fails)
    with pytest.raises(mf.errors.ResourceExhaustedError):
        _save(tmp_path, 2.0)
    monkeypatch.undo()
    a, big = _restore(prefix)            # all of the first save, none of the second
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(big, 10.0)
    _save(tmp_path, 3.0)                 # and the next save cleans up what that one left
    assert len(list(tmp_path.glob("model.shard-*"))) == 2
    np.testing.assert_array_equal(_restore(prefix)[0], 3.0)


def test_a_shard_of_another_save_is_refused_naming_it(tmp_path):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    _save(old_dir, 1.0)
    prefix = _save(new_dir, 2.0)
    (old_shard,) = old_dir.glob("model.shard-00001-*")
    (new_shard,) = new_dir.glob("model.shard-00001-*")
    shutil.copyfile(old_shard, new_shard)          # an older shard copied over a newer one
    with pytest.raises(mf.errors.DataLossError, match="belongs to another save") as info:
        _restore(prefix)
    assert str(new_shard) in str(info.value)
    assert mf.train.latest_checkpoint(str(new_dir)) is None


def test_a_damaged_piece_is_refused_by_its_digest(tmp_path):
    prefix = _save(tmp_path, 1.0)
    (shard,) = tmp_path.glob("model.shard-00000-*")
    data = bytearray(shard.read_bytes())
    at = data.index(np.full(3, 1.0, np.float32).tobytes())
    data[at + 1] ^= 0x40
    shard.write_bytes(bytes(data))
    with pytest.raises(mf.errors.DataLossError, match="CRC-32") as info:
        _restore(prefix)
    assert str(shard) in str(info.value) and "'a'" in str(info.value)


def _train_and_save(directory, steps, max_to_keep=5):
    """A one-process MonitoredTrainingSession saving every step; returns the prefixes."""
    with mf.Graph().as_default():
        v = mf.Variable(0.0, name="v")
        step = mf.train.get_or_create_global_step()
        train = mf.group(mf.assign_add(v, 1.0), mf.assign_add(step, 1))
        saver = mf.train.Saver(max_to_keep=max_to_keep)
        mf.add_to_collection(mf.GraphKeys.SAVERS, saver)
        with mf.train.MonitoredTrainingSession(
                checkpoint_dir=str(directory), save_checkpoint_steps=1,
                hooks=[mf.train.StopAtStepHook(last_step=steps)],
                progress_bar=False) as sess:
            start = None
            while not sess.should_stop():
                current = sess.run(step)
                start = current if start is None else start
                sess.run(train)
    return start


def test_a_restart_resumes_from_the_newest_whole_checkpoint_and_keeps_the_older_ones(
        tmp_path, caplog):
    _train_and_save(tmp_path, 3)
    os.remove(fmt.index_path(str(tmp_path / "model.ckpt-3")))     # the newest is gone
    with caplog.at_level(logging.WARNING, logger="mpiflow"):
        assert _train_and_save(tmp_path, 5) == 2                    # not from step 0
    assert "Passing over checkpoint" in caplog.text and "model.ckpt-3" in caplog.text
    for step in (2, 4, 5):
        assert mf.train.checkpoint_exists(str(tmp_path / f"model.ckpt-{step}"))


def test_checkpoints_that_all_fail_to_verify_stop_the_restart_instead_of_starting_over(
        tmp_path):
    _train_and_save(tmp_path, 2)
    for shard in tmp_path.glob("*.shard-*"):
        shard.write_bytes(b"not a zip")
    with pytest.raises(mf.errors.DataLossError, match="can be restored, so training would "
                                                      "start over") as info:
        _train_and_save(tmp_path, 4)
    assert "model.ckpt-2" in str(info.value) and "move these files away" in str(info.value)


def test_state_file_paths_outside_the_directory_are_neither_restored_nor_deleted(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = _save(elsewhere, 5.0, global_step=9)
    directory = tmp_path / "ckpt"
    directory.mkdir()
    inside = _save(directory, 1.0, global_step=1)
    (directory / "checkpoint").write_text(
        f'model_checkpoint_path: "{outside}"\n'
        f'all_model_checkpoint_paths: "../elsewhere/model-9"\n'
        f'all_model_checkpoint_paths: "{outside}"\n'
        'all_model_checkpoint_paths: "model-1"\n')
    state = mf.train.get_checkpoint_state(str(directory))
    assert state.all_model_checkpoint_paths == [inside]
    assert mf.train.latest_checkpoint(str(directory)) == inside
    with mf.Graph().as_default():
        _two_shard_model(1.0)
        saver = mf.train.Saver(max_to_keep=1)
        # As if recovered from a bad state file, with an old time: due for deletion.
        saver.set_last_checkpoints_with_time([(outside, 0.0)])
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            saver.save(sess, str(directory / "model"), global_step=2)
    assert mf.train.checkpoint_exists(outside)


def test_leftovers_of_dead_saves_go_with_the_next_save_and_nothing_else(tmp_path):
    stale = time.time() - 60
    leftovers = [tmp_path / "model-7.shard-00000-of-00002.0123456789abcdef.npz",
                 tmp_path / "model-7.shard-00001-of-00002.npz.tmp-123-abcdef01",
                 tmp_path / "model-7.index.json.tmp-123-0000beef",
                 tmp_path / "checkpoint.tmp-99-deadbeef"]
    kept = [tmp_path / "data.shard-00000-of-00004.npz", tmp_path / "notes.tmp-1",
            tmp_path / "expected.npz"]
    for path in leftovers + kept:
        path.write_bytes(b"x" * 100)
        os.utime(path, (stale, stale))
    _save(tmp_path, 1.0, global_step=8)
    assert not [p for p in leftovers if p.exists()]
    assert all(p.exists() for p in kept)


# A save of the two-shard model that stops after its first shard is in place until the
# file "go" appears, as a save waits for a slow ps's shard.
_PAUSED_SAVE = """
import os, sys, time
import numpy as np
import mpiflow as mf
directory = sys.argv[1]
real_replace = os.replace
def slow_second_shard(src, dst):
    if ".shard-00001-" in os.fspath(dst):
        open(os.path.join(directory, "paused"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(directory, "go")):
            assert time.monotonic() < deadline, "never told to go on"
            time.sleep(0.01)
    return real_replace(src, dst)
os.replace = slow_second_shard
with mf.device("/job:ps/task:0"):
    mf.Variable(np.full(3, 5.0, np.float32), name="a")
with mf.device("/job:ps/task:1"):
    mf.Variable(np.full((4, 2), 50.0, np.float32), name="big")
with mf.Session() as sess:
    sess.run(mf.global_variables_initializer())
    print(mf.train.Saver().save(sess, os.path.join(directory, "theirs")))
"""


def test_a_save_of_another_process_in_the_same_directory_is_left_whole(tmp_path):
    """Two jobs (or two workers of one) saving into one directory: the clean-up of one
    save must not take the other's shards, finished or half written, for a dead save's."""
    other = subprocess.Popen([sys.executable, "-c", _PAUSED_SAVE, str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "paused").exists():
            assert other.poll() is None and time.monotonic() < deadline, \
                other.communicate()[0] if other.poll() is not None else "no pause"
            time.sleep(0.01)
        time.sleep(0.05)            # its files now older than the save below begins
        mine = _save(tmp_path, 1.0, prefix="mine")
        (tmp_path / "go").touch()
        out, _ = other.communicate(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert other.returncode == 0, out
    theirs = out.strip().splitlines()[-1]
    assert mf.train.checkpoint_management.verify_checkpoint(theirs) is None
    a, big = _restore(theirs)
    np.testing.assert_array_equal(a, np.full(3, 5.0, np.float32))
    np.testing.assert_array_equal(big, np.full((4, 2), 50.0, np.float32))
    assert _restore(mine)[0].tolist() == [1.0, 1.0, 1.0]
    assert not list(tmp_path.glob("*.saving"))      # both saves are over


def test_the_files_of_a_save_whose_process_is_gone_go_with_the_next_save(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    save_id = "00112233aabbccdd"
    left = [tmp_path / f"model-3.shard-00000-of-00002.{save_id}.npz",
            tmp_path / f"model-3.shard-00001-of-00002.{save_id}.npz.tmp-{dead.stdout.strip()}"
                       "-01234567",
            tmp_path / f"model-3.{save_id}.saving"]
    left[-1].write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    for path in left[:-1]:
        path.write_bytes(b"x" * 100)
    stale = time.time() - 60
    for path in left:
        os.utime(path, (stale, stale))
    _save(tmp_path, 1.0, global_step=4)
    assert not [p for p in left if p.exists()]


def test_restore_reads_each_shard_directory_once_however_many_variables(tmp_path,
                                                                        monkeypatch):
    def build():
        with mf.device("/job:ps/task:0"):
            return [mf.Variable(np.float32(i), name=f"v{i}") for i in range(300)]
    with mf.Graph().as_default():
        build()
        saver = mf.train.Saver()
        with mf.Session() as sess:
            sess.run(mf.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "many"))
    parsed = []
    real_parse = checkpoint_reader._parse_shard
    monkeypatch.setattr(checkpoint_reader._SHARDS, "_parse",
                        lambda path, op: parsed.append(path) or real_parse(path, op))
    monkeypatch.setattr(checkpoint_reader, "_SHARDS", checkpoint_reader._FileCache(
        checkpoint_reader._SHARDS._parse, size=64))
    with mf.Graph().as_default():
        variables = build()
        with mf.Session() as sess:
            mf.train.Saver().restore(sess, prefix)
            assert sess.run(variables) == list(range(300))
    assert len(parsed) == 1


@pytest.mark.parametrize("bad", [3.7, True, "3", np.float32(2.5)])
def test_a_fractional_or_odd_global_step_is_refused(tmp_path, bad):
    mf.Variable(1.0, name="v")
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        with pytest.raises(mf.errors.InvalidArgumentError, match="whole number"):
            saver.save(sess, str(tmp_path / "m"), global_step=bad)
        assert saver.save(sess, str(tmp_path / "m"), global_step=4.0).endswith("m-4")
    assert not list(tmp_path.glob("m-3*")) and not list(tmp_path.glob("m-2*"))


@pytest.mark.parametrize("bad", [-1, 2.5, "5"])
def test_a_negative_or_odd_max_to_keep_is_refused_before_anything_is_written(bad):
    mf.Variable(1.0, name="v")
    with pytest.raises(mf.errors.InvalidArgumentError, match="max_to_keep"):
        mf.train.Saver(max_to_keep=bad)


def test_the_index_names_its_save_and_every_pieces_digest(tmp_path):
    prefix = _save(tmp_path, 1.0)
    index = json.loads(open(fmt.index_path(prefix)).read())
    assert index["version"] == 2 and len(index["save_id"]) == 16
    assert all(f".{index['save_id']}.npz" in name for name in index["shards"])
    piece = index["tensors"]["a"][0]
    assert piece["crc32"] == fmt.digest(np.full(3, 1.0, np.float32))


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: a real full disk for saves (root only; skipped elsewhere)."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(small_disk):
    def model(rows):
        with mf.device("/job:ps/task:0"):
            small = mf.Variable(np.full(4, float(rows), np.float32), name="small")
        with mf.device("/job:ps/task:1"):
            big = mf.Variable(np.full((rows, 256), 1.0, np.float32), name="big")
        return small, big

    def save(rows):
        with mf.Graph().as_default():
            model(rows)
            with mf.Session() as sess:
                sess.run(mf.global_variables_initializer())
                return mf.train.Saver().save(sess, str(small_disk / "model"))

    prefix = save(100)                                   # 100 KiB: fits
    with pytest.raises(mf.errors.ResourceExhaustedError, match="No space left"):
        save(1200)                                       # 1.2 MiB: the disk fills up
    with mf.Graph().as_default():
        small, big = model(100)
        with mf.Session() as sess:
            mf.train.Saver().restore(sess, prefix)        # the fixed prefix: the old save
            assert sess.run(small).tolist() == [100.0] * 4
            assert sess.run(big).shape == (100, 256)
    assert sorted(p.name for p in small_disk.iterdir() if p.name != "checkpoint") == \
        sorted([os.path.basename(fmt.index_path(prefix))] +
               [p.name for p in small_disk.glob("model.shard-*")])
    assert len(list(small_disk.glob("model.shard-*"))) == 2   # the failed save's went
    save(100)                                            # and the disk is usable again


def test_two_saves_into_one_directory_at_once_leave_both_whole(tmp_path, monkeypatch):
    import threading

    real_write = fmt.write_json
    first_inside, go_on = threading.Event(), threading.Event()

    def slow_first_index(path, document, op=None):
        if path.endswith("model-1.index.json"):
            first_inside.set()
            go_on.wait(5)
        return real_write(path, document, op)
    monkeypatch.setattr(fmt, "write_json", slow_first_index)
    saved = {}

    def save(step):
        saved[step] = _save(tmp_path, float(step), global_step=step)
    first = threading.Thread(target=save, args=(1,))
    first.start()
    assert first_inside.wait(5)
    second = threading.Thread(target=save, args=(2,))      # a checkpoint thread, say
    second.start()
    go_on.set()
    first.join(10)
    second.join(10)
    for step in (1, 2):
        assert mf.train.checkpoint_management.verify_checkpoint(saved[step]) is None
        np.testing.assert_array_equal(_restore(saved[step])[0], float(step))


def test_the_shards_of_a_damaged_index_are_kept_for_a_look_by_hand(tmp_path):
    other = _save(tmp_path, 1.0, prefix="other")
    with open(fmt.index_path(other), "r+") as f:
        f.truncate(20)
    _save(tmp_path, 2.0)
    assert len(list(tmp_path.glob("other.shard-*"))) == 2


def test_load_variable_reads_a_mod_table_as_it_was_saved(tmp_path):
    table = mf.get_variable("emb", [5, 2], partitioner=mf.fixed_size_partitioner(2),
                            initializer=mf.constant_initializer(np.arange(10.0).reshape(5, 2)))
    mf.nn.embedding_lookup(table, [1])                       # "mod": TensorFlow's default
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = mf.train.Saver().save(sess, str(tmp_path / "m"))
    np.testing.assert_array_equal(mf.train.load_variable(prefix, "emb"),
                                  np.arange(10.0).reshape(5, 2))


def test_a_save_whose_shard_was_deleted_under_it_writes_no_index(tmp_path, monkeypatch):
    """A process that knows nothing of the save in progress (an older mpiflow, a script
    tidying the directory) deletes a shard: the save fails naming it, rather than index
    a checkpoint that cannot be restored."""
    first = _save(tmp_path, 1.0, global_step=1)
    real_index = fmt.index_document

    def shard_deleted_meanwhile(manifests, *args):
        index = real_index(manifests, *args)
        os.remove(tmp_path / index["shards"][1])
        return index
    monkeypatch.setattr(fmt, "index_document", shard_deleted_meanwhile)
    with pytest.raises(mf.errors.DataLossError,
                       match=r"model-2\.shard-00001-of-00002\.[0-9a-f]{16}\.npz' was "
                             r"deleted before its save could index it"):
        _save(tmp_path, 2.0, global_step=2)
    assert not mf.train.checkpoint_exists(str(tmp_path / "model-2"))
    assert mf.train.latest_checkpoint(str(tmp_path)) == first
