"""A host lost mid-training: the job ends, the survivors say which host, training resumes.

Three hosts run two ranks each: ps:0 and worker:0 on node0, ps:1 and worker:1 on node1,
workers 2 and 3 on node2, which the tests strike while the job trains and checkpoints.
Heartbeats are sped up (lost after 3 s of silence) so the tests stay short.
"""

import re
import time

import pytest

from tests.cluster.conftest import PROGS

PROG = PROGS / "train_checkpointed.py"
PEER_TIMEOUT = 3.0
LIVENESS = {"MPIFLOW_HEARTBEAT_S": "0.5", "MPIFLOW_PEER_TIMEOUT": str(PEER_TIMEOUT),
            "MPIFLOW_TIMEOUT": "120"}
SURVIVORS = {0: "ps:0", 1: "worker:0", 2: "ps:1", 3: "worker:1"}
# The user's command must return within MPIFLOW_PEER_TIMEOUT + 10 s of a fault (the
# bound mpiflow sets itself); the slack covers a loaded CI machine.
RETURNS_WITHIN_S = PEER_TIMEOUT + 10 + 5
LOST = "host node2 (all its ranks: rank 4 (worker:2), rank 5 (worker:3))"

pytestmark = [pytest.mark.mpi, pytest.mark.multinode]


def saved_step(checkpoint_dir) -> int:
    state = (checkpoint_dir / "checkpoint")
    if not state.exists():
        return -1
    found = re.search(r'^model_checkpoint_path: "model\.ckpt-(\d+)"', state.read_text(), re.M)
    return int(found.group(1)) if found else -1


def train_until_a_checkpoint(launch, checkpoint_dir, step=50, via="mpiexec"):
    job = launch(PROG, checkpoint_dir, 10**9, 0.02, env=LIVENESS, via=via)
    deadline = time.monotonic() + 120
    while saved_step(checkpoint_dir) < step:
        if job.proc.poll() is not None or time.monotonic() > deadline:
            job.stop()
            pytest.fail(f"no checkpoint past step {step}\n{job.report()}", pytrace=False)
        time.sleep(0.05)
    return job


def ranks_running(hosts, names):
    """PIDs of the training program still running on ``names``."""
    running = []
    for name in names:
        for pid in hosts.pids(name):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if PROG.name.encode() in f.read():
                        running.append(pid)
            except FileNotFoundError:
                pass
    return running


def wait_until_ranks_end(hosts, names, job, timeout):
    start = time.monotonic()
    while ranks_running(hosts, names):
        if time.monotonic() - start > timeout:
            job.stop()
            pytest.fail(f"ranks on {names} still run {timeout} s after the fault\n"
                        f"{job.report()}", pytrace=False)
        time.sleep(0.05)
    return time.monotonic() - start


def resume_reaches_the_saved_step(launch, checkpoint_dir):
    """Restart the job from the checkpoint dir: it must start at the last saved step."""
    saved = saved_step(checkpoint_dir)
    assert saved >= 50
    job = launch(PROG, checkpoint_dir, saved + 40, env=LIVENESS)
    job.wait(120)
    assert job.returncode == 0, job.report()
    assert f"Restoring parameters from {checkpoint_dir}/model.ckpt-{saved}" in job.stderr
    # Ranks share stdout: lines of two ranks may run together, so match, don't split.
    starts = [int(s) for s in re.findall(r"start (\d+)", job.stdout)]
    assert len(starts) == 4 and min(starts) >= saved, job.report()
    assert saved_step(checkpoint_dir) >= saved + 40, job.report()


