"""A kernel result that a Send takes from this rank (a gradient a worker pushes, rows a ps
sends back) is written into a pooled buffer on huge pages, which MPI sends about 2.5 times
as fast as memory on 4 KiB pages, wherever the kernel can write into a given buffer
(MatMul, a Gather of rows). The values are the same, bit for bit, as when it allocates;
results that stay on the rank are allocated as before."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors
from mpiflow.framework.graph import Graph
from mpiflow.framework.graph_def import import_graph_def
from mpiflow.ops.registry import get_op_def, registered_op_types
from mpiflow.runtime.executor import Plan, schedule
from mpiflow.runtime.kernel_env import LocalEnv
from mpiflow.runtime.partition import partition
from mpiflow.runtime.plan_compiler import KernelContext
from mpiflow.runtime.resources import ResourceStore

PS, WORKER = ("ps", 0), ("worker", 0)
RANKS = {PS: 0, WORKER: 1}


def _outgoing(fetches, targets, task):
    """Names of the ops of ``task``'s piece whose kernels may write into send buffers."""
    graph = mf.get_default_graph()
    order = schedule(graph, list(fetches), list(targets), set())
    pieces = partition(order, lambda op: PS if "/job:ps" in op.device else WORKER, [],
                       list(fetches), WORKER, RANKS.__getitem__)
    piece = Graph()
    import_graph_def({"node": pieces.nodes[task]}, name="", graph=piece,
                     known_op_types=set(registered_op_types()))
    plan = Plan.from_order(piece, piece.get_operations(), [], [], LocalEnv(ResourceStore()))
    return {op.name for op in plan.outgoing}


def test_the_gradients_a_worker_pushes_are_computed_into_send_buffers():
    with mf.device("/job:ps/task:0"):
        w0, w1 = mf.get_variable("w0", [3, 4]), mf.get_variable("w1", [4, 2])
    with mf.device("/job:worker/task:0"):
        x = mf.constant(np.ones((5, 3), np.float32))
        hidden = mf.matmul(x, w0, name="hidden")
        loss = mf.reduce_sum(mf.matmul(mf.nn.relu(hidden), w1, name="logits"))
        train = mf.train.GradientDescentOptimizer(0.1).minimize(loss)
    outgoing = _outgoing([], [train], WORKER)
    # The weight gradients leave; the forward products and the gradient passed back to
    # the layer below stay on the worker.
    assert outgoing == {"gradients/hidden_grad/MatMul_1", "gradients/logits_grad/MatMul_1"}


def test_the_rows_a_ps_gathers_for_a_worker_are_gathered_into_a_send_buffer():
    with mf.device("/job:ps/task:0"):
        table = mf.get_variable("table", [100, 8])
        rows = mf.gather(table, mf.constant([3, 1, 4]), name="rows")
    with mf.device("/job:worker/task:0"):
        total = mf.reduce_sum(rows)
    assert _outgoing([total], [], PS) == {"rows"}
    assert _outgoing([total], [], WORKER) == set()


def test_a_result_sent_as_a_view_is_still_written_into_a_send_buffer():
    with mf.device("/job:ps/task:0"):
        table = mf.get_variable("table", [100, 8])
        flat = mf.reshape(mf.gather(table, mf.constant([3, 1]), name="rows"), [-1])
    with mf.device("/job:worker/task:0"):
        total = mf.reduce_sum(flat)
    assert _outgoing([total], [], PS) == {"rows"}


def test_nothing_is_written_into_send_buffers_in_one_process():
    x = mf.constant(np.ones((5, 3), np.float32))
    w = mf.get_variable("w", [3, 4])
    product = mf.matmul(x, w)
    graph = mf.get_default_graph()
    plan = Plan(graph, [product], [], [], mf.Session(graph=graph)._env)
    assert plan.outgoing == frozenset()


class _Allocator:
    """Hands out arrays as the send-buffer pool does, and remembers them."""

    def __init__(self):
        self.given = []

    def __call__(self, shape, dtype):
        array = np.full(shape, np.nan, dtype)      # stale contents must not show
        self.given.append(array)
        return array


def _context(op, allocator):
    ctx = KernelContext(op, np, None)
    get_op_def(op.type).prepare(ctx)
    ctx.outgoing = allocator
    return ctx


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_matmul_writes_its_product_into_the_send_buffer_with_the_same_values(
        transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5) if transpose_a else (5, 6)).astype(np.float32)
    b = rng.standard_normal((7, 6) if transpose_b else (6, 7)).astype(np.float32)
    op = mf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b).op
    allocate = _Allocator()
    result = get_op_def("MatMul").forward(np, _context(op, allocate), a, b)
    expected = np.matmul(a.T if transpose_a else a, b.T if transpose_b else b)
    assert len(allocate.given) == 1 and result is allocate.given[0]
    assert result.tobytes() == expected.tobytes()


@pytest.mark.parametrize("axis", [0, -2])
def test_a_row_gather_writes_its_rows_into_the_send_buffer(axis):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    ids = np.array([[9, 0], [3, 3]], np.int64)
    op = mf.gather(table, ids, axis=axis).op
    allocate = _Allocator()
    rows = get_op_def("GatherV2").forward(np, _context(op, allocate), table, ids)
    assert len(allocate.given) == 1 and rows is allocate.given[0]
    np.testing.assert_array_equal(rows, table[ids])


def test_a_gather_of_columns_allocates_as_before():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    op = mf.gather(table, [1, 2], axis=1).op
    allocate = _Allocator()
    columns = get_op_def("GatherV2").forward(np, _context(op, allocate), table,
                                             np.array([1, 2]))
    assert allocate.given == []
    np.testing.assert_array_equal(columns, table[:, [1, 2]])


def test_a_gather_into_a_send_buffer_still_refuses_a_row_out_of_range():
    table = np.zeros((10, 4), np.float32)
    op = mf.gather(table, [1]).op
    with pytest.raises(errors.InvalidArgumentError, match="Index out of range"):
        get_op_def("GatherV2").forward(np, _context(op, _Allocator()), table,
                                       np.array([1, 10]))
