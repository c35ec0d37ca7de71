"""Asynchronous training in Supervisor.managed_session, with summaries and checkpoints.

    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow supervisor_managed_async.py \
        --logdir /tmp/async_logdir

The chief writes checkpoints and summaries into --logdir (Supervisor services); every
worker trains until the global step reaches --train_steps and reports test accuracy.
"""

import tensorflow.compat.v1 as tf

import synthetic_data

tf.app.flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
tf.app.flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
tf.app.flags.DEFINE_integer("task_index", 0, "Index of task within the job")
tf.app.flags.DEFINE_string("logdir", "", "Checkpoints and summaries (default: a temp dir)")
tf.app.flags.DEFINE_integer("train_steps", 800, "Global steps to train")
tf.app.flags.DEFINE_integer("batch_size", 32, "Batch size per worker")
FLAGS = tf.app.flags.FLAGS


def model(x, y_):
    w = tf.get_variable("w", [synthetic_data.FEATURES, synthetic_data.CLASSES],
                        initializer=tf.random_normal_initializer(stddev=0.05))
    b = tf.get_variable("b", [synthetic_data.CLASSES], initializer=tf.zeros_initializer())
    logits = tf.nn.xw_plus_b(x, w, b)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1)),
                                      tf.float32))
    return loss, accuracy


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
    num_workers = cluster.num_tasks("worker")
    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        tf.set_random_seed(3)
        x = tf.placeholder(tf.float32, [None, synthetic_data.FEATURES], name="x")
        y_ = tf.placeholder(tf.float32, [None, synthetic_data.CLASSES], name="y")
        loss, accuracy = model(x, y_)
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss,
                                                                  global_step=global_step)
        tf.summary.scalar("loss", loss)
        summary_op = tf.summary.merge_all()
    with synthetic_data.scratch_dir(FLAGS.logdir) as logdir:
        sv = tf.train.Supervisor(is_chief=(FLAGS.task_index == 0),
                                 logdir=logdir,
                                 global_step=global_step, summary_op=None, save_model_secs=2)
        batches = synthetic_data.Batches(x_train, y_train, FLAGS.batch_size, FLAGS.task_index,
                                         num_workers)
        config = tf.ConfigProto(allow_soft_placement=True)
        with sv.managed_session(server.target, config=config) as sess:
            step = 0
            while not sv.should_stop() and step < FLAGS.train_steps:
                xs, ys = batches.next_batch()
                _, step, summary = sess.run([train_op, global_step, summary_op],
                                            feed_dict={x: xs, y_: ys})
                if sv.is_chief and step % 100 == 0:
                    sv.summary_computed(sess, summary, global_step=step)
                    tf.logging.info("step %d", step)
            tf.logging.info("worker %d stopped training at global step %d", FLAGS.task_index,
                            step)
            acc = sess.run(accuracy, feed_dict={x: x_test, y_: y_test})
            print("worker %d: test accuracy %.4f at step %d" % (FLAGS.task_index, acc, step))


if __name__ == "__main__":
    tf.app.run()
