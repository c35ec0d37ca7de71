"""PyTorch's DistributedDataParallel (gloo) on the same MLP, and torch.distributed's
allreduce bandwidth, as baselines for mpiflow's allreduce mode.

    python benchmarks/peers/torch_ddp.py --workers 2 [--steps 100] [--json]
    python benchmarks/peers/torch_ddp.py --workers 2 --bandwidth [--json]

Training: an MLP 784-512-512-10 without biases at batch 128 with SGD (as
``benchmarks/allreduce_step.py --hidden 512``), one process per worker on 127.0.0.1, each
with its share of the cores (torch.set_num_threads); steps/s of the job (the slowest
worker's rate: every step is synchronous). Bandwidth: ``dist.all_reduce`` of float32
buffers of 4 KiB .. 64 MiB, bus bandwidth ``2 (n-1)/n * bytes / time`` in MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

KiB, MiB = 1 << 10, 1 << 20
SIZES = [4 * KiB << (2 * i) for i in range(8)]      # as benchmarks/allreduce_bw.py


def worker(rank, world, args, port, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        if args.bandwidth:
            queue.put((rank, bandwidth(dist, torch, world, args)))
        else:
            queue.put((rank, train(dist, torch, rank, args)))
    finally:
        dist.destroy_process_group()


def train(dist, torch, rank, args):
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512, bias=False), nn.ReLU(),
                          nn.Linear(512, 512, bias=False), nn.ReLU(),
                          nn.Linear(512, 10, bias=False))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(128, 784, generator=gen)
    y = torch.randint(0, 10, (128,), generator=gen)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    return args.steps / (time.perf_counter() - start)


def bandwidth(dist, torch, world, args):
    rows = {}
    for nbytes in SIZES:
        x = torch.ones(nbytes // 4)
        for _ in range(3):
            dist.all_reduce(x)
        times = []
        iters = max(2, min(50, int(64 * MiB / nbytes)))
        for _ in range(5):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            elapsed = torch.tensor([(time.perf_counter() - start) / iters])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            times.append(float(elapsed))
        t = statistics.median(times)
        rows[nbytes] = 2 * (world - 1) / world * nbytes / t / 1e6
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--bandwidth", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print("SKIPPED torch is not installed (pip install '.[bench]')")
        return
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.workers, args, port, queue))
             for r in range(args.workers)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    if args.bandwidth:
        result = {"framework": "torch-gloo", "workers": args.workers,
                  "bus_MBps": {str(k): v for k, v in results[0].items()}}
        text = "\n".join(f"{k // KiB:>8} KiB {v:9.0f} MB/s" for k, v in results[0].items())
    else:
        result = {"framework": "torch-ddp-gloo", "workers": args.workers,
                  "steps_per_s": min(results.values())}
        text = f"torch DDP gloo, {args.workers} workers: {result['steps_per_s']:.1f} steps/s"
    print(json.dumps(result) if args.json else text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
