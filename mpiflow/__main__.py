"""``python -m mpiflow``: the ``mpiflow`` command (see ``mpiflow.cli``)."""

import sys

from mpiflow.cli import main

sys.exit(main())
