"""tf.image: flips, crops and pads, dtype conversion, brightness, standardization,
grayscale and resizes give TensorFlow's values, dtypes and shapes (recorded from TF 2.21's
tf.compat.v1), the random ones decide per image and repeat under a seed, gradients flow
(resizes checked against finite differences), and what mpiflow cannot lay out when the
graph is built is refused by name."""

import numpy as np
import pytest

import mpiflow as mf
from tests.ops.gradcheck import GradCase, check_gradient

R = np.random.default_rng(7)
IMAGE = np.arange(5 * 7 * 3, dtype=np.float32).reshape(5, 7, 3)
BATCH = np.arange(2 * 5 * 7 * 3, dtype=np.float32).reshape(2, 5, 7, 3)
U8 = np.array([[[0, 128, 255], [17, 64, 200]]], np.uint8)        # 1 x 2, RGB
# [[0, .1, .4], [.9, 1.6, 2.5]] as a batch of one 2 x 3 image
SQUARES = (np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1) ** 2) / 10
GRID = np.arange(12, dtype=np.int32).reshape(1, 3, 4, 1)


def run(fetches, feed=None):
    with mf.Session() as sess:
        return sess.run(fetches, feed)


# Resizes are linear in the image, so central differences are exact for any step: a
# large one keeps float32's rounding (the resize computes in float32) out of them.
GRAD_CASES = [
    GradCase("resize_bilinear", lambda x: mf.image.resize_bilinear(x, (5, 2)),
             [R.uniform(size=(2, 3, 4, 2))], rtol=1e-4, atol=1e-4, delta=0.1),
    GradCase("resize_bilinear_half_pixel",
             lambda x: mf.image.resize_bilinear(x, (2, 7), half_pixel_centers=True),
             [R.uniform(size=(1, 3, 4, 1))], rtol=1e-4, atol=1e-4, delta=0.1),
    GradCase("resize_bilinear_aligned",
             lambda x: mf.image.resize_bilinear(x, (4, 3), align_corners=True),
             [R.uniform(size=(1, 3, 4, 2))], rtol=1e-4, atol=1e-4, delta=0.1),
    GradCase("resize_nearest_neighbor",
             lambda x: mf.image.resize_nearest_neighbor(x, (5, 3)),
             [R.uniform(size=(2, 3, 4, 1))]),
    GradCase("per_image_standardization", mf.image.per_image_standardization,
             [R.uniform(size=(2, 3, 2))], rtol=1e-3, atol=1e-3, delta=1e-3),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case):
    check_gradient(case)


# -- flips --------------------------------------------------------------------------------

def test_flips_mirror_an_image_and_each_image_of_a_batch():
    got = run({"lr": mf.image.flip_left_right(IMAGE), "ud": mf.image.flip_up_down(IMAGE),
               "lr4": mf.image.flip_left_right(BATCH), "ud4": mf.image.flip_up_down(BATCH)})
    np.testing.assert_array_equal(got["lr"], IMAGE[:, ::-1])
    np.testing.assert_array_equal(got["ud"], IMAGE[::-1])
    np.testing.assert_array_equal(got["lr4"], BATCH[:, :, ::-1])
    np.testing.assert_array_equal(got["ud4"], BATCH[:, ::-1])


def test_random_flips_decide_per_image_of_a_batch_and_repeat_under_a_seed():
    batch = np.repeat(BATCH[:1], 200, axis=0)
    x = mf.placeholder(mf.float32, [None, 5, 7, 3])
    lr = mf.image.random_flip_left_right(x, seed=4)
    ud = mf.image.random_flip_up_down(x, seed=4)
    assert lr.shape.as_list() == [None, 5, 7, 3] and lr.dtype == mf.float32
    with mf.Session() as sess:
        first = sess.run(lr, {x: batch})
        second = sess.run(lr, {x: batch})
        upside = sess.run(ud, {x: batch})
    for out, flipped in ((first, batch[:, :, ::-1]), (upside, batch[:, ::-1])):
        was_flipped = (out == flipped).all(axis=(1, 2, 3))
        unchanged = (out == batch).all(axis=(1, 2, 3))
        assert (was_flipped | unchanged).all()
        assert 60 < was_flipped.sum() < 140            # each image its own coin
    assert not np.array_equal(first, second)           # a new draw each step
    with mf.Graph().as_default():
        again = mf.image.random_flip_left_right(mf.placeholder(mf.float32, [None, 5, 7, 3]),
                                                seed=4)
        x2 = again.graph.get_tensor_by_name("Placeholder:0")
        np.testing.assert_array_equal(run(again, {x2: batch}), first)


