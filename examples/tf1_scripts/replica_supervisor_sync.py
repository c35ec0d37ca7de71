"""Synchronous replicas under a Supervisor, the way TensorFlow 1's mnist_replica.py does it.

    mpiexec -n 3 python -m mpiflow.run --ps 1 --as-tensorflow replica_supervisor_sync.py \
        --train_dir /tmp/sync_train

Flags come from tf.app.flags; the chief runs the sync-replicas queue runner and fills the
token queue; every worker reads its session from Supervisor.prepare_or_wait_for_session.
"""

import sys
import time

import tensorflow.compat.v1 as tf

import synthetic_data

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("job_name", None, "job name: worker or ps")
flags.DEFINE_integer("task_index", None, "Worker task index, should be >= 0")
flags.DEFINE_integer("hidden_units", 64, "Number of units in the hidden layer")
flags.DEFINE_integer("train_steps", 300, "Number of (global) training steps to perform")
flags.DEFINE_integer("batch_size", 50, "Training batch size")
flags.DEFINE_float("learning_rate", 0.05, "Learning rate")
flags.DEFINE_boolean("sync_replicas", True, "Aggregate the workers' gradients every step")
flags.DEFINE_integer("replicas_to_aggregate", None,
                     "Replicas to aggregate before an update (default: all workers)")
flags.DEFINE_string("train_dir", None, "Directory for checkpoints (default: a new temp dir)")
FLAGS = flags.FLAGS


def main(unused_argv):
    tf.disable_v2_behavior()
    if FLAGS.job_name is None or FLAGS.job_name == "":
        raise ValueError("Must specify an explicit `job_name`")
    if FLAGS.task_index is None or FLAGS.task_index == "":
        raise ValueError("Must specify an explicit `task_index`")
    ps_spec = FLAGS.ps_hosts.split(",")
    worker_spec = FLAGS.worker_hosts.split(",")
    num_workers = len(worker_spec)
    cluster = tf.train.ClusterSpec({"ps": ps_spec, "worker": worker_spec})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return

    with synthetic_data.scratch_dir(FLAGS.train_dir) as train_dir:
        is_chief = (FLAGS.task_index == 0)
        (x_train, y_train), (x_test, y_test) = synthetic_data.make()
        worker_device = "/job:worker/task:%d/gpu:0" % FLAGS.task_index
        with tf.device(tf.train.replica_device_setter(worker_device=worker_device,
                                                      ps_device="/job:ps/cpu:0",
                                                      cluster=cluster)):
            tf.set_random_seed(2)
            global_step = tf.Variable(0, name="global_step", trainable=False)
            hid_w = tf.Variable(tf.truncated_normal(
                [synthetic_data.FEATURES, FLAGS.hidden_units], stddev=0.1), name="hid_w")
            hid_b = tf.Variable(tf.zeros([FLAGS.hidden_units]), name="hid_b")
            sm_w = tf.Variable(tf.truncated_normal(
                [FLAGS.hidden_units, synthetic_data.CLASSES], stddev=0.1), name="sm_w")
            sm_b = tf.Variable(tf.zeros([synthetic_data.CLASSES]), name="sm_b")
            x = tf.placeholder(tf.float32, [None, synthetic_data.FEATURES])
            y_ = tf.placeholder(tf.float32, [None, synthetic_data.CLASSES])
            hid = tf.nn.relu(tf.nn.xw_plus_b(x, hid_w, hid_b))
            y = tf.nn.softmax(tf.nn.xw_plus_b(hid, sm_w, sm_b))
            cross_entropy = -tf.reduce_sum(y_ * tf.log(tf.clip_by_value(y, 1e-10, 1.0)))
            accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1)),
                                              tf.float32))
            opt = tf.train.AdamOptimizer(FLAGS.learning_rate / 50)
            if FLAGS.sync_replicas:
                replicas = FLAGS.replicas_to_aggregate or num_workers
                opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas,
                                                     total_num_replicas=num_workers,
                                                     name="sync_replicas")
            train_step = opt.minimize(cross_entropy, global_step=global_step)
            if FLAGS.sync_replicas:
                local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
                ready_for_local_init_op = opt.ready_for_local_init_op
                chief_queue_runner = opt.get_chief_queue_runner()
                sync_init_op = opt.get_init_tokens_op()
            init_op = tf.global_variables_initializer()
            if FLAGS.sync_replicas:
                sv = tf.train.Supervisor(is_chief=is_chief, logdir=train_dir, init_op=init_op,
                                         local_init_op=local_init_op,
                                         ready_for_local_init_op=ready_for_local_init_op,
                                         recovery_wait_secs=1, global_step=global_step)
            else:
                sv = tf.train.Supervisor(is_chief=is_chief, logdir=train_dir, init_op=init_op,
                                         recovery_wait_secs=1, global_step=global_step)

        sess_config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                                     device_filters=["/job:ps",
                                                     "/job:worker/task:%d" % FLAGS.task_index])
        if is_chief:
            print("Worker %d: Initializing session..." % FLAGS.task_index)
        else:
            print("Worker %d: Waiting for session to be initialized..." % FLAGS.task_index)
        sess = sv.prepare_or_wait_for_session(server.target, config=sess_config)
        print("Worker %d: Session initialization complete." % FLAGS.task_index)
        if FLAGS.sync_replicas and is_chief:
            sess.run(sync_init_op)
            sv.start_queue_runners(sess, [chief_queue_runner])

        batches = synthetic_data.Batches(x_train, y_train, FLAGS.batch_size, FLAGS.task_index,
                                         num_workers)
        time_begin = time.time()
        local_step = 0
        while True:
            xs, ys = batches.next_batch()
            _, step = sess.run([train_step, global_step], feed_dict={x: xs, y_: ys})
            local_step += 1
            if step >= FLAGS.train_steps:
                break
        print("Worker %d: training elapsed time %.2f s, %d local steps" %
              (FLAGS.task_index, time.time() - time_begin, local_step))
        loss, acc = sess.run([cross_entropy, accuracy], feed_dict={x: x_test, y_: y_test})
        print("worker %d: test accuracy %.4f cross entropy %.4f" %
              (FLAGS.task_index, acc, loss / len(x_test)))
        sys.stdout.flush()
        sv.stop()


if __name__ == "__main__":
    tf.app.run()
