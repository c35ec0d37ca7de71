"""float32 <-> float16 conversion of host arrays, bit for bit as numpy's ``astype``, at
the same speed whatever the values.

numpy converts each value on its own and flags underflow as it goes: a value that lands
among float16's subnormals (below 6.1e-5, where gradients live) costs about 60 ns, 40x a
normal one (400,000 gradients of magnitude 1e-5: 25 ms to float16, 3 ms back), and more
for float32's own subnormals. Here:
- to float16, whole blocks at a time with integer arithmetic on the float32 bits
  (round to nearest even, subnormals by one float add with the right exponent, overflow
  to infinity, NaN keeping the top of its significand as numpy does);
- to float32, a lookup in the table of all 65,536 float16 values, made once by numpy's
  own conversion.

Imports nothing of mpiflow: kernels and the collectives both convert with it.
"""

from __future__ import annotations

import threading

import numpy as np

_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)
_U32 = np.uint32
_BLOCK = 1 << 15            # elements per block: its scratch stays in the L2 cache
_SMALL = 1 << 10            # below this numpy's own conversion costs less than the setup
_scratch = threading.local()
_table = []


def applies(array, dtype) -> bool:
    """Whether ``astype`` has a fast path for ``array`` (numpy) to ``dtype``."""
    return type(array) is np.ndarray and array.size >= _SMALL and \
        ((array.dtype == _F32 and dtype == _F16) or (array.dtype == _F16 and dtype == _F32))


def astype(array, dtype, allocate=None):
    """``array.astype(dtype)``, float32 <-> float16 of numpy arrays fast (a new array,
    from ``allocate(shape, dtype)`` where given)."""
    dtype = np.dtype(dtype)
    if not applies(array, dtype):
        return array.astype(dtype)
    out = np.empty(array.shape, dtype) if allocate is None else allocate(array.shape, dtype)
    flat = np.ascontiguousarray(array).reshape(-1)
    if dtype == _F16:
        with np.errstate(all="ignore"):         # the float add meets NaN and inf too
            _to_float16(flat, out.reshape(-1).view(np.uint16))
    else:
        # Every uint16 is an index of the table: 'clip' changes none and writes directly.
        np.take(_float16_table(), flat.view(np.uint16), out=out.reshape(-1), mode="clip")
    return out


def copyto(dst, src) -> None:
    """``np.copyto(dst, src, casting="same_kind")``, float32 into float16 fast."""
    if type(dst) is np.ndarray and dst.dtype == _F16 and dst.flags.c_contiguous and \
            applies(src, _F16) and src.shape == dst.shape:
        with np.errstate(all="ignore"):
            _to_float16(np.ascontiguousarray(src).reshape(-1),
                        dst.reshape(-1).view(np.uint16))
        return
    np.copyto(dst, src, casting="same_kind")


def add(first, second, out) -> None:
    """``np.add(first, second, out=out)`` for float16 arrays, rounded once from float32
    as numpy's float16 add does, fast."""
    if applies(first, _F32) and type(out) is np.ndarray and out.flags.c_contiguous:
        total = astype(second, _F32)        # this order: a NaN + NaN keeps numpy's payload
        total += astype(first, _F32)
        copyto(out, total)
        return
    np.add(first, second, out=out)


def add_into(inout, incoming) -> None:
    """``inout += incoming`` for float16 arrays (``add``)."""
    add(inout, incoming, inout)


def _float16_table():
    if not _table:
        _table.append(np.arange(1 << 16, dtype=np.uint16).view(_F16).astype(_F32))
    return _table[0]


def _buffers():
    found = getattr(_scratch, "buffers", None)
    if found is None:
        found = _scratch.buffers = (np.empty(_BLOCK, _U32), np.empty(_BLOCK, _U32),
                                    np.empty(_BLOCK, _U32), np.empty(_BLOCK, _U32),
                                    np.empty(_BLOCK, bool))
    return found


def _to_float16(flat, out_bits) -> None:
    """float16 bits of the float32 values ``flat`` into ``out_bits`` (uint16)."""
    bits = flat.view(_U32)
    s_abs, s_res, s_tmp, s_select, s_mask = _buffers()
    for start in range(0, bits.size, _BLOCK):
        end = min(start + _BLOCK, bits.size)
        n = end - start
        f, a, res, tmp = bits[start:end], s_abs[:n], s_res[:n], s_tmp[:n]
        select, mask = s_select[:n], s_mask[:n]
        np.bitwise_and(f, _U32(0x7FFFFFFF), out=a)
        # Normal results: rebias the exponent, round half to even on the 13 bits dropped.
        np.right_shift(a, _U32(13), out=res)
        np.bitwise_and(res, _U32(1), out=res)
        np.add(res, _U32(0xC8000FFF), out=res)          # (15 - 127) << 23, plus 0xFFF
        np.add(res, a, out=res)
        np.right_shift(res, _U32(13), out=res)
        # Subnormal results (|x| < 2**-14): adding 0.5 aligns the bits to float16's last
        # place, and the float add rounds half to even. Values up to 2**-25 all round to
        # zero, as 2**-25 itself does: raised to it first, no float32 subnormal reaches
        # the add (the processor takes a slow path for each, where gradients shrink).
        np.maximum(a, _U32(0x33000000), out=tmp)
        np.add(tmp.view(_F32), np.float32(0.5), out=tmp.view(_F32))
        np.subtract(tmp, _U32(0x3F000000), out=tmp)
        # Blended in without a branch (gradients mix both kinds at random): the sign bit
        # of a - 2**-14's bits, spread over the word, selects.
        np.subtract(a, _U32(0x38800000), out=select)
        np.right_shift(select.view(np.int32), 31, out=select.view(np.int32))
        np.bitwise_xor(tmp, res, out=tmp)
        np.bitwise_and(tmp, select, out=tmp)
        np.bitwise_xor(res, tmp, out=res)
        # Overflow to infinity; NaN keeps its significand's top 10 bits (never 0).
        np.greater_equal(a, _U32(0x47800000), out=mask)
        if mask.any():
            np.copyto(res, _U32(0x7C00), where=mask)
            np.greater(a, _U32(0x7F800000), out=mask)
            if mask.any():
                np.bitwise_and(a, _U32(0x7FFFFF), out=tmp)
                np.right_shift(tmp, _U32(13), out=tmp)
                np.maximum(tmp, _U32(1), out=tmp)
                np.add(tmp, _U32(0x7C00), out=tmp)
                np.copyto(res, tmp, where=mask)
        np.right_shift(f, _U32(16), out=tmp)
        np.bitwise_and(tmp, _U32(0x8000), out=tmp)
        np.bitwise_or(res, tmp, out=res)
        np.copyto(out_bits[start:end], res, casting="unsafe")
