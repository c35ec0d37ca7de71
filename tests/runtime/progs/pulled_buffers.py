"""A worker's pulled variables are given back to the receive pool the moment the caller
drops them (no reference cycle keeps them until the garbage collector runs), so the next
pull lands in the same warm buffers instead of fresh memory.
Usage: mpiexec -n 2 python pulled_buffers.py"""

import gc

import mpiflow as mf

cluster = mf.train.ClusterSpec.from_mpi(ps=1)
server = mf.train.Server(cluster)
if server.job_name == "worker":
    gc.disable()            # only reference counts may free anything here
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        variables = [mf.Variable(mf.fill([1 << 16], float(i)), name=f"v{i}") for i in range(3)]
    with mf.Session(server.target) as sess:
        sess.run(mf.global_variables_initializer())
        pull = sess.make_callable(variables)
        first = pull()
        assert [float(a[0]) for a in first] == [0.0, 1.0, 2.0]
        addresses = sorted(a.ctypes.data for a in first)
        del first
        again = pull()
        assert [float(a[0]) for a in again] == [0.0, 1.0, 2.0]
        print("same buffers:", sorted(a.ctypes.data for a in again) == addresses)
server.join()
