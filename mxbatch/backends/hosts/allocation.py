"""Jobs run inside a batch allocation the user already holds: a placement plus a starter,
with the ssh backend's controller (``sshcontrol``) unchanged.

``mxbatch launch --backend slurm`` in ``salloc``, an ``sbatch`` script or ``srun
--pty bash`` (``SLURM_JOB_ID``), and ``--backend sge`` inside an SGE parallel job
(``PE_HOSTFILE``), submit nothing (``backends.<slurm|sge>.inside``: auto, true,
false; ``Backend.variant`` picks these backends): the tasks are placed over the
allocation's hosts (``placement``), the scheduler on the first, and each host used
gets one agent, started by the allocation's own starter (``starters``): an ``srun``
step of the allocation, or ``qrsh -inherit`` (SGE's tight integration). The agents'
stdin and stdout are their channels to the controller (this process, or a detached
one for ``submit``), which keeps the job's state in the run directory here and relays
the rendezvous, as for ssh hosts: teardown, cancel and Ctrl-C work the same. No new
job appears in the queue, and ending the job (a failure, a cancel) ends its steps or
tasks, never the allocation.

Options of the submitting backend that ask the batch system for resources (partition,
queue, ``native``...) do not apply: the allocation has its resources already.

GPUs (Slurm): when roles ask for GPUs (``resources.gpus``), placement counts the GPUs
each node holds for the allocation (``placement.with_slurm_gpus``): a node takes no more
GPU tasks than its GPUs hold, and an allocation with too few is exit 2 before anything
starts. Each node's step asks for the GPUs of its tasks (``starters.srun_argv``) and its
agent gives every role its own share of the step's devices (``runtime.environ``).
"""

from __future__ import annotations

import abc
import dataclasses
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, TypeVar

from ...errors import BackendUnavailable, SpecError
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan, TaskInfo
from ...spec.plan import JobPlan
from ...spec.typed import to_data
from ..base import RenderedItem, Rollback
from ..batch.common import Inside
from ..batch.sge import SgeOptions
from ..batch.slurm import SlurmOptions
from ..records import JobRecord
from . import placement as placements
from .controller import ControlledBackend, Controller, ControllerHandle
from .hostfile import GpuShortage
from .ssh import SshRequest
from .sshcontrol import HostPlan, SshController, SshSetup
from .starters import StarterKind, qrsh_argv, remote_command, srun_argv, step_name

OptionsT = TypeVar("OptionsT")


@dataclasses.dataclass(frozen=True)
class AllocationHandle(ControllerHandle):
    """The controller, and the allocation the job runs in (Slurm job id, SGE job id)."""

    allocation: str = ""


@dataclasses.dataclass(frozen=True)
class AllocationRequest(SshRequest):
    """Each host's agent and the starter command that reaches it; which allocation."""

    allocation: str = ""

    def native_items(self) -> List[RenderedItem]:
        return [RenderedItem("allocation", f"{self.allocation}: nothing is submitted; every "
                                           "agent runs inside it")] + super().native_items()


def host_setup(run: RunPlan, found: placements.Placement, starter: StarterKind,
               start_argv: Callable[[str, Optional[int]], List[str]]) -> SshSetup:
    """The controller's configuration for ``run`` placed by ``found``: each host used, its
    tasks, and the ``starter`` command (``start_argv(host, gpus)``) that runs its agent;
    ``gpus``: what the host's tasks ask for when ``found`` counts GPUs (None otherwise),
    and then the agent gives each role its share of the host's."""
    wants = [task.gpus for task in run.tasks]
    dealt = found.deal(len(run.tasks), wants)
    python = run.python or sys.executable
    hosts = []
    for index, host in enumerate(found.hosts):
        tasks = tuple(t for t, h in enumerate(dealt) if h == index)
        if not tasks:
            continue
        gpus = None if found.gpus is None else sum(wants[t] for t in tasks)
        hosts.append(HostPlan(host=host.name, tasks=tasks,
                              ssh=tuple(start_argv(host.name, gpus)),
                              remote=remote_command(run.job_id, python, gpus is not None),
                              starter=starter))
    return SshSetup(hosts=tuple(hosts), python=python, connect_timeout_s=30.0)


