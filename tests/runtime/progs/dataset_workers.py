"""Each worker reads its shard of a tf.data.Dataset (mapped per element before its batch)
through a one-shot iterator and trains
until the end of its input, which MonitoredTrainingSession takes as a clean stop; the
iterator lives and runs on the worker, the variables on the ps.
Usage: mpiexec -n K python dataset_workers.py
"""

import numpy as np

import mpiflow as mf


def main():
    cluster = mf.train.ClusterSpec.from_mpi(ps=1)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        kinds = sorted({name.split(":")[0] for name in server._service.store.resources})
        print(f"OK ps: resources {kinds}", flush=True)
        return
    workers = cluster.num_tasks("worker")
    ids = np.arange(24, dtype=np.int64)
    features = np.stack([ids, -ids], axis=1).astype(np.float32)
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        ds = mf.data.Dataset.from_tensor_slices((features, ids))
        # A map before the batch runs per element, in the engine, on the worker.
        ds = ds.map(lambda f, i: (f, i, f - mf.reduce_mean(f)))
        ds = ds.shard(workers, server.task_index).shuffle(24, seed=1).batch(5)
        x, y, centered = ds.make_one_shot_iterator().get_next()
        w = mf.get_variable("w", [2], initializer=mf.zeros_initializer())
        loss = mf.reduce_mean(mf.square(mf.reduce_sum(x * w, axis=1) - 1.0))
        step = mf.train.get_or_create_global_step()
        train_op = mf.train.GradientDescentOptimizer(1e-4).minimize(loss, global_step=step)
    seen = []
    with mf.train.MonitoredTrainingSession(server.target, is_chief=server.is_chief) as sess:
        while not sess.should_stop():
            _, ids_seen, centered_seen = sess.run([train_op, y, centered])
            seen.extend(int(i) for i in ids_seen)
            # each row (i, -i) centered on its own mean, not on the batch's
            want = np.stack([ids_seen, -ids_seen], axis=1).astype(np.float32)
            assert np.array_equal(centered_seen, want), (centered_seen, ids_seen)
    mine = list(range(server.task_index, 24, workers))
    assert sorted(seen) == mine, (seen, mine)
    assert seen != mine, "not shuffled"
    kinds = sorted({name.split(":")[0] for name in server._service.store.resources})
    print(f"OK worker {server.task_index}: read {len(seen)} examples of its shard, mapped "
          "per element; "
          f"resources {kinds}", flush=True)


if __name__ == "__main__":
    main()