@pytest.mark.parametrize("fault", ["power_off", "cut_link"])
def test_every_survivor_names_the_silent_host_and_training_resumes(hosts, launch, tmp_path,
                                                                   fault):
    """The host vanishes without closing anything (power loss, or its link cut)."""
    checkpoint_dir = tmp_path / "ckpt"
    job = train_until_a_checkpoint(launch, checkpoint_dir)
    getattr(hosts, fault)("node2")
    took = wait_until_ranks_end(hosts, ["node0", "node1"], job, PEER_TIMEOUT + 30)
    if fault == "cut_link":
        # The cut-off ranks hear nothing from rank 0 and end by themselves as well.
        wait_until_ranks_end(hosts, ["node2"], job, PEER_TIMEOUT + 30)
    print(f"{fault}: every surviving rank ended {took:.1f} s after the fault")
    # The user's command returns too (a rank on the launcher's host ends it if it waits
    # for the proxy it cannot reach).
    job.wait(RETURNS_WITHIN_S)
    stderr = job.stderr
    for rank, role in SURVIVORS.items():
        lines = [line for line in stderr.splitlines()
                 if line.startswith(f"[rank {rank} ({role}) on node")]
        assert any(LOST in line for line in lines), f"rank {rank} did not name it\n{stderr}"
    assert "lost contact with " + LOST in stderr
    hosts.restore_link("node2")
    resume_reaches_the_saved_step(launch, checkpoint_dir)


def test_every_process_of_a_host_killed_ends_the_job_at_once_and_training_resumes(
        hosts, launch, tmp_path):
    """The host's kernel lives on and closes the sockets: MPICH's launcher sees its proxy
    go and ends the job at once (before any rank could say more than it does)."""
    checkpoint_dir = tmp_path / "ckpt"
    job = train_until_a_checkpoint(launch, checkpoint_dir)
    hosts.kill_host("node2")
    took = job.wait(PEER_TIMEOUT + 30)
    print(f"kill_host: the job ended {took:.1f} s after the fault")
    assert job.returncode != 0
    wait_until_ranks_end(hosts, hosts.names, job, 10)   # the launcher's proxies kill them
    resume_reaches_the_saved_step(launch, checkpoint_dir)


@pytest.mark.parametrize("via", ["mpiexec", "mpiflow"])
def test_the_users_command_returns_when_the_launching_host_is_cut_off(hosts, launch, tmp_path,
                                                                     via):
    """node0, where the launcher runs, loses its link: MPICH's mpiexec waits for proxies it
    can no longer reach. A rank there that ends the job ends its launcher too (plain
    mpiexec), or mpiflow launch ends it."""
    checkpoint_dir = tmp_path / "ckpt"
    job = train_until_a_checkpoint(launch, checkpoint_dir, via=via)
    hosts.cut_link("node0")
    took = job.wait(RETURNS_WITHIN_S)
    print(f"{via}: the command returned {took:.1f} s after node0's link was cut")
    assert job.returncode != 0, job.report()
    if via == "mpiflow":
        last = job.stderr.strip().splitlines()[-1]
        assert re.match(r"mpiflow\.launch: the job failed \(.*\) after [\d.]+ s: rank 0 "
                        r"\(ps:0\) on node0: .*lost contact with host node1 .*host node2",
                        last), job.report()
    hosts.restore_link("node0")
    wait_until_ranks_end(hosts, hosts.names, job, 20)     # the cut-off ranks end too
    resume_reaches_the_saved_step(launch, checkpoint_dir)


def test_mpiflow_launch_names_a_powered_off_host_and_returns_in_bounded_time(hosts, launch,
                                                                           tmp_path):
    checkpoint_dir = tmp_path / "ckpt"
    job = train_until_a_checkpoint(launch, checkpoint_dir, via="mpiflow")
    hosts.power_off("node2")
    took = job.wait(RETURNS_WITHIN_S)
    print(f"mpiflow launch returned {took:.1f} s after node2 powered off")
    assert job.returncode != 0, job.report()
    last = job.stderr.strip().splitlines()[-1]
    assert last.startswith("mpiflow.launch: the job failed") and "lost contact with " + LOST \
        in last, job.report()
    hosts.restore_link("node2")
    resume_reaches_the_saved_step(launch, checkpoint_dir)


