"""tf.image's preprocessing and augmentation: flips, crops and pads, dtype conversion,
brightness, standardization and grayscale, built from existing ops (no op type of their
own), so their gradients, GPU kernels and shipping come with those ops.

Images are ``[height, width, channels]`` or batches ``[batch, height, width, channels]``,
as in TensorFlow. Offsets, target sizes and fractions are layout arguments, fixed when the
graph is built as mpiflow's are (TensorFlow also takes tensors for them); the crops and
pads also need the image's height and width known then. A random op (random flips,
brightness, crop) takes its seed as mpiflow's random ops do (graph seed and op seed);
with a batch the random flips decide per image, as TensorFlow's do.
"""

from __future__ import annotations

import numpy as np

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import get_default_graph
from mpiflow.framework.scopes import control_dependencies
from mpiflow.ops import (
    array_ops, check_ops, indexing_ops, math_ops, random_ops, reduction_ops, sparse_ops)
from mpiflow.ops.constant_ops import constant, convert_to_tensor
from mpiflow.ops.control_ops import identity


# -- shapes -------------------------------------------------------------------------------

def image_rank(image, what: str) -> int:
    """The rank of ``image``, 3 (one image) or 4 (a batch), known when the graph is built.

    Raises:
        InvalidArgumentError: an unknown rank or another one.
    """
    rank = image.shape.ndims
    if rank not in (3, 4):
        raise errors.InvalidArgumentError(
            f"{what}: '{image.name}' must be an image [height, width, channels] or a batch "
            f"[batch, height, width, channels] (rank 3 or 4, known when the graph is "
            f"built), got shape {image.shape}")
    return rank


def height_width(image, what: str) -> tuple:
    """``image``'s height and width, which must be known when the graph is built.

    Raises:
        InvalidArgumentError: either is unknown (or the rank is not 3 or 4).
    """
    rank = image_rank(image, what)
    height, width = image.shape.as_list()[rank - 3:rank - 1]
    if height is None or width is None:
        raise errors.InvalidArgumentError(
            f"{what}: the height and width of '{image.name}' must be known when the graph "
            f"is built (mpiflow's crops, pads and resizes are laid out then), got shape "
            f"{image.shape}")
    return height, width


def _static_int(value, what: str) -> int:
    return array_ops.static_axis(value, what)


def _with_batch(image, rank):
    """``image`` as a batch (a 3-D image gets a batch of one), and the inverse."""
    if rank == 4:
        return image, lambda x: x
    return array_ops.expand_dims(image, 0), lambda x: array_ops.squeeze(x, [0])


# -- flips --------------------------------------------------------------------------------

def _flip(image, axis, scope):
    with get_default_graph().name_scope(scope):
        image = convert_to_tensor(image, name="image")
        rank = image_rank(image, scope)
        return indexing_ops.reverse(image, [axis + rank - 3])


def flip_left_right(image):
    """Return ``image`` (or each image of a batch) mirrored left to right (the width
    axis reversed), as TensorFlow's."""
    return _flip(image, 1, "flip_left_right")


def flip_up_down(image):
    """Return ``image`` (or each image of a batch) mirrored top to bottom (the height
    axis reversed), as TensorFlow's."""
    return _flip(image, 0, "flip_up_down")


def _random_flip(image, axis, seed, scope):
    """Flip with probability 1/2: one draw for a 3-D image (flipped where it is < 0.5),
    one per image for a batch (flipped where it rounds to 1, i.e. is > 0.5), as
    TensorFlow decides. The choice is a ``where``, so values pass unchanged."""
    with get_default_graph().name_scope(scope):
        image = convert_to_tensor(image, name="image")
        rank = image_rank(image, scope)
        flipped = indexing_ops.reverse(image, [axis + rank - 3])
        if rank == 3:
            flip = math_ops.less(random_ops.random_uniform([], seed=seed), 0.5)
        else:
            batch = image.shape[0] if image.shape[0] is not None else \
                math_ops.shape(image)[0]
            draws = random_ops.random_uniform([batch], seed=seed)
            flip = array_ops.reshape(math_ops.greater(draws, 0.5), [-1, 1, 1, 1])
        return math_ops.where(flip, flipped, image)


