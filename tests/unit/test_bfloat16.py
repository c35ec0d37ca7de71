"""bfloat16 (``ml_dtypes.bfloat16``) as a dtype of its own: the table, casts, float32
accumulation in matmul, gradients and training, and every place a dtype is written down
(GraphDef, checkpoints, message headers, collective records, summaries).

The multi-rank case (a bfloat16 variable on a ps, bit for bit against one process) is in
tests/runtime/test_ps_runtime.py; the GPU matmul case in tests/gpu/test_gpu_ops.py.
"""

import json
import pickle

import ml_dtypes
import msgpack
import numpy as np
import pytest

import mpiflow as mf
from mpiflow.framework import dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)
EPS = float(ml_dtypes.finfo(BF16).eps)      # 2**-7
# Values that bfloat16 holds exactly, with the corners of its range and its specials.
SPECIALS = np.array([0.0, -0.0, 1.0, -2.5, 3.0e38, -3.0e38, 1e-40, np.inf, -np.inf, np.nan],
                    dtype=np.float32).astype(BF16)


def bits(array) -> np.ndarray:
    """The raw 16-bit patterns of a bfloat16 array (NaN compares equal to itself)."""
    array = np.asarray(array)
    assert array.dtype == BF16, f"expected bfloat16, got {array.dtype}"
    return array.view(np.uint16)


def spacing(exact, dtype) -> np.ndarray:
    """The spacing of ``dtype``'s values at ``exact`` (fixed among subnormals)."""
    info = ml_dtypes.finfo(dtype)
    return np.maximum(2.0 ** (np.floor(np.log2(np.abs(exact))) - info.nmant),
                      float(info.smallest_subnormal))


def ulps(got, exact, dtype) -> np.ndarray:
    """|got - exact| in units of the spacing of ``dtype`` at ``exact``."""
    return np.abs(np.asarray(got).astype(np.float64) - exact) / spacing(exact, dtype)


def run(fetches, feed=None):
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        return sess.run(fetches, feed)


# -- the dtype table ------------------------------------------------------------------------

def test_bfloat16_is_one_floating_row_of_the_dtype_table():
    bf16 = mf.bfloat16
    assert bf16 is dtypes.bfloat16 and bf16 in dtypes.ALL
    assert (bf16.name, str(bf16), repr(bf16), bf16.size) == ("bfloat16", "bfloat16",
                                                               "mf.bfloat16", 2)
    assert bf16.np_dtype == BF16 and bf16.as_numpy_dtype is ml_dtypes.bfloat16
    assert bf16.is_floating and bf16.is_signed and bf16.is_differentiable
    assert not (bf16.is_integer or bf16.is_bool)
    # bfloat16 keeps float32's exponent range: max 3.38953e38, not float16's 65504.
    assert float(bf16.max) == -float(bf16.min) == float(ml_dtypes.finfo(BF16).max) > 3.3e38
    assert bf16.mpi_name is None and bf16.nccl_name == "bfloat16"
    assert pickle.loads(pickle.dumps(bf16)) is bf16


@pytest.mark.parametrize("value", ["bfloat16", ml_dtypes.bfloat16, BF16, mf.bfloat16],
                         ids=["name", "scalar type", "numpy dtype", "DType"])
def test_as_dtype_finds_bfloat16_from_any_spelling(value):
    assert mf.as_dtype(value) is mf.bfloat16


def test_as_dtype_refuses_a_plain_two_byte_void():
    # What bfloat16 looks like to numpy without ml_dtypes ('<V2') is not bfloat16.
    with pytest.raises(mf.errors.InvalidArgumentError, match="Unsupported dtype"):
        mf.as_dtype(np.dtype("V2"))


def test_from_numpy_and_feeds_keep_bfloat16():
    assert dtypes.from_numpy(np.zeros(3, BF16)) is mf.bfloat16
    x = mf.placeholder(mf.bfloat16, [3])
    got = run(x * 2.0, {x: np.array([1.0, 1.5, -3.0], np.float32)})
    assert got.dtype == BF16 and got.tolist() == [2.0, 3.0, -6.0]


# -- casts ----------------------------------------------------------------------------------

def test_cast_to_bfloat16_and_back_round_trips_what_bfloat16_holds():
    exact = SPECIALS.astype(np.float32)
    to_bf16 = mf.cast(mf.constant(exact), mf.bfloat16)
    back = mf.cast(to_bf16, mf.float32)
    got_bf16, got_back = run([to_bf16, back])
    np.testing.assert_array_equal(bits(got_bf16), bits(SPECIALS))
    np.testing.assert_array_equal(got_back, exact)


