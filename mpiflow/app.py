"""``mf.app``: TF1's ``tf.app.run`` and ``tf.app.flags`` (which are absl-py's flags).

TF1 scripts define flags with ``tf.app.flags.DEFINE_string(...)`` and start with
``tf.app.run()``, which parses the known flags, leaves the rest to ``main(argv)`` and
exits with its return value. mpiflow passes the cluster flags itself under
``python -m mpiflow.run``.
"""

from __future__ import annotations

import sys

from absl import flags

from mpiflow import unsupported

FLAGS = flags.FLAGS


def run(main=None, argv=None):
    """Parse the flags in ``argv`` (default ``sys.argv``), then ``sys.exit(main(rest))``.

    Unknown flags are left in ``rest`` for ``main``, as TensorFlow 1 did.
    """
    argv = sys.argv if argv is None else list(argv)
    try:
        rest = FLAGS(argv, known_only=True)
    except flags.Error as exc:
        sys.stderr.write(f"FATAL Flags parsing error: {exc}\n")
        sys.exit(1)
    main = main or sys.modules["__main__"].main
    sys.exit(main(rest))

__getattr__ = unsupported.namespace_getattr(__name__, "tf.app")
