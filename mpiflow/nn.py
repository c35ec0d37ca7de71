"""``mf.nn``: neural-network ops under TensorFlow's ``tf.nn`` names."""

from mpiflow import unsupported
from mpiflow.ops.activation_ops import (  # noqa: F401
    elu, leaky_relu, log_softmax, relu, relu6, selu, sigmoid, softmax, softplus, softsign,
    tanh)
from mpiflow.ops.candidate_sampling_ops import (  # noqa: F401
    log_uniform_candidate_sampler, uniform_candidate_sampler)
from mpiflow.ops.conv_ops import (  # noqa: F401
    conv1d, conv2d, conv2d_backprop_filter, conv2d_backprop_input, conv2d_transpose)
from mpiflow.ops.nn_ops import (  # noqa: F401
    batch_normalization, bias_add, dropout, in_top_k, l2_loss, l2_normalize, moments,
    sigmoid_cross_entropy_with_logits, softmax_cross_entropy_with_logits, softmax_cross_entropy_with_logits_v2,
    sparse_softmax_cross_entropy_with_logits, weighted_cross_entropy_with_logits,
    xw_plus_b)
from mpiflow.ops.pooling_ops import avg_pool, avg_pool2d, max_pool, max_pool2d  # noqa: F401
from mpiflow.ops.sampled_losses import nce_loss, sampled_softmax_loss  # noqa: F401
from mpiflow.ops.selection_ops import top_k  # noqa: F401
from mpiflow.ops.sparse_ops import embedding_lookup  # noqa: F401

__getattr__ = unsupported.namespace_getattr(__name__, "tf.nn")
