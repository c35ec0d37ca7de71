"""Asynchronous between-graph replication, as TensorFlow 1's distributed guide writes it.

Start one process per task by hand (the TF1 way):
    python between_graph_async.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 \
        --job_name=ps --task_index=0          # and so on for every task
or all at once over MPI with mpiflow:
    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow between_graph_async.py
"""

import argparse
import sys

import tensorflow.compat.v1 as tf

import synthetic_data

FLAGS = None


def main(_):
    tf.disable_v2_behavior()
    ps_hosts = FLAGS.ps_hosts.split(",")
    worker_hosts = FLAGS.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)

    if FLAGS.job_name == "ps":
        server.join()
        return
    (x_train, y_train), (x_test, y_test) = synthetic_data.make()
    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, synthetic_data.FEATURES])
        y_ = tf.placeholder(tf.float32, [None, synthetic_data.CLASSES])
        w1 = tf.Variable(tf.truncated_normal([synthetic_data.FEATURES, FLAGS.hidden_units],
                                             stddev=0.1), name="hid_w")
        b1 = tf.Variable(tf.zeros([FLAGS.hidden_units]), name="hid_b")
        w2 = tf.Variable(tf.truncated_normal([FLAGS.hidden_units, synthetic_data.CLASSES],
                                             stddev=0.1), name="sm_w")
        b2 = tf.Variable(tf.zeros([synthetic_data.CLASSES]), name="sm_b")
        hidden = tf.nn.relu(tf.nn.xw_plus_b(x, w1, b1))
        y = tf.nn.softmax(tf.nn.xw_plus_b(hidden, w2, b2))
        cross_entropy = -tf.reduce_mean(
            tf.reduce_sum(y_ * tf.log(tf.clip_by_value(y, 1e-10, 1.0)), axis=1))
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.AdagradOptimizer(0.05).minimize(cross_entropy,
                                                             global_step=global_step)
        correct = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    batches = synthetic_data.Batches(x_train, y_train, FLAGS.batch_size,
                                     FLAGS.task_index, len(worker_hosts))
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    with tf.train.MonitoredTrainingSession(master=server.target,
                                           is_chief=(FLAGS.task_index == 0),
                                           hooks=hooks) as mon_sess:
        while not mon_sess.should_stop():
            xs, ys = batches.next_batch()
            mon_sess.run(train_op, feed_dict={x: xs, y_: ys})
        # The last run may have stopped the session: read the model with a plain one.
    with tf.Session(server.target) as sess:
        acc, loss = sess.run([accuracy, cross_entropy], feed_dict={x: x_test, y_: y_test})
    print("worker %d: test accuracy %.4f cross entropy %.4f" % (FLAGS.task_index, acc, loss))
    sys.stdout.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.register("type", "bool", lambda v: v.lower() == "true")
    parser.add_argument("--ps_hosts", type=str, default="")
    parser.add_argument("--worker_hosts", type=str, default="")
    parser.add_argument("--job_name", type=str, default="")
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--hidden_units", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=50)
    parser.add_argument("--train_steps", type=int, default=600)
    FLAGS, unparsed = parser.parse_known_args()
    tf.app.run(main=main, argv=[sys.argv[0]] + unparsed)