def test_cast_to_bfloat16_rounds_to_nearest_even():
    # 1 + 2**-8 lies halfway between 1 and 1 + 2**-7: it rounds to the even mantissa, 1.
    values = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 0.1, 1 / 3, 65504.0], np.float32)
    got = run(mf.cast(mf.constant(values), mf.bfloat16))
    np.testing.assert_array_equal(bits(got), bits(values.astype(BF16)))
    assert got[:2].astype(np.float32).tolist() == [1.0, 1 + 2 ** -6]


def test_integer_casts_and_the_cast_gradient():
    ints = mf.constant(np.array([-7, 0, 255], np.int32))
    assert run(mf.cast(mf.cast(ints, mf.bfloat16), mf.int32)).tolist() == [-7, 0, 255]
    x = mf.constant(np.array([0.5, 2.0], np.float32))
    grad, = mf.gradients(mf.reduce_sum(mf.cast(x, mf.bfloat16) * 3.0), [x])
    assert grad.dtype is mf.float32 and run(grad).tolist() == [3.0, 3.0]


# -- matmul accumulates in float32 ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("transpose", [False, True], ids=["a@b", "a@bT"])
def test_half_matmul_at_k4096_sums_in_float32_and_rounds_once(rng, dtype, transpose):
    dtype = np.dtype(dtype)
    k = 4096
    a = rng.standard_normal((8, k)).astype(dtype)
    b = rng.standard_normal((k, 8)).astype(dtype)
    exact = a.astype(np.float64) @ b.astype(np.float64)   # the inputs are exact in float64
    out = mf.matmul(a, b.T.copy(), transpose_b=True) if transpose else mf.matmul(a, b)
    got = run(out)
    assert got.dtype == dtype
    # One rounding of a float32 sum: within an ulp (half an ulp, but for float32's error).
    assert ulps(got, exact, dtype).max() <= 1.0
    # Summed in the half dtype itself, one product after another, the rounding errors of
    # 4096 additions pile up: many ulps off.
    naive = np.add.accumulate(a[:, :, None] * b[None, :, :], axis=1, dtype=dtype)[:, -1]
    assert ulps(naive, exact, dtype).max() > 8.0


def _convs(x, f, dy):
    """conv2d and both its gradients (VALID, stride 1) of the given arrays."""
    return [mf.nn.conv2d(x, f, [1, 1, 1, 1], "VALID"),
            mf.nn.conv2d_backprop_filter(x, f.shape, dy, [1, 1, 1, 1], "VALID"),
            mf.nn.conv2d_backprop_input(x.shape, f, dy, [1, 1, 1, 1], "VALID")]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_conv2d_and_its_gradients_sum_in_float32_and_round_once(rng, dtype):
    dtype = np.dtype(dtype)
    x = rng.standard_normal((2, 6, 6, 256)).astype(dtype)      # 3*3*256 = 2304 terms
    f = rng.standard_normal((3, 3, 256, 4)).astype(dtype)
    dy = rng.standard_normal((2, 4, 4, 4)).astype(dtype)
    wide = [v.astype(np.float64) for v in (x, f, dy)]
    got = run(_convs(x, f, dy))
    exact = run(_convs(*wide))
    magnitude = run(_convs(*[np.abs(v) for v in wide]))      # sum of |terms| per output
    for g, want, size, what in zip(got, exact, magnitude, ("conv2d", "filter", "input")):
        assert g.dtype == dtype, what
        # One rounding to the half dtype (an ulp at most) plus what a float32 sum of these
        # terms may lose where they cancel (a few float32 ulps of the sum of |terms|);
        # summed in the half dtype, the loss would be that many half ulps instead.
        error = np.abs(g.astype(np.float64) - want)
        assert (error <= spacing(want, dtype) + 2.0 ** -20 * size).all(), what


def test_batched_bfloat16_matmul_keeps_its_dtype_and_batch_shape(rng):
    a = rng.standard_normal((3, 4, 5)).astype(BF16)
    b = rng.standard_normal((3, 5, 2)).astype(BF16)
    got = run(mf.matmul(a, b))
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    assert got.shape == (3, 4, 2)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_accumulating_dtype_is_float32_for_half_floats_on_numpy_only():
    from mpiflow.ops.math_ops import accumulating_dtype
    assert accumulating_dtype(np, BF16) == accumulating_dtype(np, np.float16) == np.float32
    assert accumulating_dtype(np, np.float64) == np.float64
    assert accumulating_dtype(np, np.int32) == np.int32

    class GpuModule:           # any other array module (cupy) sums half floats itself...
        pass
    assert accumulating_dtype(GpuModule, BF16) == BF16
    assert accumulating_dtype(GpuModule, np.float16, batched=True) == np.float16
    # ...but cupy 14 has no batched bfloat16 matmul: float32 there.
    assert accumulating_dtype(GpuModule, BF16, batched=True) == np.float32


