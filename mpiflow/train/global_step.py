"""The global step: an int64 scalar variable named "global_step" that counts training steps.

It lives in the GLOBAL_VARIABLES and GLOBAL_STEP collections of its graph, is not
trainable, and starts at zero; ``Optimizer.minimize(global_step=...)`` increments it.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework import dtypes
from mpiflow.framework.graph import Graph, GraphKeys, Tensor, get_default_graph
from mpiflow.ops import init_ops
from mpiflow.ops.variable_scope import VariableScope

GLOBAL_STEP_NAME = "global_step"


class GlobalStepTypeError(errors.InvalidArgumentError, TypeError):
    """The global step is not an integer scalar Variable or Tensor. Also a ``TypeError``,
    which TensorFlow raises there."""


def get_global_step(graph: Graph | None = None):
    """Return the global step variable of ``graph`` (default graph), or None if it has none.

    Raises:
        InvalidArgumentError: the GLOBAL_STEP collection holds several items.
        GlobalStepTypeError: the global step is not an integer scalar (a TypeError too).
    """
    graph = graph if graph is not None else get_default_graph()
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        raise errors.InvalidArgumentError(
            f"The GLOBAL_STEP collection holds {len(found)} items "
            f"({[getattr(f, 'name', f) for f in found]}); expected one global step")
    if found:
        step = found[0]
    else:
        try:
            step = graph.get_tensor_by_name(GLOBAL_STEP_NAME + ":0")
        except errors.NotFoundError:
            return None
    _check_global_step(step)
    return step


def create_global_step(graph: Graph | None = None):
    """Create the global step variable in ``graph`` (default graph) and return it.

    Raises:
        AlreadyExistsError: the graph already has a global step.
    """
    graph = graph if graph is not None else get_default_graph()
    if get_global_step(graph) is not None:
        raise errors.AlreadyExistsError(
            f'"{GLOBAL_STEP_NAME}" already exists in this graph: use '
            "mf.train.get_or_create_global_step() to share it")
    with graph.as_default(), graph.name_scope(None), \
            graph.control_dependencies(None), graph._colocation_reset():
        # A root scope: the step is "global_step" whatever variable scope is open.
        return VariableScope(False).get_variable(
            GLOBAL_STEP_NAME, shape=[], dtype=dtypes.int64,
            initializer=init_ops.Zeros(), trainable=False,
            collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph: Graph | None = None):
    """Return the global step of ``graph`` (default graph), creating it if needed."""
    graph = graph if graph is not None else get_default_graph()
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess, global_step_tensor) -> int:
    """Return the value of ``global_step_tensor`` (a Variable, Tensor or name) in ``sess``."""
    if isinstance(global_step_tensor, str):
        global_step_tensor = sess.graph.get_tensor_by_name(global_step_tensor)
    return int(sess.run(global_step_tensor))


def assert_global_step(global_step_tensor) -> None:
    """Check that ``global_step_tensor`` can be a global step: an integer scalar Variable
    or Tensor.

    Raises:
        GlobalStepTypeError: it is not (also a TypeError, as TensorFlow raises).
    """
    _check_global_step(global_step_tensor)


def _check_global_step(step) -> None:
    tensor = step if isinstance(step, Tensor) else getattr(step, "_ref", lambda: None)()
    if not isinstance(tensor, Tensor):
        raise GlobalStepTypeError(
            f"The global step must be a Variable or Tensor, got {type(step).__name__}")
    if not tensor.dtype.is_integer:
        raise GlobalStepTypeError(
            f"The global step '{tensor.name}' must have an integer dtype, got "
            f"{tensor.dtype.name} (as TensorFlow; make it with "
            "mf.train.get_or_create_global_step(), an int64 scalar)")
    if tensor.shape.ndims not in (None, 0):
        raise GlobalStepTypeError(
            f"The global step '{tensor.name}' must be a scalar, got shape {tensor.shape}")
