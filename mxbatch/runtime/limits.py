"""A role's ``memory`` and ``cpus`` enforced on the machine that runs it, where no batch
system does: the local backend (``applies``: every task on this machine).

- **cgroup v2** where the agent's own cgroup (``cgroups.JobCgroup``, made by mxbatch)
  offers the ``memory`` / ``cpu`` controllers: they are enabled in that cgroup's
  ``cgroup.subtree_control`` (a cgroup mxbatch made; never a parent's) and the task's
  cgroup gets ``memory.max`` (and ``memory.swap.max`` 0) and ``cpu.max`` (``cpus``
  periods of 100 ms per 100 ms).
- otherwise **memory** as ``RLIMIT_DATA`` (soft and hard) on the role's processes: the
  private writable memory a process maps (heap, anonymous mappings, thread stacks), not
  its shared libraries nor address space it only reserves. ``RLIMIT_AS`` counts those
  too, and an MXNet role reserves far more than it uses (measured, the example's worker:
  1.3 GB of address space, 350 MB of data, 163 MB resident), so a sensible ``memory``
  would fail roles that fit. A process that goes past it gets ``ENOMEM``: Python's
  ``MemoryError``; ``import mxnet`` below about 400 MB crashes or fails.
- otherwise **cpus**: nothing enforced (said in the role's log). Pinning roles to cores
  (``sched_setaffinity``) was not chosen: every role asks ``cpus: 1`` by default, and on
  a shared machine fixed core sets make roles of several jobs (and users) share the same
  cores while others idle; ``OMP_NUM_THREADS`` already sizes the role's threads.
- a docker or podman role: the client's limits do not reach the container (the daemon
  starts it): nothing enforced here, the runtime's ``--memory``/``--cpus`` in
  ``container.options`` do.

Only files of cgroups mxbatch made are written. Standard library only.
"""

import enum
import os
from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple

#: the cgroup v2 controllers that enforce memory and cpus
MEMORY = "memory"
CPU = "cpu"
#: cpu.max's period, microseconds
CPU_PERIOD_US = 100_000
MIB = 1 << 20


class Means(str, enum.Enum):
    """How a resource of a role is enforced."""

    CGROUP = "cgroup"
    RLIMIT = "rlimit"
    NONE = "none"


@dataclass(frozen=True)
class Enforcement:
    """What ``enforce`` set up for one role: how its memory and cpus are held, the
    ``RLIMIT_DATA`` to give its processes (bytes; None: none), and lines for its log."""

    memory: Means
    cpus: Means
    rlimit_data: Optional[int]
    notes: Tuple[str, ...]


def applies(loopback_only: bool) -> bool:
    """Whether an agent enforces resources: only where every task runs on this machine
    (the local backend); batch systems enforce their own, and ssh hosts are left as
    they were."""
    return loopback_only


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as handle:
            handle.write(text)
        return True
    except OSError:
        return False


def enable_controllers(agent_cgroup: str, wanted: FrozenSet[str]) -> FrozenSet[str]:
    """Enable those of ``wanted`` that ``agent_cgroup`` offers (its
    ``cgroup.controllers``) for its children, in its own ``cgroup.subtree_control``;
    the ones enabled now."""
    offered = set(_read(os.path.join(agent_cgroup, "cgroup.controllers")).split())
    control = os.path.join(agent_cgroup, "cgroup.subtree_control")
    missing = sorted(wanted & offered - set(_read(control).split()))
    if missing:
        _write(control, " ".join("+" + name for name in missing))
    return frozenset(_read(control).split()) & wanted


def enforce(agent_cgroup: Optional[str], task_cgroup: Optional[str],
            memory_mib: Optional[int], cpus: int, daemon_container: bool) -> Enforcement:
    """Hold a role to ``memory_mib`` (None: no limit) and ``cpus``: in ``task_cgroup``
    (its directory, below ``agent_cgroup``) where the controllers allow, else see the
    module docstring. Call before the role starts."""
    if daemon_container:
        if memory_mib is None:
            return Enforcement(Means.NONE, Means.NONE, None, ())
        return Enforcement(Means.NONE, Means.NONE, None, (
            "memory %d MiB and cpus %d are not enforced on a container's client: give the "
            "runtime's own limits in container.options (--memory, --cpus)"
            % (memory_mib, cpus),))
    enabled: FrozenSet[str] = frozenset()
    if agent_cgroup is not None and task_cgroup is not None:
        wanted = frozenset({CPU} | ({MEMORY} if memory_mib is not None else set()))
        enabled = enable_controllers(agent_cgroup, wanted)
    notes = []
    memory, rlimit = Means.NONE, None
    if memory_mib is not None:
        if MEMORY in enabled and task_cgroup is not None and _write(
                os.path.join(task_cgroup, "memory.max"), str(memory_mib * MIB)):
            _write(os.path.join(task_cgroup, "memory.swap.max"), "0")
            memory = Means.CGROUP
            notes.append("memory: at most %d MiB (cgroup memory.max; past it the kernel "
                         "kills the role)" % memory_mib)
        else:
            memory, rlimit = Means.RLIMIT, memory_mib * MIB
            notes.append("memory: at most %d MiB of data (RLIMIT_DATA: no cgroup memory "
                         "controller here; past it allocations fail, MemoryError)"
                         % memory_mib)
    cpu = Means.NONE
    if CPU in enabled and task_cgroup is not None and _write(
            os.path.join(task_cgroup, "cpu.max"), "%d %d" % (cpus * CPU_PERIOD_US,
                                                             CPU_PERIOD_US)):
        cpu = Means.CGROUP
        notes.append("cpus: at most %d (cgroup cpu.max)" % cpus)
    elif memory_mib is not None or cpus > 1:
        notes.append("cpus: %d not enforced (no cgroup cpu controller here); "
                     "OMP_NUM_THREADS=%d" % (cpus, cpus))
    return Enforcement(memory, cpu, rlimit, tuple(notes))


def describe_here(parent: Optional[str]) -> Tuple[Means, Means]:
    """How memory and cpus would be enforced for an agent whose cgroup is made below
    ``parent`` (None: no cgroup): what ``parent`` enables for its children (its
    ``cgroup.subtree_control``) is what the agent's cgroup is offered. Changes nothing
    (``mxbatch doctor``)."""
    if parent is None:
        return Means.RLIMIT, Means.NONE
    offered = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    return (Means.CGROUP if MEMORY in offered else Means.RLIMIT,
            Means.CGROUP if CPU in offered else Means.NONE)
