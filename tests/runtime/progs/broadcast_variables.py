"""broadcast_variables_op makes every worker's variables the root's, in their own buffers:
each rank starts from values of its own (a 64 MiB table drawn by its initializer, a small
bias, a bfloat16 one, a scalar); after the broadcast every rank holds the root's, bit for
bit, trains on from them, and its peak memory grew by much less than the table (the
broadcast wrote into the buffers instead of holding a second copy of each).
Usage: mpiexec -n K python broadcast_variables.py ROOT [gpu]   (every rank a worker; with
``gpu`` the variables live on each rank's GPU)
Prints one JSON line per rank: BROADCAST {...}, each table as its sum and a hash of its
sample (bit for bit, and short: the launcher interleaves long lines of several ranks).
"""

import hashlib
import json
import resource
import sys

import numpy as np

import mpiflow as mf

TABLE_ROWS, TABLE_COLS = 32768, 512          # float32: 64 MiB


def own_values(task):
    rng = np.random.default_rng(task)
    return {"bias": rng.standard_normal(7).astype(np.float32),
            "half": rng.standard_normal(9).astype(mf.bfloat16.as_numpy_dtype),
            "scalar": np.asarray(rng.standard_normal(), np.float32)}


def table_digest(total, sample):
    """The table as its sum and the sha256 of a sample of its values (their bytes)."""
    return [float(total), hashlib.sha256(sample.tobytes()).hexdigest()]


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    root = int(sys.argv[1])
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    task = server.task_index
    gpu = "/device:GPU:0" if "gpu" in sys.argv[2:] else ""
    with mf.device(f"/job:worker/task:{task}{gpu}"):
        small = {name: mf.Variable(value, name=name)
                 for name, value in own_values(task).items()}
        table = mf.get_variable("table", [TABLE_ROWS, TABLE_COLS], initializer=(
            mf.random_uniform_initializer(-1.0, 1.0, seed=100 + task)))
        # What a rank's table is, read without copying it: its sum and every 4097th value.
        digest = [mf.reduce_sum(table), mf.reshape(table, [-1])[::4097]]
        broadcast = mf.train.AllreduceOptimizer(
            mf.train.GradientDescentOptimizer(0.1)).broadcast_variables_op(root=root)
        step = small["bias"].assign_add(mf.ones([7]))
    kinds = {op.type for op in broadcast.control_inputs}
    assert kinds == {"CollectiveBroadcastVariable"}, kinds
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        before_sum, before_sample = sess.run(digest)
        before_peak = peak_mib()
        sess.run(broadcast)
        grew = peak_mib() - before_peak
        after_sum, after_sample = sess.run(digest)
        expected = own_values(root)
        for name, v in small.items():
            got = sess.run(v)
            assert got.dtype == expected[name].dtype, (name, got.dtype)
            np.testing.assert_array_equal(got, expected[name], err_msg=name)
        sess.run(step)
        np.testing.assert_array_equal(sess.run(small["bias"]), expected["bias"] + 1)
    print("BROADCAST " + json.dumps({
        "task": task, "before": table_digest(before_sum, before_sample),
        "after": table_digest(after_sum, after_sample), "grew_mib": grew,
        "table_mib": TABLE_ROWS * TABLE_COLS * 4 / 2 ** 20}), flush=True)
    server.join()


if __name__ == "__main__":
    main()
