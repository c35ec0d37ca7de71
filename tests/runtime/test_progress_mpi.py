"""Progress of a launched job: only the chief reports, in whole tagged lines.

``mpiexec -n 3 python examples/mnist_ps.py`` (1 ps + 2 workers) with MPIFLOW_PROGRESS=lines:
MonitoredTrainingSession gives the chief a ProgressBarHook, whose lines show the loss of
the train op made by ``minimize`` (no loss given to the hook; the evaluation after
training shows none) and end with one "done".
"""

import re

import pytest

from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "mnist_ps.py"
RATE = r"[0-9.]+(?:e[+-]\d+)?"
CHIEF = r"\[worker:0 r1\] INFO mpiflow\.progress: "
STEP_LINE = re.compile(rf"{CHIEF}train: step (\d+), {RATE} steps/s, loss -?[0-9.]+(?:e[+-]\d+)?")
DONE_LINE = re.compile(rf"{CHIEF}train: done at step \d+ in \d+:\d\d:\d\d \({RATE} steps/s\)")
# The chief's test-accuracy run after training runs no train op, so a line falling due
# with it has no loss (ProgressBarHook shows the loss of the steps that train): only
# right before the done line.
EVAL_LINE = re.compile(rf"{CHIEF}train: step \d+, {RATE} steps/s")
STDOUT_LINES = (
    re.compile(r"data: .+; 2 workers, 1 ps; variables on \['/job:ps/task:0'\]"),
    re.compile(r"worker [01]: global step \d+, test accuracy [0-9.]+"),
)

pytestmark = pytest.mark.mpi


def test_only_the_chief_reports_progress_in_whole_tagged_lines_with_the_loss(run_mpi):
    proc = run_mpi(3, EXAMPLE, "--epochs", "3", timeout=120,
                   env={"MPIFLOW_PROGRESS": "lines", "MPIFLOW_PROGRESS_INTERVAL_S": "0.05"})
    output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    errs = proc.stderr.splitlines()
    # Every line is one whole line of a known kind: the chief's progress, nothing spliced,
    # nothing from the ps (r0) or the other worker (r2).
    strays = [line for i, line in enumerate(errs)
              if not (STEP_LINE.fullmatch(line) or DONE_LINE.fullmatch(line) or
                      (EVAL_LINE.fullmatch(line) and i == len(errs) - 2))]
    assert strays == [], output
    steps = [int(m.group(1)) for m in map(STEP_LINE.fullmatch, errs) if m]
    assert steps, "a line every 0.05 s of a run of about 130 steps: " + output
    assert steps == sorted(steps), output
    assert sum(1 for line in errs if DONE_LINE.fullmatch(line)) == 1, output
    assert DONE_LINE.fullmatch(errs[-1]), output
    outs = proc.stdout.splitlines()
    assert all(any(p.fullmatch(line) for p in STDOUT_LINES) for line in outs), output
    assert len(outs) == 3, output
