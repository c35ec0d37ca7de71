"""What importing mpiflow does to the process, once: its settings checked, and under an
MPI launcher its output written in whole lines.

A misspelt ``MPIFLOW_*`` variable would otherwise be ignored for the whole run, and a bad
value would surface as a traceback per rank wherever it is first read; here rank 0 warns
of the first (with the option it may mean) and every rank stops at once on the second,
with one tagged line naming the variable and what it accepts (a rank of its own each:
settings can differ per node).
"""

from __future__ import annotations

import atexit
import sys

from mpiflow import config, logger

_BAD_SETTING_EXIT_CODE = 2      # as a command-line tool's usage error


def check_settings(cfg: config.Config | None = None) -> None:
    """Warn of unknown ``MPIFLOW_*`` variables (rank 0 only) and stop on malformed ones.

    Raises:
        SystemExit: a declared variable has a value its option refuses (after one line).
    """
    cfg = cfg or config.default()
    bad = cfg.bad_values()
    if bad:
        sys.stderr.write("".join(f"{logger.line_tag()}mpiflow: {text}\n" for text in bad))
        sys.stderr.flush()
        raise SystemExit(_BAD_SETTING_EXIT_CODE)
    unknown = cfg.unknown_with_hints()
    if unknown and logger.launch_rank() in (None, "0"):
        logger.get_logger("mpiflow.config").warning(
            "unknown MPIFLOW_* variable(s) ignored: %s (python -m mpiflow info --settings "
            "lists them all)", ", ".join(unknown))


def prepare_process() -> None:
    """Everything importing mpiflow does to the process."""
    check_settings()
    rank = logger.launch_rank()
    if rank is not None:
        logger.whole_lines()
        _open_launch_link(rank)


def _open_launch_link(rank: str) -> None:
    """Under ``mpiflow launch``: tell it this rank is here (from import on, so a rank
    stuck before it ever reaches MPI is seen too), and that it ended well at exit."""
    from mpiflow.comm import launch_link  # noqa: PLC0415  (only under mpiflow launch)
    from mpiflow.runtime import whereabouts  # noqa: PLC0415  (idem)

    link = launch_link.connect_from_environment(rank)
    if link is None:
        return
    link.whereabouts = whereabouts.report
    atexit.register(launch_link.tell, "bye")
    # Until the rank service installs its own hook, an uncaught exception is still this
    # rank's failure, not a "bye".
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        launch_link.tell("failed", why=f"{exc_type.__name__}: {exc}".splitlines()[0][:500])
        previous(exc_type, exc, tb)

    sys.excepthook = hook
