"""The parameter-server runtime under mpiexec: parity with one process, exactly-once
updates from many workers, the examples' accuracy, and clear errors."""

import json
import re
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "momentum"])
def test_training_on_two_ps_matches_one_process(run_mpi, optimizer):
    out = run_mpi(3, PROGS / "ps_parity.py", optimizer, 6, timeout=120,
                  env={"MPIFLOW_PS": "2"}).stdout
    assert f"OK parity {optimizer}: 6 steps" in out
    assert "/job:ps/task:0" in out and "/job:ps/task:1" in out


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_bfloat16_training_on_two_ps_matches_one_process_bit_for_bit(run_mpi, optimizer):
    # bfloat16 variables (and momentum slots) on the ps, read by the worker, updated by its
    # gradient pushes: tensors cross ranks by name ("bfloat16"), not as raw 2-byte voids.
    out = run_mpi(3, PROGS / "ps_parity.py", optimizer, 6, "bfloat16", timeout=120,
                  env={"MPIFLOW_PS": "2"}).stdout
    assert f"OK parity {optimizer} bfloat16: 6 steps" in out
    assert "/job:ps/task:0" in out and "/job:ps/task:1" in out


def test_moving_averages_on_the_ps_match_one_process(run_mpi):
    # The shadows live on the ps; the global step they take as num_updates is read after
    # the train op's increment there as in one process (0.566489 after 3 steps; read
    # before it, the shadow was 0.552182).
    out = run_mpi(2, PROGS / "ema_on_ps.py", 3, timeout=120).stdout
    assert "OK ema on ps: 3 steps, shadow [0.566489, 1.132979]" in out, out


def test_ps_applies_every_update_of_three_workers_exactly_once(run_mpi):
    out = run_mpi(4, PROGS / "ps_counting.py", 200, timeout=120).stdout
    # Ranks share stdout, so lines of different ranks may run together: match, don't split.
    reports = re.findall(r"OK worker (\d): 200 updates applied once each; "
                         r"interleaved=(True|False); registrations=(\d+)", out)
    assert sorted(r[0] for r in reports) == ["0", "1", "2"], out
    assert all(r[2] == "1" for r in reports), out
    assert any(r[1] == "True" for r in reports), out


def test_a_rank_with_a_send_in_flight_polls_instead_of_sleeping(run_mpi):
    # With MPICH's single-copy transfers off, 8 MiB cross shared memory in pieces that
    # the sender copies in from inside MPI: a ps that slept between polls with its reply
    # in flight paced the pull by its sleeps (1 ps + 2 workers on the MLP of
    # benchmarks/ps_throughput.py: 8 steps/s, against 85-96 polling).
    out = run_mpi(2, PROGS / "sends_in_flight.py", 10, timeout=120,
                  env={"MPIR_CVAR_CH4_CMA_ENABLE": "0"}).stdout
    counts = re.findall(r"OK sends_in_flight (ps|worker): (\d+) of \d+ sleeps", out)
    assert sorted(job for job, _ in counts) == ["ps", "worker"], out
    assert all(n == "0" for _, n in counts), out


def test_a_table_initialized_on_its_ps_is_made_there_once(run_mpi):
    # The initializer's draw becomes the table's buffer (no copy of it next to the draw):
    # a ps's peak memory grows by its share of the table, not twice that.
    out = run_mpi(3, BENCHMARKS / "ps_init_memory.py", "--gib", 0.25, timeout=120,
                  env={"MPIFLOW_PS": "2"}).stdout
    found = re.findall(r"(ps:\d|worker:0): peak ([\d.]+) GiB \(at start ([\d.]+) GiB; "
                       r"table ([\d.]+) GiB over 2 ps\)", out)
    assert sorted(role for role, *_ in found) == ["ps:0", "ps:1", "worker:0"], out
    for role, peak, start, table in found:
        share = 0 if role == "worker:0" else float(table) / 2
        assert float(peak) - float(start) <= 1.3 * share + 0.02, out


