"""Server: this rank's place in the cluster (job, task) and its serving loop.

``Server(cluster)`` works out the job and task of this MPI rank from the cluster; its
``target`` opens a distributed ``Session``; ``join()`` serves the partitions other
ranks send here and returns once every rank that is not serving has left, so a ps task
exits by itself when training ends. All Servers of one process share one engine (the
rank service) on a private duplicate of ``MPI.COMM_WORLD``.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping

from mpiflow import errors, logger
from mpiflow.comm import arrival, launch_link
from mpiflow.comm.cluster import check_agreement
from mpiflow.runtime import interrupts
from mpiflow.runtime.distributed import ClusterContext, register_target
from mpiflow.runtime.process import rank_service
from mpiflow.runtime.session_options import ConfigProto
from mpiflow.train.cluster_spec import ClusterSpec


class _KeepServing:
    """What a serving rank does when asked to stop gracefully: go on until it is done."""

    silent = True       # it says "stopped" when its serving ends

    def request_stop(self) -> None:
        pass


_KEEP_SERVING = _KeepServing()


def name_roles(service, cluster) -> None:
    """Name every rank by its task in errors ("rank 2 (worker:1)") and this process's log
    lines by its own ("[worker:1 r2]")."""
    service.peers.role_names.update(
        {r: "{}:{}".format(*cluster.task_of_rank(r)) for r in range(service.size)})
    logger.set_role(*cluster.task_of_rank(service.rank), service.rank)
    launch_link.tell("name", name=service.describe_self())
    # Imported here, not with mpiflow: ``python -m mpiflow.supervise`` (every rank of
    # ``mpiflow launch``) would otherwise find the module already imported by the package
    # and print runpy's RuntimeWarning on every rank.
    from mpiflow import supervise  # noqa: PLC0415

    if supervise.STATUS_VARIABLE in os.environ:
        # The parent watching this rank (mpiflow launch runs every rank under one, and
        # mpiflow.run) names it so if a signal kills it: "[rank 2 (worker:1) on node3]".
        supervise.tell_parent(os.environ.pop(supervise.STATUS_VARIABLE),
                              service.describe_self())


def _join_job_group(service, cluster, job) -> None:
    """Give this rank the communicator of its job's ranks (collective over all ranks).

    Allreduce mode runs its collectives on the workers' group; the Split happens once per
    process, when the first Server is made (every rank makes one).
    """
    if job in service.groups:
        return
    jobs = sorted(cluster.jobs)
    arrival.meet(service.transport.comm, "Server (the job groups, MPI_Comm_split)",
                 describe=service.describe)
    comm = service.transport.comm.Split(jobs.index(job), service.rank)
    service.add_group(job, comm)


def _check_every_rank_agrees(service, cluster) -> None:
    """Stop every rank at once if the ranks worked out different clusters (collective)."""
    roles = [list(cluster.task_of_rank(r)) for r in range(cluster.num_ranks)]
    compared = json.dumps({"cluster": cluster.as_dict(), "roles by rank": roles},
                          sort_keys=True)
    env = ", ".join(f"{k}={os.environ.get(k) or 'unset'}"
                    for k in ("MPIFLOW_PS", "MPIFLOW_PS_POLICY"))
    check_agreement(service.transport.comm, compared, f"{cluster.as_dict()} ({env})",
                    "cluster")


# The protocols TF1 servers were built with: gRPC, and the contrib transports layered on
# it. mpiflow takes them so a TF1 script runs unchanged, and ignores them: MPI carries every
# task's traffic. TensorFlow refuses any other name (NotFoundError: no server factory).
KNOWN_PROTOCOLS = ("grpc", "grpc+verbs", "grpc+mpi", "grpc+gdr")


def _check_protocol(protocol) -> None:
    if protocol is not None and protocol not in KNOWN_PROTOCOLS:
        raise errors.NotFoundError(
            f"tf.train.Server: unknown protocol {protocol!r}: expected None or one of "
            f"{', '.join(repr(p) for p in KNOWN_PROTOCOLS)} (accepted and ignored: MPI "
            f"carries the traffic between tasks)")


class Server:
    """A TF1 ``tf.train.Server`` for the MPI rank this process is.

    Args:
        server_or_cluster_def: a ClusterSpec, a dict for one (``{job: [address, ...]}`` or
            the ``as_cluster_def()`` form), or another Server's ``server_def``.
        job_name, task_index: optional; each one given must match this rank's task (the
            launch decides it, so leaving ``task_index`` out is never ambiguous).
        protocol: None or a protocol TF1 knows (``"grpc"``, ``"grpc+verbs"``,
            ``"grpc+mpi"``, ``"grpc+gdr"``), kept in ``server_def`` and otherwise ignored:
            every task talks over MPI. Another name raises ``NotFoundError``, as in TF.
        config: an ``mf.ConfigProto`` used as the default for sessions on ``target``.
    """

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None,
                 config=None, start=True):
        definition = server_or_cluster_def
        if isinstance(definition, Mapping) and "cluster" in definition:   # a server_def
            job_name = definition.get("job_name") if job_name is None else job_name
            task_index = definition.get("task_index") if task_index is None else task_index
            protocol = definition.get("protocol") if protocol is None else protocol
            config = definition.get("default_session_config") if config is None else config
            definition = definition["cluster"]
        _check_protocol(protocol)
        cluster = definition if isinstance(definition, ClusterSpec) \
            else ClusterSpec(definition)
        service = rank_service()
        rank = service.rank
        if cluster.num_ranks != service.size:
            raise errors.InvalidArgumentError(
                f"Rank {rank}: the cluster has {cluster.num_ranks} tasks but the MPI job has "
                f"{service.size} ranks; one rank runs each task: {cluster.as_dict()}")
        _check_every_rank_agrees(service, cluster)
        job, task = cluster.task_of_rank(rank)
        if (job_name is not None and job_name != job) or \
                (task_index is not None and task_index != task):
            asked = ", ".join(f"{k}={v!r}" for k, v in (("job_name", job_name),
                                                         ("task_index", task_index))
                              if v is not None)
            raise errors.InvalidArgumentError(
                f"Rank {rank} runs /job:{job}/task:{task} in the launch layout, but the "
                f"script asked for {asked}: {cluster.as_dict()}")
        name_roles(service, cluster)
        _join_job_group(service, cluster, job)
        self._setup(service, cluster, job, task, config, protocol)

    def _setup(self, service, cluster, job, task, config, protocol=None):
        self._protocol = protocol
        self._cluster = cluster
        self._job = job
        self._task = task
        self._config = config
        self._service = service
        if config is not None and not isinstance(config, ConfigProto):
            raise errors.InvalidArgumentError(
                f"Server: config must be an mf.ConfigProto, got {type(config).__name__}")
        self._target = f"mpi://{socket.gethostname()}/{service.rank}"
        register_target(self._target, ClusterContext(service, cluster, job, task, config))

    @classmethod
    def create_local_server(cls, config=None, start=True) -> "Server":
        """Return a one-task server (job 'localhost') serving only this process."""
        server = cls.__new__(cls)
        service = rank_service()
        cluster = ClusterSpec({"localhost": [f"mpi://{socket.gethostname()}/{service.rank}"]})
        server._setup(service, cluster, "localhost", 0, config)
        return server

    @property
    def server_def(self) -> dict:
        """Return this server's definition, TensorFlow's ``ServerDef`` as a dict:
        ``cluster`` (``as_cluster_def()``), ``job_name``, ``task_index``, ``protocol``
        and ``default_session_config``; ``Server(server_def)`` takes it."""
        return {"cluster": self._cluster.as_cluster_def(), "job_name": self._job,
                "task_index": self._task, "protocol": self._protocol,
                "default_session_config": self._config}

    @property
    def target(self) -> str:
        return self._target

    @property
    def job_name(self) -> str:
        return self._job

    @property
    def task_index(self) -> int:
        return self._task

    @property
    def is_chief(self) -> bool:
        """True for task 0 of 'chief' (or of 'worker' when the cluster has no chief; of its
        own job when it has neither)."""
        return (self._job, self._task) == (self._cluster.chief_task() or (self._job, 0))

    @property
    def cluster_spec(self) -> ClusterSpec:
        return self._cluster

    @property
    def rank(self) -> int:
        return self._service.rank

    def start(self) -> None:
        """Servers serve from construction on; kept for TensorFlow compatibility."""

    def join(self) -> None:
        """Serve requests until every rank that is not serving has left the job.

        A graceful stop (SIGTERM) keeps it serving: the workers stop after their step and
        the chief's last checkpoint needs this rank."""
        interrupts.STOPPABLE.append(_KEEP_SERVING)
        try:
            self._service.join()
        finally:
            interrupts.STOPPABLE.remove(_KEEP_SERVING)
        interrupts.say_stopped("served until the workers were done")

    def __repr__(self):
        return f"<mf.train.Server /job:{self._job}/task:{self._task} rank {self.rank}>"
