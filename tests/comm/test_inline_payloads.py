"""Small host payloads ride inside their header's message (an inline frame): one MPI
message per mpiflow message instead of one per tensor, the values copied on the sender
and viewed on the receiver, in order with the messages around them; in a larger message
the small ones still do and the large ones follow (a mixed frame); a frame whose lengths
do not add up is refused, naming its sender."""

import ml_dtypes
import msgpack
import numpy as np
import pytest

from mpiflow import errors
from mpiflow.comm import transport as transport_lib
from mpiflow.comm.transport import (
    INLINE_MAX_BYTES,
    PAYLOAD_TAG,
    SMALL_PAYLOAD_BYTES,
    inline_frame,
    read_inline_frame,
)


def _poll(link):
    for _ in range(100000):
        message = link.poll()
        if message is not None:
            return message
    raise AssertionError("no message")


MIXED = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, ml_dtypes.bfloat16),
         np.array(5, np.int64), np.zeros((0, 2)), np.array([True, False])]


def test_small_payloads_arrive_whole_in_one_message(link):
    link.send(0, {"k": "t", "n": 1}, MIXED)
    assert not link.comm.Iprobe(0, PAYLOAD_TAG)      # nothing follows the header
    message = _poll(link)
    assert message.header == {"k": "t", "n": 1}
    for got, sent in zip(message.arrays, MIXED, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert np.array_equal(got, sent)
    link.flush()


def test_payloads_over_the_inline_limit_follow_as_their_own_messages(link):
    big = np.ones(INLINE_MAX_BYTES // 4 + 1, np.float32)
    link.send(0, {"k": "t"}, [big])
    assert link.comm.Iprobe(0, PAYLOAD_TAG)
    assert np.array_equal(_poll(link).arrays[0], big)
    link.flush()


def test_an_inline_value_is_a_copy_taken_at_send_and_the_receiver_may_write_it(link):
    variable = np.zeros(4, np.float32)
    link.send(0, {"k": "t"}, [variable])
    variable += 1                   # a writer right after: no guard to wait for
    (got,) = _poll(link).arrays
    assert np.array_equal(got, np.zeros(4)) and got.flags.writeable
    got += 2
    link.flush()


def test_inline_and_separate_messages_of_one_sender_keep_their_order(link):
    small, big = np.ones(8, np.float32), np.ones(INLINE_MAX_BYTES, np.float32)
    for n, array in enumerate([small, big, small, big]):
        link.send(0, {"k": "t", "n": n}, [array])
    assert [_poll(link).header["n"] for _ in range(4)] == [0, 1, 2, 3]
    link.flush()


def test_small_payloads_of_a_large_message_ride_inline_and_the_large_ones_follow(link):
    # A pull of many variables: the small ones copied into the header's message, each
    # large one sent from its own buffer (guarded) as before, all in their places.
    small = [np.full(SMALL_PAYLOAD_BYTES // 4, i, np.float32) for i in range(3)]
    large = [np.full(SMALL_PAYLOAD_BYTES // 4 + 1, 7, np.float32),
             np.full((3, INLINE_MAX_BYTES // 4), 8, np.float32)]
    arrays = [small[0], large[0], small[1], small[2], large[1], MIXED[1], MIXED[3]]
    link.send(0, {"k": "t"}, arrays, guards=["s0", "big0", "s1", "s2", "big1", None, None])
    assert sorted(link._guarded) == ["big0", "big1"]       # what MPI still reads
    for array in small:
        array += 100            # copied at send: a writer may go on at once
    message = _poll(link)
    assert message.header == {"k": "t"}
    for got, sent in zip(message.arrays, arrays, strict=True):
        expected = sent - 100 if any(sent is s for s in small) else sent
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert np.array_equal(got, expected)
    link.flush()


def test_a_message_of_small_payloads_only_is_one_frame_whatever_its_size(link):
    arrays = [np.full(SMALL_PAYLOAD_BYTES // 4, i, np.float32) for i in range(8)]
    link.send(0, {"k": "t"}, arrays, guards=[f"v{i}" for i in range(8)])
    assert not link.comm.Iprobe(0, PAYLOAD_TAG) and not link._guarded
    assert all(np.array_equal(g, a) for g, a in zip(_poll(link).arrays, arrays))
    link.flush()


def test_a_payload_list_sent_again_is_packed_and_checked_once(link):
    # A step sends the same payload list every time: the sender packs it once, and the
    # receiver checks it once and reads every later message by it.
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, ml_dtypes.bfloat16)]
    link.send(0, {"k": "t"}, arrays)
    _poll(link)
    packed = transport_lib._packed_specs.cache_info()
    checked = transport_lib._unpacked_specs.cache_info()
    link.send(0, {"k": "t"}, [a + 1 for a in arrays])
    again = _poll(link)
    assert transport_lib._packed_specs.cache_info().hits == packed.hits + 1
    assert transport_lib._unpacked_specs.cache_info().hits == checked.hits + 1
    assert [(a.shape, a.dtype) for a in again.arrays] == [(a.shape, a.dtype) for a in arrays]
    assert all(np.array_equal(g, a + 1) for g, a in zip(again.arrays, arrays))


def _frame(arrays):
    header = {"k": "t", "_buf": [transport_lib._wire_spec(a.dtype, a.shape)
                                 for a in arrays]}
    return bytearray(inline_frame(msgpack.packb(header, use_bin_type=True), arrays))


def test_frames_of_one_payload_list_are_read_right_whichever_payloads_follow():
    # Where a frame holds each payload is worked out once per list and set of payloads
    # that follow: frames of one list that differ in it are each read by their own.
    arrays = [np.arange(5, dtype=np.int16), np.zeros((0, 3)), np.full((2, 2), 7.0),
              np.array(3, np.int64)]
    packed = transport_lib._packed_specs(tuple((a.dtype, a.shape) for a in arrays))
    for following in ([], [2], [0, 3], [], [2]):
        header = {"k": "t", "_buf": packed}
        if following:
            header["_fo"] = following
        inline = [a for i, a in enumerate(arrays) if i not in following]
        frame = inline_frame(msgpack.packb(header, use_bin_type=True), inline)
        _, got, after = read_inline_frame(bytearray(frame), source=3, rank=0)
        assert [i for i, _, _ in after] == following
        for i, a in enumerate(arrays):
            if i in following:
                assert got[i] is None
            else:
                assert got[i].shape == a.shape and got[i].dtype == a.dtype
                assert np.array_equal(got[i], a)


@pytest.mark.parametrize("damage", [
    lambda f: f[:3],                                    # shorter than its prefix
    lambda f: f[:1] + (10 ** 6).to_bytes(4, "little") + f[5:],   # header past the end
    lambda f: f[:-1],                                   # payload cut short
    lambda f: f + b"\0",                                # bytes after the payloads
])
def test_a_frame_whose_lengths_do_not_add_up_is_refused_naming_its_sender(damage):
    frame = damage(_frame([np.ones(3, np.float32), np.ones(2, np.int64)]))
    with pytest.raises(errors.DataLossError, match="from rank 3"):
        read_inline_frame(bytearray(frame), source=3, rank=0)


@pytest.mark.parametrize("following", [[2], [1, 0], [0, 0], [-1], ["0"], 1, [True]])
def test_a_mixed_frame_naming_payloads_it_does_not_have_is_refused(following):
    header = {"k": "t", "_buf": [transport_lib._wire_spec(np.dtype(np.float32), (3,))] * 2,
              "_fo": following}
    frame = inline_frame(msgpack.packb(header, use_bin_type=True), [np.ones(3, np.float32)])
    with pytest.raises(errors.DataLossError, match="from rank 3: .*following payloads"):
        read_inline_frame(bytearray(frame), source=3, rank=0)


def test_what_a_partition_holds_back_for_a_rank_leaves_as_one_inline_message():
    # runtime/transfers.py keeps its own copy of the bound (plans of one process never
    # import MPI): what it holds for one peer must fit one inline frame.
    from mpiflow.runtime.transfers import HOLD_MAX_BYTES
    assert HOLD_MAX_BYTES <= INLINE_MAX_BYTES
