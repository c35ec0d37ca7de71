"""ClusterSpec: the jobs and tasks of a training cluster, as TensorFlow's, plus MPI ranks.

Owns the job -> task -> address description (TensorFlow's ``tf.train.ClusterSpec``
behaviour) and the mapping between tasks and MPI ranks. ``ClusterSpec.from_mpi`` builds
one from the running MPI job through ``mpiflow.comm.cluster``; the role policies and the
gathering of the layout live there, not here.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Mapping

from mpiflow import config as config_lib
from mpiflow import errors
from mpiflow.comm.cluster import Layout, Role, agree_on_roles

if TYPE_CHECKING:
    from mpi4py import MPI

# Jobs that take the lowest ranks, in this order, in a cluster not made from MPI; the
# other jobs follow in sorted order. ps first matches from_mpi's "block" policy.
RANK_ORDER = ("ps", "chief", "worker")


class ClusterSpec:
    """The jobs of a cluster, each a set of tasks with an address.

    Built from ``{job: [address, ...]}``, from ``{job: {task_index: address}}`` (sparse
    tasks), from another ClusterSpec, or from the MPI job with ``ClusterSpec.from_mpi``.

    Every task also runs on one MPI rank (``rank_of``, ``task_of_rank``). From MPI that is
    the rank the task was assigned to. Otherwise tasks take ranks 0, 1, ... in job order
    ``ps``, ``chief``, ``worker``, then the other jobs sorted by name, each job's tasks
    by index (holes of sparse jobs take no rank).

    Attributes:
        layout: the ``mpiflow.comm.cluster.Layout`` the cluster was made from, or None.
    """

    __hash__ = None  # equal to dicts that describe the same cluster, as TensorFlow's

    def __init__(self, cluster: ClusterSpec | Mapping[str, Any]):
        """Build a ClusterSpec from a dict of jobs (or the ``as_cluster_def()`` form of one)
        or from another ClusterSpec.

        Raises:
            InvalidArgumentError: ``cluster`` is neither; a job name, task index or address
                has the wrong type; two job names are the same.
        """
        self.layout: Layout | None = None
        if isinstance(cluster, ClusterSpec):
            self._jobs = {job: dict(tasks) for job, tasks in cluster._jobs.items()}
            self._set_ranks(cluster._by_rank)
            self.layout = cluster.layout
            return
        if not isinstance(cluster, Mapping):
            raise errors.op_error(
                errors.InvalidArgumentError, "Bad cluster for ClusterSpec",
                expected="a dict mapping job names to lists of addresses or to dicts "
                         "{task_index: address}, or a ClusterSpec",
                got=f"{type(cluster).__name__} {cluster!r}")
        if is_cluster_def(cluster):     # as TensorFlow's ClusterSpec takes a ClusterDef
            cluster = _jobs_of_cluster_def(cluster)
        self._jobs: dict[str, dict[int, str]] = {}
        for name, tasks in cluster.items():
            job = _job_name(name)
            if job in self._jobs:
                raise errors.op_error(errors.InvalidArgumentError,
                                      f"Duplicate job name {job!r} in cluster",
                                      expected="each job once", got=f"{name!r} twice")
            self._jobs[job] = _job_tasks(job, tasks)
        launch = _LAUNCH[0]
        if launch is not None and set(self._jobs) & set(launch._jobs):
            self._adopt_launch_ranks(launch)
        else:
            self._set_ranks(_ranks_in_job_order(self._jobs))

    def _adopt_launch_ranks(self, launch: ClusterSpec) -> None:
        """Under ``python -m mpiflow.run``: run each task on the rank the launch gave it.

        A TF1 script builds its cluster from host:port flags; what ties a task to a rank is
        its job and index, so the shapes must agree (the addresses may be the script's own).
        """
        shape = {job: sorted(tasks) for job, tasks in self._jobs.items()}
        launched = {job: sorted(tasks) for job, tasks in launch._jobs.items()}
        if shape != launched:
            raise errors.InvalidArgumentError(
                f"The script's cluster does not match the launch: the script has "
                f"{_describe_shape(shape)} ({self.as_dict()}), but mpiflow.run launched "
                f"{_describe_shape(launched)} ({launch.as_dict()}). Build the cluster from "
                "the --ps_hosts/--worker_hosts flags (or TF_CONFIG) mpiflow.run passes, or "
                "launch as many ranks (mpiexec -n) and ps (mpiflow.run --ps) as the script "
                "expects")
        self._set_ranks(launch._by_rank)
        self.layout = launch.layout

    @classmethod
    def from_cluster_def(cls, cluster_def: Mapping[str, Any]) -> ClusterSpec:
        """Build a ClusterSpec from the dict ``as_cluster_def`` returns.

        Raises:
            InvalidArgumentError: the dict is not shaped like ``{"job": [{"name", "tasks"}]}``
                or names a job twice.
        """
        entries = cluster_def.get("job") if isinstance(cluster_def, Mapping) else None
        if not isinstance(entries, (list, tuple)) or not all(
                isinstance(e, Mapping) and "name" in e for e in entries):
            raise errors.op_error(
                errors.InvalidArgumentError, "Bad cluster def",
                expected='{"job": [{"name": NAME, "tasks": {INDEX: ADDRESS}}, ...]}',
                got=repr(cluster_def))
        return cls(_jobs_of_cluster_def(cluster_def))

    @classmethod
    def from_mpi(cls, ps: int | None = None, policy: str | None = None,
                 comm: MPI.Intracomm | None = None,
                 config: config_lib.Config | None = None) -> ClusterSpec:
        """Make the cluster of the running MPI job; collective over ``comm``.

        Task addresses read ``"mpi://<host>/<rank>"``. A job with no ps has no "ps" job.

        Args:
            ps: number of ps tasks; None takes MPIFLOW_PS, and when that is unset 1 ps if
                the job has 2 or more ranks, else 0 (a single rank is one worker).
            policy: which ranks become ps, ``"block"`` (ranks 0..ps-1) or ``"spread"``
                (one per node first); None takes MPIFLOW_PS_POLICY (default "block").
            comm: the communicator whose ranks form the cluster (default COMM_WORLD; it is
                only used for the layout's collectives, never kept).
            config: where the MPIFLOW_* variables are read (default: the environment).

        Raises:
            InvalidArgumentError: ``ps`` leaves no worker, is negative, or ``policy`` is
                unknown; the message names the layout.
            DeadlineExceededError: a rank of ``comm`` did not join within MPIFLOW_TIMEOUT.
        """
        if comm is None:
            from mpiflow.runtime.process import start_mpi

            comm = start_mpi().COMM_WORLD
        layout = Layout.from_comm(comm, config=config)
        return cls._from_roles(layout, agree_on_roles(comm, layout, ps, policy, config))

    @classmethod
    def from_layout(cls, layout: Layout, ps: int | None = None, policy: str | None = None,
                    config: config_lib.Config | None = None) -> ClusterSpec:
        """Make the cluster of ranks laid out as ``layout`` (``from_mpi`` without MPI)."""
        return cls._from_roles(layout, layout.assign_roles(ps, policy, config))

    @classmethod
    def _from_roles(cls, layout: Layout, roles) -> ClusterSpec:
        jobs: dict[str, dict[int, str]] = {}
        for rank, (job, task) in enumerate(roles):
            jobs.setdefault(job, {})[task] = f"mpi://{layout.hosts[rank]}/{rank}"
        spec = cls({job: jobs[job] for job in sorted(jobs)})
        spec._set_ranks(roles)
        spec.layout = layout
        return spec

    def _set_ranks(self, by_rank) -> None:
        self._by_rank = tuple(Role(*role) for role in by_rank)
        self._ranks = {role: rank for rank, role in enumerate(self._by_rank)}

    @property
    def jobs(self) -> list[str]:
        """Return the job names in the order the cluster was given them (TensorFlow's)."""
        return list(self._jobs)

    @property
    def num_ranks(self) -> int:
        """Return the number of ranks the cluster's tasks run on (one per task)."""
        return len(self._by_rank)

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """Return ``{job: [address, ...]}``, a job as ``{task_index: address}`` if sparse."""
        result: dict[str, list[str] | dict[int, str]] = {}
        for job in self.jobs:
            indices = self.task_indices(job)
            if indices and indices[-1] + 1 == len(indices):
                result[job] = self.job_tasks(job)
            else:
                result[job] = {i: self._jobs[job][i] for i in indices}
        return result

    def as_cluster_def(self) -> dict[str, list[dict[str, Any]]]:
        """Return ``{"job": [{"name": job, "tasks": {index: address}}, ...]}``, jobs sorted
        (as TensorFlow's ClusterDef).

        The plain-dict form of TensorFlow's ``ClusterDef``; ``from_cluster_def`` reads it.
        """
        return {"job": [{"name": job, "tasks": dict(sorted(self._jobs[job].items()))}
                        for job in sorted(self._jobs)]}

    def chief_task(self) -> tuple[str, int] | None:
        """Return the chief's (job, task): task 0 of 'chief', else of 'worker' (None when
        the cluster has neither)."""
        for job in ("chief", "worker"):
            if job in self._jobs:
                return job, 0
        return None

    def num_tasks(self, job_name: str) -> int:
        """Return the number of tasks of ``job_name``."""
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """Return the task indices of ``job_name``, sorted."""
        return sorted(self._job(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        """Return the address of task ``task_index`` of ``job_name``."""
        return self._job(job_name)[self._task(job_name, task_index)]

    def job_tasks(self, job_name: str) -> list[str | None]:
        """Return the addresses of ``job_name`` by task index, None where a task is missing."""
        tasks = self._job(job_name)
        result: list[str | None] = [None] * (max(tasks) + 1 if tasks else 0)
        for index, address in tasks.items():
            result[index] = address
        return result

    def rank_of(self, job_name: str, task_index: int) -> int:
        """Return the MPI rank that runs task ``task_index`` of ``job_name``."""
        return self._ranks[Role(job_name, self._task(job_name, task_index))]

    def task_of_rank(self, rank: int) -> Role:
        """Return the ``(job, task_index)`` that MPI rank ``rank`` runs."""
        try:
            index = operator.index(rank)
        except TypeError:
            index = -1
        if 0 <= index < self.num_ranks:
            return self._by_rank[index]
        raise errors.op_error(
            errors.InvalidArgumentError, f"No rank {rank!r} in {self!r}",
            expected=f"a rank in [0, {self.num_ranks})", got=repr(rank))

    def _job(self, job_name: str) -> dict[int, str]:
        try:
            return self._jobs[job_name]
        except (KeyError, TypeError):
            listed = ", ".join(repr(j) for j in self.jobs) or "(no jobs)"
            raise errors.op_error(
                errors.InvalidArgumentError, f"No job {job_name!r} in the cluster",
                expected=f"one of {listed}", got=repr(job_name)) from None

    def _task(self, job_name: str, task_index: int) -> int:
        tasks = self._job(job_name)
        try:
            index = operator.index(task_index)
        except TypeError:
            index = None
        if index in tasks:
            return index
        indices = sorted(tasks)
        if indices and indices[-1] + 1 == len(indices):
            expected = f"a task index in [0, {len(indices)})"
        else:
            expected = f"one of the task indices {indices}"
        raise errors.op_error(
            errors.InvalidArgumentError,
            f"No task {task_index!r} in job {job_name!r} ({len(indices)} tasks)",
            expected=expected, got=repr(task_index))

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            try:
                other = ClusterSpec(other)
            except errors.InvalidArgumentError:
                return False
        if not isinstance(other, ClusterSpec):
            return NotImplemented
        return self._jobs == other._jobs

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __repr__(self) -> str:
        items = ", ".join(f"{job!r}: {tasks!r}" for job, tasks in self.as_dict().items())
        return "ClusterSpec({" + items + "})"


# The cluster ``python -m mpiflow.run`` launched, if it did (see ``set_launch_cluster``).
_LAUNCH: list[ClusterSpec | None] = [None]


def set_launch_cluster(cluster: ClusterSpec | None) -> None:
    """Make ``cluster`` (from the launch layout) the one that clusters built from address
    lists are mapped onto: their tasks run on the ranks it gave them. None forgets it."""
    _LAUNCH[0] = cluster


def _describe_shape(shape: dict[str, list[int]]) -> str:
    return ", ".join(f"{len(tasks)} {job}" for job, tasks in sorted(shape.items())) or \
        "no tasks"


def is_cluster_def(cluster: Any) -> bool:
    """Whether ``cluster`` is a non-empty ``as_cluster_def()`` dict. A job named "job" of
    a plain dict has addresses (strings), never dicts, so the two cannot be confused."""
    entries = cluster.get("job") if isinstance(cluster, Mapping) and len(cluster) == 1 \
        else None
    return isinstance(entries, (list, tuple)) and bool(entries) and all(
        isinstance(e, Mapping) and "name" in e for e in entries)


def _jobs_of_cluster_def(cluster_def: Mapping[str, Any]) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    for entry in cluster_def["job"]:
        job = _job_name(entry["name"])
        if job in jobs:
            raise errors.op_error(errors.InvalidArgumentError,
                                  f"Duplicate job name {job!r} in cluster def",
                                  expected="each job once", got=f"{job!r} twice")
        jobs[job] = entry.get("tasks", {})
    return jobs


def _job_name(name: Any) -> str:
    if isinstance(name, bytes):
        name = name.decode("utf-8")
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise errors.op_error(
            errors.InvalidArgumentError, "Bad job name in cluster",
            expected="a non-empty string without '/' or surrounding spaces", got=repr(name))
    return name


def _job_tasks(job: str, tasks: Any) -> dict[int, str]:
    if isinstance(tasks, (list, tuple)):
        items = list(enumerate(tasks))
    elif isinstance(tasks, Mapping):
        items = list(tasks.items())
    else:
        raise errors.op_error(
            errors.InvalidArgumentError, f"Bad tasks for job {job!r}",
            expected="a list of addresses or a dict {task_index: address}",
            got=f"{type(tasks).__name__} {tasks!r}")
    result: dict[int, str] = {}
    for index, address in items:
        task = _task_index(job, index)
        if task in result:
            raise errors.op_error(errors.InvalidArgumentError,
                                  f"Duplicate task {task} in job {job!r}",
                                  expected="each task index once", got=f"{index!r} twice")
        if isinstance(address, bytes):
            address = address.decode("utf-8")
        if not isinstance(address, str):
            raise errors.op_error(
                errors.InvalidArgumentError, f"Bad address of task {task} in job {job!r}",
                expected="a string", got=f"{type(address).__name__} {address!r}")
        result[task] = address
    return result


def _task_index(job: str, index: Any) -> int:
    # TensorFlow takes int(key); accept ints and digit strings ("1" from a JSON config).
    if isinstance(index, str) and index.isdigit():
        return int(index)
    if not isinstance(index, bool):
        try:
            value = operator.index(index)
        except TypeError:
            value = -1
        if value >= 0:
            return value
    raise errors.op_error(errors.InvalidArgumentError, f"Bad task index in job {job!r}",
                          expected="an int >= 0", got=repr(index))


def _ranks_in_job_order(jobs: dict[str, dict[int, str]]) -> list[Role]:
    order = [j for j in RANK_ORDER if j in jobs] + sorted(j for j in jobs if j not in RANK_ORDER)
    return [Role(job, task) for job in order for task in sorted(jobs[job])]