def random_flip_left_right(image, seed=None):
    """Return ``image`` mirrored left to right with probability 1/2; a batch's images
    each by their own draw, as TensorFlow's."""
    return _random_flip(image, 1, seed, "random_flip_left_right")


def random_flip_up_down(image, seed=None):
    """Return ``image`` mirrored top to bottom with probability 1/2; a batch's images
    each by their own draw, as TensorFlow's."""
    return _random_flip(image, 0, seed, "random_flip_up_down")


# -- crops and pads -----------------------------------------------------------------------

def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """Return the ``[target_height, target_width]`` window of ``image`` (each image of a
    batch) whose top-left corner is at (``offset_height``, ``offset_width``), as
    TensorFlow's.

    Raises:
        InvalidArgumentError: a negative offset, a target that is not positive, or a
            window that does not fit in the image (TensorFlow raises ValueError).
    """
    what = "crop_to_bounding_box"
    with get_default_graph().name_scope(what):
        image = convert_to_tensor(image, name="image")
        rank = image_rank(image, what)
        top, left = _static_int(offset_height, f"{what} offset_height"), \
            _static_int(offset_width, f"{what} offset_width")
        rows, cols = _static_int(target_height, f"{what} target_height"), \
            _static_int(target_width, f"{what} target_width")
        height, width = image.shape.as_list()[rank - 3:rank - 1]
        problems = [text for bad, text in (
            (top < 0, f"offset_height must be >= 0, got {top}"),
            (left < 0, f"offset_width must be >= 0, got {left}"),
            (rows <= 0, f"target_height must be > 0, got {rows}"),
            (cols <= 0, f"target_width must be > 0, got {cols}"),
            (height is not None and height < top + rows,
             f"height {height} must be >= target + offset = {top + rows}"),
            (width is not None and width < left + cols,
             f"width {width} must be >= target + offset = {left + cols}")) if bad]
        if problems:
            raise errors.InvalidArgumentError(
                f"{what}: {problems[0]} (image '{image.name}' of shape {image.shape})")
        begin, size = [top, left, 0], [rows, cols, -1]
        if rank == 4:
            begin, size = [0] + begin, [-1] + size
        return indexing_ops.slice(image, begin, size)


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """Return ``image`` (each image of a batch) placed at (``offset_height``,
    ``offset_width``) on a ``[target_height, target_width]`` canvas of zeros, as
    TensorFlow's.

    Raises:
        InvalidArgumentError: a negative offset, an image that does not fit in the target
            from its offset (TensorFlow raises ValueError), or a height or width unknown
            when the graph is built.
    """
    what = "pad_to_bounding_box"
    with get_default_graph().name_scope(what):
        image = convert_to_tensor(image, name="image")
        height, width = height_width(image, what)
        top, left = _static_int(offset_height, f"{what} offset_height"), \
            _static_int(offset_width, f"{what} offset_width")
        rows, cols = _static_int(target_height, f"{what} target_height"), \
            _static_int(target_width, f"{what} target_width")
        bottom, right = rows - top - height, cols - left - width
        problems = [text for bad, text in (
            (top < 0, f"offset_height must be >= 0, got {top}"),
            (left < 0, f"offset_width must be >= 0, got {left}"),
            (bottom < 0, f"height {height} must be <= target - offset = {rows - top}"),
            (right < 0, f"width {width} must be <= target - offset = {cols - left}"))
            if bad]
        if problems:
            raise errors.InvalidArgumentError(
                f"{what}: {problems[0]} (image '{image.name}' of shape {image.shape})")
        paddings = [[top, bottom], [left, right], [0, 0]]
        if image.shape.ndims == 4:
            paddings = [[0, 0]] + paddings
        return array_ops.pad(image, paddings)


