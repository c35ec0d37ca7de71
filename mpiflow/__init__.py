"""mpiflow: TensorFlow-1-style graphs, trained on MPI clusters.

This module only re-exports the public API under TensorFlow's names.
"""

from mpiflow import errors
from mpiflow.framework.dtypes import (
    DType, as_dtype, bfloat16, bool_ as bool, float16, float32, float64, int8, int16, int32,
    int64, uint8)
from mpiflow.framework.device_spec import DeviceSpec
from mpiflow.framework.graph import (
    Graph, GraphKeys, Operation, Tensor, get_default_graph, get_default_session,
    reset_default_graph)
from mpiflow.framework.indexed_slices import IndexedSlices
from mpiflow.framework.tensor_shape import TensorShape
from mpiflow.framework.scopes import (
    add_to_collection, add_to_collections, colocate_with, control_dependencies, device,
    get_collection, get_collection_ref, name_scope)
from mpiflow.gradients import AggregationMethod, UnconnectedGradients, gradients
from mpiflow.ops.activation_ops import log_sigmoid, sigmoid, tanh
from mpiflow.ops.array_ops import (
    concat, expand_dims, pad, rank, reshape, sequence_mask, size, squeeze, stack, tile,
    transpose)
from mpiflow.ops.indexing_ops import one_hot, reverse, slice, split, strided_slice, unstack
from mpiflow.ops.check_ops import (
    Assert, assert_equal, assert_greater, assert_greater_equal, assert_less, assert_less_equal,
    assert_negative, assert_non_negative, assert_non_positive, assert_none_equal,
    assert_positive, assert_rank, assert_type)
from mpiflow.ops.collective_ops import all_gather, all_reduce, broadcast, fused_all_reduce
from mpiflow.ops.constant_ops import (
    constant, convert_to_tensor, placeholder, placeholder_with_default)
from mpiflow.ops.data_flow_ops import dynamic_partition, dynamic_stitch
from mpiflow.ops.control_ops import (
    check_numerics, group, identity, no_op, stop_gradient, tuple_ as tuple)
from mpiflow.ops.grid_ops import eye, linspace, meshgrid
from mpiflow.ops.importer import import_graph_def
from mpiflow.ops.init_ops import (
    constant_initializer, glorot_normal_initializer, glorot_uniform_initializer,
    ones_initializer, random_normal_initializer, random_uniform_initializer,
    truncated_normal_initializer, variance_scaling_initializer, zeros_initializer)
from mpiflow.ops.math_ops import (
    abs, add, add_n, broadcast_to, cast, div, divide, equal, exp, floor, floordiv, floormod,
    greater, greater_equal, is_finite, is_nan, less, less_equal, log, log1p, logical_and,
    logical_not, logical_or, logical_xor, matmul, maximum, minimum, multiply, negative,
    not_equal, ones_like, pow, realdiv, reciprocal, rsqrt, shape, sign, sqrt, square, squared_difference, subtract,
    to_float, truediv, where, zeros_like)
from mpiflow.ops.math_ops import ceil, cos, expm1, round, sin
from mpiflow.ops.clip_ops import clip_by_global_norm, clip_by_norm, clip_by_value, global_norm
from mpiflow.ops.math_ops import div_no_nan
from mpiflow.ops.confusion_ops import confusion_matrix
from mpiflow.ops.math_ops import range_ as range
from mpiflow.ops.print_ops import print_ as Print, print_v2 as print
from mpiflow.ops.partitioned_variables import PartitionedVariable, create_partitioned_variables
from mpiflow.ops.partitioners import (
    fixed_size_partitioner, min_max_variable_partitioner, variable_axis_size_partitioner)
from mpiflow.ops.image_ops import random_crop
from mpiflow.ops.random_ops import (
    fill, ones, random_normal, random_uniform, set_random_seed, truncated_normal, zeros)
from mpiflow.ops.reduction_ops import (
    argmax, argmin, count_nonzero, cumprod, cumsum, reduce_all, reduce_any, reduce_logsumexp,
    reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum)
from mpiflow.ops.selection_ops import boolean_mask, gather_nd, scatter_nd
from mpiflow.ops.segment_ops import (
    unsorted_segment_max, unsorted_segment_mean, unsorted_segment_min, unsorted_segment_prod,
    unsorted_segment_sqrt_n)
from mpiflow.ops.sparse_ops import gather, unique, unsorted_segment_sum
from mpiflow.ops.state_ops import (
    assign, assign_add, assign_sub, is_variable_initialized, scatter_add, scatter_sub,
    scatter_update)
from mpiflow.ops.variable_scope import (
    AUTO_REUSE, VariableScope, get_local_variable, get_variable, get_variable_scope,
    variable_scope)
from mpiflow.ops.variables import (
    Variable, all_variables, global_variables, global_variables_initializer,
    initialize_all_variables, local_variables, local_variables_initializer,
    model_variables, moving_average_variables, trainable_variables, variables_initializer)
from mpiflow.runtime.session import (
    ConfigProto, InteractiveSession, RunMetadata, RunOptions, Session)

from mpiflow import nn, train  # noqa: E402  (namespaces that use the names above)
from mpiflow import summary  # noqa: E402
from mpiflow import app  # noqa: E402
from mpiflow import tf_logging as logging  # noqa: E402
from mpiflow import compat  # noqa: E402
from mpiflow import timeline  # noqa: E402
from mpiflow import layers, losses, metrics  # noqa: E402  (tf.layers, tf.losses, tf.metrics)
from mpiflow import data  # noqa: E402  (tf.data; also the input helpers)
from mpiflow import image  # noqa: E402  (tf.image)
# tf.math (after the names it re-exports); its module is not named math.py, which would
# shadow the standard library's math for a script run from inside the package
# (python mpiflow/info.py: numpy then fails to import)
from mpiflow import math_namespace as math

flags = app.flags


def disable_eager_execution():
    """Nothing to do: mpiflow only builds graphs (kept so TF2-era v1 scripts run)."""


def disable_v2_behavior():
    """Nothing to do: mpiflow only has TF1 behaviour (kept so scripts run)."""

sub = subtract
reverse_v2 = reverse
lin_space = linspace
newaxis = None
mul = multiply
neg = negative
mod = floormod
__version__ = "0.1.0"

from mpiflow import unsupported as _unsupported  # noqa: E402

_missing = _unsupported.namespace_getattr(__name__, "tf")


def __getattr__(name):
    """``tf.Summary``, ``tf.SessionLog`` and ``tf.Event`` are tensorboardX's protocol
    buffers, imported on first use (``summary.event_proto``); any other name mpiflow
    lacks is unsupported."""
    if name in summary.EVENT_PROTOS:
        return summary.event_proto(name)
    return _missing(name)


from mpiflow import startup as _startup  # noqa: E402

_startup.prepare_process()