def test_random_flip_of_one_image_flips_it_whole_or_not_at_all():
    image = mf.constant(IMAGE)
    flip = mf.image.random_flip_left_right(image, seed=2)
    with mf.Session() as sess:
        outs = [sess.run(flip) for _ in range(40)]
    kinds = {"flipped" if np.array_equal(o, IMAGE[:, ::-1]) else
             "same" if np.array_equal(o, IMAGE) else "other" for o in outs}
    assert kinds == {"flipped", "same"}


# -- crops and pads -----------------------------------------------------------------------

def test_crops_and_pads_take_tensorflows_windows():
    got = run({
        "crop": mf.image.crop_to_bounding_box(IMAGE, 1, 2, 3, 4),
        "crop4": mf.image.crop_to_bounding_box(BATCH, 0, 1, 5, 3),
        "pad": mf.image.pad_to_bounding_box(IMAGE, 1, 2, 8, 10),
        "pad4": mf.image.pad_to_bounding_box(BATCH, 0, 1, 6, 8),
        # TF 2.21: the margins are int((size - size * fraction) / 2) a side
        "central": mf.image.central_crop(IMAGE, 0.5),
        "central4": mf.image.central_crop(BATCH, 0.33),
        # crop about the centre where larger, pad about it where smaller; an odd
        # difference leaves the extra row or column at the bottom or right
        "crop_pad": mf.image.resize_image_with_crop_or_pad(IMAGE, 4, 10),
        "crop_pad4": mf.image.resize_image_with_crop_or_pad(BATCH, 8, 2),
    })
    np.testing.assert_array_equal(got["crop"], IMAGE[1:4, 2:6])
    np.testing.assert_array_equal(got["crop4"], BATCH[:, 0:5, 1:4])
    np.testing.assert_array_equal(got["pad"], np.pad(IMAGE, [[1, 2], [2, 1], [0, 0]]))
    np.testing.assert_array_equal(got["pad4"], np.pad(BATCH, [[0, 0], [0, 1], [1, 0], [0, 0]]))
    np.testing.assert_array_equal(got["central"], IMAGE[1:4, 1:6])
    np.testing.assert_array_equal(got["central4"], BATCH[:, 1:4, 2:5])
    np.testing.assert_array_equal(got["crop_pad"], np.pad(IMAGE[0:4], [[0, 0], [1, 2], [0, 0]]))
    np.testing.assert_array_equal(got["crop_pad4"],
                                  np.pad(BATCH[:, :, 2:4], [[0, 0], [1, 2], [0, 0], [0, 0]]))
    assert mf.image.central_crop(BATCH, 0.33).shape.as_list() == [2, 3, 3, 3]


@pytest.mark.parametrize("build, words", [
    (lambda: mf.image.crop_to_bounding_box(IMAGE, 3, 0, 3, 7), "height 5 must be >="),
    (lambda: mf.image.crop_to_bounding_box(IMAGE, -1, 0, 3, 7), "offset_height must be"),
    (lambda: mf.image.pad_to_bounding_box(IMAGE, 0, 2, 5, 8), "width 7 must be <="),
    (lambda: mf.image.central_crop(IMAGE, 1.5), "within (0, 1]"),
    (lambda: mf.image.flip_left_right(np.zeros((3, 3), np.float32)), "rank 3 or 4"),
    (lambda: mf.image.pad_to_bounding_box(
        mf.placeholder(mf.float32, [None, None, 3]), 0, 0, 4, 4), "must be known"),
    (lambda: mf.image.crop_to_bounding_box(IMAGE, mf.placeholder(mf.int32, []), 0, 2, 2),
     "must be known when the graph is built"),
])
def test_bounding_boxes_are_checked_when_the_graph_is_built(build, words):
    with pytest.raises(mf.errors.InvalidArgumentError) as raised:
        build()
    assert words in str(raised.value)


