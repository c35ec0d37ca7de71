"""Run one of these scripts under TensorFlow itself, the TF1 way: a process per task.

    python run_with_tensorflow.py SCRIPT [script flags...]     (needs tensorflow installed)

Starts 1 ps and 2 workers on 127.0.0.1 (gRPC ports 22220-22222) with the conventional
--ps_hosts/--worker_hosts/--job_name/--task_index flags, waits for the workers, then
stops the ps (TF1 ps tasks serve forever). Prints the workers' output: the figures the
tests compare mpiflow's runs with were made this way.
"""

import subprocess
import sys

PS, WORKERS, PORT = 1, 2, 22220
TIMEOUT_S = 120


def main(script, *args):
    hosts = [f"127.0.0.1:{PORT + i}" for i in range(PS + WORKERS)]
    flags = [f"--ps_hosts={','.join(hosts[:PS])}", f"--worker_hosts={','.join(hosts[PS:])}"]

    def start(job, index):
        return subprocess.Popen([sys.executable, script, *args, *flags, f"--job_name={job}",
                                 f"--task_index={index}"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    ps = [start("ps", i) for i in range(PS)]
    workers = [start("worker", i) for i in range(WORKERS)]
    codes = []
    for i, worker in enumerate(workers):
        try:
            out, _ = worker.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # TF1's sync replicas can leave a worker waiting for a token at the end.
            worker.kill()
            out, _ = worker.communicate()
            print(f"--- worker {i} still ran after {TIMEOUT_S} s: killed")
        codes.append(worker.returncode)
        lines = [line for line in out.splitlines() if "worker" in line.lower()]
        print(f"--- worker {i} (exit {worker.returncode})\n" + "\n".join(lines))
    for p in ps:
        p.kill()
        p.wait()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
