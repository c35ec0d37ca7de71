"""mf.broadcast reads its input and gives the root's value as a new tensor: a non-root
rank's variable and an array the caller fed keep their own values; mf.all_gather gives
every rank's rows (task t gives t + 1 of them) in task order.
Usage: mpiexec -n K python broadcast_inputs.py [gpu]   (every rank a worker; with ``gpu``
the ops run on each rank's GPU)
"""

import sys

import numpy as np

import mpiflow as mf


def main():
    cluster = mf.train.ClusterSpec.from_mpi(ps=0)
    server = mf.train.Server(cluster)
    task = server.task_index
    fed = np.full(4, task + 1.0, np.float32)
    own = np.full(3, 10.0 * (task + 1), np.float32)
    gpu = "/device:GPU:0" if "gpu" in sys.argv[1:] else ""
    with mf.device(f"/job:worker/task:{task}{gpu}"):
        x = mf.placeholder(mf.float32, [4], name="x")
        v = mf.Variable(own, name="v")
        from_root = mf.broadcast(x, root=0)
        var_from_root = mf.broadcast(v.value(), root=0)
        later_read = mf.identity(v.value())
        gathered = mf.all_gather(mf.fill([task + 1, 2], float(task)))
    with mf.Session(server.target) as sess:
        sess.run(v.initializer)
        got, got_var = sess.run([from_root, var_from_root], {x: fed})
        np.testing.assert_array_equal(sess.run(gathered), np.concatenate(
            [np.full((t + 1, 2), float(t)) for t in range(cluster.num_tasks("worker"))]))
        np.testing.assert_array_equal(got, np.full(4, 1.0))
        np.testing.assert_array_equal(got_var, np.full(3, 10.0))
        np.testing.assert_array_equal(fed, np.full(4, task + 1.0))      # the caller's array
        np.testing.assert_array_equal(sess.run(later_read), own)       # this rank's variable
    print(f"OK broadcast worker {task}: inputs unchanged", flush=True)
    server.join()


if __name__ == "__main__":
    main()
