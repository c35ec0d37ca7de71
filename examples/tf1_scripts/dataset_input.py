"""Input through tf.data: a one-shot iterator for training, an initializable one for testing.

Each worker builds its training pipeline as
    Dataset.from_tensor_slices((x, y)).shard(num_workers, task_index)
           .shuffle(buffer).repeat().batch(batch_size)
and draws batches from make_one_shot_iterator().get_next(), so no feed_dict is needed.
Dataset.shard gives worker i every num_workers-th example starting at i. After training,
each worker runs the test set through a make_initializable_iterator until
tf.errors.OutOfRangeError and reports the accuracy over every test example. The model's
variables are shared between the training and the test input through variable_scope reuse.

    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow dataset_input.py
"""

import sys

import numpy as np
import tensorflow.compat.v1 as tf

import synthetic_data

tf.app.flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
tf.app.flags.DEFINE_integer("task_index", 0, "Index of task within the job")
tf.app.flags.DEFINE_integer("train_steps", 600, "Global steps to train")
tf.app.flags.DEFINE_integer("batch_size", 50, "Batch size per worker")
tf.app.flags.DEFINE_integer("shuffle_buffer", 1000, "Examples in the shuffle buffer")
tf.app.flags.DEFINE_integer("test_batch_size", 400, "Batch size of the test pass")
tf.app.flags.DEFINE_integer("hidden_units", 64, "Number of units in the hidden layer")
tf.app.flags.DEFINE_float("learning_rate", 0.05, "Adagrad learning rate")
FLAGS = tf.app.flags.FLAGS


def model(features):
    """Logits of a one-hidden-layer network; variables come from tf.get_variable."""
    hid_w = tf.get_variable("hid_w", [synthetic_data.FEATURES, FLAGS.hidden_units],
                            initializer=tf.truncated_normal_initializer(stddev=0.1))
    hid_b = tf.get_variable("hid_b", [FLAGS.hidden_units],
                            initializer=tf.zeros_initializer())
    sm_w = tf.get_variable("sm_w", [FLAGS.hidden_units, synthetic_data.CLASSES],
                           initializer=tf.truncated_normal_initializer(stddev=0.1))
    sm_b = tf.get_variable("sm_b", [synthetic_data.CLASSES],
                           initializer=tf.zeros_initializer())
    hidden = tf.nn.relu(tf.nn.xw_plus_b(features, hid_w, hid_b))
    return tf.nn.xw_plus_b(hidden, sm_w, sm_b)


def main(_):
    tf.disable_v2_behavior()
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","),
                                    "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return

    (x_train, y_train), (x_test, y_test) = synthetic_data.make()
    labels_train = np.argmax(y_train, axis=1).astype(np.int64)
    labels_test = np.argmax(y_test, axis=1).astype(np.int64)
    num_workers = cluster.num_tasks("worker")

    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        tf.set_random_seed(6)
        train_dataset = (tf.data.Dataset.from_tensor_slices((x_train, labels_train))
                         .shard(num_workers, FLAGS.task_index)
                         .shuffle(FLAGS.shuffle_buffer, seed=FLAGS.task_index)
                         .repeat()
                         .batch(FLAGS.batch_size))
        features, labels = train_dataset.make_one_shot_iterator().get_next()

        test_dataset = (tf.data.Dataset.from_tensor_slices((x_test, labels_test))
                        .batch(FLAGS.test_batch_size))
        test_iterator = test_dataset.make_initializable_iterator()
        test_features, test_labels = test_iterator.get_next()

        with tf.variable_scope("model"):
            logits = model(features)
        with tf.variable_scope("model", reuse=True):
            test_logits = model(test_features)

        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.AdagradOptimizer(FLAGS.learning_rate).minimize(
            loss, global_step=global_step)
        test_correct = tf.reduce_sum(
            tf.cast(tf.equal(tf.argmax(test_logits, 1), test_labels), tf.int32))
        test_count = tf.shape(test_labels)[0]

    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    # A worker talks to the ps and to itself only, so it never waits on another worker.
    config = tf.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" %
                                            FLAGS.task_index])
    local_step = 0
    with tf.train.MonitoredTrainingSession(master=server.target,
                                           is_chief=(FLAGS.task_index == 0),
                                           config=config, hooks=hooks) as mon_sess:
        while not mon_sess.should_stop():
            _, step, batch_loss = mon_sess.run([train_op, global_step, loss])
            local_step += 1
            if local_step % 100 == 0:
                print("worker %d: local step %d, global step %d, loss %.4f" %
                      (FLAGS.task_index, local_step, step, batch_loss))
                sys.stdout.flush()
    # The last run may have stopped the session: read the model with a plain one.
    with tf.Session(server.target, config=config) as sess:
        sess.run(test_iterator.initializer)
        correct = total = 0
        while True:
            try:
                batch_correct, batch_count = sess.run([test_correct, test_count])
            except tf.errors.OutOfRangeError:
                break
            correct += batch_correct
            total += batch_count
    print("worker %d: test accuracy %.4f over %d test examples" %
          (FLAGS.task_index, float(correct) / total, total))
    sys.stdout.flush()


if __name__ == "__main__":
    tf.app.run()
