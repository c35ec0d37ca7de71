"""Cluster layout of an MPI job: hosts, nodes, local ranks, and which ranks become ps.

Owns ``Layout`` (where every rank of a communicator runs) and the role policies that turn a
layout into ps/worker tasks. The role logic is pure (``roles_for`` over a list of host
names) so it is tested without MPI; only ``Layout.from_comm`` talks to MPI, with
buffer-based collectives (no pickle). Imports mpi4py, numpy and mpiflow.errors/config only;
it knows nothing of graphs or of ``ClusterSpec``.
"""

from __future__ import annotations

import hashlib
import os

from typing import TYPE_CHECKING, Callable, Hashable, NamedTuple, Sequence

import numpy as np

from mpiflow import config as config_lib
from mpiflow import errors
from mpiflow.comm import arrival
from mpiflow.comm.backoff import Backoff, poll_until

if TYPE_CHECKING:
    from mpi4py import MPI


class Role(NamedTuple):
    """The task one rank runs: its job name and task index."""

    job: str
    task_index: int


def node_indices(nodes: Sequence[Hashable]) -> list[int]:
    """Return the node index of every rank; nodes are numbered by their first rank.

    Args:
        nodes: one node key per rank (a host name, or anything hashable that tells the
            nodes apart).
    """
    first_seen: dict[Hashable, int] = {}
    return [first_seen.setdefault(key, len(first_seen)) for key in nodes]


