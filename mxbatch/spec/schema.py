"""The job spec as frozen dataclasses: what ``spec.load`` returns. No parsing here.

Every value is already validated and typed; ``JobSpec.error`` cites file:line
for a key, for checks made later (by a backend, for instance).

Each field that a spec key sets says so with ``spec_field``: the key's name in the
YAML (when it differs from the field's), its type and default as users read them,
and a one-line help. The job spec reference (``reference.spec_reference``, the
documentation site's ``reference/spec.md``) is generated from these, so it cannot
drift from the code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple

from ..errors import SpecError
from ..runtime.attempts import DEFAULT_ON
from ..runtime.container import ContainerRuntime, GpuMode
from ..runtime.gate import MemberStart
from ..runtime.leanscheduler import SchedulerStart
from ..runtime.roles import Role
from ..runtime.states import EndReason
from .located import KeyPath, Locations
from .paths import mxbatch_home

DEFAULT_BACKEND = "local"

#: what a job's name may be: 1-63 letters, digits, '_', '.', '-', starting with a
#: letter or digit (a job id starts with it, ``plan.JOB_ID``)
JOB_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"

#: stands for the list of registered backends in a help text; the reference (and each
#: command's help) fills it in from the registry
BACKENDS = "{backends}"

#: metadata keys of ``spec_field`` (``help`` is the one ``typed.option`` uses too)
HELP, KEY, TYPE, DEFAULT, TOP_LEVEL = "help", "spec_key", "spec_type", "spec_default", "top"


def spec_field(help: str, *, key: Optional[str] = None, type: Optional[str] = None,
               default_text: Optional[str] = None, top_level: bool = False,
               **field_args: Any) -> Any:
    """A dataclass field set by the spec key ``key`` (default: the field's name);
    ``type``/``default_text``: how the reference shows them when the Python type or
    default would mislead (``2G`` for a size in MiB); ``top_level``: the key is also
    allowed at the top of the spec, as the default of every role."""
    metadata = {HELP: help, KEY: key, TYPE: type, DEFAULT: default_text,
                TOP_LEVEL: top_level}
    return dataclasses.field(metadata=metadata, **field_args)


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one task of a role asks for. ``None`` means "the backend's default"."""

    cpus: int = spec_field("CPU cores per task; also sets OMP_NUM_THREADS", default=1)
    memory_mib: Optional[int] = spec_field(
        "memory per task (512M, 2G, 1.5GiB; a plain number is MiB)", key="memory",
        type="size", default_text="the backend's", default=None)
    gpus: int = spec_field("GPUs per task", default=0)
    walltime_s: Optional[float] = spec_field(
        "the longest a task may run (30m, 1h30m); the job fails when one exceeds it",
        key="walltime", type="duration", default_text="none", default=None)


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    """``roles.<role>:``: how many tasks of one role run, their command, resources and
    environment (the top level's where the role gives none)."""

    role: Role
    count: int = spec_field("how many tasks of the role (scheduler: always 1)",
                            default_text="worker: 1; server: as many as workers; "
                                         "scheduler: 1")
    command: Tuple[str, ...] = spec_field(
        "the command (a string, split like a shell would, or a list); also at the top "
        "level, for every role", type="string or list of strings", default_text="required",
        top_level=True)
    resources: Resources = spec_field("what each task of the role asks for; also at the top "
                                      "level, as every role's default", top_level=True)
    env: Mapping[str, str] = spec_field("environment variables of this role's tasks (over "
                                        "the top-level env)", type="mapping NAME: value",
                                        default_text="{}")


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """``network:``: the address tasks advertise and the ports the job's roles bind."""

    interface: Optional[str] = spec_field(
        "the interface whose IPv4 address tasks advertise (eth0, ib0); default: the "
        "default route's (127.0.0.1 on the local backend)", default=None)
    port_low: int = spec_field("the ports of the job (9000-9999, [9000, 9999], 9100): the "
                               "scheduler's, and one slice a server or worker binds in "
                               "task order (so kv.rank follows the rank)",
                               key="ports", type="port range", default_text="9000-9999",
                               default=9000)
    port_high: int = dataclasses.field(default=9999)  # set by ``ports`` too


@dataclasses.dataclass(frozen=True)
class RendezvousSpec:
    """``rendezvous:``: where the run directory lives, the deadlines every task keeps
    (start-up, grace, heartbeat, stall, exit) and how members and the scheduler start."""

    dir: Path = spec_field(
        "where run directories are made (<dir>/<job-id>/, mode 0700); on storage every "
        "node sees for batch backends; expands ~ and $VAR; relative: to the spec's folder",
        type="path", default_text="$MXBATCH_HOME/runs (~/.mxbatch/runs)")
    startup_timeout_s: float = spec_field(
        "every task must have started by then, or the job fails",
        key="startup_timeout", type="duration", default_text="10m", default=600.0)
    grace_s: float = spec_field(
        "SIGTERM to SIGKILL (a role stopped gets this long to exit by itself)",
        key="grace", type="duration", default_text="30s", default=30.0)
    heartbeat_timeout_s: float = spec_field(
        "a task whose heartbeat is older than this is lost, and the job fails; at "
        "least 3s (supervisors beat every third of it)",
        key="heartbeat_timeout", type="duration", default_text="30s", default=30.0)
    #: a stopped role, or a worker without CPU or output, this long fails the job
    stall_timeout_s: Optional[float] = spec_field(
        "a stopped role, or a worker using no CPU and writing no output, this long fails "
        "the job; null: never", key="stall_timeout", type="duration or null",
        default_text="30m", default=1800.0)
    #: a role still running this long after its code finished is ended (exit hang)
    exit_timeout_s: Optional[float] = spec_field(
        "a role still running this long after its script's code finished (MXNet's exit "
        "hang) is ended, and counts as succeeded; a worker using no CPU and writing no "
        "output this long while another worker has finished fails the job (a dist_sync "
        "deadlock); null: neither; launch --exit-timeout",
        key="exit_timeout", type="duration or null", default_text="60s", default=60.0)
    #: once every worker's code has finished, a worker still running this long is ended
    exit_grace_s: float = spec_field(
        "once every worker's script code has finished (training is over), a worker still "
        "running this long is ended and counts as succeeded (MXNet's exit hang), and "
        "servers and the scheduler end as soon as every worker has; exit_timeout is the "
        "longer wait of a worker that finished while another still trains; launch "
        "--exit-grace", key="exit_grace", type="duration", default_text="5s", default=5.0)
    member_start: MemberStart = spec_field(
        "when servers and workers start: early (with the scheduler; their Python is held "
        "just before MXNet connects, until the scheduler listens, so MXNet imports in "
        "parallel) or after_listen (once the scheduler listens: for members whose program "
        "is not Python, or runs without site, python -S or -I)",
        type="early or after_listen", default_text="early", default=MemberStart.EARLY)
    scheduler: SchedulerStart = spec_field(
        "what the scheduler's role runs: lean (when its script does nothing but import, "
        "define and bind names before import mxnet, ps-lite's scheduler from the MXNet "
        "library the script would load, without the script's MXNet import: about a "
        "CPU-second less, and it listens sooner) or script (its command, as launch.py runs "
        "it: for modules imported before MXNet that change sys.path or ps-lite variables)",
        type="lean or script", default_text="lean", default=SchedulerStart.LEAN)
    trust_shared: bool = spec_field(
        "site config only: accept a rendezvous dir (or a folder above it) that other "
        "users can write, which mxbatch otherwise refuses (docs/shared-systems.md); only "
        "where every user who can write there is trusted; doctor warns",
        default=False)


@dataclasses.dataclass(frozen=True)
class RestartsSpec:
    """``restarts:``: relaunch the whole job (every role, the same job id and run
    directory) when an attempt ends for one of the ``on`` reasons, at most ``max``
    times; see docs/long-jobs.md."""

    max: int = spec_field("how many times the job may be relaunched (0: never, today's "
                          "behaviour); launch --max-restarts", default=0)
    on: Tuple[EndReason, ...] = spec_field(
        "the end reasons that relaunch it: failure, stall, exit_hang, startup_deadline, "
        "preempted (or preemption), walltime, node_failure",
        type="list of reasons", default_text=", ".join(r.value for r in DEFAULT_ON),
        default=DEFAULT_ON)
    backoff_s: float = spec_field("the wait between an attempt's end and the next one's "
                                  "start (0: none)", key="backoff", type="duration",
                                  default_text="10s", default=10.0)
    checkpoint_signal: Optional[str] = spec_field(
        "what every worker gets on preemption or walltime before the teardown (SIGUSR1, "
        "SIGUSR2, SIGTERM, SIGINT...; null: none)", type="signal name or null",
        default_text="SIGUSR1", default="SIGUSR1")
    checkpoint_grace_s: float = spec_field(
        "how long the workers may take to checkpoint and exit after that signal, the "
        "other roles kept running for them", key="checkpoint_grace", type="duration",
        default_text="2m", default=120.0)
    checkpoint_lead_s: float = spec_field(
        "how long before the walltime the attempt checkpoints and ends (Slurm: "
        "--signal=B:USR1@lead; SGE: -l s_rt; elsewhere the supervisor's own clock)",
        key="checkpoint_lead", type="duration", default_text="2m", default=120.0)


@dataclasses.dataclass(frozen=True)
class ContainerSpec:
    """``container:``: run every role in this image. Which runtimes a backend can use
    is its own business (it rejects the others); ``mounts`` are ``host:container[:ro|rw]``,
    ``options`` are passed to the runtime as the backend documents; ``gpus``: which GPUs
    a role's container gets (where the runtime runs roles in containers itself)."""

    runtime: ContainerRuntime = spec_field("what runs the container (a backend rejects the "
                                           "runtimes it does not run)", default_text="docker")
    image: str = spec_field("the image every role runs in", default_text="required")
    mounts: Tuple[str, ...] = spec_field("host-path:container-path[:ro|rw]", default=())
    options: Tuple[str, ...] = spec_field("options for the runtime, as the backend "
                                          "documents", default=())
    gpus: GpuMode = spec_field("which GPUs a role's container gets: auto (the role's gpus "
                               "resource), none, all", default=GpuMode.AUTO)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A validated job. ``backend_options`` holds the ``backends.<name>`` blocks as the
    YAML gave them (plain data): the spec layer knows no backend, so the backends'
    registry parses them (``backends.registry.options_for``, every block present, each
    error at its file:line); ``locations`` lets later checks cite file:line for a key."""

    name: str = spec_field("the job's name, the first part of its id (letters, digits, "
                           "_ . -)", default_text="the spec file's name")
    workdir: Path = spec_field("the roles' working directory; relative: to the spec's "
                               "folder; expands ~ and $VAR", type="path",
                               default_text="the spec's folder")
    env: Mapping[str, str] = spec_field("environment variables of every task (added to the "
                                        "inherited environment)", type="mapping NAME: value",
                                        default_text="{}")
    inherit_env: bool = spec_field("tasks inherit the submitter's environment (like "
                                   "sbatch --export=ALL)", default_text="true")
    roles: Mapping[Role, RoleSpec] = spec_field("per role (scheduler, server, worker): count, "
                                                "command, resources, env")
    network: NetworkSpec = spec_field("how the roles find each other")
    rendezvous: RendezvousSpec = spec_field("the run directory and the job's deadlines")
    backend_options: Mapping[str, Any] = spec_field(
        "per backend, its own options (checked by the backend)", key="backends",
        type="mapping", default_text="{}", default_factory=dict)
    source: Optional[Path] = None
    container: Optional[ContainerSpec] = spec_field("run every role in this container image "
                                                    "(YARN: docker)", default=None)
    core_dumps: bool = spec_field("roles may write core files (else RLIMIT_CORE is 0)",
                                  default=False)
    check_script: bool = spec_field(
        "submit and launch refuse a command whose script (python3 X.py) is not in the "
        "workdir where the roles run; false: the script exists only on the nodes (as "
        "--no-check)", default=True)
    max_tasks: Optional[int] = spec_field(
        "the most tasks (scheduler, servers, workers) the job may have: a count above "
        "the backend's ceiling is a spec error unless this raises it",
        default_text="the backend's ceiling (local 1000, others 10000)", default=None)
    restarts: RestartsSpec = spec_field("relaunch the job after preemption, walltime, node "
                                        "failures or failures, resuming from a checkpoint",
                                        default_text="max 0: never",
                                        default_factory=RestartsSpec)
    locations: Locations = dataclasses.field(
        default_factory=lambda: Locations(None), compare=False, repr=False)
    backend: Optional[str] = spec_field(f"where the job runs: {BACKENDS}, or a plugin's "
                                        "name; --backend wins", default_text="local",
                                        default=None)

    def role(self, role: Role) -> RoleSpec:
        return self.roles[role]

    def error(self, key_path: KeyPath, problem: str, hint: Optional[str] = None) -> SpecError:
        """A ``SpecError`` at ``key_path`` of this spec's file (for later checks)."""
        return self.locations.error(key_path, problem, hint)


def default_runs_dir() -> Path:
    """``$MXBATCH_HOME/runs`` (``~/.mxbatch/runs``): shared storage on most clusters."""
    return mxbatch_home() / "runs"
