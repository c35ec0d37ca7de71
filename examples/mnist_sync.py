"""Synchronous replicas with parameter servers, checkpoints and resume.

    mpiexec -n 3 python examples/mnist_sync.py                       # 1 ps + 2 workers
    mpiexec -n 4 python examples/mnist_sync.py --ps 2
    mpiexec -n 3 python examples/mnist_sync.py --checkpoint-dir ckpt --last-step 300
    mpiexec -n 3 python examples/mnist_sync.py --checkpoint-dir ckpt --last-step 600
                                          # the second run resumes at step 300

Every global step averages one gradient from each worker (SyncReplicasOptimizer) and
applies it once on the ps, so the model trains as one process would at the combined
batch. MonitoredTrainingSession makes the chief initialise or restore the variables (the
other workers wait for it), saves checkpoints into ``--checkpoint-dir`` and stops every
worker at ``--last-step``; run again with the same directory to continue.
"""

from __future__ import annotations

import argparse

import mpiflow as mf
from launched import cluster_of_launch
from mlp_model import build_mlp, loss_and_accuracy, worker_data
from mpiflow.data import batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=None)
    parser.add_argument("--data-dir")
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--last-step", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--backup-workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    cluster = cluster_of_launch(ps=args.ps)
    server = mf.train.Server(cluster)
    if server.job_name == "ps":
        server.join()
        return None

    task = server.task_index
    workers = cluster.num_tasks("worker")
    x_train, y_train, x_test, y_test, source, n_classes = worker_data(
        args.data_dir, args.seed, workers, task)

    mf.set_random_seed(args.seed)
    with mf.device(mf.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x = mf.placeholder(mf.float32, [None, x_train.shape[1]], name="x")
        y = mf.placeholder(mf.int64, [None], name="y")
        loss, accuracy = loss_and_accuracy(build_mlp(x, n_classes), y)
        global_step = mf.train.get_or_create_global_step()
        optimizer = mf.train.SyncReplicasOptimizer(
            mf.train.AdamOptimizer(args.learning_rate),
            replicas_to_aggregate=workers - args.backup_workers, total_num_replicas=workers)
        train_op = optimizer.minimize(loss, global_step=global_step)

    hooks = [optimizer.make_session_run_hook(server.is_chief),
             mf.train.StopAtStepHook(last_step=args.last_step)]
    with mf.train.MonitoredTrainingSession(
            master=server.target, is_chief=server.is_chief,
            checkpoint_dir=args.checkpoint_dir, hooks=hooks,
            save_checkpoint_steps=100 if args.checkpoint_dir else None,
            log_step_count_steps=None) as sess:
        first_step = None
        epoch = 0
        while not sess.should_stop():
            for xb, yb in batches(x_train, y_train, args.batch_size,
                                  seed=args.seed * 1000 + epoch * workers + task):
                if sess.should_stop():
                    break
                # The global step as this step read it, before the step's update.
                _, step = sess.run([train_op, global_step], {x: xb, y: yb})
                first_step = step + 1 if first_step is None else first_step
            epoch += 1
    # The variables live on the ps and outlive the monitored session: evaluate them.
    with mf.Session(server.target) as sess:
        test_accuracy = sess.run(accuracy, {x: x_test, y: y_test})
    trained = f"steps {first_step}..{args.last_step}" if first_step is not None else \
        f"no steps to train (the checkpoint is at or past --last-step {args.last_step})"
    print(f"worker {task}: {source}; {trained}, test accuracy {test_accuracy:.4f}",
          flush=True)
    return float(test_accuracy)


if __name__ == "__main__":
    main()
