"""Shared fixtures: a seeded rng, an mpiexec launcher that cannot hang, a fresh default graph."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import mpiflow
except ModuleNotFoundError as e:  # only "mpiflow is absent"; a broken import must still fail
    if e.name != "mpiflow":
        raise
    mpiflow = None

REPO_ROOT = Path(__file__).resolve().parent.parent

# Every kernel of every test (and of every rank the tests launch) gets its inputs
# read-only, so a kernel that writes what it does not own fails where it does it.
os.environ.setdefault("MPIFLOW_CHECK_KERNEL_WRITES", "1")


def _mpich_segments() -> set:
    return set(Path("/dev/shm").glob("mpich_shm_*"))


def _mapped_files() -> set:
    """The files some process on this machine has mapped (that we may read)."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.split(None, 5)[5].strip() for line in maps.read_text().splitlines()
                          if line.count(" ") >= 5 and "/dev/shm/" in line)
        except (OSError, IndexError):
            pass
    return mapped


@pytest.fixture(scope="session", autouse=True)
def _no_shared_memory_left_behind():
    """Remove the MPICH shared-memory segments that launches of this session killed on
    purpose left in /dev/shm (about 3 MB each, hundreds per run; a small /dev/shm fills
    up, and a stale segment can hang a later job that gets its name): those nobody maps
    any more."""
    before = _mpich_segments()
    yield
    mapped = _mapped_files()
    for segment in _mpich_segments() - before:
        if str(segment) not in mapped:
            segment.unlink(missing_ok=True)


@pytest.fixture
def rng():
    """Return a numpy Generator seeded with 0, new for each test."""
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    """Start each test on an empty default graph, once mpiflow provides one."""
    reset = getattr(mpiflow, "reset_default_graph", None)
    if reset is not None:
        reset()
    yield


def find_mpiexec():
    """Return the mpiexec beside this Python (a venv with an MPI wheel), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked ``mpich_only`` where the mpiexec the tests launch with
    (``find_mpiexec``) is not MPICH's: they drive its own options, its PMI and its forwarding of signals (or, under
    srun, its PMI, which another MPI's wheel may not speak)."""
    marked = [item for item in items if item.get_closest_marker("mpich_only")]
    mpiexec = find_mpiexec() if marked and mpiflow is not None else None
    if mpiexec is None:         # no launches at all: the mpi tests skip themselves
        return
    from mpiflow.launch.launchers import mpiexec_kind

    kind, _ = mpiexec_kind(mpiexec)
    if kind == "mpich":
        return
    skip = pytest.mark.skip(reason=f"needs MPICH's launcher or PMI; {mpiexec} is "
                                   f"{kind or 'another MPI'}'s")
    for item in marked:
        item.add_marker(skip)


def launch_env(env):
    """This process's environment for a launch of ranks, with ``env`` over it."""
    full_env = dict(os.environ)
    # The ranks import the same mpiflow as this test process.
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH")) if p)
    full_env["PYTHONUNBUFFERED"] = "1"
    # Open MPI refuses root and more ranks than cores unless told; MPICH ignores these.
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    full_env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    full_env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    full_env.update(env or {})
    return full_env


def _require_mpiexec():
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip(f"no mpiexec beside {sys.executable} or on PATH; "
                    "install one with: pip install '.[mpich]'")
    return mpiexec


@pytest.fixture
def start_mpi():
    """Return ``start(n, script_path, *args, env=None, launcher_args=())``: the running
    ``mpiexec -n n python script_path args...`` as a ``subprocess.Popen`` (text pipes), in
    its own process group (``os.killpg(proc.pid, ...)`` reaches every process of the
    launch, as a terminal's Ctrl-C does). Whatever is still running when the test ends is
    killed."""
    mpiexec = _require_mpiexec()
    started = []

    def start(n, script_path, *args, env=None, launcher_args=()):
        cmd = [mpiexec, *launcher_args, "-n", str(n), sys.executable, str(script_path),
               *map(str, args)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=launch_env(env), start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()


@pytest.fixture
def run_mpi(start_mpi):
    """Return ``run(n, script_path, *args, timeout=120, env=None, check=True)``.

    ``run`` launches ``mpiexec -n n python script_path args...`` in its own process group and
    returns the ``subprocess.CompletedProcess`` (text stdout and stderr). A launch that runs
    past ``timeout`` seconds has its whole process group killed, and the test fails with what
    it printed, so a hung rank never hangs the test suite. With ``check=True`` a non-zero exit
    also fails the test with the output; tests of failure paths pass ``check=False``. The
    test is skipped when no mpiexec is found.
    """
    def run(n, script_path, *args, timeout=120, env=None, check=True, launcher_args=()):
        proc = start_mpi(n, script_path, *args, env=env, launcher_args=launcher_args)
        cmd = proc.args
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                stdout, stderr = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a rank left the group and holds the pipes
                stdout, stderr = "(unavailable)", "(unavailable)"
        if timed_out:
            pytest.fail(f"{' '.join(cmd)} timed out after {timeout}s; killed its process "
                        f"group.\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
                        pytrace=False)
        result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited with {proc.returncode}.\n--- stdout ---\n"
                        f"{stdout}\n--- stderr ---\n{stderr}", pytrace=False)
        return result

    return run