def test_random_crop_takes_a_block_that_fits_and_repeats_under_a_seed():
    x = mf.placeholder(mf.float32, [None, 5, 7, 3])
    crop = mf.image.random_crop(x, [2, 3, 4, 3], seed=9)
    assert crop.shape.as_list() == [2, 3, 4, 3]
    grad = mf.gradients(mf.reduce_sum(crop), x)[0]
    with mf.Session() as sess:
        outs = [sess.run([crop, grad], {x: BATCH}) for _ in range(30)]
    starts = set()
    for block, g in outs:
        b, h, w = [int(np.argwhere(BATCH == block.flat[0])[0][i]) for i in range(3)]
        np.testing.assert_array_equal(block, BATCH[b:b + 2, h:h + 3, w:w + 4])
        assert isinstance(g, np.ndarray) and g.sum() == block.size     # dense, one per pick
        starts.add((b, h, w))
    assert len(starts) > 5
    with mf.Session() as sess, \
            pytest.raises(mf.errors.InvalidArgumentError, match="random_crop"):
        sess.run(crop, {x: BATCH[:1]})                 # 1 image, 2 asked for
    with pytest.raises(mf.errors.InvalidArgumentError, match="one length per dimension"):
        mf.random_crop(IMAGE, [2, 2])


# -- dtypes and colour --------------------------------------------------------------------

def test_convert_image_dtype_scales_as_tensorflow():
    got = run({
        "u8_f32": mf.image.convert_image_dtype(U8, mf.float32),
        "f_u8": mf.image.convert_image_dtype(
            np.array([-0.2, 0.0, 0.001, 0.5, 0.999, 1.0, 1.3], np.float32), mf.uint8,
            saturate=True),
        "u8_i32": mf.image.convert_image_dtype(U8, mf.int32),
        "i32_u8": mf.image.convert_image_dtype(np.array([0, 2**24, 2**31 - 1], np.int32),
                                               mf.uint8),
        "i8_u8": mf.image.convert_image_dtype(np.array([-5, 0, 100, 127], np.int8), mf.uint8,
                                              saturate=True),
    })
    # recorded from TF 2.21's tf.compat.v1
    np.testing.assert_array_equal(got["u8_f32"], np.float32(
        [[[0.0, 0.501960813999176, 1.0], [0.06666667014360428, 0.250980406999588,
                                          0.7843137979507446]]]))
    assert got["f_u8"].dtype == np.uint8 and got["f_u8"].tolist() == [0, 0, 0, 127, 255, 255,
                                                                       255]
    assert got["u8_i32"].tolist() == [[[0, 1073741824, 2139095040],
                                       [142606336, 536870912, 1677721600]]]
    assert got["i32_u8"].tolist() == [0, 2, 255]
    assert got["i8_u8"].tolist() == [0, 0, 200, 254]


def test_per_image_standardization_floors_the_stddev_as_tensorflow():
    got = run({"image": mf.image.per_image_standardization(
                   np.array([[[1.], [2.]], [[4.], [9.]]], np.float32)),
               "flat": mf.image.per_image_standardization(np.full((2, 2, 1), 7, np.uint8)),
               "batch": mf.image.per_image_standardization(BATCH)})
    # recorded from TF 2.21's tf.compat.v1
    np.testing.assert_allclose(got["image"].ravel(), [-0.9733285307884216, -0.6488856673240662,
                                                      0.0, 1.6222141981124878], rtol=1e-6)
    assert got["flat"].dtype == np.float32 and not got["flat"].any()
    for one, image in zip(got["batch"], BATCH):       # each image by its own statistics
        np.testing.assert_allclose(one, (image - image.mean()) / image.std(), rtol=1e-5)


