"""The ``mpiflow`` command (``python -m mpiflow``, the ``mpiflow`` console script) and the
version flag every mpiflow command takes. Each runs as a process of its own, as a user
types it, with no launcher."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mpiflow
from mpiflow import config
from tests.conftest import REPO_ROOT

VERSION_LINE = f"mpiflow {mpiflow.__version__}\n"
_LAUNCH_VARIABLES = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPIFLOW_")


def _env(**extra):
    """This environment without any launcher's or mpiflow's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_VARIABLES)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def _run(*args, env=None, program=(sys.executable,)):
    return subprocess.run([*program, *args], check=False, capture_output=True, text=True,
                          env=env or _env(), cwd=REPO_ROOT, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [
    ("-m", "mpiflow", "--version"),
    ("-m", "mpiflow", "version"),
    ("-m", "mpiflow.run", "--version"),
    ("-m", "mpiflow.info", "--version"),
], ids=" ".join)
def test_every_command_prints_mpiflows_version(args):
    proc = _run(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, VERSION_LINE, "")


def test_the_console_script_is_the_same_command():
    script = Path(sys.executable).parent / "mpiflow"
    if not script.is_file():
        pytest.skip(f"no mpiflow console script beside {sys.executable} (pip install -e .)")
    proc = _run("--version", program=(str(script),))
    assert (proc.returncode, proc.stdout) == (0, VERSION_LINE), proc.stderr


def test_no_command_prints_the_usage_with_every_command_and_exits_2():
    proc = _run("-m", "mpiflow")
    assert proc.returncode == 2
    assert proc.stdout.startswith("usage: mpiflow [--version] <command> [args...]")
    listed = re.findall(r"^  (\w+)  +\S", proc.stdout, flags=re.MULTILINE)
    assert listed == ["info", "run", "launch", "stacks", "version"], proc.stdout


def test_help_prints_the_usage_and_succeeds():
    proc = _run("-m", "mpiflow", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: mpiflow ")


def test_an_unknown_command_exits_2_naming_it():
    proc = _run("-m", "mpiflow", "trian")
    assert proc.returncode == 2
    assert proc.stderr.startswith("mpiflow: unknown command 'trian'\n"), proc.stderr
    assert "usage: mpiflow" in proc.stderr and proc.stdout == ""


def test_info_alone_prints_the_rank_table_versions_and_settings_in_effect():
    proc = _run("-m", "mpiflow", "info", env=_env(MPIFLOW_PS_POLICY="spread"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["rank", "host", "node", "local", "role", "threads", "gpu"]
    assert re.fullmatch(r"\s+0  \S+\s+0\s+0  worker:0\s+\d+  \S+", lines[1]), lines[1]
    fields = dict(line.split(": ", 1) for line in lines[2:] if ": " in line)
    assert fields["mpiflow"] == mpiflow.__version__
    assert fields["Python"] == sys.version.split()[0]
    for component in ("numpy", "mpi4py", "MPI", "cupy", "NCCL", "CUDA-aware MPI", "GPUs"):
        assert fields.get(component), (component, proc.stdout)
    assert fields["MPIFLOW_* set"] == "MPIFLOW_PS_POLICY='spread'"
    assert "settings:" not in proc.stdout       # only with --settings


def test_info_with_nothing_set_says_all_defaults():
    proc = _run("-m", "mpiflow", "info")
    assert proc.returncode == 0, proc.stderr
    assert "MPIFLOW_* set: none (all defaults)\n" in proc.stdout


def test_info_settings_describes_every_option():
    proc = _run("-m", "mpiflow", "info", "--settings")
    assert proc.returncode == 0, proc.stderr
    described = proc.stdout.split("settings:\n", 1)[1]
    names = re.findall(r"^(MPIFLOW_\w+) \(", described, flags=re.MULTILINE)
    assert names == sorted(config.OPTIONS), described
    assert "MPIFLOW_TIMEOUT (a float > 0, default 300.0): seconds any wait" in described


def test_a_bad_ps_count_is_one_line_of_usage_error_not_a_traceback():
    for bad in ("-1", "x"):
        proc = _run("-m", "mpiflow", "info", "--ps", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[-1].endswith(
            f"error: argument --ps: expected an int >= 0, got {bad if bad == '-1' else repr(bad)}")


def test_info_asked_for_more_ps_than_ranks_says_so_in_one_line():
    proc = _run("-m", "mpiflow", "info", "--ps", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("mpiflow info: Cannot assign roles, no worker left"), \
        proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_run_without_a_script_asks_for_the_script_alone():
    proc = _run("-m", "mpiflow.run", "--ps", "1")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == \
        "python -m mpiflow.run: error: the training script is required", proc.stderr


@pytest.mark.parametrize("mistake", ["missing script", "unknown option"])
def test_run_says_a_mistake_of_its_command_line_once_for_the_whole_launch(tmp_path,
                                                                          mistake):
    missing = str(tmp_path / "trian.py")
    args, said = ((missing,), f"no such script: {missing}") if mistake == "missing script" \
        else (("--pss", "1", missing), "unrecognized arguments: --pss")
    for rank in ("0", "1"):     # the launch's first rank says it; the others are quiet
        proc = _run("-m", "mpiflow.run", *args, env=_env(PMI_RANK=rank))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[-1:] == (
            [f"python -m mpiflow.run: error: {said}"] if rank == "0" else []), proc.stderr


def test_run_says_a_syntax_error_of_the_script_once_before_mpi_starts(tmp_path):
    # Every rank compiled the script once its rank service ran, and each printed the same
    # traceback through runpy.
    script = tmp_path / "broken.py"
    script.write_text("import os\ndef f(:\n    pass\n")
    for rank in ("0", "1"):
        proc = _run("-m", "mpiflow.run", "--no-supervise", str(script),
                    env=_env(PMI_RANK=rank))
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        if rank == "0":
            assert proc.stderr.splitlines()[0] == f'  File "{script}", line 2', proc.stderr
            assert proc.stderr.splitlines()[-1] == "SyntaxError: invalid syntax", proc.stderr
        else:
            assert proc.stderr == "", proc.stderr


@pytest.mark.parametrize("case, code, why", [
    ("no such command", 127, "command not found"),
    ("a file that is not executable", 126, "cannot execute it (Permission denied)"),
])
def test_the_rank_watcher_says_in_one_line_which_command_it_cannot_run_and_exits_as_a_shell(
        tmp_path, case, code, why):
    # What mpiflow launch runs on every rank: a mistyped command must read as a shell's
    # "command not found" (127) or "cannot execute" (126), not a watcher's traceback.
    command = str(tmp_path / "no_such_program")
    if case != "no such command":
        Path(command).write_text("echo never\n")
        Path(command).chmod(0o644)
    proc = _run("-m", "mpiflow.supervise", command)
    assert proc.returncode == code
    assert proc.stderr == f"mpiflow.supervise: {command!r}: {why}\n"


def test_info_warns_of_a_misspelt_variable_once():
    proc = _run("-m", "mpiflow", "info", env=_env(MPIFLOW_TIMEOTU="3"))
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    assert said.count("MPIFLOW_TIMEOTU") == 1, said
    assert "MPIFLOW_TIMEOTU (did you mean MPIFLOW_TIMEOUT?)" in proc.stderr
