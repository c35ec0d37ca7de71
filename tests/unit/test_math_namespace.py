"""tf.math is TF1's namespace of aliases: each name mpiflow has under another TF1 name
is that same function, and each name TF1's tf.math has that mpiflow lacks is refused by
name, pointing to docs/tf1_api.md."""

import pytest

import mpiflow as mf

# dir(tf.compat.v1.math), public names.
TF1_MATH = """
abs accumulate_n acos acosh add add_n angle approx_max_k approx_min_k argmax argmin asin
asinh atan atan2 atanh bessel_i0 bessel_i0e bessel_i1 bessel_i1e betainc bincount ceil
confusion_matrix conj cos cosh count_nonzero cumprod cumsum cumulative_logsumexp digamma
divide divide_no_nan equal erf erfc erfcinv erfinv exp expm1 floor floordiv floormod
greater greater_equal igamma igammac imag in_top_k invert_permutation is_finite is_inf
is_nan is_non_decreasing is_strictly_increasing l2_normalize lbeta less less_equal
lgamma log log1p log_sigmoid log_softmax logical_and logical_not logical_or logical_xor
maximum minimum mod multiply multiply_no_nan ndtri negative nextafter not_equal
polygamma polyval pow real reciprocal reciprocal_no_nan reduce_all reduce_any
reduce_euclidean_norm reduce_logsumexp reduce_max reduce_mean reduce_min reduce_prod
reduce_std reduce_sum reduce_variance rint round rsqrt scalar_mul segment_max
segment_mean segment_min segment_prod segment_sum sigmoid sign sin sinh sobol_sample
softmax softplus softsign special sqrt square squared_difference subtract tan tanh top_k
truediv unsorted_segment_max unsorted_segment_mean unsorted_segment_min
unsorted_segment_prod unsorted_segment_sqrt_n unsorted_segment_sum xdivy xlog1py xlogy
zero_fraction zeta
""".split()

# tf.math names whose function mpiflow has under another TF1 name than tf.<same name>.
OTHER_NAMES = {"divide_no_nan": mf.div_no_nan, "mod": mf.floormod,
               **{name: getattr(mf.nn, name) for name in (
                   "in_top_k", "l2_normalize", "log_softmax", "softmax", "softplus",
                   "softsign", "top_k")}}


def _same_function_elsewhere(name):
    if name in OTHER_NAMES:
        return OTHER_NAMES[name]
    return vars(mf).get(name)


@pytest.mark.parametrize("name", TF1_MATH)
def test_each_tf1_math_name_is_mpiflows_function_or_refused_by_name(name):
    elsewhere = _same_function_elsewhere(name)
    if elsewhere is not None:
        assert getattr(mf.math, name) is elsewhere
    else:
        with pytest.raises(mf.errors.UnsupportedAPIError,
                           match=rf"tf\.math\.{name}\b.*docs/tf1_api\.md"):
            getattr(mf.math, name)


def test_the_common_tf1_math_calls_resolve():
    for name in ("log", "reduce_mean", "sigmoid", "squared_difference", "top_k",
                 "in_top_k", "is_nan", "l2_normalize", "unsorted_segment_sum",
                 "unsorted_segment_max", "unsorted_segment_mean"):
        assert callable(getattr(mf.math, name)), name
    assert mf.compat.v1.math is mf.math


def test_tf_mod_is_floormod_as_in_tf1():
    assert mf.mod is mf.floormod