# -- ops, gradients and training ------------------------------------------------------------

OPS = {  # name -> build(x, y), on x [4, 6] and y [4, 6] (y > 0)
    "arithmetic": lambda x, y: (x + y) * x - x / y,
    "relu_sigmoid_tanh": lambda x, y: mf.nn.relu(x) + mf.sigmoid(x) * mf.tanh(y),
    "exp_log_sqrt_square": lambda x, y: mf.exp(x) + mf.log(y) + mf.sqrt(y) + mf.square(x),
    "maximum_minimum_abs": lambda x, y: mf.maximum(x, y) - mf.minimum(x, 0.5) + mf.abs(x),
    "reductions": lambda x, y: mf.stack([mf.reduce_sum(x), mf.reduce_mean(y),
                                         mf.reduce_max(x), mf.nn.l2_loss(x)]),
    "softmax": lambda x, y: mf.nn.softmax(x),
    "softmax_cross_entropy": lambda x, y: mf.nn.softmax_cross_entropy_with_logits(
        labels=mf.nn.softmax(y), logits=x),
    "sparse_softmax_cross_entropy": lambda x, y: mf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=mf.constant([0, 5, 2, 2], dtype=mf.int64), logits=x),
    "bias_add": lambda x, y: mf.nn.bias_add(x, y[0]),
    "relu6_leaky_relu_elu": lambda x, y: mf.nn.relu6(x * 4.0) + mf.nn.leaky_relu(x, 0.1) +
    mf.nn.elu(x),
    "select": lambda x, y: mf.where(x > 0, x, y),
    "segment_sum_and_gather": lambda x, y: mf.unsorted_segment_sum(x, [0, 2, 0, 1], 3) +
    mf.gather(y, [3, 0, 3]),
    "conv2d": lambda x, y: mf.nn.conv2d(mf.reshape(x, [1, 4, 6, 1]),
                                        mf.reshape(y[:2, :2], [2, 2, 1, 1]), [1, 1, 1, 1],
                                        "SAME"),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_in_bfloat16_is_its_float32_value_to_bfloat16_precision(rng, name):
    x = rng.standard_normal((4, 6)).astype(BF16)
    y = rng.uniform(0.5, 2.0, (4, 6)).astype(BF16)
    got = run(OPS[name](mf.constant(x), mf.constant(y)))
    mf.reset_default_graph()
    want = run(OPS[name](mf.constant(x.astype(np.float32)), mf.constant(y.astype(np.float32))))
    assert got.dtype == BF16, f"{name}: output is {got.dtype}"
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2 * EPS, atol=2 * EPS * scale,
                               err_msg=name)


def _model(dtype, values):
    x, w1, b1, w2, labels = values
    x = mf.constant(x.astype(dtype))
    variables = [mf.Variable(v.astype(dtype), name=n) for v, n in
                 ((w1, "w1"), (b1, "b1"), (w2, "w2"))]
    w1, b1, w2 = variables
    logits = mf.matmul(mf.tanh(mf.nn.relu(mf.matmul(x, w1) + b1)), w2)
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return loss, variables


def _values(rng):
    """Inputs of the small model, exact in bfloat16 (so both dtypes start alike)."""
    return [rng.standard_normal((32, 6)).astype(BF16),
            (rng.standard_normal((6, 8)) * 0.5).astype(BF16),
            (rng.standard_normal(8) * 0.1).astype(BF16),
            (rng.standard_normal((8, 3)) * 0.5).astype(BF16),
            rng.integers(0, 3, 32)]


def test_gradients_of_a_bfloat16_model_match_float32_to_bfloat16_precision(rng):
    values = _values(rng)
    loss, variables = _model(BF16, values)
    got = run([loss] + mf.gradients(loss, variables))
    mf.reset_default_graph()
    loss, variables = _model(np.float32, values)
    want = run([loss] + mf.gradients(loss, variables))
    for k, (g, w) in enumerate(zip(got, want)):
        what = "loss" if k == 0 else f"gradient of {['w1', 'b1', 'w2'][k - 1]}"
        assert np.asarray(g).dtype == BF16, what
        np.testing.assert_allclose(np.asarray(g).astype(np.float32), w, rtol=0,
                                   atol=4 * EPS * np.max(np.abs(w)), err_msg=what)


