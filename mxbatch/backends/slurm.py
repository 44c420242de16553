"""Slurm backend: one ``sbatch --array`` per role group, or with ``het: true`` one
heterogeneous job (scheduler : servers : workers) whose components start together.

Status comes from ``squeue`` (never ``sacct``: accounting is optional), cancel from
``scancel``. ``submitter: drmaa`` uses a Slurm DRMAA library named by
``DRMAA_LIBRARY_PATH`` (slurm-drmaa; none is packaged for Debian or PyPI).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import BackendUnavailable, CommandError
from ..plan import JobPlan
from ..quoting import shell_words
from ..runtime.layout import RunLayout
from ..runtime.planfile import RunPlan
from ..runtime.roles import Role
from ..status import NativeState, TaskKey
from ..typed import option
from ..units import format_duration
from . import drmaa as drmaa_glue
from .base import Handle, Rollback
from .batch import (
    BatchBackend,
    BatchRequest,
    Directive,
    RoleGroup,
    directive_lines,
    job_name,
    native_directives,
    render_jobscript,
    role_groups,
    runtime_argv,
)

SBATCH_JOB_ID = re.compile(r"^(?P<job_id>\d+)(?:;\S+)?\s*$", re.MULTILINE)
CONTROLLER_DOWN = re.compile(r"Unable to contact slurm controller|Connection refused|"
                             r"Zero Bytes were transmitted|Socket timed out", re.IGNORECASE)
#: squeue's long state names -> what the queue says of a task
NATIVE_STATES: Dict[str, NativeState] = {
    **{s: NativeState.QUEUED for s in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                                       "REQUEUE_FED", "RESV_DEL_HOLD", "RESIZING")},
    **{s: NativeState.ACTIVE for s in ("RUNNING", "COMPLETING", "SUSPENDED", "SIGNALING",
                                       "STAGE_OUT", "STOPPED")},
    **{s: NativeState.GONE for s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                     "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                                     "PREEMPTED", "REVOKED", "SPECIAL_EXIT")},
}
SQUEUE_FORMAT = "%i|%F|%K|%T"


class Submitter(str, enum.Enum):
    AUTO = "auto"
    DRMAA = drmaa_glue.SUBMITTER
    SBATCH = "sbatch"


class GpuFlag(str, enum.Enum):
    GRES = "gres"      # --gres=gpu:N
    GPUS = "gpus"      # --gpus-per-task=N


#: the name of the one script of a heterogeneous job (``jobs/het.sh``)
HET_SCRIPT = "het"


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """``backends.slurm``."""

    submitter: Submitter = option(Submitter.AUTO, "how to submit: sbatch, drmaa (a Slurm "
                                  "DRMAA library in DRMAA_LIBRARY_PATH), or auto")
    partition: Optional[str] = option(None, "the partition (--partition)")
    account: Optional[str] = option(None, "the account (--account)")
    qos: Optional[str] = option(None, "the quality of service (--qos)")
    constraint: Optional[str] = option(None, "node features (--constraint)")
    het: bool = option(False, "one heterogeneous job whose components start together, "
                              "instead of an array job per role")
    gpu_flag: GpuFlag = option(GpuFlag.GRES, "how to ask for GPUs: gres (--gres=gpu:N) or "
                               "gpus (--gpus-per-task=N)")
    extra: Tuple[str, ...] = option((), "more sbatch options, passed last and unchanged")


@dataclasses.dataclass(frozen=True)
class SlurmHandle(Handle):
    """The array job of each role group, or the one heterogeneous job."""

    submitter: Submitter
    job_ids: Dict[Role, str] = dataclasses.field(default_factory=dict)
    het_job_id: Optional[str] = None


def native_state(name: str) -> NativeState:
    return NATIVE_STATES.get(name.split()[0].rstrip("+") if name else "", NativeState.UNKNOWN)


def parse_squeue(text: str) -> Dict[Tuple[str, str], str]:
    """``{(job id, array task id or het offset): state}`` from ``squeue -r -o %i|%F|%K|%T``.

    Array tasks key on (array job id, task id); heterogeneous components on
    (leader id, offset) from ``%i`` = ``<leader>+<offset>``.
    """
    states: Dict[Tuple[str, str], str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4:
            continue
        job, array_job, array_task, state = parts
        het = re.fullmatch(r"(\d+)\+(\d+)", job)
        if het:
            states[(het.group(1), het.group(2))] = state
        elif array_task not in ("", "N/A"):
            states[(array_job, array_task)] = state
        else:
            states[(job, "")] = state
    return states


class SlurmBackend(BatchBackend[SlurmHandle]):
    name = "slurm"
    script_template = "slurm.sh"
    directive_prefix = "#SBATCH"
    output_prefix = "slurm"
    options_class = SlurmOptions
    handle_class = SlurmHandle
    options: SlurmOptions
    scheduler = "Slurm"
    daemon = "slurmctld"
    unreachable = CONTROLLER_DOWN
    unreachable_hint = "is slurmctld running? check `scontrol ping` and SLURM_CONF"
    rejection_hint = ("check backends.slurm (partition, account, qos, constraint, extra) "
                      "against `sinfo` and `sacctmgr`")
    job_id_pattern = SBATCH_JOB_ID
    daemon_probe = ("scontrol", "ping")
    drmaa_extra_args = ("--array-base", "1")  # slurm-drmaa numbers array tasks from 1

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        """The submitter to use: ``auto`` resolved (DRMAA when a library is named)."""
        if self.options.submitter is Submitter.AUTO:
            usable = bool(os.environ.get("DRMAA_LIBRARY_PATH")) and \
                drmaa_glue.python_binding_available()
            return Submitter.DRMAA if usable and not self.options.het else Submitter.SBATCH
        return self.options.submitter

    def submitter_name(self) -> str:
        return self.submitter().value

    def check(self, plan: JobPlan) -> None:
        if self.options.het and self.options.submitter is Submitter.DRMAA:
            raise plan.spec.error(("backends", "slurm", "het"),
                                  "heterogeneous jobs need submitter: sbatch")

    def check_environment(self) -> None:
        if self.submitter() is Submitter.DRMAA:
            if not os.environ.get("DRMAA_LIBRARY_PATH"):
                raise BackendUnavailable("submitter drmaa needs DRMAA_LIBRARY_PATH pointing at "
                                         "a Slurm DRMAA library (slurm-drmaa)")
            if not drmaa_glue.python_binding_available():
                raise BackendUnavailable("the drmaa package is missing: "
                                         "pip install 'mxbatch[drmaa]'")
        for tool in ("sbatch", "squeue", "scancel"):
            if shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH: install the Slurm client "
                                         "(slurm-client) or fix PATH")

    # ------------------------------------------------------------------ rendering
    def resource_directives(self, group: RoleGroup, per_cpu_memory: bool) -> List[Directive]:
        task = group.first
        options = self.options
        result = [Directive("--cpus-per-task", (str(task.cpus),), "=")]
        if task.memory_mib:
            if per_cpu_memory:
                per_cpu = -(-task.memory_mib // task.cpus)
                result.append(Directive("--mem-per-cpu", (f"{per_cpu}M",), "="))
            else:
                result.append(Directive("--mem", (f"{task.memory_mib}M",), "="))
        if task.gpus:
            if options.gpu_flag is GpuFlag.GPUS:
                result.append(Directive("--gpus-per-task", (str(task.gpus),), "="))
            else:
                result.append(Directive("--gres", (f"gpu:{task.gpus}",), "="))
        if task.walltime_s:
            result.append(Directive("--time", (format_duration(task.walltime_s),), "="))
        for flag, value in (("--partition", options.partition), ("--account", options.account),
                            ("--qos", options.qos), ("--constraint", options.constraint)):
            if value:
                result.append(Directive(flag, (value,), "="))
        return result

    def common_directives(self, plan: JobPlan) -> List[Directive]:
        return [Directive("--export", ("ALL" if plan.run.inherit_env else "NONE",), "=")]

    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """An array job of one role group, as its job script carries it."""
        return ([Directive("--job-name", (job_name(plan, group.role),), "="),
                 Directive("--array", (f"0-{group.count - 1}",), "="),
                 Directive("--ntasks", ("1",), "="),
                 Directive("--chdir", (plan.run.run_dir,), "="),
                 Directive("--output", (self.output_path(plan, group, "%a"),), "=")]
                + self.common_directives(plan)
                + self.resource_directives(group, per_cpu_memory=False)
                + native_directives(self.options.extra))

    def het_script(self, plan: JobPlan) -> str:
        blocks = []
        components = []
        for offset, group in enumerate(role_groups(plan.run)):
            directives = [Directive("--ntasks", (str(group.count),), "=")]
            if offset == 0:
                output = plan.run.layout.batch_output_single(self.output_prefix, HET_SCRIPT)
                directives = [Directive("--job-name", (plan.job_id,), "="),
                              Directive("--chdir", (plan.run.run_dir,), "="),
                              Directive("--output", (output,), "="),
                              *self.common_directives(plan), *directives]
            directives += self.resource_directives(group, per_cpu_memory=True)
            directives += native_directives(self.options.extra)
            blocks.append(directive_lines(self.directive_prefix, directives))
            argv = runtime_argv(plan, group.role)[:-2] + ["--task-from", "SLURM_PROCID"]
            components.append(f"--het-group={offset} {shell_words(argv)}")
        return render_jobscript(
            "slurm-het.sh", job_id=plan.job_id,
            directives=f"\n{self.directive_prefix} hetjob\n".join(blocks),
            command="srun --kill-on-bad-exit=0 " + " : ".join(components))

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        if self.options.het:
            return {HET_SCRIPT: self.het_script(plan)}
        return super().scripts(plan)

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        return (self.common_directives(plan)
                + self.resource_directives(group, per_cpu_memory=False)
                + native_directives(self.options.extra))

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout,
               rollback: Rollback) -> SlurmHandle:
        submitter = Submitter(request.submitter)
        if submitter is Submitter.DRMAA:
            return SlurmHandle(submitter=submitter, job_ids=self.submit_drmaa(request, rollback))
        ids = self.submit_scripts(request, layout, rollback)
        if HET_SCRIPT in ids:
            return SlurmHandle(submitter=submitter, het_job_id=ids[HET_SCRIPT])
        return SlurmHandle(submitter=submitter, job_ids={Role(n): i for n, i in ids.items()})

    def submit_argv(self, script: Path) -> List[str]:
        return ["sbatch", "--parsable", str(script)]

    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        return drmaa_glue.DrmaaClient(os.environ["DRMAA_LIBRARY_PATH"], "Slurm")

    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        """``["12_1", "12_2"]`` -> ``"12"``."""
        return task_ids[0].split("_")[0]

    # ------------------------------------------------------------------ watching
    def native_states(self, handle: SlurmHandle, run: RunPlan
                      ) -> Tuple[Dict[TaskKey, NativeState], Dict[TaskKey, str]]:
        argv = ["squeue", "--noheader", "--array", "--format", SQUEUE_FORMAT,
                "--jobs", ",".join(_job_ids(handle))]
        result = self.run_command(argv, timeout=30, check=False)
        if result.returncode != 0 and "Invalid job id" not in result.stderr:
            raise self.translate(CommandError(argv, result.returncode, result.stdout,
                                              result.stderr))
        queue = parse_squeue(result.stdout if result.returncode == 0 else "")
        native, ids = {}, {}
        offsets = {g.role: i for i, g in enumerate(role_groups(run))}
        for task in run.tasks:
            key = (task.role, task.rank)
            if handle.het_job_id is not None:
                leader = handle.het_job_id
                state = queue.get((leader, str(offsets[task.role])))
                ids[key] = f"{leader}+{offsets[task.role]}"
            else:
                number = handle.job_ids.get(task.role, "")
                state = queue.get((number, str(task.rank)))
                ids[key] = f"{number}_{task.rank}"
            native[key] = NativeState.GONE if state is None else native_state(state)
        return native, ids

    def delete(self, handle: SlurmHandle, force: bool = False) -> None:
        self.delete_ids(_job_ids(handle), force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["scancel", *(["--signal=KILL", "--full"] if force else []),
                              *job_ids], check=False, timeout=30)


def _job_ids(handle: SlurmHandle) -> List[str]:
    """Every Slurm job id of the job (the arrays' or the heterogeneous job's)."""
    return [handle.het_job_id] if handle.het_job_id else list(handle.job_ids.values())
