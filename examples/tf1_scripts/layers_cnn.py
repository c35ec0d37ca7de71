"""A small convolutional network built from tf.layers, trained asynchronously on ps/workers.

Each 64-feature example of synthetic_data is read as an 8x8 one-channel image:
conv2d -> batch_normalization -> relu -> max_pooling2d -> flatten -> dense -> dropout
-> dense logits, with a sparse softmax cross entropy on integer labels. Dropout and
batch normalization switch between training and inference through a boolean placeholder;
the batch-norm moving averages are updated through the UPDATE_OPS collection, run as a
control dependency of the train op. The 64 features are not spatially related, so the
max pooling discards part of the class signal: the network ends near two thirds accuracy
where a dense model gets past 80 %.

Start one process per task by hand:
    python layers_cnn.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 \
        --job_name=ps --task_index=0          # and so on for every task
or all at once over MPI with mpiflow:
    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow layers_cnn.py
"""

import sys

import numpy as np
import tensorflow.compat.v1 as tf

import synthetic_data

tf.app.flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
tf.app.flags.DEFINE_integer("task_index", 0, "Index of task within the job")
tf.app.flags.DEFINE_integer("train_steps", 400, "Global steps to train")
tf.app.flags.DEFINE_integer("batch_size", 50, "Batch size per worker")
tf.app.flags.DEFINE_float("learning_rate", 0.003, "Adam learning rate")
tf.app.flags.DEFINE_float("dropout_rate", 0.3, "Fraction of dense units dropped in training")
FLAGS = tf.app.flags.FLAGS

SIDE = 8  # synthetic_data.FEATURES == SIDE * SIDE


def cnn(images, is_training):
    """Logits of an [N, 8, 8, 1] batch."""
    net = tf.layers.conv2d(images, filters=16, kernel_size=3, padding="same",
                           use_bias=False, name="conv1")
    net = tf.layers.batch_normalization(net, training=is_training, name="bn1")
    net = tf.nn.relu(net)
    net = tf.layers.max_pooling2d(net, pool_size=2, strides=2, name="pool1")   # 4x4x16
    net = tf.layers.flatten(net)
    net = tf.layers.dense(net, 64, activation=tf.nn.relu, name="fc1")
    net = tf.layers.dropout(net, rate=FLAGS.dropout_rate, training=is_training)
    return tf.layers.dense(net, synthetic_data.CLASSES, name="logits")


def main(_):
    tf.disable_v2_behavior()
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","),
                                    "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return

    (x_train, y_train), (x_test, y_test) = synthetic_data.make()
    # Sparse labels: class indices instead of one-hot rows.
    labels_train = np.argmax(y_train, axis=1).astype(np.int64)
    labels_test = np.argmax(y_test, axis=1).astype(np.int64)
    num_workers = cluster.num_tasks("worker")

    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        tf.set_random_seed(4)
        x = tf.placeholder(tf.float32, [None, synthetic_data.FEATURES], name="x")
        labels = tf.placeholder(tf.int64, [None], name="labels")
        is_training = tf.placeholder(tf.bool, [], name="is_training")
        images = tf.reshape(x, [-1, SIDE, SIDE, 1])
        logits = cnn(images, is_training)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        global_step = tf.train.get_or_create_global_step()
        optimizer = tf.train.AdamOptimizer(FLAGS.learning_rate)
        # Batch normalization's moving mean and variance update with every train step.
        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, global_step=global_step)
        correct = tf.equal(tf.argmax(logits, 1), labels)
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    # Every num_workers-th example, shuffled; labels are the one-hot rows turned to indices.
    batches = synthetic_data.Batches(x_train, labels_train, FLAGS.batch_size,
                                     FLAGS.task_index, num_workers)
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    # A worker talks to the ps and to itself only, so it never waits on another worker.
    config = tf.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" %
                                            FLAGS.task_index])
    local_step = 0
    with tf.train.MonitoredTrainingSession(master=server.target,
                                           is_chief=(FLAGS.task_index == 0),
                                           config=config, hooks=hooks) as mon_sess:
        while not mon_sess.should_stop():
            xs, ys = batches.next_batch()
            _, step, batch_loss = mon_sess.run(
                [train_op, global_step, loss],
                feed_dict={x: xs, labels: ys, is_training: True})
            local_step += 1
            if local_step % 100 == 0:
                print("worker %d: local step %d, global step %d, loss %.4f" %
                      (FLAGS.task_index, local_step, step, batch_loss))
                sys.stdout.flush()
    # The last run may have stopped the session: read the model with a plain one.
    with tf.Session(server.target, config=config) as sess:
        acc, test_loss = sess.run([accuracy, loss], feed_dict={
            x: x_test, labels: labels_test, is_training: False})
    print("worker %d: test accuracy %.4f cross entropy %.4f" %
          (FLAGS.task_index, acc, test_loss))
    sys.stdout.flush()


if __name__ == "__main__":
    tf.app.run()