def gpus_asked(tasks: Sequence[TaskInfo]) -> str:
    """What the roles ask for, for a message: ``4 workers x 1, 1 server x 2``."""
    counts: Dict[tuple, int] = {}
    for task in tasks:
        if task.gpus:
            key = (task.role.value, task.gpus)
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {role}{'s' if n > 1 else ''} x {gpus}"
                     for (role, gpus), n in counts.items())


class AllocationBackend(ControlledBackend[OptionsT, AllocationRequest]):
    """What the in-allocation backends share (see the module docstring)."""

    handle_class = AllocationHandle
    abort_poll_s = 0.5  # a call relayed to a local file: cheap
    #: the spec's block these backends read (``backends.slurm``)
    options_key: ClassVar[str]
    #: the variable that says this process runs inside an allocation, and its system
    allocation_variable: ClassVar[str]
    system: ClassVar[str]
    starter: ClassVar[StarterKind]
    #: the commands the starter needs here
    tools: ClassVar[tuple] = ()
    #: where to run mxbatch to be inside such an allocation; how to get more slots
    where_hint: ClassVar[str] = ""
    more_hint: ClassVar[str] = "ask for a larger allocation, or run fewer tasks"
    more_gpus_hint: ClassVar[str] = ("ask for an allocation with more GPUs, or lower the "
                                     "roles' resources.gpus")

    # ------------------------------------------------------------------ subclasses
    @abc.abstractmethod
    def placement(self, plan: JobPlan, environ: Mapping[str, str]) -> placements.Placement:
        """The allocation's hosts with their slots."""

    @abc.abstractmethod
    def start_argv(self, host: str, job_id: str, environ: Mapping[str, str],
                   gpus: Optional[int] = None) -> List[str]:
        """The starter's command for ``host``, before the remote command; ``gpus``: what
        its tasks ask for, when the placement counts GPUs."""

    def allocation_id(self, environ: Mapping[str, str]) -> str:
        return environ.get(self.allocation_variable, "")

    # ------------------------------------------------------------------ checks
    def _inside(self, plan: JobPlan, environ: Mapping[str, str]) -> None:
        if not environ.get(self.allocation_variable):
            raise plan.spec.error(("backends", self.options_key, "inside"),
                                  f"inside: {Inside.TRUE.value}, but this process is not inside "
                                  f"an {self.system} ({self.allocation_variable} is not set): "
                                  "nothing was started",
                                  f"run it in {self.where_hint}, or set inside: auto")

    def _placement(self, plan: JobPlan) -> placements.Placement:
        environ = os.environ
        self._inside(plan, environ)
        found = self.placement(plan, environ)
        tasks = plan.run.tasks
        try:
            found.deal(len(tasks), [task.gpus for task in tasks])
        except GpuShortage as exc:
            who = "" if exc.task is None else f"{tasks[exc.task].label} asks for " \
                f"{tasks[exc.task].gpus} GPUs, but "
            raise SpecError(f"{found.source}: {who}{exc} (GPUs asked: {gpus_asked(tasks)}; "
                            f"{self.more_gpus_hint}); nothing was started") from None
        except ValueError as exc:
            raise SpecError(f"{found.source}: {exc} granted ({self.more_hint}); nothing was "
                            "started") from None
        return found

    def check(self, plan: JobPlan) -> None:
        if plan.run.restarts.enabled:
            raise plan.spec.error(("restarts", "max"), f"backend {self.name!r} (inside an "
                                  "allocation) does not relaunch jobs yet",
                                  "set restarts.max: 0, or submit from outside the allocation "
                                  "(see docs/long-jobs.md)")
        self._placement(plan)

    def check_environment(self) -> None:
        for tool in self.tools:
            if shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH (needed to start the agents "
                                         f"inside the {self.system})")

    # ------------------------------------------------------------------ rendering
    def render(self, plan: JobPlan) -> AllocationRequest:
        found = self._placement(plan)
        setup = host_setup(plan.run, found, self.starter,
                           lambda host, gpus: self.start_argv(host, plan.job_id, os.environ,
                                                              gpus))
        allocation = f"{self.system} {self.allocation_id(os.environ)}"
        return AllocationRequest(plan=plan, setup=setup, hosts_from=found.source,
                                 allocation=allocation, controller_backend=self.name)

    # ------------------------------------------------------------------ controller
    def controller_config(self, request: AllocationRequest) -> Dict[str, Any]:
        return to_data(request.setup)

    @classmethod
    def make_controller(cls, plan: RunPlan, config: Dict[str, Any],
                        attempt: Optional[Any] = None) -> Controller:
        return SshController.from_config(plan, config, attempt)

    def launch(self, request: AllocationRequest, layout: RunLayout,
               rollback: Rollback) -> AllocationHandle:
        handle = super().launch(request, layout, rollback)
        return AllocationHandle(controller_pid=handle.controller_pid, host=handle.host,
                                controller_started=handle.controller_started,
                                allocation=self.allocation_id(os.environ))