def _train(rng, optimizer, variable_dtype, steps=60):
    """Train the small model with bfloat16 compute; return (first loss, last loss)."""
    values = _values(rng)
    x, *params, labels = values
    variables = [mf.Variable(v.astype(variable_dtype.np_dtype)) for v in params]
    w1, b1, w2 = [mf.cast(v, mf.bfloat16) for v in variables]
    logits = mf.matmul(mf.nn.relu(mf.matmul(mf.constant(x), w1) + b1), w2)
    loss = mf.reduce_mean(mf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    train = optimizer.minimize(loss)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        losses = [float(sess.run([loss, train])[0]) for _ in range(steps)]
    assert loss.dtype is mf.bfloat16 and all(np.isfinite(losses)), losses
    return losses[0], losses[-1]


@pytest.mark.parametrize("optimizer", [
    lambda: mf.train.GradientDescentOptimizer(0.5),
    lambda: mf.train.MomentumOptimizer(0.1, 0.9),
    lambda: mf.train.AdamOptimizer(0.02, beta2=0.99),
], ids=["sgd", "momentum", "adam_beta2_0.99"])
def test_training_with_bfloat16_variables_lowers_the_loss(rng, optimizer):
    first, last = _train(rng, optimizer(), mf.bfloat16)
    assert last < 0.6 * first, (first, last)


def test_adam_with_float32_variables_trains_a_bfloat16_model(rng):
    # Mixed precision: float32 variables (and Adam slots), bfloat16 arithmetic.
    first, last = _train(rng, mf.train.AdamOptimizer(0.02), mf.float32)
    assert last < 0.6 * first, (first, last)


def test_adam_refuses_a_beta_that_rounds_to_one_in_bfloat16():
    # 0.999 is 1.0 in bfloat16: the second moment would stay 0 and the steps blow up.
    w = mf.Variable(np.ones(3, BF16), name="w")
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"beta2=0.999 rounds to 1.0 in bfloat16 \(variable 'w'\).*"
                             r"keep the variables in float32.*beta2 <= 0.99609375"):
        mf.train.AdamOptimizer(0.01).minimize(mf.reduce_sum(w * w))


# -- serialised forms -----------------------------------------------------------------------

def test_graph_def_round_trip_keeps_bfloat16_constants_bit_for_bit():
    x = mf.placeholder(mf.bfloat16, [None], name="x")
    mf.add(x, mf.constant(SPECIALS, name="c"), name="y")
    graph_def = msgpack.unpackb(msgpack.packb(mf.get_default_graph().as_graph_def()),
                                raw=False)
    node = next(n for n in graph_def["node"] if n["name"] == "x")
    assert node["attr"]["dtype"] == {"dtype": "bfloat16"}
    assert node["output"][0]["dtype"] == "bfloat16"
    with mf.Graph().as_default():
        const, y = mf.import_graph_def(graph_def, return_elements=["c:0", "y:0"], name="")
        assert const.dtype is y.dtype is mf.bfloat16
        got_const, got_y = run([const, y], {"x:0": np.zeros(len(SPECIALS), BF16)})
    np.testing.assert_array_equal(bits(got_const), bits(SPECIALS))
    np.testing.assert_array_equal(bits(got_y), bits(SPECIALS + np.zeros(1, BF16)))


def test_checkpoint_of_a_bfloat16_variable_restores_bit_for_bit(tmp_path):
    v = mf.Variable(SPECIALS, name="v")
    saver = mf.train.Saver()
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "model"))
        sess.run(mf.assign(v, np.zeros(len(SPECIALS), BF16)))
        saver.restore(sess, prefix)
        np.testing.assert_array_equal(bits(sess.run(v)), bits(SPECIALS))
    index = json.loads((tmp_path / "model.index.json").read_text())
    assert index["tensors"]["v"][0]["dtype"] == "bfloat16"
    np.testing.assert_array_equal(bits(mf.train.load_variable(prefix, "v")), bits(SPECIALS))


def test_bfloat16_checkpoint_does_not_restore_into_float16(tmp_path):
    # Both are 2 bytes: without the index's dtype the raw bits would pass as float16.
    mf.Variable(SPECIALS[:4], name="v")
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        prefix = mf.train.Saver().save(sess, str(tmp_path / "model"))
    with mf.Graph().as_default():
        mf.Variable(np.zeros(4, np.float16), name="v")
        with mf.Session() as sess, pytest.raises(mf.errors.InvalidArgumentError,
                                                 match="Dtype of 'v'.*bfloat16"):
            mf.train.Saver().restore(sess, prefix)