def resize_image_with_crop_or_pad(image, target_height, target_width):
    """Return ``image`` (each image of a batch) cropped about its centre where it is
    larger than the target and padded with zeros about it where it is smaller, as
    TensorFlow's (an odd difference puts the extra row or column at the bottom/right).

    Raises:
        InvalidArgumentError: a target that is not positive, or a height or width unknown
            when the graph is built.
    """
    what = "resize_image_with_crop_or_pad"
    with get_default_graph().name_scope(what):
        image = convert_to_tensor(image, name="image")
        height, width = height_width(image, what)
        rows, cols = _static_int(target_height, f"{what} target_height"), \
            _static_int(target_width, f"{what} target_width")
        if rows <= 0 or cols <= 0:
            raise errors.InvalidArgumentError(
                f"{what}: target_height and target_width must be > 0, got {rows} and "
                f"{cols}")
        cropped = crop_to_bounding_box(
            image, max((height - rows) // 2, 0), max((width - cols) // 2, 0),
            min(rows, height), min(cols, width))
        return pad_to_bounding_box(cropped, max((rows - height) // 2, 0),
                                   max((cols - width) // 2, 0), rows, cols)


def central_crop(image, central_fraction):
    """Return the central ``central_fraction`` of ``image`` (each image of a batch) in
    height and width, as TensorFlow's: the margin each side is
    ``int((size - size * central_fraction) / 2)``.

    Raises:
        InvalidArgumentError: a fraction outside (0, 1] (TensorFlow raises ValueError) or
            not known when the graph is built, or a height or width unknown then.
    """
    what = "central_crop"
    with get_default_graph().name_scope(what):
        image = convert_to_tensor(image, name="image")
        fraction = float(array_ops.static_scalar(central_fraction, f"{what} central_fraction"))
        if not 0.0 < fraction <= 1.0:
            raise errors.InvalidArgumentError(
                f"{what}: central_fraction must be within (0, 1], got {fraction}")
        if fraction == 1.0:
            return image
        height, width = height_width(image, what)
        top = int((float(height) - float(height) * fraction) / 2)
        left = int((float(width) - float(width) * fraction) / 2)
        return crop_to_bounding_box(image, top, left, height - 2 * top, width - 2 * left)


def random_crop(value, size, seed=None, name=None):
    """Return a ``size`` block of ``value`` (any rank) at an offset drawn uniformly
    among those where it fits, as TensorFlow's; ``size`` must be given, one length per
    dimension, known when the graph is built.

    Each dimension the block does not fill is a gather of ``size[d]`` consecutive indices
    from the drawn offset, so the gradient flows back to the chosen block.

    Raises:
        InvalidArgumentError: ``size`` not one length per dimension, or larger than a
            dimension known when the graph is built; a larger run-time dimension fails
            the step naming the check.
    """
    with get_default_graph().name_scope(name or "random_crop"):
        value = convert_to_tensor(value, name="value")
        lengths = array_ops.static_ints(size, "random_crop size").reshape(-1).tolist()
        rank = value.shape.ndims
        if rank is None or len(lengths) != rank:
            raise errors.InvalidArgumentError(
                f"random_crop: size {lengths} must give one length per dimension of "
                f"'{value.name}' (shape {value.shape}, rank known when the graph is built)")
        dims = value.shape.as_list()
        too_big = [d for d in range(rank) if dims[d] is not None and dims[d] < lengths[d]]
        if too_big or min(lengths, default=0) < 0:
            raise errors.InvalidArgumentError(
                f"random_crop: need value.shape >= size >= 0, got shape {value.shape} and "
                f"size {lengths}")
        sizes = constant(np.asarray(lengths, np.int32), name="size")
        shape = math_ops.shape(value, out_type=dtypes.int32)
        check = check_ops.assert_greater_equal(
            shape, sizes, message="random_crop: need value.shape >= size")
        with control_dependencies([check]):
            limit = identity(shape - sizes + 1)
        draws = random_ops.random_uniform([rank], maxval=np.iinfo(np.int32).max,
                                          dtype=dtypes.int32, seed=seed)
        offsets = math_ops.floormod(draws, limit)
        out = value
        for d in range(rank):
            if dims[d] is not None and dims[d] == lengths[d]:
                continue
            steps = constant(np.arange(lengths[d], dtype=np.int32))
            if d == 0:      # gathered along axis 1 of a leading 1, so the gradient is
                out = array_ops.squeeze(sparse_ops.gather(       # dense, as TF's is
                    array_ops.expand_dims(out, 0), offsets[0] + steps, axis=1), [0])
            else:
                out = sparse_ops.gather(out, offsets[d] + steps, axis=d)
        return out if out is not value else identity(value)


# -- dtypes and colour --------------------------------------------------------------------

def _saturate_cast(x, dtype):
    """``x`` clipped to ``dtype``'s range (the bounds as ``x``'s dtype holds them, not
    above it) and cast: TensorFlow's saturate_cast."""
    low, high = int(dtype.min), int(dtype.max)
    if x.dtype.is_integer:      # bounds past x's own range clip nothing
        low, high = max(low, int(x.dtype.min)), min(high, int(x.dtype.max))
    lo = np.asarray(low).astype(x.dtype.np_dtype)
    hi = np.asarray(high).astype(x.dtype.np_dtype)
    if x.dtype.is_floating and float(hi) > high:      # float32(2**31 - 1) is 2**31
        hi = np.nextafter(hi, np.zeros_like(hi))
    clipped = math_ops.maximum(math_ops.minimum(x, constant(hi)), constant(lo))
    return math_ops.cast(clipped, dtype)


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """Return ``image`` in ``dtype``, rescaled as TensorFlow does: integers span
    [0, MAX] of their dtype and floats [0, 1]. Integer to float multiplies by
    1 / MAX; float to integer multiplies by MAX + 0.5 and truncates; integer to integer
    divides (floor) or multiplies by the ratio of the ranges; float to float casts.
    ``saturate`` clips into ``dtype``'s range before a cast that could overflow.

    Raises:
        InvalidArgumentError: a dtype that is neither an integer nor a float.
    """
    image = convert_to_tensor(image, name="image")
    dtype = dtypes.as_dtype(dtype)
    for kind, what in ((dtype, "dtype"), (image.dtype, "image dtype")):
        if not (kind.is_floating or kind.is_integer):
            raise errors.InvalidArgumentError(
                f"convert_image_dtype: {what} must be an integer or floating dtype, got "
                f"{kind.name}")
    if dtype is image.dtype:
        return identity(image, name=name)
    with get_default_graph().name_scope(name or "convert_image"):
        source = image.dtype
        cast = (lambda x, to: _saturate_cast(x, to)) if saturate else math_ops.cast
        if source.is_integer and dtype.is_integer:
            scale_in, scale_out = int(source.max), int(dtype.max)
            if scale_in > scale_out:
                scale = (scale_in + 1) // (scale_out + 1)
                return cast(math_ops.floordiv(image, constant(scale, dtype=source)), dtype)
            scale = (scale_out + 1) // (scale_in + 1)
            return math_ops.multiply(cast(image, dtype), constant(scale, dtype=dtype))
        if source.is_floating and dtype.is_floating:
            return math_ops.cast(image, dtype)
        if source.is_integer:
            return math_ops.multiply(math_ops.cast(image, dtype),
                                     constant(1.0 / float(source.max), dtype=dtype))
        scaled = math_ops.multiply(image, constant(float(dtype.max) + 0.5, dtype=source))
        return cast(scaled, dtype)


def _as_float(image):
    """``image`` as floats in [0, 1]: float16 and float32 as they are, anything else
    converted to float32, as TensorFlow's colour adjustments take them."""
    if image.dtype in (dtypes.float16, dtypes.float32):
        return image
    return convert_image_dtype(image, dtypes.float32)


def adjust_brightness(image, delta):
    """Return ``image`` plus ``delta`` (on the [0, 1] scale of a float image), converted
    back to the image's dtype with saturation, as TensorFlow's."""
    with get_default_graph().name_scope("adjust_brightness"):
        image = convert_to_tensor(image, name="image")
        flt = _as_float(image)
        adjusted = math_ops.add(flt, math_ops.cast(delta, flt.dtype))
        return convert_image_dtype(adjusted, image.dtype, saturate=True)


def random_brightness(image, max_delta, seed=None):
    """Return ``adjust_brightness(image, delta)`` with one delta drawn uniformly from
    [-max_delta, max_delta) per call (the same for every image of a batch), as
    TensorFlow's.

    Raises:
        InvalidArgumentError: a negative max_delta (TensorFlow raises ValueError).
    """
    if max_delta < 0:
        raise errors.InvalidArgumentError(
            f"random_brightness: max_delta must be non-negative, got {max_delta}")
    delta = random_ops.random_uniform([], -max_delta, max_delta, seed=seed)
    return adjust_brightness(image, delta)


def per_image_standardization(image):
    """Return each image scaled to mean 0 and variance 1, as TensorFlow's:
    ``(x - mean) / max(stddev, 1 / sqrt(num_elements))`` over height, width and channels
    of each image, in float32 whatever the input dtype (integers are not rescaled). The
    floor on the stddev keeps a uniform image finite."""
    with get_default_graph().name_scope("per_image_standardization"):
        image = convert_to_tensor(image, name="image")
        rank = image.shape.ndims
        if rank is not None and rank < 3:
            raise errors.InvalidArgumentError(
                f"per_image_standardization: '{image.name}' must have at least 3 "
                f"dimensions [..., height, width, channels], got shape {image.shape}")
        image = math_ops.cast(image, dtypes.float32)
        axes = [-1, -2, -3]
        count = reduction_ops.reduce_prod(math_ops.shape(image)[-3:])
        mean = reduction_ops.reduce_mean(image, axis=axes, keepdims=True)
        stddev = math_ops.sqrt(reduction_ops.reduce_mean(
            math_ops.square(image - mean), axis=axes, keepdims=True))
        floor = math_ops.rsqrt(math_ops.cast(count, dtypes.float32))
        return math_ops.divide(image - mean, math_ops.maximum(stddev, floor))


# ITU-R 601-2 luma weights, as TensorFlow's rgb_to_grayscale uses.
_LUMA = (0.2989, 0.5870, 0.1140)


def rgb_to_grayscale(images, name=None):
    """Return the luma of RGB ``images`` (last dimension 3) as one channel, in the
    images' dtype: computed on the float32 [0, 1] scale with weights
    (0.2989, 0.5870, 0.1140) and converted back, as TensorFlow's.

    Raises:
        InvalidArgumentError: a last dimension that is not 3.
    """
    with get_default_graph().name_scope(name or "rgb_to_grayscale"):
        images = convert_to_tensor(images, name="images")
        if images.shape.ndims is None or images.shape.as_list()[-1:] != [3]:
            raise errors.InvalidArgumentError(
                f"rgb_to_grayscale: the last dimension of '{images.name}' must be 3 (RGB), "
                f"got shape {images.shape}")
        flt = convert_image_dtype(images, dtypes.float32)
        weights = constant(np.asarray(_LUMA, np.float32).reshape(3, 1))
        gray = math_ops.matmul(array_ops.reshape(flt, [-1, 3]), weights)
        shape = images.shape.as_list()[:-1] + [1]
        if None in shape:
            shape = array_ops.concat([math_ops.shape(images)[:-1], [1]], 0)
        return convert_image_dtype(array_ops.reshape(gray, shape), images.dtype)