def test_the_hand_written_ps_baseline_does_the_same_math_as_one_process(run_mpi):
    # benchmarks/ps_throughput.py sets mpiflow's async steps against a ps written by hand
    # in mpi4py and numpy: its pushes must leave the variables one process's steps do.
    out = run_mpi(2, PROGS / "hand_written_ps.py", 5, timeout=60).stdout
    assert "OK hand_written_ps: 5 steps" in out, out


def test_the_ps_throughput_benchmark_measures_every_part(run_mpi):
    out = run_mpi(3, BENCHMARKS / "ps_throughput.py", "--sizes-mib", 1, "--rounds", 1,
                  "--round-seconds", 0.05, "--mlp-rounds", 1, "--seconds", 0.2, "--json",
                  timeout=120, env={"OMP_NUM_THREADS": "1"}).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["workers"] == 2
    row, = summary["bandwidth"]
    assert all(v > 0 for k, v in row.items() if not k.endswith("range")), row
    for key in ("mlp_steps_per_s", "one_process_steps_per_s", "numpy_steps_per_s",
                "raw_async_steps_per_s", "of_one_process", "of_floor", "of_raw_async",
                "raw_async_of_numpy", "raw_async_of_floor"):
        assert summary[key] > 0, (key, summary)
    assert set(summary["cpu_s_raw_async"]) == {"rank 0", "rank 1", "rank 2"}


def test_the_many_variables_benchmark_measures_both_sides(run_mpi):
    out = run_mpi(3, BENCHMARKS / "ps_many_variables.py", "--variables", 12, "--rounds", 1,
                  "--seconds", 0.1, "--json", timeout=120,
                  env={"OMP_NUM_THREADS": "1"}).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["workers"] == 2 and summary["variables"] == 12, summary
    assert summary["one_process_ms"] > 0 and summary["async_ms"] > 0, summary
    assert summary["async_of_one_process"] > 0, summary


def test_the_one_sided_pull_benchmark_measures_every_way(run_mpi):
    out = run_mpi(2, BENCHMARKS / "one_sided_pull.py", "--sizes-kib", 64, "--rounds", 1,
                  "--seconds", 0.05, "--json", timeout=120,
                  env={"OMP_NUM_THREADS": "1"}).stdout
    rates = json.loads(out.strip().splitlines()[-1])["64"]
    assert set(rates) == {"two-sided", "get", "get (Win.Create)", "get (dynamic)",
                          "get, ps busy", "epoch, ps busy", "dynamic epoch, ps busy"}, rates
    # A pull that needs the busy ps may finish only after the round: its rate may be 0.
    assert all(v > 0 for k, v in rates.items() if "busy" not in k), rates


@pytest.mark.parametrize("ranks,args", [(3, []), (4, ["--ps", "2"])])
def test_mnist_ps_example_trains_to_95_percent(run_mpi, ranks, args):
    out = run_mpi(ranks, EXAMPLES / "mnist_ps.py", "--epochs", 20, *args, timeout=240).stdout
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d\.\d+)", out)]
    assert len(accuracies) == 2, out
    assert min(accuracies) >= 0.95, out


def test_in_graph_example_trains_to_95_percent(run_mpi):
    out = run_mpi(3, EXAMPLES / "in_graph.py", "--epochs", 20, timeout=240).stdout
    accuracy, = re.findall(r"test accuracy (\d\.\d+)", out)
    assert float(accuracy) >= 0.95, out
    assert "'/job:worker/task:0', '/job:worker/task:1'" in out


@pytest.mark.parametrize("case,expected", [
    ("job_not_in_cluster", r"PlacementError: Cannot place op 'stray/.*' .*on rank 1 "
                           r"\(worker:0\).*job 'parameter_server' is not in the cluster "
                           r"\{'ps'"),
    ("task_out_of_range", r"PlacementError: .*on rank 1 \(worker:0\).*/job:ps/task:3 but "
                          r"job 'ps' has 1 task"),
    ("remote_kernel_error", r"InvalidArgumentError: Index out of range in op 'lookup_on_ps' "
                            r"\(GatherV2\).*got 9 \[raised on rank 0 \(ps:0\)"),
])
def test_distributed_errors_name_the_op_and_the_layout(run_mpi, case, expected):
    out = run_mpi(2, PROGS / "ps_errors.py", case, timeout=60).stdout
    assert re.search(expected, out), out


