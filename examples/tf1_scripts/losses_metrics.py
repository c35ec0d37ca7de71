"""Losses from tf.losses, evaluation with tf.metrics, clipped gradients and a decaying rate.

The training loss is tf.losses.sparse_softmax_cross_entropy plus the L2 penalties that the
dense layers' kernel_regularizer adds to the REGULARIZATION_LOSSES collection, summed by
tf.losses.get_total_loss(). The gradients are clipped with tf.clip_by_global_norm and
applied with a learning rate from tf.train.exponential_decay on the global step. Training
runs asynchronously under a Supervisor; afterwards each worker evaluates the test set with
tf.metrics.accuracy and tf.metrics.mean, whose counters are local variables kept on the
worker itself (set to zero by tf.local_variables_initializer, then accumulated by running
the update ops over every test batch).

    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow losses_metrics.py \
        --logdir /tmp/losses_metrics

The chief writes checkpoints into --logdir (Supervisor services).
"""

import sys

import numpy as np
import tensorflow.compat.v1 as tf

import synthetic_data

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
flags.DEFINE_integer("task_index", 0, "Index of task within the job")
flags.DEFINE_string("logdir", "", "Checkpoints and summaries (default: a temp dir)")
flags.DEFINE_integer("train_steps", 500, "Global steps to train")
flags.DEFINE_integer("batch_size", 50, "Batch size per worker")
flags.DEFINE_integer("eval_batch_size", 250, "Batch size of the test-set evaluation")
flags.DEFINE_integer("hidden_units", 64, "Number of units in the hidden layer")
flags.DEFINE_float("learning_rate", 0.1, "Initial learning rate")
flags.DEFINE_integer("decay_steps", 100, "Global steps per learning-rate decay")
flags.DEFINE_float("decay_rate", 0.8, "Learning-rate factor per decay_steps")
flags.DEFINE_float("l2_scale", 1e-3, "Weight of the L2 penalty on the dense kernels")
flags.DEFINE_float("clip_norm", 2.0, "Global norm the gradients are clipped to")
FLAGS = flags.FLAGS


def l2_regularizer(scale):
    """scale * sum(w ** 2) / 2 of a kernel, as a kernel_regularizer."""
    def regularizer(weights):
        return tf.multiply(scale, tf.nn.l2_loss(weights), name="l2_penalty")
    return regularizer


def model(x):
    regularizer = l2_regularizer(FLAGS.l2_scale)
    hidden = tf.layers.dense(x, FLAGS.hidden_units, activation=tf.nn.relu,
                             kernel_regularizer=regularizer, name="hidden")
    return tf.layers.dense(hidden, synthetic_data.CLASSES, kernel_regularizer=regularizer,
                           name="logits")


def main(_):
    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.INFO)
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","),
                                    "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return

    (x_train, y_train), (x_test, y_test) = synthetic_data.make()
    labels_train = np.argmax(y_train, axis=1).astype(np.int32)
    labels_test = np.argmax(y_test, axis=1).astype(np.int32)
    num_workers = cluster.num_tasks("worker")
    worker_device = "/job:worker/task:%d" % FLAGS.task_index

    with tf.device(tf.train.replica_device_setter(worker_device=worker_device,
                                                  cluster=cluster)):
        tf.set_random_seed(5)
        x = tf.placeholder(tf.float32, [None, synthetic_data.FEATURES], name="x")
        labels = tf.placeholder(tf.int32, [None], name="labels")
        logits = model(x)
        cross_entropy = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        total_loss = tf.losses.get_total_loss()   # cross entropy + regularization losses
        global_step = tf.train.get_or_create_global_step()
        learning_rate = tf.train.exponential_decay(FLAGS.learning_rate, global_step,
                                                   FLAGS.decay_steps, FLAGS.decay_rate,
                                                   staircase=True)
        optimizer = tf.train.MomentumOptimizer(learning_rate, momentum=0.9)
        grads_and_vars = optimizer.compute_gradients(total_loss)
        grads, variables = zip(*grads_and_vars)
        clipped, global_norm = tf.clip_by_global_norm(grads, FLAGS.clip_norm)
        train_op = optimizer.apply_gradients(zip(clipped, variables), global_step=global_step)
        predictions = tf.argmax(logits, 1, output_type=tf.int32)

    # The metrics' counters are this worker's own: kept off the ps, where every worker's
    # replica_device_setter would put them (under one name) otherwise.
    with tf.device(worker_device):
        accuracy, accuracy_update = tf.metrics.accuracy(labels=labels,
                                                        predictions=predictions)
        mean_loss, mean_loss_update = tf.metrics.mean(cross_entropy)
    reset_metrics = tf.local_variables_initializer()

    batches = synthetic_data.Batches(x_train, labels_train, FLAGS.batch_size,
                                     FLAGS.task_index, num_workers)
    config = tf.ConfigProto(allow_soft_placement=True,
                            device_filters=["/job:ps", worker_device])
    with synthetic_data.scratch_dir(FLAGS.logdir) as logdir:
        sv = tf.train.Supervisor(is_chief=(FLAGS.task_index == 0), logdir=logdir,
                                 global_step=global_step, summary_op=None,
                                 save_model_secs=600, recovery_wait_secs=1)
        with sv.managed_session(server.target, config=config) as sess:
            step = 0
            while not sv.should_stop() and step < FLAGS.train_steps:
                xs, ys = batches.next_batch()
                _, step, loss, norm, rate = sess.run(
                    [train_op, global_step, total_loss, global_norm, learning_rate],
                    feed_dict={x: xs, labels: ys})
                if step % 100 == 0:
                    tf.logging.info("worker %d: global step %d, total loss %.4f, gradient "
                                    "norm %.3f, learning rate %.4f", FLAGS.task_index, step,
                                    loss, norm, rate)
            tf.logging.info("worker %d stopped training at global step %d",
                            FLAGS.task_index, step)

            sess.run(reset_metrics)
            for start in range(0, len(x_test), FLAGS.eval_batch_size):
                end = start + FLAGS.eval_batch_size
                sess.run([accuracy_update, mean_loss_update],
                         feed_dict={x: x_test[start:end], labels: labels_test[start:end]})
            acc, loss = sess.run([accuracy, mean_loss])
            print("worker %d: test accuracy %.4f cross entropy %.4f at step %d" %
                  (FLAGS.task_index, acc, loss, step))
            sys.stdout.flush()


if __name__ == "__main__":
    tf.app.run()
