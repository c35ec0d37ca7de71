"""``import mpiflow`` checks the MPIFLOW_* settings (mpiflow/startup.py).

A misspelt variable gets one warning, on rank 0 only, with the option it may mean; a
malformed value stops every rank at once with one line naming the variable and what it
accepts, tagged with the rank, and no traceback.
"""

import logging
import os
import subprocess
import sys

import pytest

from mpiflow import config, logger, startup
from tests.conftest import REPO_ROOT

_LAUNCH_VARIABLES = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPIFLOW_")
BAD_TIMEOUT = ("mpiflow: Bad value for environment variable MPIFLOW_TIMEOUT: expected a "
               "float > 0 (")


def _import_mpiflow(**variables):
    """Run ``python -c "import mpiflow"`` with ``variables`` (and no launcher's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_VARIABLES)}
    env.update(PYTHONPATH=str(REPO_ROOT), **variables)
    return subprocess.run([sys.executable, "-c", "import mpiflow; import mpiflow.train"],
                          check=False, capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=120, stdin=subprocess.DEVNULL)


# -- Config: the findings ----------------------------------------------------------------

def test_unknown_variables_come_with_the_option_they_may_mean():
    cfg = config.Config(env={"MPIFLOW_TIMOUT": "3", "MPIFLOW_BANANA": "1",
                             "MPIFLOW_PS": "1", "OTHER_TIMOUT": "2"})
    assert cfg.unknown_with_hints() == ["MPIFLOW_BANANA",
                                        "MPIFLOW_TIMOUT (did you mean MPIFLOW_TIMEOUT?)"]
    assert config.Config(env={"MPIFLOW_TIMEOUT": "3"}).unknown_with_hints() == []


def test_bad_values_gives_one_message_per_refused_variable():
    cfg = config.Config(env={"MPIFLOW_TIMEOUT": "abc", "MPIFLOW_PS": "-1",
                             "MPIFLOW_PROGRESS": "lines", "MPIFLOW_TIMOUT": "x"})
    found = cfg.bad_values()
    assert len(found) == 2
    assert found[0].startswith("Bad value for environment variable MPIFLOW_PS: expected an "
                               "int >= 0 (") and found[0].endswith("got '-1'")
    assert found[1].startswith(BAD_TIMEOUT[len("mpiflow: "):]) and \
        found[1].endswith("got 'abc'")
    assert config.Config(env={"MPIFLOW_TIMEOUT": " 3 ", "MPIFLOW_PS": ""}).bad_values() == []


# -- check_settings in this process -------------------------------------------------------

def _without_launcher(monkeypatch):
    for name in logger._RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_check_settings_stops_on_a_bad_value_with_one_line(monkeypatch, capsys):
    _without_launcher(monkeypatch)
    monkeypatch.setattr(logger, "_TAG", ["[r5] "])
    with pytest.raises(SystemExit) as info:
        startup.check_settings(config.Config(env={"MPIFLOW_TIMEOUT": "abc"}))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("[r5] " + BAD_TIMEOUT) and err.count("\n") == 1, err


def test_check_settings_warns_of_unknown_variables_on_rank_0_only(monkeypatch, caplog):
    cfg = config.Config(env={"MPIFLOW_TIMOUT": "3"})
    for rank, warned in ((None, True), ("0", True), ("1", False)):
        _without_launcher(monkeypatch)
        if rank is not None:
            monkeypatch.setenv("PMI_RANK", rank)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mpiflow.config"):
            startup.check_settings(cfg)
        messages = [r.getMessage() for r in caplog.records if r.name == "mpiflow.config"]
        assert len(messages) == int(warned), (rank, messages)
        if warned:
            assert "MPIFLOW_TIMOUT (did you mean MPIFLOW_TIMEOUT?)" in messages[0]


# -- at import, in a process of its own ----------------------------------------------------

def test_a_misspelt_variable_warns_once_at_import_with_a_hint():
    proc = _import_mpiflow(MPIFLOW_TIMOUT="3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("did you mean MPIFLOW_TIMEOUT") == 1, proc.stderr
    assert proc.stderr.startswith("WARNING mpiflow.config: unknown MPIFLOW_* variable(s) "
                                  "ignored: MPIFLOW_TIMOUT (did you mean MPIFLOW_TIMEOUT?)")


def test_only_rank_0_of_a_launch_warns_of_a_misspelt_variable():
    rank0 = _import_mpiflow(MPIFLOW_TIMOUT="3", PMI_RANK="0")
    assert rank0.stderr.startswith("[r0] WARNING mpiflow.config: ") and \
        rank0.stderr.count("did you mean MPIFLOW_TIMEOUT") == 1, rank0.stderr
    rank1 = _import_mpiflow(MPIFLOW_TIMOUT="3", PMI_RANK="1")
    assert (rank1.returncode, rank1.stderr) == (0, "")


def test_a_malformed_value_stops_the_import_with_one_line_and_no_traceback():
    proc = _import_mpiflow(MPIFLOW_TIMEOUT="abc")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(BAD_TIMEOUT), proc.stderr
    assert proc.stderr.endswith("got 'abc'\n") and "Traceback" not in proc.stderr


def test_the_line_of_a_malformed_value_is_tagged_with_the_launchers_rank():
    proc = _import_mpiflow(MPIFLOW_TIMEOUT="abc", PMI_RANK="0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("[r0] " + BAD_TIMEOUT), \
        proc.stderr