ELASTIC_PROG = PROGS.parent.parent / "launch" / "progs" / "elastic_training.py"


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("fault", ["power_off", "cut_link"])
def test_an_elastic_job_trains_on_without_a_host_of_workers(hosts, launch, tmp_path, fault,
                                                            mode):
    """1 ps + 5 workers; node2 holds workers 3 and 4 only. It vanishes mid-training: the
    others train to the end, nothing is half applied, and the launch ends 0 naming both.
    sync: 3 of 5 replicas aggregated (2 backup workers), so the 3 survivors go on."""
    last_step = 2500 if mode == "async" else 800   # the fault strikes midway
    job = launch(ELASTIC_PROG, tmp_path / "ckpt", last_step, "none", 1, mode, 2,
                 env=LIVENESS, via="mpiflow", launch_args=("--elastic",))
    job.wait_for_output("start", 120)
    time.sleep(2.0)
    getattr(hosts, fault)("node2")
    took = job.wait(120)
    print(f"{fault}: the elastic job ended {took:.1f} s after node2 vanished")
    assert job.returncode == 0, job.report()
    found = re.search(r"final v=(\d+) step=(\d+)", job.stdout)
    assert found and found.group(1) == found.group(2) and \
        int(found.group(2)) >= last_step, job.report()
    assert not re.search(r"\] done \d+$", "\n".join(
        line for line in job.stdout.splitlines() if "on node2]" in line)), job.report()
    last = job.stderr.strip().splitlines()[-1]
    assert re.match(r"mpiflow\.launch: the job ended after [\d.]+ s; it went on without: ",
                    last) and "rank 4 (worker:3) on node2" in last and \
        "rank 5 (worker:4) on node2" in last, job.report()
    hosts.restore_link("node2")


def kill_rank(hosts, host, rank):
    """SIGKILL the process of MPI rank ``rank`` on ``host`` (the rank itself, not the
    parent that watches it under mpiflow launch --elastic)."""
    import os
    import signal
    for pid in hosts.pids(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(ELASTIC_PROG.name.encode()) for a in argv) and \
                b"mpiflow.supervise" not in argv and f"PMI_RANK={rank}".encode() in environ:
            os.kill(pid, signal.SIGKILL)
            return
    raise AssertionError(f"no rank {rank} on {host}")


@pytest.mark.parametrize("victim, mode, ends", [
    (5, "sync", False),      # worker:4 on node2, sync with one backup: the others go on
    (5, "async", False),     # worker:4 on node2, async: the others go on
    (1, "async", False),     # the chief on node0: worker:1 on node1 takes its duties over
    (1, "sync", False),      # the same in sync training, the sync loop included
    (0, "async", True),      # the ps on node0 (the variables were only there): job ends
    (0, "sync", True),
], ids=["sync-worker", "async-worker", "async-chief", "sync-chief", "async-ps", "sync-ps"])
def test_elastic_jobs_across_hosts_lose_one_rank(hosts, launch, tmp_path, victim, mode, ends):
    last_step = 1500 if mode == "async" else 600
    job = launch(ELASTIC_PROG, tmp_path / "ckpt", last_step, "none", 1, mode,
                 env=LIVENESS, via="mpiflow", launch_args=("--elastic",))
    job.wait_for_output("start", 120)
    time.sleep(2.0)
    host = {0: "node0", 1: "node0", 5: "node2"}[victim]
    kill_rank(hosts, host, victim)
    took = job.wait(RETURNS_WITHIN_S if ends else 120)
    print(f"{mode}, rank {victim} killed: the command returned {took:.1f} s later")
    last = job.stderr.strip().splitlines()[-1]
    if ends:
        assert job.returncode != 0 and "the job failed" in last and "(ps:0)" in last, \
            job.report()
        return
    assert job.returncode == 0, job.report()
    found = re.search(r"final v=(\d+) step=(\d+)", job.stdout)
    assert found and found.group(1) == found.group(2) and \
        int(found.group(2)) >= last_step, job.report()
    assert "it went on without: rank " + str(victim) in last, job.report()
    if victim == 1:
        assert "[worker:1 r2] WARNING mpiflow.elastic: this worker takes over the chief's" \
            in job.stderr, job.report()
