"""Small host payloads ride inside their header's message (an inline frame): one MPI
message per mpiflow message instead of one per tensor, the values copied on the sender
and viewed on the receiver, in order with the messages around them; a frame whose
lengths do not add up is refused, naming its sender."""

import ml_dtypes
import msgpack
import numpy as np
import pytest

from mpiflow import errors
from mpiflow.comm import transport as transport_lib
from mpiflow.comm.transport import (
    INLINE_MAX_BYTES,
    PAYLOAD_TAG,
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


def _frame(arrays):
    header = {"k": "t", "_buf": [transport_lib._wire_spec(a.dtype, a.shape)
                                 for a in arrays]}
    return bytearray(inline_frame(msgpack.packb(header, use_bin_type=True), arrays))


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