def local_ranks(nodes: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """Return ``(local_rank, local_size)`` lists: each rank's place among its node's ranks."""
    counts: dict[Hashable, int] = {}
    ranks = []
    for key in nodes:
        ranks.append(counts.get(key, 0))
        counts[key] = ranks[-1] + 1
    return ranks, [counts[key] for key in nodes]


def _block_ps(nodes: list[int], num_ps: int) -> list[int]:
    return list(range(num_ps))


def _spread_ps(nodes: list[int], num_ps: int) -> list[int]:
    # Round r takes the r-th lowest rank of every node (nodes in order) that has one, so ps
    # land on as many nodes as possible before any node gets a second.
    members: dict[int, list[int]] = {}
    for rank, node in enumerate(nodes):
        members.setdefault(node, []).append(rank)
    order = []
    for depth in range(max(len(m) for m in members.values())):
        order.extend(m[depth] for m in members.values() if depth < len(m))
    return order[:num_ps]


# policy name -> function(node index per rank, num_ps) -> ps ranks in ps task order
POLICIES: dict[str, Callable[[list[int], int], list[int]]] = {
    "block": _block_ps,
    "spread": _spread_ps,
}


def describe_layout(nodes: Sequence[Hashable], limit: int = 4) -> str:
    """Return e.g. ``"4 ranks on 2 nodes (a: ranks 0,2; b: ranks 1,3)"`` for messages."""
    members: dict[Hashable, list[int]] = {}
    for rank, key in enumerate(nodes):
        members.setdefault(key, []).append(rank)
    parts = [f"{key}: ranks {rank_ranges(ranks)}"
             for key, ranks in list(members.items())[:limit]]
    if len(members) > limit:
        parts.append(f"{len(members) - limit} more nodes")
    return f"{_count(len(nodes), 'rank')} on {_count(len(members), 'node')} ({'; '.join(parts)})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def chief_role(roles) -> str:
    """The chief's role among ``roles`` ("job:task"): task 0 of "chief", else of "worker"."""
    return "chief:0" if "chief:0" in roles else "worker:0"


def may_be_left_behind(role: str, roles, chief_can_move: bool) -> bool:
    """Whether an elastic job goes on without the rank of ``role`` among ``roles``: any
    worker but the chief, and the chief too once its duties can move."""
    return role.partition(":")[0] == "worker" and \
        (chief_can_move or role != chief_role(set(roles)))


def rank_ranges(ranks) -> str:
    """Return ranks as compact ranges: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def default_num_ps(size: int) -> int:
    """Return the number of ps used when neither the caller nor MPIFLOW_PS says.

    One ps when the job has 2 or more ranks (the smallest ps/worker cluster), else none, so
    a single-rank job is one worker that trains alone.
    """
    return 1 if size >= 2 else 0


def roles_for(hosts: Sequence[Hashable], num_ps: int, policy: str = "block") -> list[Role]:
    """Return the ``Role`` of every rank of a job whose ranks run on ``hosts``.

    Args:
        hosts: one entry per rank, equal for ranks that share a node.
        num_ps: how many ranks become ps tasks; the rest are workers.
        policy: ``"block"``: ranks 0..num_ps-1 are ps; ``"spread"``: the lowest rank of
            every node (nodes in order), then the second-lowest of every node, and so on.
            Either way workers are the remaining ranks in rank order, and ps task i is the
            i-th rank the policy picked.

    Raises:
        InvalidArgumentError: unknown policy, ``num_ps < 0``, or no rank left for a worker;
            the message names the layout.
    """
    size = len(hosts)
    if policy not in POLICIES:
        raise errors.op_error(
            errors.InvalidArgumentError,
            f"Unknown ps policy {policy!r} for {describe_layout(hosts)}",
            expected="one of " + ", ".join(repr(p) for p in POLICIES), got=repr(policy))
    if isinstance(num_ps, bool) or not isinstance(num_ps, (int, np.integer)) or num_ps < 0:
        raise errors.op_error(
            errors.InvalidArgumentError,
            f"Bad number of ps for {describe_layout(hosts)}",
            expected=f"an int in [0, {size})", got=repr(num_ps))
    if num_ps >= size:
        raise errors.op_error(
            errors.InvalidArgumentError,
            f"Cannot assign roles, no worker left: {size} ranks, {num_ps} ps "
            f"(policy {policy!r}, {describe_layout(hosts)})",
            expected=f"fewer ps than ranks (at most {size - 1})", got=f"{num_ps} ps")
    ps_ranks = POLICIES[policy](node_indices(hosts), int(num_ps))
    roles: list[Role | None] = [None] * size
    for task, rank in enumerate(ps_ranks):
        roles[rank] = Role("ps", task)
    workers = [rank for rank in range(size) if roles[rank] is None]
    for task, rank in enumerate(workers):
        roles[rank] = Role("worker", task)
    return roles


# The launchers' variables for a process's rank and for the number of processes they
# started (the rank variables are those of ``mpiflow.logger``): MPICH/Hydra and srun's
# PMI, Open MPI, PMIx (no size), and srun's own (a job step's, not a batch script's).
LAUNCH_SIZE_VARIABLES = (("PMI_RANK", "PMI_SIZE"),
                         ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                         ("PMIX_RANK", None),
                         ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"))


def launched_size(environ=None) -> tuple[str, str, int] | None:
    """``(rank variable, size variable, size)``: how many processes the launcher that
    started this one says it started, or None where it does not say (no launcher, or one
    that gives no size).

    The first launcher whose rank variable is set decides: an MPI launcher started inside
    a Slurm job (mpiexec or a PMIx launcher in a batch script) leaves Slurm's variables of
    the batch script in its processes' environment, which count something else."""
    environ = os.environ if environ is None else environ
    for rank_variable, size_variable in LAUNCH_SIZE_VARIABLES:
        if not environ.get(rank_variable):
            continue
        try:
            return rank_variable, size_variable, int(environ[size_variable])
        except (KeyError, ValueError):
            return None
    return None


def check_launch_size(world_size: int, environ=None) -> None:
    """Stop a process that its launcher started as one of N but that MPI made a job of
    another size (MPI_COMM_WORLD).

    What it catches: an MPI library that did not join the launcher's process manager, so
    that every process starts MPI alone, a job of one rank: ``srun`` without the PMI the
    MPI library speaks (``--mpi=pmi2`` for MPICH, where the site's default is none), or
    another MPI's ``mpirun`` than mpi4py's. Each process would then train a model of its
    own as the only worker, all writing the same checkpoint directory, and exit 0.

    Raises:
        FailedPreconditionError: the sizes differ; the message names both and the cure.
    """
    environ = os.environ if environ is None else environ
    launched = launched_size(environ)
    if launched is None or launched[2] == world_size:
        return
    rank_variable, size_variable, size = launched
    rank = environ.get(rank_variable)
    if rank_variable == "SLURM_PROCID":
        cure = ("start the tasks with the PMI the MPI library speaks: srun --mpi=pmi2 for "
                "MPICH (also the pip 'mpich' extra), --mpi=pmix for an MPI built with PMIx "
                "(srun --mpi=list shows what this Slurm offers)")
    else:
        cure = ("launch with the mpiexec of the MPI library mpi4py was built with "
                "(python -m mpiflow info names it; the pip 'mpich' extra puts it next to "
                "python), or with srun --mpi=pmi2 / pmix under Slurm")
    error = errors.FailedPreconditionError(
        f"The launcher started this process as rank {rank} of {size} ({rank_variable}="
        f"{rank}, {size_variable}={size}), but MPI made a job of {world_size} rank(s) of "
        f"it (MPI_COMM_WORLD): the MPI library did not join the launcher's job, so every "
        f"process would train on its own. {cure[0].upper()}{cure[1:]}")
    error.brief = True          # a launch setting: the traceback would say nothing more
    raise error


def cpu_list_text(cpus) -> str:
    """``cpus`` (processor numbers) as ranges, e.g. ``"0-3,8"``: what a rank tells the
    others of its node about the processors it may run on."""
    parts, ordered = [], sorted(cpus)
    start = previous = None
    for cpu in ordered + [None]:
        if start is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(parts)


def parse_cpu_list(text: str) -> frozenset:
    """The processors of a ``cpu_list_text`` (empty text: none)."""
    cpus = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def cpu_share(mine, node_cpu_sets) -> tuple[int, int]:
    """``(threads, node processors)``: how many threads a rank whose affinity is ``mine``
    should run its kernels on, and how many processors the job's ranks of its machine
    (``node_cpu_sets``, this rank's among them) may run on in all.

    The machine's own count (``os.cpu_count()``) says nothing of a job that was given
    part of a node (Slurm confines it to its processors) or of ranks bound to their own
    cores (``srun --cpu-bind``, Open MPI's default): a rank shares its processors with
    the ranks whose affinity overlaps its own, and no more, so each takes an equal part
    of its own set. Ranks bound to 2 processors each get 2 threads; unbound ranks of a
    job given 8 processors of a 64-core node, 4 of them, 2 each.
    """
    mine = frozenset(mine)
    sharers = sum(1 for cpus in node_cpu_sets if cpus & mine) or 1
    return max(1, len(mine) // sharers), max(1, len(mine.union(*node_cpu_sets)))


def this_process_cpus() -> frozenset:
    """The processors this process may run on (its affinity; all of them where the
    platform cannot tell)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


class Layout:
    """Where every rank of a communicator runs: host, node index, local rank.

    Pure data, so tests build one from a host list; ``Layout.from_comm`` gathers it from
    an MPI communicator.

    Attributes:
        rank, size: this rank and the number of ranks.
        hosts: the host name of every rank.
        nodes: the node index of every rank (nodes numbered by their first rank).
        num_nodes: how many nodes the ranks span.
        local_ranks, local_sizes: every rank's index among the ranks of its node, and the
            number of ranks on its node.
        host, node, local_rank, local_size: the same for this rank.
        cpu_threads: the threads this rank's kernels should use (``cpu_share``).
        node_cpus: the processors the job's ranks on this rank's machine may run on.
    """

    def __init__(self, hosts: Sequence[str], rank: int = 0,
                 node_keys: Sequence[Hashable] | None = None,
                 cpus: tuple[int, int] | None = None):
        """Build the layout of ranks running on ``hosts``, seen from ``rank``.

        Args:
            hosts: the host name of every rank.
            rank: the rank this layout belongs to.
            node_keys: one key per rank that tells nodes apart (default: the host names).
            cpus: this rank's ``cpu_share`` (``from_comm`` gathers it); default: the
                machine's processors, shared by the ranks of this rank's node.
        """
        self.hosts = tuple(hosts)
        self.size = len(self.hosts)
        if not 0 <= rank < self.size:
            raise errors.op_error(errors.InvalidArgumentError, "Bad rank for a layout",
                                  expected=f"a rank in [0, {self.size})", got=rank)
        self.rank = rank
        self._node_keys = tuple(self.hosts if node_keys is None else node_keys)
        self.nodes = tuple(node_indices(self._node_keys))
        self.num_nodes = max(self.nodes) + 1
        ranks, sizes = local_ranks(self._node_keys)
        self.local_ranks, self.local_sizes = tuple(ranks), tuple(sizes)
        if cpus is None:
            machine = os.cpu_count() or 1
            cpus = (max(1, machine // self.local_size), machine)
        self.cpu_threads, self.node_cpus = cpus

    host = property(lambda self: self.hosts[self.rank])
    node = property(lambda self: self.nodes[self.rank])
    local_rank = property(lambda self: self.local_ranks[self.rank])
    local_size = property(lambda self: self.local_sizes[self.rank])

    @classmethod
    def from_comm(cls, comm: MPI.Intracomm, host: str | None = None,
                  config: config_lib.Config | None = None) -> Layout:
        """Gather the layout of ``comm``; collective: every rank of ``comm`` must call it.

        Two ranks share a node when they share a host name *and* a shared-memory domain
        (``Split_type(COMM_TYPE_SHARED)``): the domain tells apart machines that report the
        same name (containers), the name tells apart hosts simulated on one machine.

        Args:
            comm: the communicator (e.g. a ``Dup`` of ``COMM_WORLD``, made by the caller).
            host: this rank's host name (default ``MPI.Get_processor_name()``); tests pass
                one to simulate several hosts.
            config: where MPIFLOW_TIMEOUT and MPIFLOW_POLL_MAX_SLEEP_US come from.

        Raises:
            DeadlineExceededError: some rank of ``comm`` did not join within MPIFLOW_TIMEOUT.
        """
        # Imported here: importing mpi4py.MPI initialises MPI, which the pure role logic
        # and the rest of mpiflow's import must not do.
        from mpi4py import MPI

        config = config or config_lib.default()
        # A launch whose processes each started MPI alone never meets: say so first.
        check_launch_size(MPI.COMM_WORLD.Get_size())
        # Every rank first, or the ones that never come named (not a gather that hangs).
        arrival.meet(comm, "the cluster layout (ClusterSpec.from_mpi, Server)", config)
        rank, size = comm.Get_rank(), comm.Get_size()
        name = (MPI.Get_processor_name() if host is None else host).encode("utf-8")
        waiter = _Waiter(config, f"rank {rank} of {size}")

        # The first collective (sizing the names) is also where a rank that never calls
        # from_comm is noticed.
        hosts = _allgather_texts(comm, waiter, name,
                                 "agreeing on the host name width (Iallreduce)",
                                 "gathering host names (Iallgather)")

        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        node_group, group = node_comm.Get_group(), comm.Get_group()
        try:
            leader = node_group.Translate_ranks([0], group)[0]
            # Processors are shared by the ranks of one machine (its shared-memory
            # domain), whatever host names they report.
            mine = this_process_cpus()
            machine = _allgather_texts(
                node_comm, waiter, cpu_list_text(mine).encode(),
                "agreeing on the width of the processor lists (Iallreduce)",
                "gathering the processors each rank may run on (Iallgather)")
            cpus = cpu_share(mine, [parse_cpu_list(text) for text in machine])
        finally:
            node_group.Free()
            group.Free()
            node_comm.Free()

        leaders = np.empty(size, dtype=np.int64)
        waiter.wait(comm.Iallgather(np.array([leader], dtype=np.int64), leaders),
                    "gathering shared-memory domains (Iallgather)")
        return cls(hosts, rank, node_keys=list(zip(hosts, leaders.tolist())), cpus=cpus)

    def assign_roles(self, num_ps: int | None = None, policy: str | None = None,
                     config: config_lib.Config | None = None) -> list[Role]:
        """Return the ``Role`` of every rank (see ``roles_for``).

        Args:
            num_ps: number of ps; None takes MPIFLOW_PS, and when that is unset
                ``default_num_ps(size)`` (1 ps for 2 or more ranks, else 0).
            policy: ``"block"`` or ``"spread"``; None takes MPIFLOW_PS_POLICY.
            config: where those variables are read (default: the process environment).
        """
        config = config or config_lib.default()
        from_env = []
        if num_ps is None:
            num_ps = config.get("MPIFLOW_PS")
            if num_ps is None:
                num_ps = default_num_ps(self.size)
            else:
                from_env.append(f"MPIFLOW_PS={num_ps}")
        if policy is None:
            policy = config.get("MPIFLOW_PS_POLICY")
            if config.is_set("MPIFLOW_PS_POLICY"):
                from_env.append(f"MPIFLOW_PS_POLICY={policy}")
        try:
            return roles_for(self._labels(), num_ps, policy)
        except errors.InvalidArgumentError as exc:
            if not from_env:
                raise
            # Say where the numbers came from: a stale variable in a batch script is a
            # common cause, and the call site does not show it.
            raise errors.InvalidArgumentError(
                f"{exc.message} (from the environment: {', '.join(from_env)})") from None

    def describe(self) -> str:
        """Return e.g. ``"4 ranks on 2 nodes (a: ranks 0,2; b: ranks 1,3)"``."""
        return describe_layout(self._labels())

    def _labels(self) -> list[str]:
        # One printable name per node: its host, made unique where hosts repeat a name.
        first = {}
        for rank, key in enumerate(self._node_keys):
            first.setdefault(key, rank)
        names = {}
        for key, rank in first.items():
            host = self.hosts[rank]
            names[key] = host if host not in names.values() else f"{host}@rank{rank}"
        return [names[key] for key in self._node_keys]

    def __repr__(self) -> str:
        return f"Layout(rank={self.rank}, {self.describe()})"


def agree_on_roles(comm, layout: Layout, num_ps: int | None = None,
                   policy: str | None = None,
                   config: config_lib.Config | None = None) -> list[Role]:
    """``layout.assign_roles`` on every rank of ``comm``, with one verdict; collective.

    Every rank works out the same roles from the same layout, so a launch that cannot
    have them (more ps than ranks, a bad policy) fails on every rank at once: each would
    print the same traceback, and the first abort could cut the others' short, the
    culprit's included. Here the lowest rank that found the error reports it (in one
    line: it is a launch setting, the traceback says nothing more) and the others say
    one line and leave the report and the job's end to it
    (``runtime.process.follow_the_reporter``). Ranks whose environment gave them other
    numbers raise the same error, so none goes on alone.

    Raises:
        InvalidArgumentError: on every rank, when the roles cannot be assigned on some.
        DeadlineExceededError: a rank did not take part within MPIFLOW_TIMEOUT.
    """
    from mpi4py import MPI

    config = config or config_lib.default()
    try:
        roles, found = layout.assign_roles(num_ps, policy, config), None
    except errors.InvalidArgumentError as exc:
        roles, found = None, exc
    rank, size = comm.Get_rank(), comm.Get_size()
    waiter = _Waiter(config, f"rank {rank} of {size}")
    first = np.array([rank if found is not None else size], dtype=np.int64)
    waiter.wait(comm.Iallreduce(MPI.IN_PLACE, first, op=MPI.MIN),
                "agreeing on the roles (Iallreduce)")
    reporter = int(first[0])
    if reporter == size:
        return roles
    texts = _allgather_texts(comm, waiter,
                             (found.message if found is not None else "").encode("utf-8"),
                             "sizing the roles' errors (Iallreduce)",
                             "gathering the roles' errors (Iallgather)")
    error = errors.InvalidArgumentError(texts[reporter] if reporter != rank else found.message)
    error.brief = True
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        error.reported_by_rank = group.Translate_ranks([reporter], world)[0]
    finally:
        group.Free()
        world.Free()
    raise error


def check_agreement(comm, compared: str, shown: str, what: str,
                    config: config_lib.Config | None = None) -> None:
    """Check that every rank of ``comm`` holds the same ``compared`` text; collective.

    Ranks launched with different settings (an MPMD launch, an environment that differs
    per node) can each work out their own cluster and all go on: two chiefs writing one
    checkpoint directory, a job that exits 0 having trained nothing right. This stops
    every rank at once instead, naming two ranks that disagree and what each holds.

    Args:
        compared: what must be equal (e.g. the cluster as JSON).
        shown: how this rank's side reads in the error (``compared`` plus where it came
            from, e.g. the environment).
        what: what is compared, for the message ("cluster").

    Raises:
        InvalidArgumentError: on every rank, when two ranks disagree.
        DeadlineExceededError: a rank did not take part within MPIFLOW_TIMEOUT.
    """

    config = config or config_lib.default()
    rank, size = comm.Get_rank(), comm.Get_size()
    waiter = _Waiter(config, f"rank {rank} of {size}")
    digest = np.frombuffer(hashlib.sha256(compared.encode("utf-8")).digest(), np.uint8)
    digests = np.empty((size, digest.size), dtype=np.uint8)
    waiter.wait(comm.Iallgather(digest, digests), f"comparing the {what} (Iallgather)")
    if (digests == digests[0]).all():
        return
    texts = _allgather_texts(comm, waiter, shown.encode("utf-8"),
                             f"sizing the {what} descriptions (Iallreduce)",
                             f"gathering the {what} descriptions (Iallgather)")
    other = next(r for r in range(size) if (digests[r] != digests[0]).any())
    sides = "; ".join(f"rank {r}: {texts[r]}" for r in (0, other))
    error = errors.InvalidArgumentError(
        f"The ranks of this job work out different {what}s, so they would not train one "
        f"model ({sides}). Launch every rank with the same settings: an MPMD launch or an "
        "environment that differs per node (MPIFLOW_PS, MPIFLOW_PS_POLICY) does this")
    error.brief = True          # a setting, not a bug: the traceback would say nothing more
    raise error


def _allgather_texts(comm, waiter, text: bytes, sizing: str, gathering: str) -> list:
    """Every rank's UTF-8 ``text``, in rank order; collective. The ranks agree on the
    longest first, then gather records padded to it (``sizing`` and ``gathering`` say
    what each wait is, if it times out)."""
    from mpi4py import MPI

    width = np.array([len(text)], dtype=np.int64)
    waiter.wait(comm.Iallreduce(MPI.IN_PLACE, width, op=MPI.MAX), sizing)
    record = np.zeros(int(width[0]), dtype=np.uint8)
    record[:len(text)] = np.frombuffer(text, dtype=np.uint8)
    rows = np.empty((comm.Get_size(), int(width[0])), dtype=np.uint8)
    waiter.wait(comm.Iallgather(record, rows), gathering)
    return [bytes(row).rstrip(b"\0").decode("utf-8") for row in rows]


class _Waiter:
    """Complete MPI requests by polling with a bounded back-off, up to MPIFLOW_TIMEOUT."""

    def __init__(self, config: config_lib.Config, who: str):
        self.timeout = config.get("MPIFLOW_TIMEOUT")
        self.backoff = Backoff(spin_s=0.0, first_s=1e-6,
                               max_s=config.get("MPIFLOW_POLL_MAX_SLEEP_US") * 1e-6)
        self.who = who

    def wait(self, request, what: str) -> None:
        def expired(waited):
            return errors.DeadlineExceededError(
                f"Cluster layout: {self.who} waited {waited:.1f} s {what}: expected every "
                f"rank of the communicator to build the layout (ClusterSpec.from_mpi / "
                f"Layout.from_comm) within MPIFLOW_TIMEOUT={self.timeout:g} s")
        poll_until(request.Test, self.timeout, expired, self.backoff)