"""Server.create_local_server(): a one-task cluster whose target runs a Session."""

import mpiflow as mf

server = mf.train.Server.create_local_server()
c = mf.constant(21.0) * 2.0
with mf.Session(server.target) as sess:
    value = sess.run(c)
print(f"OK local server: {value} on /job:{server.job_name}/task:{server.task_index}",
      flush=True)
