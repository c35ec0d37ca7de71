"""``mf.math``: TF1's ``tf.math`` namespace.

Each name is the function mpiflow has under its other TF1 name (``tf.math.log`` is
``tf.log``, ``tf.math.top_k`` is ``tf.nn.top_k``, ``tf.math.divide_no_nan`` is
``tf.div_no_nan``, ``tf.math.mod`` is ``tf.floormod``), as in TF1, where these are
aliases; a ``tf.math`` name mpiflow lacks is refused as in every namespace.
"""

from mpiflow import unsupported
from mpiflow.ops.activation_ops import (  # noqa: F401
    log_sigmoid, log_softmax, sigmoid, softmax, softplus, softsign, tanh)
from mpiflow.ops.confusion_ops import confusion_matrix  # noqa: F401
from mpiflow.ops.math_ops import (  # noqa: F401
    abs, add, add_n, ceil, cos, div_no_nan as divide_no_nan, divide, equal, exp, expm1,
    floor, floordiv, floormod, greater, greater_equal, is_finite, is_nan, less, less_equal,
    log, log1p, logical_and, logical_not, logical_or, logical_xor, maximum, minimum,
    multiply, negative, not_equal, pow, reciprocal, round, rsqrt, sign, sin, sqrt, square,
    squared_difference, subtract, truediv)
from mpiflow.ops.nn_ops import in_top_k, l2_normalize  # noqa: F401
from mpiflow.ops.reduction_ops import (  # noqa: F401
    argmax, argmin, count_nonzero, cumprod, cumsum, reduce_all, reduce_any, reduce_logsumexp,
    reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum)
from mpiflow.ops.segment_ops import (  # noqa: F401
    unsorted_segment_max, unsorted_segment_mean, unsorted_segment_min, unsorted_segment_prod,
    unsorted_segment_sqrt_n)
from mpiflow.ops.selection_ops import top_k  # noqa: F401
from mpiflow.ops.sparse_ops import unsorted_segment_sum  # noqa: F401

mod = floormod

__getattr__ = unsupported.namespace_getattr(__name__, "tf.math")
