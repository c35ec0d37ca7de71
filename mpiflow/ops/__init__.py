"""The op registry and every op family; importing this package registers all ops."""

from mpiflow.ops import (  # noqa: F401  (imported for their registrations)
    activation_ops, array_ops, candidate_sampling_ops, check_ops, collective_ops, comm_ops,
    compression_ops, constant_ops, control_ops, conv_ops, data_flow_ops, grid_ops,
    indexing_ops, init_ops, io_ops, math_ops, nn_ops, partitioned_variables, pooling_ops,
    print_ops, random_ops, reduction_ops, sampled_losses, segment_ops, selection_ops, sparse_ops,
    staleness_ops, state_ops, sync_ops, training_ops, variable_scope, variables)
