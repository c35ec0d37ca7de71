"""Image resizing: tf.image.resize_images, resize_bilinear and resize_nearest_neighbor,
with TF1's ``align_corners`` and ``half_pixel_centers`` (both False by default).

The new size and the input's height and width are known when the graph is built, so
which input rows and columns each output pixel reads, and with what weights, are
computed then, in float32 as TensorFlow's kernels compute them: a resize is gathers of
rows and columns (and, for bilinear, the same linear interpolation in the same order).
No op type of its own: the gradient is gather's, the exact adjoint of the resize, as
TensorFlow's ResizeBilinearGrad and ResizeNearestNeighborGrad are.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.ops import array_ops, math_ops, sparse_ops
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.image_ops import height_width, image_rank


class ResizeMethod:
    """TF1's resize methods (``tf.compat.v1.image.ResizeMethod``)."""
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """Input pixels per output pixel, in float32: (in - 1) / (out - 1) when the corners
    are aligned (and out > 1), in / out otherwise."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _bilinear_taps(in_size, out_size, align_corners, half_pixel_centers):
    """For each output index: the lower and upper input index and the weight of the
    upper one. A half-pixel centre maps output i to (i + 0.5) * scale - 0.5."""
    scale = _scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=np.float32)
    where = (i + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel_centers \
        else i * scale
    floor = np.floor(where)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(where).astype(np.int64), in_size - 1)
    return lower.astype(np.int32), upper.astype(np.int32), (where - floor).astype(np.float32)


def _nearest_taps(in_size, out_size, align_corners, half_pixel_centers):
    """For each output index, the input index it copies: (i + 0.5) * scale with
    half-pixel centres, i * scale otherwise; rounded half away from zero when the corners
    are aligned, else floored; within [0, in_size)."""
    scale = _scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=np.float32)
    where = (i + np.float32(0.5)) * scale if half_pixel_centers else i * scale
    picked = np.sign(where) * np.floor(np.abs(where) + np.float32(0.5)) if align_corners \
        else np.floor(where)
    picked = np.minimum(picked.astype(np.int64), in_size - 1)
    return np.maximum(picked, 0).astype(np.int32)


def _new_size(size, what):
    pair = array_ops.static_ints(size, f"{what} size").reshape(-1).tolist()
    if len(pair) != 2:
        raise errors.InvalidArgumentError(
            f"{what}: size must be 2 values [new_height, new_width] known when the graph "
            f"is built, got {size!r}")
    if min(pair) <= 0:
        raise errors.InvalidArgumentError(
            f"{what}: the new height and width must be positive, got {pair}")
    return pair


def _check_batch(images, what):
    images = convert_to_tensor(images, name="images")
    if images.shape.ndims != 4:
        raise errors.InvalidArgumentError(
            f"{what}: '{images.name}' must be a batch of images [batch, height, width, "
            f"channels] (rank 4), got shape {images.shape}")
    height_width(images, what)
    return images


def _check_centres(align_corners, half_pixel_centers, what):
    if align_corners and half_pixel_centers:
        raise errors.InvalidArgumentError(
            f"{what}: if half_pixel_centers is True, align_corners must be False")


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """Return the batch ``images`` resized to ``size`` [new_height, new_width] by
    bilinear interpolation, in float32 whatever the input dtype, as TensorFlow's
    ResizeBilinear: interpolated along the width first, then along the height.

    Raises:
        InvalidArgumentError: images not a batch with known height and width, a size not
            2 positive ints known when the graph is built, or both align_corners and
            half_pixel_centers.
    """
    what = "resize_bilinear"
    _check_centres(align_corners, half_pixel_centers, what)
    with get_default_graph().name_scope(name or "ResizeBilinear"):
        images = _check_batch(images, what)
        rows, cols = _new_size(size, what)
        height, width = images.shape.as_list()[1:3]
        top, bottom, y_weight = _bilinear_taps(height, rows, align_corners,
                                               half_pixel_centers)
        left, right, x_weight = _bilinear_taps(width, cols, align_corners,
                                               half_pixel_centers)
        x = math_ops.cast(images, dtypes.float32)
        x_weight = constant(x_weight.reshape(1, 1, cols, 1))

        def across(band):      # interpolate a band of rows along the width
            lo = sparse_ops.gather(band, constant(left), axis=2)
            hi = sparse_ops.gather(band, constant(right), axis=2)
            return lo + (hi - lo) * x_weight

        upper = across(sparse_ops.gather(x, constant(top), axis=1))
        lower = across(sparse_ops.gather(x, constant(bottom), axis=1))
        return upper + (lower - upper) * constant(y_weight.reshape(1, rows, 1, 1))


def resize_nearest_neighbor(images, size, align_corners=False, name=None,
                            half_pixel_centers=False):
    """Return the batch ``images`` resized to ``size`` [new_height, new_width], each
    output pixel a copy of the input pixel TensorFlow's ResizeNearestNeighbor picks, in
    the input's dtype.

    Raises:
        InvalidArgumentError: as resize_bilinear.
    """
    what = "resize_nearest_neighbor"
    _check_centres(align_corners, half_pixel_centers, what)
    with get_default_graph().name_scope(name or "ResizeNearestNeighbor"):
        images = _check_batch(images, what)
        rows, cols = _new_size(size, what)
        height, width = images.shape.as_list()[1:3]
        picked = sparse_ops.gather(
            images, constant(_nearest_taps(height, rows, align_corners,
                                           half_pixel_centers)), axis=1)
        return sparse_ops.gather(
            picked, constant(_nearest_taps(width, cols, align_corners,
                                           half_pixel_centers)), axis=2)


# What resize_images builds for each method it has; the others are refused by name.
_RESIZERS = {ResizeMethod.BILINEAR: resize_bilinear,
             ResizeMethod.NEAREST_NEIGHBOR: resize_nearest_neighbor}
_METHOD_NAMES = {"bilinear": ResizeMethod.BILINEAR, "nearest": ResizeMethod.NEAREST_NEIGHBOR,
                 "bicubic": ResizeMethod.BICUBIC, "area": ResizeMethod.AREA}


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False,
                  preserve_aspect_ratio=False, name=None):
    """Return ``images`` (an image or a batch) resized to ``size`` [new_height,
    new_width], as TF1's ``tf.image.resize_images``: bilinear (float32 out) or nearest
    neighbour (the input dtype), ``half_pixel_centers`` False. Images already of that
    size are returned as they are (no cast), as TensorFlow does. With
    ``preserve_aspect_ratio`` the image is scaled by the smaller of the two ratios, so it
    fits within ``size``.

    Raises:
        UnimplementedError: BICUBIC or AREA, which mpiflow does not have.
        InvalidArgumentError: as resize_bilinear, or an unknown method.
    """
    what = "resize_images"
    code = _METHOD_NAMES.get(method, method) if isinstance(method, str) else method
    if code in (ResizeMethod.BICUBIC, ResizeMethod.AREA):
        raise errors.UnimplementedError(
            f"{what}: mpiflow resizes with ResizeMethod.BILINEAR and NEAREST_NEIGHBOR only, "
            f"got method {method!r}")
    if code not in _RESIZERS:
        raise errors.InvalidArgumentError(
            f"{what}: resize method is not implemented: {method!r} (expected "
            f"ResizeMethod.BILINEAR or NEAREST_NEIGHBOR)")
    with get_default_graph().name_scope(name or "resize"):
        images = convert_to_tensor(images, name="images")
        rank = image_rank(images, what)
        height, width = height_width(images, what)
        rows, cols = _new_size(size, what)
        if preserve_aspect_ratio:
            factor = min(np.float32(rows) / np.float32(height),
                         np.float32(cols) / np.float32(width))
            rows = int(np.round(factor * np.float32(height)))
            cols = int(np.round(factor * np.float32(width)))
        if (rows, cols) == (height, width):
            return images
        batch = images if rank == 4 else array_ops.expand_dims(images, 0)
        out = _RESIZERS[code](batch, [rows, cols], align_corners=align_corners)
        return out if rank == 4 else array_ops.squeeze(out, [0])
