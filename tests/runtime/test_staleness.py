"""Staleness-aware asynchronous ps training on a deterministic schedule: worker 1 reads
the variables at global step 0 and pushes after worker 0 applied 3 steps; the ps records
staleness 0, 0, 0, 3 and applies the stale gradient as the rule says (hand-computed:
w = 1 trained on w**2 with lr 0.1: worker 0 leaves 0.8**3 = 0.512; worker 1's gradient is
2 * 1)."""

import json
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"
pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("rule,bound,w,step,dropped", [
    ("none", -1, 0.512 - 0.1 * 2, 4, 0),          # plain async: applied whole
    ("inverse", -1, 0.512 - 0.1 / 4 * 2, 4, 0),   # lr / (1 + 3)
    ("none", 2, 0.512, 3, 1),                     # older than 2 steps: dropped, not counted
])
def test_a_stale_gradient_is_measured_and_treated_as_the_rule_says(run_mpi, rule, bound, w,
                                                                   step, dropped):
    out = run_mpi(3, PROGS / "staleness_schedule.py", rule, bound, timeout=120).stdout
    results = {r["task"]: r for r in (json.loads(line) for line in out.splitlines()
                                      if line.startswith("{"))}
    assert results[0]["seen"] == [0, 0, 0] and results[1]["seen"] == [3], out
    for r in results.values():
        assert r["histogram"] == {"0": 3, "3": 1} and r["dropped"] == dropped, out
        assert r["w"] == pytest.approx(w, rel=1e-6) and r["step"] == step, out
