"""Every collective case for one strategy, at any number of ranks; prints one summary line.

Usage: collectives_cases.py ALGORITHM [--no-large]     (ALGORITHM: mpi, ring, nccl or auto)
  --no-large   skip the 4 MiB allreduces (for runs with tiny ring chunks)

Inputs and expected values come from rank and size only. Each rank prints
``CASES {"rank", "algorithm", "cases", "failures"}``, or ``SKIP <reason>`` when the
strategy is not enabled here (nccl without a GPU). The cases run on two fresh
communicators in turn, so the lazy set-up (communicator duplicate, NCCL communicator)
runs twice.
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from mpiflow import backend
from mpiflow.comm.buckets import FusedAllreduce, TensorSpec
from mpiflow.comm.collectives import BY_NAME, get_collective, select
from mpiflow.errors import FailedPreconditionError
from mpiflow.framework import dtypes

SIZES = (0, 1, 1009)
LARGE = 1 << 20
BF16 = dtypes.bfloat16.np_dtype
# Tolerance of an average (a division, rounded to the dtype); sums are exact.
AVERAGE_TOL = {"float16": 2e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-12}


class Cases:
    def __init__(self, comm, algorithm, xp, large=True):
        self.comm, self.algorithm, self.xp, self.large = comm, algorithm, xp, large
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.count = 0
        self.failures = []

    def collective(self, like):
        return get_collective(self.algorithm, self.comm, like)

    def runs(self, dtype):
        """Return whether the strategy takes ``dtype`` (NCCL has no int16 type)."""
        return self.algorithm != "nccl" or BY_NAME["nccl"].enabled(
            self.comm, self.xp.zeros(1, dtype=dtype))[0]

    def expect(self, label, got, want, tol=0.0):
        self.count += 1
        got = backend.to_host(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append(f"{label}: got {got.dtype}{got.shape}, "
                                 f"expected {want.dtype}{want.shape}")
        elif tol:
            if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol):
                self.failures.append(f"{label}: values differ, e.g. {got.ravel()[:4]} vs "
                                     f"{want.ravel()[:4]}")
        elif not np.array_equal(got, want):
            bad = np.flatnonzero(got.ravel() != want.ravel())[:4]
            self.failures.append(f"{label}: values differ at {bad.tolist()}: "
                                 f"{got.ravel()[bad]} vs {want.ravel()[bad]}")

    def contribution(self, rank, n, dtype):
        """Rank ``rank``'s input: exact in every dtype, so sums do not depend on order."""
        base = np.arange(n) % 11
        if dtype == np.bool_:
            return (np.arange(n) % (self.size + 1)) == rank
        if dtype.kind == "u":
            return (base + rank).astype(dtype)
        if dtype.kind == "i":
            return (base - 5 + rank).astype(dtype)
        return ((base - 5) * 0.25 + rank).astype(dtype)

    def expected(self, n, dtype, op):
        parts = [self.contribution(k, n, dtype) for k in range(self.size)]
        if dtype == np.bool_:
            return np.logical_or.reduce(parts) if n else parts[0]
        total = np.sum([p.astype(np.float64) for p in parts], axis=0)
        return (total / self.size if op == "average" else total).astype(dtype)

    def allreduce(self):
        for dtype in [d.np_dtype for d in dtypes.ALL]:
            for n in SIZES:
                self.allreduce_one(dtype, n)
        for op in ("sum", "average") if self.large else ():
            self.allreduce_one(np.dtype(np.float32), LARGE, ops=(op,))
        # More dimensions, and a non-contiguous input.
        x = self.xp.asarray(self.contribution(self.rank, 7 * 13 * 3, np.dtype(np.float32)))
        want = self.expected(7 * 13 * 3, np.dtype(np.float32), "sum")
        c = self.collective(x)
        self.expect("allreduce 3-d", c.allreduce(x.reshape(7, 13, 3)), want.reshape(7, 13, 3))
        self.expect("allreduce transposed", c.allreduce(x.reshape(7, 13, 3).transpose(2, 0, 1)),
                    want.reshape(7, 13, 3).transpose(2, 0, 1))
        self.allreduce_in_place_strided()

    def allreduce_in_place_strided(self):
        """In place on a view that is not contiguous: the sum lands in the view (blocking
        and async, sum and average) and the elements between its strides stay as they
        were."""
        f32, n = np.dtype(np.float32), 7 * 13
        for op, how in (("sum", "blocking"), ("sum", "async"), ("average", "blocking")):
            mine = self.contribution(self.rank, n, f32)
            base = self.xp.asarray(np.stack([mine, np.full(n, -7.0, f32)], axis=1))
            view = base[:, 0]
            c = self.collective(view)
            name = f"strided/{op}/{how}"
            got = c.allreduce(view, op, out=view, name=name) if how == "blocking" else \
                c.allreduce_async(view, op, out=view, name=name).wait()
            label = f"allreduce {op} in place on a strided view ({how})"
            tol = AVERAGE_TOL["float32"] if op == "average" else 0.0
            self.expect(label, view, self.expected(n, f32, op), tol)
            self.expect(label + ", elements between untouched", base[:, 1],
                        np.full(n, -7.0, f32))
            if got is not view:
                self.failures.append(f"{label}: the result is not the view")

    def allreduce_one(self, dtype, n, ops=None):
        if not self.runs(dtype):
            return
        ops = ops or (("sum", "average") if dtypes.as_dtype(dtype).is_floating else ("sum",))
        xp = self.xp
        for op in ops:
            want = self.expected(n, dtype, op)
            tol = AVERAGE_TOL[dtype.name] if op == "average" else 0.0
            mine = xp.asarray(self.contribution(self.rank, n, dtype))
            c = self.collective(mine)
            label = f"allreduce {op} {dtype.name}[{n}]"
            self.expect(label + " new output", c.allreduce(mine, op), want, tol)
            out = xp.empty_like(mine)
            got = c.allreduce(mine, op, out=out)
            self.expect(label + " given output", out, want, tol)
            self.expect(label + " input untouched", mine,
                        self.contribution(self.rank, n, dtype))
            if got is not out:
                self.failures.append(f"{label}: result is not the given out")
            got = c.allreduce(mine, op, out=mine, name=f"inplace/{dtype.name}/{n}")
            self.expect(label + " in place", mine, want, tol)

    def broadcast(self):
        xp = self.xp
        for dtype in (np.float32, np.float16, BF16, np.int64, np.bool_, np.uint8):
            for n in (0, 1009) if self.runs(dtype) else ():
                for root in range(self.size):
                    source = self.contribution(root, n, np.dtype(dtype))
                    mine = xp.asarray(source if self.rank == root else
                                      np.zeros(n, dtype=dtype))
                    got = self.collective(mine).broadcast(mine, root=root)
                    self.expect(f"broadcast {np.dtype(dtype).name}[{n}] from {root}", got, source)
        base = np.arange(24, dtype=np.float64).reshape(4, 6)
        mine = xp.asarray(base if self.rank == 0 else np.zeros((4, 6)))
        view = mine.T                                   # non-contiguous: copied back
        self.collective(view).broadcast(view, root=0)
        self.expect("broadcast into a transposed view", mine, base)

    def allgather(self):
        xp = self.xp
        def part(r, dtype):
            rows = r % 3                                # rank 0 gives no row
            return (np.arange(rows * 5).reshape(rows, 5) + 100 * r).astype(dtype)

        for dtype in (np.float32, np.int16, np.bool_, np.float16, BF16):
            if not self.runs(dtype):
                continue
            mine = xp.asarray(part(self.rank, dtype))
            got = self.collective(mine).allgather(mine, name=f"gather/{np.dtype(dtype).name}")
            want = np.concatenate([part(r, dtype) for r in range(self.size)])
            self.expect(f"allgather {np.dtype(dtype).name} uneven rows", got, want)
        mine = xp.asarray(np.full(self.rank + 1, self.rank, dtype=np.int64))
        want = np.concatenate([np.full(r + 1, r, dtype=np.int64) for r in range(self.size)])
        self.expect("allgather 1-d", self.collective(mine).allgather(mine), want)

    def handles(self):
        """Handles driven by test() alone, several in flight, tested in reverse order."""
        xp = self.xp
        dtype = np.dtype(np.float32)
        mine = xp.asarray(self.contribution(self.rank, 1 << 18, dtype))
        c = self.collective(mine)
        handle = c.allreduce_async(mine, name="driven-by-test")
        polls = 0
        while not handle.test():
            polls += 1
        self.expect("handle driven by test() alone", handle.result,
                    self.expected(1 << 18, dtype, "sum"))
        sizes = [1 << 16, 3, 1 << 17, 0, 1009]
        inputs = [xp.asarray(self.contribution(self.rank, n, dtype)) for n in sizes]
        started = [self.collective(x).allreduce_async(x, "average", name=f"inflight/{i}")
                   for i, x in enumerate(inputs)]
        try:
            started[0].result if not started[0].test() else None
        except FailedPreconditionError:
            pass
        else:
            self.count += 1           # done already: nothing to check
        for i in reversed(range(len(sizes))):
            self.expect(f"in flight #{i} waited in reverse order", started[i].wait(),
                        self.expected(sizes[i], dtype, "average"), 1e-6)

    def waited_in_another_order_on_each_rank(self):
        """Operations of several steps (allgathers: sizes, then rows; the ring's many
        exchanges) whose handles each rank waits in its own order: every rank still
        starts the collectives underneath in issue order, and none stalls waiting on an
        operation the others have not moved on."""
        xp = self.xp
        dtype = np.dtype(np.float32)
        handles = []
        for i, rows in enumerate((2, 3, 1)):
            mine = xp.asarray(np.full((rows, 2), 10 * i + self.rank, dtype))
            want = np.concatenate([np.full((rows, 2), 10 * i + r, dtype)
                                   for r in range(self.size)])
            handles.append((f"allgather #{i}", self.collective(mine).allgather_async(
                mine, name=f"order/gather/{i}"), want))
            x = xp.asarray(self.contribution(self.rank, 5000 + i, dtype))
            handles.append((f"allreduce #{i}", self.collective(x).allreduce_async(
                x, name=f"order/reduce/{i}"), self.expected(5000 + i, dtype, "sum")))
        order = list(range(len(handles)))
        np.random.default_rng(self.rank).shuffle(order)
        for k in order:
            label, handle, want = handles[k]
            self.expect(f"{label} waited in rank {self.rank}'s own order", handle.wait(),
                        want)

    def late_rank(self):
        """Blocking calls that outlast their first quick polls (the last rank comes 20 ms
        late): one goes on as a handle while at its check, one (unchecked) in its data
        phase; an async call and a blocking one issued right after it still match the
        other ranks' calls in order."""
        xp = self.xp
        dtype = np.dtype(np.float32)
        late = self.rank == self.size - 1
        for n, check in ((1009, True), (1 << 16, False)):
            mine = xp.asarray(self.contribution(self.rank, n, dtype))
            if late:
                time.sleep(0.02)
            got = self.collective(mine).allreduce(mine, name=f"late/{check}", check=check)
            self.expect(f"late rank, check={check}", got, self.expected(n, dtype, "sum"))
        first = xp.asarray(self.contribution(self.rank, 1 << 16, dtype))
        second = xp.asarray(self.contribution(self.rank, 7, dtype))
        if late:
            time.sleep(0.02)
        handle = self.collective(first).allreduce_async(first, name="late/async")
        got = self.collective(second).allreduce(second, "average", name="late/after")
        self.expect("blocking call behind a late async one", got,
                    self.expected(7, dtype, "average"), 1e-6)
        self.expect("the late async one", handle.wait(),
                    self.expected(1 << 16, dtype, "sum"))

    def fusion(self):
        xp = self.xp
        if self.algorithm == "nccl":
            return   # fusion of device buffers: covered by the GPU script
        specs = [TensorSpec(f"g/{i:02d}", np.float32, 4 * (10 + i)) for i in range(30)]
        specs += [TensorSpec("g/int", np.int32, 4 * 7), TensorSpec("g/big", np.float32, 4 * 4096)]
        specs += [TensorSpec(f"g/bf16/{i}", BF16, 2 * (5 + i)) for i in range(3)]
        fused = FusedAllreduce(self.comm, specs, algorithm=self.algorithm, op="sum",
                               threshold_bytes=1024)

        def count(s):
            return s.nbytes // np.dtype(s.dtype).itemsize
        for step in range(2):
            arrays = {s.name: xp.asarray(self.contribution(self.rank, count(s),
                                                           np.dtype(s.dtype)))
                      for s in specs}
            order = list(arrays)
            if self.rank % 2:
                order.reverse()        # buckets still start in plan order on every rank
            for name in order:
                fused.add(name, arrays[name])
            results = fused.wait_all()
            for s in specs:
                self.expect(f"fused {s.name} step {step}", results[s.name],
                            self.expected(count(s), np.dtype(s.dtype), "sum"))