def test_brightness_and_grayscale_convert_back_to_the_images_dtype():
    got = run({"up": mf.image.adjust_brightness(U8, 0.1),
               "down": mf.image.adjust_brightness(U8, -0.3),
               "gray": mf.image.rgb_to_grayscale(U8),
               "gray_f": mf.image.rgb_to_grayscale(np.float32([[[0.2, 0.4, 0.8]]]))})
    # recorded from TF 2.21's tf.compat.v1 (saturated at 0 and 255)
    assert got["up"].dtype == np.uint8 and got["up"].tolist() == [[[25, 153, 255],
                                                                   [42, 89, 225]]]
    assert got["down"].tolist() == [[[0, 51, 178], [0, 0, 123]]]
    assert got["gray"].dtype == np.uint8 and got["gray"].tolist() == [[[104], [65]]]
    np.testing.assert_allclose(got["gray_f"], [[[0.38578000664711]]], rtol=1e-6)


def test_random_brightness_adds_one_delta_within_max_delta():
    image = mf.constant(IMAGE / 200)
    shifted = mf.image.random_brightness(image, 0.25, seed=3)
    with mf.Session() as sess:
        deltas = [sess.run(shifted) - IMAGE / 200 for _ in range(20)]
    for delta in deltas:
        np.testing.assert_allclose(delta, delta.flat[0], atol=1e-6)
        assert -0.25 <= delta.flat[0] < 0.25
    assert len({round(float(d.flat[0]), 5) for d in deltas}) > 10
    with pytest.raises(mf.errors.InvalidArgumentError, match="max_delta"):
        mf.image.random_brightness(image, -0.1)


# -- resizes ------------------------------------------------------------------------------

# SQUARES resized to 3 x 5, recorded from TF 2.21's tf.compat.v1
BILINEAR = {
    (False, False): [[0.0, 0.06000000238418579, 0.1600000262260437, 0.3400000333786011,
                      0.4000000059604645],
                     [0.6000000238418579, 0.9000000357627869, 1.2400002479553223,
                      1.660000205039978, 1.7999999523162842],
                     [0.8999999761581421, 1.3200000524520874, 1.78000009059906,
                      2.320000171661377, 2.5]],
    (True, False): [[0.0, 0.05000000074505806, 0.10000000149011612, 0.25,
                     0.4000000059604645],
                    [0.44999998807907104, 0.6500000357627869, 0.8500000238418579,
                     1.149999976158142, 1.4499999284744263],
                    [0.8999999761581421, 1.25, 1.600000023841858, 2.049999952316284, 2.5]],
    (False, True): [[0.0, 0.04000000283122063, 0.10000000149011612, 0.28000006079673767,
                     0.4000000059604645],
                    [0.44999998807907104, 0.6100000739097595, 0.8500000238418579,
                     1.2100000381469727, 1.4499999284744263],
                    [0.8999999761581421, 1.1800000667572021, 1.600000023841858,
                     2.140000104904175, 2.5]],
}
# GRID (3 x 4 int32) resized to 5 x 3, recorded from TF 2.21's tf.compat.v1
NEAREST = {
    (False, False): [[0, 1, 2], [0, 1, 2], [4, 5, 6], [4, 5, 6], [8, 9, 10]],
    (True, False): [[0, 2, 3], [4, 6, 7], [4, 6, 7], [8, 10, 11], [8, 10, 11]],
    (False, True): [[0, 2, 3], [0, 2, 3], [4, 6, 7], [8, 10, 11], [8, 10, 11]],
}


