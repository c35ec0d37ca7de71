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
        _fail_the_job_on_uncaught_errors()
        _report_on_sigusr1(rank)


def _report_on_sigusr1(rank: str) -> None:
    """Until its Server exists, SIGUSR1 (``kill -USR1`` of mpiexec, which forwards it)
    makes each rank print where it is itself, instead of killing the job."""
    from mpiflow.runtime import interrupts, whereabouts  # noqa: PLC0415  (launched rank)

    def own_report(stack):
        return (f"{logger.line_tag()}mpiflow: where rank {rank} is (its Server does not "
                "exist yet: each rank reports itself)\n" +
                whereabouts.format_report(f"rank {rank}", {**whereabouts.report(),
                                                           "stack": stack}))

    interrupts.install_early_dump(own_report)


def _open_launch_link(rank: str) -> None:
    """Under ``mpiflow launch``: tell it this rank is here (from import on, so a rank
    stuck before it ever reaches MPI is seen too), and that it ended well at exit."""
    from mpiflow.comm import launch_link  # noqa: PLC0415  (only in a launched rank)
    from mpiflow.runtime import whereabouts  # noqa: PLC0415  (idem)

    link = launch_link.connect_from_environment(rank)
    if link is not None:
        link.whereabouts = whereabouts.report
        atexit.register(launch_link.tell, "bye")


def _fail_the_job_on_uncaught_errors() -> None:
    """Until the rank service installs its own hook: an uncaught error ends the whole job.

    A rank that raises once MPI is running (a start-up wait that timed out, a bad layout,
    the script's own error before its Server) would otherwise finalize MPI and exit
    cleanly, while the others wait for it in a collective without end. Here it prints its
    error with its tag, tells mpiflow launch, and aborts the job. Before MPI starts, the
    launcher sees a failed process and ends the job itself.
    """
    from mpiflow.comm import launch_link, launcher_reaper  # noqa: PLC0415  (launched rank)
    from mpiflow.runtime.process import (  # noqa: PLC0415  (idem)
        follow_the_reporter,
        let_the_followers_speak,
        report_failure,
    )

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        rank = logger.launch_rank()
        rank = int(rank) if rank else None
        summary = follow_the_reporter(exc, logger.line_tag(), rank) or report_failure(
            exc_type, exc, tb, logger.line_tag(), rank)
        launch_link.tell("failed", why=summary)
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            launcher_reaper.end_launcher_later()
            let_the_followers_speak(exc, rank)
            mpi.COMM_WORLD.Abort(1)

    sys.excepthook = hook
