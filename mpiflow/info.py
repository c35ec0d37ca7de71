"""``python -m mpiflow.info``: the layout this launch gives, and what each rank can use.

    mpiexec -n 4 python -m mpiflow.info          # or: srun --mpi=pmi2 python -m mpiflow.info
    mpiexec -n 4 python -m mpiflow.info --ps 2 --policy spread
    MPIFLOW_PS=2 MPIFLOW_PS_POLICY=spread mpiexec -n 4 python -m mpiflow.info   # the same

Rank 0 prints one line per rank (host, node, local rank, role and task, BLAS threads,
GPU), then the versions of mpiflow, Python, numpy, mpi4py, the MPI library, cupy and NCCL,
whether MPI is CUDA-aware, and the MPIFLOW_* settings in effect (``--settings``: every
option with its documentation). Collective over the job; every rank must run it (or run
it alone, as a job of one rank).
"""

from __future__ import annotations

import sys

import numpy as np

from mpiflow.cli import add_version_argument


def _count(text: str) -> int:
    """An argument that counts something: an int >= 0 (argparse names the option)."""
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {value}")
    return value


def add_layout_arguments(parser) -> None:
    """``--ps`` and ``--policy``, as ``ClusterSpec.from_mpi`` takes them (shared by the
    commands that lay out a launch)."""
    parser.add_argument("--ps", type=_count, default=None,
                        help="number of ps tasks (default: MPIFLOW_PS, else 1 for 2+ ranks)")
    parser.add_argument("--policy", choices=("block", "spread"), default=None,
                        help="which ranks become ps (default: MPIFLOW_PS_POLICY, else block)")


def _parse(argv):
    import argparse
    parser = argparse.ArgumentParser(
        prog="python -m mpiflow.info",
        description="Show the layout this launch gives (run under mpiexec or srun).")
    add_layout_arguments(parser)
    parser.add_argument("--settings", action="store_true",
                        help="describe every MPIFLOW_* setting, not only those set")
    add_version_argument(parser)
    return parser.parse_args(argv)


def versions(mpi) -> list[tuple[str, str]]:
    """(component, version) of everything a run depends on, ``mpi`` being mpi4py.MPI."""
    import mpi4py

    import mpiflow
    from mpiflow import backend
    found = [("mpiflow", mpiflow.__version__),
             ("Python", sys.version.split()[0]),
             ("numpy", np.__version__),
             ("mpi4py", mpi4py.__version__),
             ("MPI", " ".join(mpi.Get_library_version().splitlines()[0].split()))]
    found.append(("cupy", backend.cupy_version() or f"no ({backend.gpu_reason()})"))
    nccl, why = backend.nccl_module()
    found.append(("NCCL", _nccl_version(nccl) if nccl is not None else f"no ({why})"))
    return found


def _nccl_version(nccl) -> str:
    code = nccl.get_version()           # e.g. 22105 for 2.21.5
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def main(argv=None) -> int:
    args = _parse(argv)
    from mpiflow.runtime.process import start_mpi

    MPI = start_mpi()
    from mpiflow import backend, config, errors
    from mpiflow.comm import cuda_aware
    from mpiflow.comm.cluster import Layout

    comm = MPI.COMM_WORLD
    layout = Layout.from_comm(comm)
    try:
        roles = layout.assign_roles(args.ps, args.policy)
    except errors.MpiflowError as exc:
        # Every rank reaches the same verdict; rank 0 says it once.
        if layout.rank == 0:
            sys.stderr.write(f"mpiflow info: {exc}\n")
        return 2
    policy = args.policy or config.get("MPIFLOW_PS_POLICY")
    threads = config.get("MPIFLOW_CPU_THREADS") or layout.cpu_threads
    # as the rank service does
    backend.set_local_rank(layout.local_rank, layout.local_size, layout.node_cpus)
    gpus = backend.gpu_count()
    gpu = backend.bound_gpu() if gpus else -1
    mine = np.array([threads, gpu], dtype=np.int64)
    every = np.empty((layout.size, 2), dtype=np.int64)
    comm.Allgather(mine, every)
    if layout.rank != 0:
        return 0
    print(f"{'rank':>4}  {'host':<20} {'node':>4} {'local':>5}  {'role':<10} "
          f"{'threads':>7}  gpu")
    for r in range(layout.size):
        job, task = roles[r]
        gpu_text = f"GPU:{every[r, 1]}" if every[r, 1] >= 0 else "-"
        print(f"{r:>4}  {layout.hosts[r]:<20} {layout.nodes[r]:>4} "
              f"{layout.local_ranks[r]:>5}  {f'{job}:{task}':<10} {every[r, 0]:>7}  "
              f"{gpu_text}")
    print(f"nodes: {layout.num_nodes}; ps policy {policy}")
    for name, version in versions(MPI):
        print(f"{name}: {version}")
    print(f"CUDA-aware MPI: {cuda_aware.describe()}")
    if gpus:
        print(f"GPU binding: /device:GPU:0 of each rank is the GPU in the table (local "
              f"rank % {gpus} GPU(s) per node, MPIFLOW_GPU overrides); rank 0: "
              f"{backend.describe_binding()}")
    print(f"GPUs: {gpus}")
    settings = config.default()
    if args.settings:
        print("settings:\n" + config.describe())
    given = [name for name in sorted(config.OPTIONS) if settings.is_set(name)]
    print("MPIFLOW_* set: " + (", ".join(f"{n}={settings.get(n)!r}" for n in given)
                              or "none (all defaults)"))
    # Misspelt MPIFLOW_* variables are not repeated here: importing mpiflow warned of them
    # already, on rank 0 (mpiflow.startup), with the option each may mean.
    return 0


if __name__ == "__main__":
    sys.exit(main())
