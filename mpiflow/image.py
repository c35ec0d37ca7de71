"""``mf.image``: image preprocessing and augmentation under TF1's ``tf.image`` names."""

from mpiflow import unsupported
from mpiflow.ops.image_ops import (  # noqa: F401
    adjust_brightness, central_crop, convert_image_dtype, crop_to_bounding_box,
    flip_left_right, flip_up_down, pad_to_bounding_box, per_image_standardization,
    random_brightness, random_crop, random_flip_left_right, random_flip_up_down,
    resize_image_with_crop_or_pad, rgb_to_grayscale)
from mpiflow.ops.resize_ops import (  # noqa: F401
    ResizeMethod, resize_bilinear, resize_images, resize_nearest_neighbor)

resize = resize_images                          # TF1 exports both names
resize_with_crop_or_pad = resize_image_with_crop_or_pad

__getattr__ = unsupported.namespace_getattr(__name__, "tf.image")
