"""Save in a loop on 1 ps + 1 worker until the job is killed with SIGKILL.

    mpiexec -n 2 python checkpoint_sigkill.py DIR self      # the ps kills itself mid-save
    mpiexec -n 2 python checkpoint_sigkill.py DIR external  # the test kills the job

Save ``i`` holds ``w = i * base()`` and ``global_step = i``, so any checkpoint checks
itself. With ``self`` the ps SIGKILLs itself in save ``KILL_AT``, after writing its shard
to the temporary file and before renaming it: the worker never hears back and mpiexec
takes the job down. With ``external`` the loop runs until the test kills the process
group. The worker prints ``saved i`` once save ``i`` has returned.
"""

import os
import signal
import sys

import numpy as np

import mpiflow as mf

KILL_AT = 4
MAX_SAVES = 5000


def base():
    """The saved pattern: large enough that writing a shard takes a moment."""
    return np.linspace(-1.0, 1.0, 256 * 512, dtype=np.float32).reshape(256, 512)


def build():
    w = mf.get_variable("w", [256, 512], initializer=mf.zeros_initializer())
    step = mf.train.get_or_create_global_step()
    i = mf.placeholder(mf.int64, [], name="i")
    update = mf.group(mf.assign(w, mf.cast(i, mf.float32) * base()), mf.assign(step, i))
    return w, step, i, update


def kill_before_shard_rename(at: int) -> None:
    """Make this process SIGKILL itself just before its ``at``-th shard rename."""
    real_replace = os.replace
    renames = [0]

    def replace(src, dst):
        if ".shard-" in os.fspath(dst):
            renames[0] += 1
            if renames[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)
    os.replace = replace


def main(directory, mode):
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        if mode == "self":
            kill_before_shard_rename(KILL_AT)
        server.join()
        return
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        _, step, i, update = build()
        saver = mf.train.Saver(max_to_keep=3)
        init = mf.global_variables_initializer()
    with mf.Session(server.target) as sess:
        sess.run(init)
        for n in range(1, MAX_SAVES + 1):
            sess.run(update, {i: n})
            saver.save(sess, os.path.join(directory, "model"), global_step=step)
            print(f"saved {n}", flush=True)
    print("NOT KILLED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