def test_log_device_placement_shows_cluster_devices(run_mpi):
    proc = run_mpi(2, PROGS / "ps_errors.py", "log_device_placement", timeout=60)
    assert "NO ERROR" in proc.stdout
    assert "placed/read: (Identity): /job:ps/replica:0/task:0/device:CPU:0" in proc.stderr
    assert "doubled: (Mul): /job:worker/replica:0/task:0/device:CPU:0" in proc.stderr


def test_local_server_runs_a_one_rank_session(run_mpi):
    out = run_mpi(1, PROGS / "local_server.py", timeout=60).stdout
    assert "OK local server: 42.0 on /job:localhost/task:0" in out


@pytest.mark.parametrize("role,culprit,message", [
    ("worker", r"rank 2 \(worker:1\)", "ValueError: bad batch in worker 1"),
    ("ps", r"rank 0 \(ps:0\)", "RuntimeError: disk full on the parameter server"),
])
def test_an_exception_on_one_rank_ends_the_job_fast_naming_it(run_mpi, role, culprit,
                                                               message):
    import time
    start = time.monotonic()
    proc = run_mpi(3, PROGS / "fail_fast.py", role, timeout=60, check=False)
    elapsed = time.monotonic() - start
    err = proc.stderr
    assert proc.returncode != 0
    assert elapsed < 20, f"the job took {elapsed:.0f} s to end"
    assert re.search(rf"\[{culprit} on .*\] {re.escape(message)}", err), err
    aborted = re.findall(rf"aborted because {culprit} on \S+ failed: {re.escape(message)}",
                         err)
    assert len(aborted) == 2, err      # every other rank says why it stops


def test_a_rank_that_failed_itself_never_blames_another_that_failed_at_once(run_mpi):
    # Both workers raise at about the same moment: each says its own error, or (where
    # the other's word came first) that it stops because of the other; never both.
    proc = run_mpi(3, PROGS / "fail_fast.py", "workers", timeout=60, check=False)
    assert proc.returncode != 0
    for rank, task in ((1, 0), (2, 1)):
        own = re.search(rf"\[rank {rank} \(worker:{task}\) on \S+\] ValueError: bad batch in "
                        rf"worker {task}", proc.stderr)
        blames = re.search(rf"\[rank {rank} \(worker:{task}\) on \S+\] aborted because",
                           proc.stderr)
        assert bool(own) != bool(blames), proc.stderr


def test_a_run_timeout_ends_the_step_naming_what_it_waited_for(run_mpi):
    out = run_mpi(2, PROGS / "run_timeout.py", timeout=60).stdout
    found = re.search(r"TIMEOUT after (\d+\.\d) s: Rank 1 waited 1.5 s for step \d+: "
                      r"tensor 'sync_replicas/SyncTokenWait:0' from rank 0 \(ps:0\)", out)
    assert found, out
    assert float(found[1]) < 5.0
    assert "value still readable" in out       # the session goes on after the timeout


@pytest.mark.soak
def test_soak_memory_flat_nothing_outstanding_every_push_applied(run_mpi):
    # 25 s: about 58,000 pushes here, 17 s of them after the warm-up.
    out = run_mpi(4, PROGS / "soak.py", 25, timeout=180).stdout
    found = re.search(r"SOAK pushes (\d+) applied (\d+) max_growth (-?\d+\.\d+)% "
                      r"outstanding (\d+)", out)
    assert found, out
    pushes, applied, growth, outstanding = (int(found[1]), int(found[2]), float(found[3]),
                                            int(found[4]))
    assert pushes > 1000 and applied == pushes, out
    assert growth < 5.0, out
    assert outstanding == 0, out