def main():
    algorithm = sys.argv[1]
    world = MPI.COMM_WORLD
    xp = np
    if algorithm == "nccl":
        nccl, reason = backend.nccl_module()
        if nccl is None:
            print(f"SKIP {reason}", flush=True)
            return
        xp = backend.array_module("/device:GPU:0")
        devices = xp.cuda.runtime.getDeviceCount()
        if devices < world.Get_size():
            # NCCL refuses two ranks of one communicator on the same GPU.
            print(f"SKIP NCCL needs a GPU per rank: {devices} GPU(s) for "
                  f"{world.Get_size()} ranks", flush=True)
            return
        xp.cuda.Device(world.Get_rank()).use()
    select(algorithm, world, xp.zeros(1))
    total, failures = 0, []
    for attempt in range(2):
        comm = world.Dup()
        cases = Cases(comm, algorithm, xp, large="--no-large" not in sys.argv)
        for case in (cases.allreduce, cases.broadcast, cases.allgather, cases.handles,
                     cases.waited_in_another_order_on_each_rank, cases.late_rank,
                     cases.fusion):
            case()
        total += cases.count
        failures += [f"comm #{attempt}: {f}" for f in cases.failures]
    line = {"rank": world.Get_rank(), "size": world.Get_size(), "algorithm": algorithm,
            "cases": total, "failures": failures[:20]}
    sys.stdout.write("CASES " + json.dumps(line) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
