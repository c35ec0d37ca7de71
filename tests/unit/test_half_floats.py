"""float32 <-> float16 conversion gives numpy's bits exactly (rounding half to even,
subnormals, overflow, infinities, NaN payloads), in every shape, while taking no longer
for the tiny values of gradients than for others."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import half_floats

ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


def _bits(array):
    return array.view(np.uint16 if array.dtype == np.float16 else np.uint32)


def _same_as_numpy(x, dtype):
    with np.errstate(all="ignore"):
        expected = x.astype(dtype)
    got = half_floats.astype(x, dtype)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_every_float16_widens_as_numpy_widens_it():
    _same_as_numpy(ALL_HALVES, np.float32)


def test_every_float32_a_float16_rounds_to_or_from_narrows_as_numpy():
    # Each half, the midpoints to its neighbours (where rounding half to even decides) and
    # one float32 step either side of each: every boundary of the conversion.
    with np.errstate(all="ignore"):
        wide = ALL_HALVES.astype(np.float32)
    finite = wide[np.isfinite(wide)]
    ordered = np.unique(finite)
    midpoints = (ordered[:-1].astype(np.float64) + ordered[1:]) / 2
    points = np.concatenate([finite, midpoints.astype(np.float32)])
    near = np.concatenate([points, np.nextafter(points, np.float32(np.inf)),
                           np.nextafter(points, np.float32(-np.inf))])
    _same_as_numpy(near, np.float16)


def test_overflow_infinities_nans_and_float32_subnormals_narrow_as_numpy():
    special = np.array([65504, 65519.99, 65520, 65536, 1e30, np.inf, -np.inf, 0.0, -0.0,
                        1e-45, -1e-45, 1e-40, 5.96e-8, 2.98e-8, 2.99e-8, 6.1e-5],
                       np.float32)
    nans = np.array([0x7FC00000, 0x7F800001, 0x7F802000, 0xFFFFFFFF, 0x7FBFFFFF,
                     0x7F801FFF], np.uint32).view(np.float32)
    _same_as_numpy(np.tile(np.concatenate([special, nans]), 100), np.float16)


def test_float32_subnormals_and_the_smallest_normals_narrow_as_numpy():
    tiny = np.concatenate([np.arange(1, 1 << 16, dtype=np.uint32),
                           np.arange(0x00800000 - 50, 0x00800000 + 50, dtype=np.uint32),
                           np.arange(0x33000000 - 50, 0x33000000 + 50, dtype=np.uint32)])
    _same_as_numpy(np.concatenate([tiny, tiny | np.uint32(0x80000000)]).view(np.float32),
                   np.float16)


def test_random_bit_patterns_narrow_as_numpy():
    bits = np.random.default_rng(0).integers(0, 1 << 32, 1 << 21, dtype=np.uint64)
    _same_as_numpy(bits.astype(np.uint32).view(np.float32), np.float16)


@pytest.mark.parametrize("make", [
    lambda x: x.reshape(64, -1),                 # 2-D
    lambda x: x.reshape(64, -1)[:, ::2],         # not contiguous
    lambda x: x[:100],                           # small: numpy's own conversion
])
def test_any_shape_and_layout_converts_as_numpy(make):
    x = make((np.random.default_rng(1).standard_normal(1 << 14) * 1e-5).astype(np.float32))
    _same_as_numpy(x, np.float16)
    _same_as_numpy(x.astype(np.float16), np.float32)


def test_other_dtypes_are_numpy_s_astype():
    x = np.arange(5000, dtype=np.float64)
    assert half_floats.astype(x, np.float16).dtype == np.float16
    assert not half_floats.applies(x, np.float16)


def test_copying_and_adding_into_half_floats_round_as_numpy():
    rng = np.random.default_rng(2)
    wide = (rng.standard_normal(5000) * 1e-4).astype(np.float32)
    into = np.empty(5000, np.float16)
    half_floats.copyto(into, wide)
    np.testing.assert_array_equal(_bits(into), _bits(wide.astype(np.float16)))
    # Every kind of half at random (NaN + NaN too: numpy keeps one payload of the two).
    a = rng.integers(0, 1 << 16, 1 << 18).astype(np.uint16).view(np.float16)
    b = rng.integers(0, 1 << 16, 1 << 18).astype(np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        expected = a + b
        half_floats.add_into(a, b)
    np.testing.assert_array_equal(_bits(a), _bits(expected))


def test_the_cast_op_narrows_tiny_gradients_to_numpy_s_bits():
    x = (np.random.default_rng(3).standard_normal((300, 40)) * 1e-6).astype(np.float32)
    with mf.Graph().as_default(), mf.Session() as sess:
        narrow = sess.run(mf.cast(mf.constant(x), mf.float16))
        wide = sess.run(mf.cast(mf.constant(narrow), mf.float32))
    np.testing.assert_array_equal(_bits(narrow), _bits(x.astype(np.float16)))
    np.testing.assert_array_equal(_bits(wide), _bits(narrow.astype(np.float32)))