def test_summaries_of_bfloat16_tensors_are_written(tmp_path):
    pytest.importorskip("tensorboardX")
    x = mf.constant(np.array([0.5, 1.5, 2.5], BF16))
    mf.summary.scalar("average", mf.reduce_mean(x))
    mf.summary.histogram("values", x)
    with mf.Session() as sess, mf.summary.FileWriter(tmp_path) as writer:
        writer.add_summary(sess.run(mf.summary.merge_all()), global_step=1)
    path, = tmp_path.glob("events.out.tfevents.*")
    values = {v.tag: v for e in mf.summary.summary_iterator(str(path)) for v in e.summary.value}
    assert values["average"].simple_value == 1.5
    assert (values["values"].histo.num, values["values"].histo.sum) == (3, 4.5)


# -- the comm layer: message headers, collective records, fusion ----------------------------

def test_message_header_names_bfloat16_and_the_payload_arrives_bit_for_bit():
    pytest.importorskip("mpi4py")
    from tests.comm.loopback import send_to_self
    message = send_to_self([SPECIALS, np.arange(3, dtype=np.float16)])
    got_bf16, got_f16 = message.arrays
    np.testing.assert_array_equal(bits(got_bf16), bits(SPECIALS))
    assert got_f16.dtype == np.float16 and got_f16.tolist() == [0, 1, 2]


def test_headers_carry_bfloat16_by_name_and_refuse_raw_voids():
    pytest.importorskip("mpi4py")
    from mpiflow.comm.transport import decode_header
    from mpiflow.comm.wire_dtypes import from_wire, wire_name
    assert wire_name(BF16) == "bfloat16" and from_wire("bfloat16") == BF16
    assert wire_name(np.float16) == "<f2" and from_wire("<f2") == np.float16
    _, specs = decode_header(msgpack.packb({"_buf": [["bfloat16", [2, 3]]]}), 1, 0)
    assert list(specs) == [((2, 3), BF16)]
    with pytest.raises(mf.errors.DataLossError, match="bad buffer spec"):
        decode_header(msgpack.packb({"_buf": [[BF16.str, [2]]]}), 1, 0)


def test_one_rank_collectives_pass_bfloat16_through_and_records_name_it():
    from mpi4py import MPI

    from mpiflow.comm.collectives import get_collective
    from mpiflow.comm.collectives.check import describe_mismatch, make_record
    # One rank: the float32 round trip of the half-float path gives the same bits back
    # (the multi-rank sums are in tests/comm/progs/collectives_cases.py).
    x = np.array([1.0, 3.0e38, -2.5], np.float32).astype(BF16)
    for algorithm in ("mpi", "ring"):
        got = get_collective(algorithm, MPI.COMM_SELF, x).allreduce(x, "average")
        np.testing.assert_array_equal(bits(got), bits(x))
    records = np.stack([make_record("allreduce", "g", "ring", "sum", -1, BF16, (4,)),
                        make_record("allreduce", "g", "ring", "sum", -1, np.float16, (4,))])
    assert "bfloat16 on rank 0; float16 on rank 1" in describe_mismatch(records)


def test_fusion_buckets_keep_bfloat16_apart_from_float16():
    from mpiflow.comm.buckets import TensorSpec, plan_buckets
    specs = [TensorSpec("a", BF16, 8), TensorSpec("b", np.float16, 8), TensorSpec("c", BF16, 4)]
    buckets = plan_buckets(specs, threshold_bytes=1024)
    assert [(b.dtype, b.names, b.sizes) for b in buckets] == [
        (np.dtype(np.float16), ("b",), (4,)), (BF16, ("a", "c"), (4, 2))]


def test_gpu_kernels_of_bfloat16_ops_are_held_to_their_declared_dtype():
    # cupy widens some bfloat16 results (reductions, where) to float32; plans wrap the
    # GPU kernels of bfloat16 ops so the next kernel sees the dtype the graph declared.
    from mpiflow.runtime.plan_compiler import _keeping_dtypes
    widened = np.array([1.5, 2.0], np.float32)
    single = _keeping_dtypes(lambda: widened, [BF16], multi=False)
    assert single().dtype == BF16 and single().tolist() == [1.5, 2.0]
    kept = np.array([3], np.int64)
    pair = _keeping_dtypes(lambda: (widened, kept), [BF16, np.dtype(np.int64)], multi=True)
    out = pair()
    assert out[0].dtype == BF16 and out[1] is kept
