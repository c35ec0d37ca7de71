"""A Session's plan over the cluster: place, partition, register remote pieces, run steps.

One ``DistributedPlan`` per (fetches, feeds) signature, like the local ``Plan``: the
remote pieces are registered once and then run by handle each step, so no graph travels
per step. The client's own piece runs here, inside the same step as the remote ones.
"""

from __future__ import annotations

from mpiflow import errors
from mpiflow.framework.device_spec import job_and_task
from mpiflow.framework.graph import Graph
from mpiflow.framework.graph_def import GRAPH_DEF_VERSION, import_graph_def
from mpiflow.ops.registry import registered_op_types
from mpiflow.runtime.executor import Plan, schedule
from mpiflow.runtime.partition import partition
from mpiflow.runtime.placement import Placer, print_placement
from mpiflow.runtime.resources import UNINITIALIZED_VALUE


class ClusterContext:
    """What a distributed session needs to know: the cluster, its own task, the service.

    ``cluster`` provides ``jobs``, ``num_tasks(job)``, ``task_indices(job)``,
    ``as_dict()`` and ``rank_of(job, task)`` (``mf.train.ClusterSpec`` does).
    """

    def __init__(self, service, cluster, job: str, task: int, config=None):
        self.service = service
        self.cluster = cluster
        self.job = job
        self.task = task
        self.config = config        # the Server's ConfigProto: sessions' default

    def rank_of(self, task) -> int:
        return self.cluster.rank_of(task[0], task[1])


class DistributedPlan:
    """Fetches and feeds of one signature, split over the cluster and registered."""

    def __init__(self, graph, fetch_tensors, target_ops, feed_tensors, ctx: ClusterContext,
                 placer: Placer):
        self.fetch_tensors = list(fetch_tensors)
        self.feed_tensors = list(feed_tensors)
        self._service = ctx.service
        fed = set(self.feed_tensors)
        order = schedule(graph, self.fetch_tensors, target_ops, fed)
        client = (ctx.job, ctx.task)
        chief = getattr(ctx.cluster, "chief_task", lambda: None)()
        self._task, self._chief = client, chief
        self._is_chief = chief is None or chief == client
        ranks = {}

        def rank_of(task):
            if task not in ranks:
                ranks[task] = ctx.rank_of(task)
                if task != client and ranks[task] == ctx.service.rank:
                    raise errors.PlacementError(
                        f"Task /job:{task[0]}/task:{task[1]} maps to this process (rank "
                        f"{ranks[task]}), which already runs /job:{client[0]}/task:"
                        f"{client[1]}: one MPI rank serves one task")
            return ranks[task]

        parts = partition(order, placer.task_of, self.feed_tensors, self.fetch_tensors,
                          client, rank_of, placer.device_of)
        self._pieces = [{"device": f"/job:{job}/replica:0/task:{task}",
                         "versions": {"producer": GRAPH_DEF_VERSION}, "node": nodes}
                        for (job, task), nodes in sorted(parts.nodes.items())]
        local_graph = Graph()
        import_graph_def({"node": parts.nodes.pop(client)}, name="", graph=local_graph,
                         known_op_types=set(registered_op_types()))
        self._local = Plan.from_order(
            local_graph, local_graph.get_operations(),
            [local_graph.get_tensor_by_name(n) for n in parts.fetch_names],
            [local_graph.get_tensor_by_name(n) for n in parts.feed_names], ctx.service.env)
        self.handles = ctx.service.register(
            {rank_of(task): nodes for task, nodes in parts.nodes.items()})

    def partition_graphs(self) -> list:
        """The piece of the step each task runs, one GraphDef dict per task."""
        return self._pieces

    def run(self, feed_values, timeout=None, trace=None):
        try:
            return self._service.run_step(self._local, feed_values, self.handles, timeout,
                                          trace)
        except errors.FailedPreconditionError as exc:
            if UNINITIALIZED_VALUE not in exc.message or self._is_chief:
                raise
            if self._on_this_task(exc.op):
                raise type(exc)(
                    f"{exc.message}. It lives on this task (/job:{self._task[0]}/task:"
                    f"{self._task[1]}), not on a ps: the chief does not initialize it; run "
                    "mf.local_variables_initializer() (a local variable) or its initializer "
                    "here", exc.op) from exc
            raise type(exc)(
                f"{exc.message}. This is /job:{self._task[0]}/task:{self._task[1]}, not the "
                f"chief (/job:{self._chief[0]}/task:{self._chief[1]}): the chief initializes "
                "or restores the variables on the ps, and the other workers must wait for "
                "it before their first step: open the session with "
                "mf.train.MonitoredTrainingSession(master, is_chief=False) (or a Supervisor, "
                "or mf.train.SessionManager().wait_for_session(master)), or call "
                "TrainingMode.initialize(sess, is_chief) on a plain Session", exc.op) from exc

    def _on_this_task(self, op) -> bool:
        """Whether ``op`` (a variable an error names) is placed on this client's task."""
        return job_and_task(getattr(op, "device", "")) == tuple(self._task)

    def close(self):
        self._service.unregister(self.handles)


def make_placer(graph, ctx: ClusterContext, config) -> Placer:
    return Placer(graph, ctx.cluster, ctx.job, ctx.task, config,
                  log=print_placement if config.log_device_placement else None,
                  who=ctx.service.describe(ctx.service.rank))


# -- targets: Session(target) finds the cluster of a Server created in this process --------

_TARGETS = {}


def register_target(target: str, ctx: ClusterContext) -> None:
    _TARGETS[target] = ctx


def resolve_target(target: str):
    """Return the ClusterContext for ``target`` ('' -> None: an in-process session).

    A TF1 script may pass a gRPC-style target of its own server; with exactly one server
    in this process, any non-empty target means that server.
    """
    if not target:
        return None
    if target in _TARGETS:
        return _TARGETS[target]
    if len(_TARGETS) == 1:
        return next(iter(_TARGETS.values()))
    known = sorted(_TARGETS) or ["none: create mf.train.Server(cluster) first"]
    raise errors.InvalidArgumentError(
        f"Session target {target!r} is not a server of this process (servers here: {known})")
