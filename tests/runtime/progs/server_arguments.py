"""tf.train.Server's arguments as a TF1 script passes them, on a 2-rank job (1 ps, 1 worker).

Both ranks first ask for task_index=1 alone (no such task: refused on both). Then the ps
leaves task_index out (TensorFlow takes the job's only task) and the worker builds its
Server from a server_def. Each rank prints what it got, then serves / ends.
"""

from mpi4py import MPI

import mpiflow as mf

cluster = mf.train.ClusterSpec({"ps": ["ps0:2222"], "worker": ["worker0:2222"]})
job = cluster.task_of_rank(MPI.COMM_WORLD.Get_rank()).job
try:
    mf.train.Server(cluster, task_index=1)
    print(f"ACCEPTED task_index=1 on {job}", flush=True)
except mf.errors.InvalidArgumentError as e:
    print(f"REFUSED {e}", flush=True)
if job == "ps":
    server = mf.train.Server(cluster, job_name="ps", protocol="grpc")
else:
    definition = {"cluster": cluster.as_cluster_def(), "job_name": "worker",
                  "task_index": 0, "protocol": "grpc", "default_session_config": None}
    server = mf.train.Server(definition)
    assert mf.train.ClusterSpec(server.server_def["cluster"]) == cluster
definition = server.server_def
print(f"OK {server.job_name}:{server.task_index} {definition['job_name']}:"
      f"{definition['task_index']} {definition['protocol']}", flush=True)
server.join()
