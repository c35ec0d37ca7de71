"""A real one-node Slurm on localhost for the batch-script tests: munged, slurmctld and
slurmd started in a temporary directory of their own, torn down after the module."""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")

_CONF = """ClusterName=mpiflowtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmi2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
FirstJobId={first_job_id}
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 \
ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _unavailable():
    if sys.platform != "linux" or os.geteuid() != 0:
        return "a local Slurm needs Linux and root (CI runs as root)"
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return (f"no {', '.join(missing)}: install Debian's slurm-wlm and munge "
                "(.ci/run does)")
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    def __init__(self, directory: Path):
        self.dir = directory
        self.conf = directory / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self):
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir()
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(["munged", "--force", f"--key-file={key}",
                        f"--socket={self.dir}/munge.sock", f"--log-file={self.dir}/munged.log",
                        f"--pid-file={self.dir}/munged.pid",
                        f"--seed-file={self.dir}/munged.seed"], check=True)
        # Job ids of their own: MPICH names a job step's shared memory after its job and
        # step ids, and a step that was killed leaves that segment in /dev/shm; a later
        # Slurm counting from 1 again would give a step the same name, and its ranks
        # would hang attaching the stale segment.
        self.conf.write_text(_CONF.format(host=socket.gethostname(), dir=self.dir,
                                          ctld_port=_free_port(), d_port=_free_port(),
                                          first_job_id=random.randrange(10_000, 60_000_000)))
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, env=self.env)
        subprocess.run(["slurmd", "-f", str(self.conf)], check=True, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True,
                                   text=True, env=self.env).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the local Slurm never became idle (state {state!r}); "
                           f"logs in {self.dir}")

    def sbatch(self, script, *options, timeout=240, **env):
        """Submit ``script`` with ``sbatch --wait`` from the repository root; return
        (exit code, the job's output).

        mpiflow's own deadline is set well inside ``timeout``, so a job that hangs reports
        where its ranks were; a job still running at ``timeout`` is cancelled and the test
        fails with its output and the daemons' logs, not a bare TimeoutExpired."""
        out = self.dir / f"job-{Path(script).stem}.out"
        job_env = dict(self.env, PYTHON=sys.executable, MPIFLOW_TIMEOUT=str(timeout // 3),
                       **env)
        job_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), job_env.get("PYTHONPATH")) if p)
        command = ["sbatch", "--wait", f"--output={out}", *options, str(script)]
        with subprocess.Popen(command, cwd=REPO_ROOT, env=job_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as submitted:
            try:
                stdout, stderr = submitted.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                submitted.kill()
                stdout, stderr = submitted.communicate()
                job = re.search(r"Submitted batch job (\d+)", stdout)
                if job:
                    subprocess.run(["scancel", "--full", job[1]], env=self.env, timeout=30)
                    time.sleep(2)
                pytest.fail(f"sbatch {Path(script).name} was still running after {timeout} s; "
                            f"its output:\n{out.read_text() if out.exists() else '(none)'}\n"
                            f"{stderr}\n{self.log_tails()}", pytrace=False)
        text = out.read_text() if out.exists() else ""
        return submitted.returncode, text + stderr

    def log_tails(self, lines=40):
        """The last ``lines`` of each daemon's log, for a job that went wrong."""
        tails = []
        for name in ("slurmctld", "slurmd"):
            log = self.dir / f"{name}.log"
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            tails.append(f"--- {name}.log (last {lines} lines)\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self):
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.dir / f"{name}.pid"
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass
        time.sleep(0.5)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