class SlurmStepsBackend(AllocationBackend[SlurmOptions]):
    """Inside a Slurm allocation: one ``srun --overlap`` step a node."""

    name = "slurm-steps"
    options_class = SlurmOptions
    options_key = "slurm"
    allocation_variable = placements.SLURM_JOB_ID
    system = "Slurm allocation"
    starter = StarterKind.SRUN
    tools = ("srun", "scontrol", "squeue", "scancel")
    where_hint = "salloc, an sbatch script or srun --pty"
    more_gpus_hint = ("ask for an allocation with more GPUs, salloc/sbatch --gres=gpu:N "
                      "(N a node) or --gpus-per-node=N, or lower the roles' resources.gpus")

    def placement(self, plan: JobPlan, environ: Mapping[str, str]) -> placements.Placement:
        found = placements.slurm_allocation(environ, len(plan.run.tasks))
        if any(task.gpus for task in plan.run.tasks):
            found = placements.with_slurm_gpus(found, self.allocation_id(environ))
        return found

    def start_argv(self, host: str, job_id: str, environ: Mapping[str, str],
                   gpus: Optional[int] = None) -> List[str]:
        return srun_argv("srun", self.allocation_id(environ), host, job_id, [], gpus)

    def sweep(self, record: JobRecord, run: RunPlan) -> None:
        """Cancel the job's steps still in the allocation (by their name); never the
        allocation itself."""
        allocation = AllocationHandle.from_dict(record.handle).allocation  # type: ignore
        for step in job_steps(allocation, record.job_id):
            subprocess.run(["scancel", step], capture_output=True, timeout=30, check=False)


def job_steps(allocation: str, job_id: str) -> List[str]:
    """The ids (``16.3``) of the steps of ``allocation`` that belong to job ``job_id``."""
    if not allocation:
        return []
    try:
        result = subprocess.run(["squeue", "--noheader", "--steps", "--jobs", allocation,
                                 "--format", "%i %j"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    name = step_name(job_id)
    return [line.split()[0] for line in result.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1] == name]


class SgePeBackend(AllocationBackend[SgeOptions]):
    """Inside an SGE parallel-environment job: one ``qrsh -inherit`` agent a host."""

    name = "sge-pe"
    options_class = SgeOptions
    options_key = "sge"
    allocation_variable = placements.PE_HOSTFILE
    system = "SGE parallel job"
    starter = StarterKind.QRSH
    tools = ("qrsh",)
    where_hint = "a job submitted with qsub -pe PE N (a PE with control_slaves TRUE)"
    more_hint = "submit with more slots, qsub -pe PE N, or run fewer tasks"

    def allocation_id(self, environ: Mapping[str, str]) -> str:
        return environ.get(placements.SGE_JOB_ID, "")

    def placement(self, plan: JobPlan, environ: Mapping[str, str]) -> placements.Placement:
        return placements.pe_hostfile(environ[placements.PE_HOSTFILE])

    def start_argv(self, host: str, job_id: str, environ: Mapping[str, str],
                   gpus: Optional[int] = None) -> List[str]:
        return qrsh_argv("qrsh", host)

