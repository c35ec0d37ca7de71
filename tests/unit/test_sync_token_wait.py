"""SyncTokenWait, the wait of a synchronous worker for the chief's release of its step:
it waits while the step can still be made, says who left when it cannot, and in a
graceful stop (SIGTERM) lets a worker go that waits for a step the others, who stopped
after their own, will never join."""

import numpy as np
import pytest

import mpiflow as mf
from mpiflow.ops.registry import Wait, apply_op, get_op_def
from mpiflow.runtime.kernel_env import KernelEnv
from mpiflow.runtime.plan_compiler import KernelContext
from mpiflow.runtime.resources import ResourceStore


class ThreeWorkers(KernelEnv):
    """A ps's view of a job of 3 workers: who left, and whether the job is stopping."""

    def __init__(self, left=(), stopping=False):
        super().__init__(ResourceStore())
        self.left, self.stopping = list(left), stopping

    def departed(self, job):
        return [(task, f"rank {task + 1} (worker:{task}) (its script ended, 0 s ago)")
                for task in self.left] if job == "worker" else []

    def tasks_of(self, job):
        return 3 if job == "worker" else None

    def stopping_gracefully(self):
        return self.stopping


def wait_for_step(env, local_step, released=-1, replicas=2):
    op = apply_op("SyncTokenWait", [mf.constant(np.int64(local_step))],
                  {"shared_name": "tokens", "replicas": replicas})
    ctx = KernelContext(op, np, env)
    kernel = get_op_def("SyncTokenWait")
    kernel.prepare(ctx)
    ctx.tokens.step = released
    return kernel.forward(np, ctx, np.int64(local_step))


def test_a_released_step_returns_at_once():
    assert wait_for_step(ThreeWorkers(), local_step=4, released=5) == 5


def test_a_step_that_can_still_be_made_waits():
    assert isinstance(wait_for_step(ThreeWorkers(left=[2]), local_step=5, released=5), Wait)


def test_a_step_too_few_workers_are_left_for_names_who_left():
    with pytest.raises(mf.errors.UnavailableError,
                       match=r"needs 2 worker\(s\), but only 1 of 3 are left: rank 2 "):
        wait_for_step(ThreeWorkers(left=[1, 2]), local_step=5, released=5)


def test_in_a_graceful_stop_a_step_nobody_will_join_lets_its_worker_go_unapplied():
    # The others stopped after their own step: this worker's gradient is not applied,
    # the step it returns is the last one released, and its train op ends.
    env = ThreeWorkers(left=[1, 2], stopping=True)
    assert wait_for_step(env, local_step=5, released=5) == 5
    env = ThreeWorkers(left=[0], stopping=True)         # the chief itself stopped
    assert wait_for_step(env, local_step=5, released=5, replicas=1) == 5


def test_in_a_graceful_stop_a_step_that_can_still_be_made_still_waits():
    assert isinstance(wait_for_step(ThreeWorkers(left=[2], stopping=True), local_step=5,
                                    released=5), Wait)
