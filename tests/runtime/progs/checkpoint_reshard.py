"""Save a model from a ps cluster, restore it into another partitioning or number of ps.

    mpiexec -n K python checkpoint_reshard.py save DIR PARTS
    mpiexec -n K python checkpoint_reshard.py restore DIR PARTS

``save`` trains a few deterministic steps (Momentum, so slots are saved too) with the
embedding cut in PARTS parts over the ps tasks, saves ``DIR/model-<step>`` and writes the
full values it saved to ``DIR/expected.npz``. ``restore`` builds the same model cut in
PARTS parts (0 = not partitioned), restores the latest checkpoint and compares. The
single-process restore calls ``build``/``full_values`` from the test directly.
"""

import os
import sys

import numpy as np

import mpiflow as mf


def build(parts):
    """The model; ``parts`` = 0 builds the embedding unpartitioned."""
    partitioner = mf.fixed_size_partitioner(parts) if parts else None
    with mf.variable_scope("model", partitioner=partitioner):
        emb = mf.get_variable("emb", [7, 3], initializer=mf.constant_initializer(
            np.arange(21, dtype=np.float32).reshape(7, 3) / 7))
    w = mf.get_variable("w", [3, 2], dtype=mf.float64,
                        initializer=mf.constant_initializer(np.ones((3, 2)) * 0.25))
    count = mf.Variable(np.int32(5), name="count", trainable=False)
    flags = mf.Variable(np.array([True, False, True, True]), name="flags",
                        trainable=False)
    ids = mf.placeholder(mf.int64, [None], name="ids")
    rows = mf.nn.embedding_lookup(emb, ids, partition_strategy="div")
    loss = mf.reduce_sum(mf.square(mf.matmul(mf.cast(rows, mf.float64), w) - 1.0))
    step = mf.train.get_or_create_global_step()
    opt = mf.train.MomentumOptimizer(0.01, 0.9)
    train = opt.minimize(loss, global_step=step)
    bump = mf.assign_add(count, 2)
    tensors = {"model/emb": mf.convert_to_tensor(emb), "w": w.value(), "count": count.value(),
               "flags": flags.value(), "global_step": step.value(),
               "w/Momentum": opt.get_slot(w, "momentum").value()}
    emb_parts = list(emb) if parts else [emb]
    slots = [opt.get_slot(p, "momentum").value() for p in emb_parts]
    tensors["model/emb/Momentum"] = slots[0] if len(slots) == 1 else mf.concat(slots, 0)
    return {"ids": ids, "train": [train, bump], "tensors": tensors}


def full_values(sess, model) -> dict:
    names = sorted(model["tensors"])
    return dict(zip(names, sess.run([model["tensors"][n] for n in names])))


def check_equal(got: dict, expected_path: str) -> None:
    with np.load(expected_path, allow_pickle=False) as expected:
        assert sorted(expected.files) == sorted(got), (expected.files, sorted(got))
        for name in expected.files:
            assert got[name].dtype == expected[name].dtype, (name, got[name].dtype)
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def main(mode, directory, parts):
    cluster = mf.train.ClusterSpec.from_mpi()
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        print(f"ps {server.task_index} pid {os.getpid()}", flush=True)
        server.join()
        return
    num_ps = cluster.num_tasks("ps")
    with mf.device(mf.train.replica_device_setter(cluster=cluster)):
        model = build(parts)
        saver = mf.train.Saver()
        init = mf.global_variables_initializer()
    devices = sorted({v.device for v in mf.global_variables()})
    with mf.Session(server.target) as sess:
        if mode == "save":
            sess.run(init)
            for batch in ([0, 3, 6], [1, 1, 5], [2, 4, 6]):
                sess.run(model["train"], {model["ids"]: batch})
            values = full_values(sess, model)
            path = saver.save(sess, os.path.join(directory, "model"),
                              global_step=mf.train.get_global_step())
            np.savez(os.path.join(directory, "expected.npz"), **values)
            print(f"OK saved {path} from {num_ps} ps on {devices}", flush=True)
        else:
            saver.restore(sess, mf.train.latest_checkpoint(directory))
            check_equal(full_values(sess, model), os.path.join(directory, "expected.npz"))
            print(f"OK restored {parts} parts on {num_ps} ps on {devices}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
