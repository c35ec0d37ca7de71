"""The op registry and every op family; importing this package registers all ops."""

from mpiflow.ops import (  # noqa: F401  (imported for their registrations)
    array_ops, constant_ops, control_ops, init_ops, math_ops, random_ops, reduction_ops,
    sparse_ops, state_ops, variable_scope, variables)