@pytest.mark.parametrize("align_corners, half_pixel_centers", list(BILINEAR))
def test_resizes_match_tensorflow(align_corners, half_pixel_centers):
    corners = {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers}
    bilinear = mf.image.resize_bilinear(SQUARES, (3, 5), **corners)
    nearest = mf.image.resize_nearest_neighbor(GRID, (5, 3), **corners)
    assert (bilinear.dtype, bilinear.shape.as_list()) == (mf.float32, [1, 3, 5, 1])
    assert (nearest.dtype, nearest.shape.as_list()) == (mf.int32, [1, 5, 3, 1])
    got = run({"bilinear": bilinear, "nearest": nearest})
    np.testing.assert_array_equal(got["bilinear"][0, ..., 0],
                                  np.float32(BILINEAR[align_corners, half_pixel_centers]))
    assert got["nearest"][0, ..., 0].tolist() == NEAREST[align_corners, half_pixel_centers]


def test_resize_images_keeps_tf1s_defaults_dtypes_and_shapes():
    images = {
        "bilinear": mf.image.resize_images(SQUARES[0], (3, 5)),
        "u8_bilinear": mf.image.resize_images(U8, (2, 4)),           # float32 out
        "u8_nearest": mf.image.resize_images(
            U8, (2, 4), method=mf.image.ResizeMethod.NEAREST_NEIGHBOR),
        "same_size": mf.image.resize_images(U8, (1, 2)),             # returned as it is
        "aspect": mf.image.resize_images(np.zeros((5, 7, 1), np.float32), (20, 10),
                                         preserve_aspect_ratio=True),
        "batch": mf.image.resize(mf.placeholder(mf.float32, [None, 2, 3, 1]), (4, 4)),
    }
    assert {k: (v.dtype, v.shape.as_list()) for k, v in images.items()} == {
        "bilinear": (mf.float32, [3, 5, 1]), "u8_bilinear": (mf.float32, [2, 4, 3]),
        "u8_nearest": (mf.uint8, [2, 4, 3]), "same_size": (mf.uint8, [1, 2, 3]),
        "aspect": (mf.float32, [7, 10, 1]), "batch": (mf.float32, [None, 4, 4, 1])}
    np.testing.assert_array_equal(run(images["bilinear"])[..., 0],
                                  np.float32(BILINEAR[False, False]))


@pytest.mark.parametrize("build, error, words", [
    (lambda: mf.image.resize_images(IMAGE, (3, 3), method=mf.image.ResizeMethod.BICUBIC),
     mf.errors.UnimplementedError, "BILINEAR and NEAREST_NEIGHBOR only"),
    (lambda: mf.image.resize_bilinear(BATCH, (2, 2), align_corners=True,
                                      half_pixel_centers=True),
     mf.errors.InvalidArgumentError, "align_corners must be False"),
    (lambda: mf.image.resize_bilinear(IMAGE, (2, 2)), mf.errors.InvalidArgumentError,
     "rank 4"),
    (lambda: mf.image.resize_nearest_neighbor(
        mf.placeholder(mf.float32, [None, None, None, 3]), (2, 2)),
     mf.errors.InvalidArgumentError, "height and width"),
    (lambda: mf.image.resize_bilinear(BATCH, mf.placeholder(mf.int32, [2])),
     mf.errors.InvalidArgumentError, "size must be known"),
    (lambda: mf.image.resize_bilinear(BATCH, (0, 2)), mf.errors.InvalidArgumentError,
     "must be positive"),
])
def test_resizes_refuse_what_they_cannot_lay_out(build, error, words):
    with pytest.raises(error) as raised:
        build()
    assert words in str(raised.value)


def test_the_rest_of_tf_image_is_refused_by_name():
    with pytest.raises(mf.errors.UnsupportedAPIError, match="tf.image.random_hue"):
        _ = mf.image.random_hue
    with pytest.raises(mf.errors.UnsupportedAPIError,
                       match="resize_bilinear and resize_nearest_neighbor"):
        _ = mf.image.resize_bicubic
