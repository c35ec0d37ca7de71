"""Image summaries' pixels: a batch of images made uint8 as TensorFlow's image summary op
makes them, and each encoded as a PNG file.

Pure numpy and zlib (no imaging library): an event file stores each image as the bytes
of a PNG, which TensorBoard decodes. Owns nothing else; ``event_file`` builds the records.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from mpiflow import errors

# The pixel TensorFlow draws where a value is NaN or infinite (red, opaque), cut to the
# image's channels: 255 in a grayscale image.
BAD_COLOR = (255, 0, 0, 255)

# TensorFlow scales an image whose values all lie this close to 0 by 0.
_ZERO_THRESHOLD = np.float32(1e-6)

IMAGE_DTYPES = ("uint8", "float16", "float32", "float64")


def check_images(tag: str, images) -> np.ndarray:
    """Return ``images`` as an array ``[batch, height, width, channels]`` with 1, 3 or 4
    channels (grayscale, RGB, RGBA), as TensorFlow's image summary op checks it.

    Raises:
        InvalidArgumentError: another shape or dtype, or images without pixels.
    """
    array = np.asarray(images)
    if array.ndim != 4 or array.shape[-1] not in (1, 3, 4):
        raise errors.InvalidArgumentError(
            f"Summary image '{tag}': Tensor must be 4-D with last dim 1, 3, or 4, not "
            f"[{','.join(str(d) for d in array.shape)}]")
    if array.dtype.name not in IMAGE_DTYPES:
        raise errors.InvalidArgumentError(
            f"Summary image '{tag}': images must be one of {list(IMAGE_DTYPES)}, got "
            f"{array.dtype.name}")
    if array.shape[0] and (array.shape[1] == 0 or array.shape[2] == 0):
        raise errors.InvalidArgumentError(
            f"Summary image '{tag}': images of shape {list(array.shape)} have no pixels")
    return array


def to_uint8(image: np.ndarray) -> np.ndarray:
    """Return the pixels ``[height, width, channels]`` of one image as uint8.

    uint8 is kept. Floats are scaled, each image by itself, as TensorFlow's op does (in
    the image's own dtype, the result truncated): if no finite value is negative, so that
    the largest is 255; otherwise so that the largest absolute value is 127, with 0 at
    128. A pixel with a NaN or infinite channel is ``BAD_COLOR`` and counts for neither
    bound.
    """
    if image.dtype == np.uint8:
        return image
    dtype = image.dtype
    channels = image.shape[-1]
    finite = np.isfinite(image).all(axis=-1)
    values = image[finite].astype(np.float32)
    low = values.min() if values.size else np.float32(np.inf)
    high = values.max() if values.size else np.float32(-np.inf)
    if low < 0:
        bound = max(abs(low), abs(high))
        scale = np.float32(0.0) if bound < _ZERO_THRESHOLD else np.float32(127.0) / bound
        offset = 128.0
    else:
        scale = np.float32(0.0) if high < _ZERO_THRESHOLD else np.float32(255.0) / high
        offset = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = image * dtype.type(scale) + dtype.type(offset)
    pixels = np.empty(image.shape, np.uint8)
    pixels[finite] = np.clip(np.trunc(scaled[finite]), 0, 255).astype(np.uint8)
    pixels[~finite] = BAD_COLOR[:channels]
    return pixels


def encode_png(pixels: np.ndarray) -> bytes:
    """Return the PNG file of uint8 ``pixels`` ``[height, width, 1|3|4]`` (grayscale, RGB
    or RGBA, 8 bits a channel, no filter)."""
    height, width, channels = pixels.shape
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rows = pixels.reshape(height, width * channels)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
