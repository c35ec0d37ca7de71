"""Clear errors from the distributed runtime. Usage: mpiexec -n 2 python ps_errors.py CASE"""

import sys

import numpy as np

import mpiflow as mf


def case_job_not_in_cluster(sess_target):
    with mf.device("/job:parameter_server/task:0"):
        v = mf.Variable(1.0, name="stray")
    with mf.Session(sess_target) as sess:
        sess.run(v.initializer)


def case_task_out_of_range(sess_target):
    with mf.device("/job:ps/task:3"):
        v = mf.Variable(1.0, name="far")
    with mf.Session(sess_target) as sess:
        sess.run(v.initializer)


def case_remote_kernel_error(sess_target):
    with mf.device("/job:ps/task:0"):
        table = mf.Variable(np.zeros((4, 2), np.float32), name="table")
    ids = mf.placeholder(mf.int64, [None], name="ids")
    with mf.device("/job:ps/task:0"):
        rows = mf.gather(table, ids, name="lookup_on_ps")
    with mf.Session(sess_target) as sess:
        sess.run(table.initializer)
        sess.run(rows, {ids: [1, 9]})


def case_log_device_placement(sess_target):
    with mf.device("/job:ps/task:0"):
        v = mf.Variable(2.0, name="placed")
    doubled = mf.multiply(v, 2.0, name="doubled")
    config = mf.ConfigProto(log_device_placement=True)
    with mf.Session(sess_target, config=config) as sess:
        sess.run(v.initializer)
        assert sess.run(doubled) == 4.0


def main(case):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return
    try:
        globals()[f"case_{case}"](server.target)
    except mf.errors.OpError as exc:
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
    else:
        print("NO ERROR", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