@pytest.mark.parametrize("mode,culprit,detector", [
    ("freeze-worker", r"rank 2 \(worker:1\)", r"rank 0 \(ps:0\)"),
    ("freeze-ps", r"rank 0 \(ps:0\)", r"rank [12] \(worker:[01]\)"),
])
def test_a_frozen_rank_is_named_within_the_peer_timeout(run_mpi, mode, culprit, detector):
    import time
    start = time.monotonic()
    proc = run_mpi(3, PROGS / "rank_faults.py", mode, timeout=60, check=False,
                   env={"MPIFLOW_HEARTBEAT_S": "0.25", "MPIFLOW_PEER_TIMEOUT": "2"})
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 20, f"the job took {elapsed:.0f} s to end"
    assert re.search(rf"\[{detector} on \S+\] UnavailableError: {detector} on \S+ lost "
                     rf"contact with {culprit} on host \S+: no heartbeat for more than 2 s",
                     proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr     # where the detector waited says nothing


def test_ranks_that_leave_early_are_not_taken_for_lost(run_mpi):
    # Worker 1 leaves at once; the others go on well past the peer timeout.
    out = run_mpi(3, PROGS / "rank_faults.py", "leave-early", timeout=60,
                  env={"MPIFLOW_HEARTBEAT_S": "0.25", "MPIFLOW_PEER_TIMEOUT": "1"}).stdout
    assert "worker 0 done after 3 s" in out


def test_a_rank_killed_by_sigkill_is_named_with_its_role(run_mpi):
    import time
    start = time.monotonic()
    proc = run_mpi(3, "-m", "mpiflow.run", "--ps", 1, PROGS / "rank_faults.py", "kill-worker",
                   timeout=60, check=False)
    assert proc.returncode != 0
    assert time.monotonic() - start < 20
    assert re.search(r"\[rank 2 \(worker:1\) on \S+\] was killed by SIGKILL \(signal 9\); "
                     r"the job ends", proc.stderr), proc.stderr


def test_a_traced_run_gives_one_chrome_trace_with_every_rank(run_mpi, tmp_path):
    import json
    path = tmp_path / "trace.json"
    out = run_mpi(3, PROGS / "traced_run.py", path, timeout=90).stdout
    assert len(re.findall(r"worker \d: \d+ events in its part of a step", out)) == 2, out
    trace = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert set(names) == {0, 1, 2}
    assert names[0].startswith("rank 0 (ps:0) on ") and names[2].startswith("rank 2 (worker:1)")
    spans = [e for e in trace if e["ph"] == "X"]
    by_rank = {pid: {e["cat"] for e in spans if e["pid"] == pid} for pid in (0, 1, 2)}
    for pid, cats in by_rank.items():    # the ps computes the update and sends the weights
        assert "op" in cats and ({"send", "recv"} & cats), (pid, cats)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    applies = [e for e in spans if e["pid"] == 0 and "ApplyGradientDescent" in
               e["args"].get("type", "")]
    assert len(applies) == 4            # 2 traced steps x 2 workers, on the ps


def test_a_traced_allreduce_is_a_collective_span(run_mpi):
    out = run_mpi(2, PROGS / "traced_allreduce.py", timeout=60).stdout
    assert out.count("[('collective', 'CollectiveAllReduce')]") == 2, out


def test_pulled_arrays_dropped_by_the_caller_are_reused_by_the_next_pull(run_mpi):
    out = run_mpi(2, PROGS / "pulled_buffers.py", timeout=60).stdout
    assert "same buffers: True" in out, out


def test_server_takes_a_tf1_scripts_arguments(run_mpi):
    # TF: job_name alone picks the job's only task; Server(server_def) as well as a
    # ClusterSpec; a task_index given alone is checked like job_name.
    out = run_mpi(2, PROGS / "server_arguments.py", timeout=60).stdout
    assert "ACCEPTED" not in out, out
    assert out.count("REFUSED Rank") == 2 and "asked for task_index=1:" in out, out
    assert "OK ps:0 ps:0 grpc" in out and "OK worker:0 worker:0 grpc" in out, out
