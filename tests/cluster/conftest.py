"""Fixtures for multi-node tests: simulated hosts and MPI jobs launched across them."""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.virtual_hosts import VirtualHosts, unavailable_reason
from tests.conftest import REPO_ROOT, find_mpiexec

HOSTS = 3


@pytest.fixture(scope="module")
def hosts():
    """Three simulated hosts, node0..node2, built for the module and torn down after it."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec; install one with: pip install '.[mpich]'")
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    if "HYDRA" not in version:
        pytest.skip("the simulated-host launch uses MPICH's hydra (ssh launcher); this "
                    "mpiexec is another MPI's")
    with VirtualHosts(HOSTS) as built:
        built.mpiexec = mpiexec
        yield built


class Job:
    """An MPI job running across simulated hosts, its output going to files."""

    def __init__(self, hosts, argv, env, workdir):
        self.hosts = hosts
        self.stdout_path = workdir / "stdout"
        self.stderr_path = workdir / "stderr"
        self._out = open(self.stdout_path, "w")
        self._err = open(self.stderr_path, "w")
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err, env=env,
                                     start_new_session=True)
        self.returncode = None

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for_output(self, text: str, timeout: float) -> None:
        """Wait until ``text`` appears on stdout (fail the test after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while text not in self.stdout:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the job never printed {text!r}\n{self.report()}", pytrace=False)
            time.sleep(0.05)

    def wait(self, timeout: float) -> float:
        """Wait for the job to end; return how long that took. A job that outlives
        ``timeout`` is killed and fails the test: nothing may hang."""
        start = time.monotonic()
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"the job did not end within {timeout} s; killed it\n{self.report()}",
                        pytrace=False)
        finally:
            self._out.close()
            self._err.close()
        return time.monotonic() - start

    def stop(self) -> None:
        for name in self.hosts.names:
            self.hosts.kill_host(name)
        self.proc.kill()
        self.proc.wait()

    def report(self) -> str:
        return (f"{' '.join(self.argv)}\n--- stdout ---\n{self.stdout}\n"
                f"--- stderr ---\n{self.stderr}")


@pytest.fixture
def launch(hosts, tmp_path):
    """Return ``launch(script, *args, ranks_per_host=2, on=None, env=None, via="mpiexec")``
    -> Job; ``via="mpiflow"`` starts the job with ``mpiflow launch`` (around the same
    mpiexec) instead of plain mpiexec.

    The launcher itself runs on node0; every host left running after the test is cleaned.
    """
    jobs = []

    def start(script, *args, ranks_per_host=2, on=None, env=None, via="mpiexec",
              launch_args=()):
        argv = hosts.mpiexec_argv(hosts.mpiexec, ranks_per_host, on)
        if via == "mpiflow":
            hydra = argv[1:]
            for flag in ("-hosts", "-n"):       # given to mpiflow launch itself
                at = hydra.index(flag)
                del hydra[at:at + 2]
            hosts_arg = argv[argv.index("-hosts") + 1]
            count = argv[argv.index("-n") + 1]
            argv = [sys.executable, "-m", "mpiflow", "launch", "--hosts", hosts_arg,
                    "-n", count, "--launcher-args", shlex.join(hydra), *launch_args]
        argv += [sys.executable, str(script), *map(str, args)]
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH")) if p)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        workdir = tmp_path / f"job{len(jobs)}"
        workdir.mkdir()
        job = Job(hosts, hosts.command(hosts.names[0], argv), full_env, workdir)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        if job.proc.poll() is None:
            job.stop()
    for name in hosts.names:
        hosts.restore_link(name)
        hosts.kill_host(name)


@pytest.fixture
def run_on_hosts(launch):
    """Return ``run(script, *args, timeout=120, **launch_kwargs)`` -> finished Job,
    failing the test on a non-zero exit."""

    def run(script, *args, timeout=120, **kwargs):
        job = launch(script, *args, **kwargs)
        job.wait(timeout)
        if job.returncode != 0:
            pytest.fail(f"exit {job.returncode}\n{job.report()}", pytrace=False)
        return job

    return run


PROGS = Path(__file__).parent / "progs"
