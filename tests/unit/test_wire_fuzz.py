"""Fuzzing what comes from outside the process: message headers from other ranks and
checkpoint files. Whatever the bytes, the result is a decoded, schema-checked value or an
mpiflow error; never another exception, never anything executed or unpickled."""

import json

import ml_dtypes
import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mpiflow import errors

pytest.importorskip("mpi4py")
from mpiflow.comm.transport import decode_header  # noqa: E402  (imports MPI)
from mpiflow.ops.checkpoint_reader import read_slice  # noqa: E402
from mpiflow.runtime.messages import STRS, check_message  # noqa: E402
from mpiflow.runtime.rank_service import KINDS  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)     # the one numeric dtype of kind 'V', sent by name

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) |
    st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=12)
# What msgpack can carry: ints within 64 bits.
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.floats() |
    st.text(max_size=8) |
    st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_are_refused(raw):
    try:
        header, specs = decode_header(raw, source=3, rank=0)
    except errors.DataLossError as exc:
        assert "rank 3" in str(exc)
        return
    assert isinstance(header, dict)
    assert all(dtype.kind in "biufc" or dtype == BF16 for _, dtype in specs)


@settings(max_examples=300)
@given(st.dictionaries(st.text(max_size=4), plain, max_size=5),
       st.lists(st.tuples(plain, plain), max_size=3))
def test_random_headers_and_buffer_specs_are_checked(fields, buffers):
    raw = msgpack.packb(dict(fields, _buf=[list(b) for b in buffers]), use_bin_type=True)
    try:
        _, specs = decode_header(raw, source=1, rank=0)
    except errors.DataLossError:
        return
    for shape, dtype in specs:
        assert all(isinstance(d, int) and d >= 0 for d in shape)
        assert not dtype.hasobject


@settings(max_examples=300)
@given(st.dictionaries(st.text(max_size=4), plain, max_size=3),
       st.lists(st.tuples(plain, plain), max_size=3) | st.binary(max_size=24))
def test_buffer_specs_packed_as_bytes_are_checked_as_lists_are(fields, buffers):
    # A sender packs its payload list once (bytes in the header); the receiver checks it
    # as it checks a list, whatever the bytes.
    packed = buffers if isinstance(buffers, bytes) else \
        msgpack.packb([list(b) for b in buffers], use_bin_type=True)
    raw = msgpack.packb(dict(fields, _buf=packed), use_bin_type=True)
    try:
        _, specs = decode_header(raw, source=1, rank=0)
    except errors.DataLossError as exc:
        assert "rank 1" in str(exc)
        return
    for shape, dtype in specs:
        assert all(isinstance(d, int) and d >= 0 for d in shape)
        assert not dtype.hasobject


@settings(max_examples=400)
@given(st.sampled_from(sorted(KINDS) + ["evil", 7, None]),
       st.dictionaries(st.sampled_from(["c", "s", "e", "h", "n", "msg", "who", "host", "cls",
                                        "rank", "tb"]), plain, max_size=8),
       st.integers(min_value=0, max_value=2))
@example("t", {"e": [], "c": 0, "s": 0}, 0)           # arrays counted by a list field
@example("t", {"e": ["a:0"], "c": 0, "s": 1}, 1)
def test_control_messages_pass_the_schema_or_are_refused(kind, fields, arrays):
    header = dict(fields, k=kind)
    try:
        accepted = check_message(header, arrays, "rank 2 (worker:1)", 0, KINDS)
    except errors.DataLossError as exc:
        assert "rank 2 (worker:1)" in str(exc)
        return
    kind = KINDS[accepted]
    # a kind's arrays: a number, or one per entry of a list field ("t": one per edge)
    per_entry = isinstance(kind.arrays, str)
    assert arrays == (len(header[kind.arrays]) if per_entry else kind.arrays)
    for f, types in kind.fields.items():
        if types is STRS:
            assert type(header[f]) is list and all(type(v) is str for v in header[f])
        else:
            assert type(header[f]) in types


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.one_of(st.binary(max_size=80), json_values.map(lambda v: json.dumps(
           {"format": "mpiflow-checkpoint", "version": 1, "tensors": {"w": v}}).encode())),
       shard=st.binary(max_size=200))
def test_corrupt_checkpoint_files_give_mpiflow_errors(tmp_path, index, shard):
    prefix = str(tmp_path / "model")
    (tmp_path / "model.index.json").write_bytes(index)
    (tmp_path / "model.shard-00000-of-00001.npz").write_bytes(shard)
    try:
        value = read_slice(prefix, "w", "", np.dtype("float32"), (2,))
    except errors.MpiflowError:
        return
    assert value.shape == (2,)
