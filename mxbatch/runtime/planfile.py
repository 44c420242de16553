"""``plan.json``: everything a task needs to know about its job, and nothing secret.

Written once by the CLI into the run directory, read by every supervisor.
The inherited environment is *not* stored here (it may hold secrets): tasks
get it from the process that starts them (the batch system's ``-V``/``ALL``).
"""

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from .attempts import RestartPlan
from .container import ContainerPlan
from .gate import MemberStart
from .layout import RunLayout, task_name
from .roles import Role

#: how often supervisors read the abort record, unless a backend says otherwise
DEFAULT_ABORT_POLL_S = 1.0


@dataclass(frozen=True)
class TaskInfo:
    """One role instance. ``index`` is its place in the job: scheduler 0, servers, workers."""

    index: int
    role: Role
    rank: int
    argv: List[str]
    env: Dict[str, str]
    cpus: int = 1
    memory_mib: Optional[int] = None
    gpus: int = 0
    walltime_s: Optional[float] = None

    @property
    def name(self) -> str:
        """File-name form, ``worker-1``."""
        return task_name(self.role.value, self.rank)

    @property
    def label(self) -> str:
        """Display form, ``worker[1]``."""
        return "%s[%d]" % (self.role.value, self.rank)


@dataclass(frozen=True)
class RunPlan:
    """The job as the runtime sees it. Times are seconds; ``created_at`` is epoch time."""

    job_id: str
    run_dir: str
    workdir: str
    python: str
    created_at: float
    inherit_env: bool = True
    interface: Optional[str] = None
    loopback_only: bool = False
    port_low: int = 9000
    port_high: int = 9999
    startup_timeout_s: float = 600.0
    grace_s: float = 30.0
    heartbeat_timeout_s: float = 30.0
    # a role stopped, or a worker without CPU or output, this long fails the job
    # (None: never)
    stall_timeout_s: Optional[float] = 1800.0
    # a role still running this long after its hook said its code had finished is ended
    # (MXNet's exit hang); a worker using no CPU and writing nothing this long while
    # another worker has finished fails the job (a dist_sync deadlock). None: neither
    exit_timeout_s: Optional[float] = 60.0
    # once every worker's code has finished, a worker still running this long is ended
    # (succeeded), and servers and the scheduler end as soon as every worker has
    exit_grace_s: float = 5.0
    # when servers and workers start their roles: with the scheduler, held before
    # ps-lite until it listens (``gate``), or only once it listens
    member_start: MemberStart = MemberStart.EARLY
    # how often supervisors look for the abort record: often on one machine, about
    # once a second on shared storage
    abort_poll_s: float = DEFAULT_ABORT_POLL_S
    # The submitter's PATH, restored in tasks that inherit the environment: some
    # execds (SGE here) replace PATH even with qsub -V, and then `python3` is not
    # the submitter's (venv) Python.
    submit_path: Optional[str] = None
    # Let roles write core files (RLIMIT_CORE untouched); off by default: a core dump
    # of an MXNet process is hundreds of MB in the workdir.
    core_dumps: bool = False
    # Run every role in this container (docker, podman, apptainer); None: bare processes.
    container: Optional[ContainerPlan] = None
    tasks: List[TaskInfo] = field(default_factory=list)
    # Relaunch the job after an attempt ends (``restarts``; max 0: never).
    restarts: RestartPlan = field(default_factory=RestartPlan)
    # What a signal to a task's supervisor means on this backend, by signal name
    # ("SIGTERM": "preempted" on a batch system; "SIGUSR1": "walltime", the scheduler's
    # warning before the time limit): an ``EndReason`` value.
    signal_ends: Dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.run_dir)

    @property
    def startup_deadline(self) -> float:
        return self.created_at + self.startup_timeout_s

    def layout_of(self, attempt: int) -> RunLayout:
        """The run directory as attempt ``attempt`` sees it."""
        return RunLayout(self.run_dir, attempt)

    def task_keys(self) -> List[Tuple[Role, int]]:
        """(role, rank) of every task, in task order."""
        return [(t.role, t.rank) for t in self.tasks]

    def tasks_of(self, role: Role) -> List[TaskInfo]:
        return [t for t in self.tasks if t.role == role]

    def task_for(self, role: Role, rank: int) -> TaskInfo:
        for task in self.tasks:
            if task.role == role and task.rank == rank:
                return task
        raise KeyError("no task %s[%d] in job %s" % (Role(role).value, rank, self.job_id))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunPlan":
        data = json.loads(text)
        data["tasks"] = [TaskInfo(**dict(t, role=Role(t["role"]))) for t in data["tasks"]]
        if data.get("container") is not None:
            data["container"] = ContainerPlan.from_dict(data["container"])
        data["restarts"] = RestartPlan.from_dict(data.get("restarts"))
        data["member_start"] = MemberStart(data.get("member_start", MemberStart.EARLY))
        return cls(**data)
