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
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from ..errors import BackendUnavailable, CommandError
from ..plan import JobPlan
from ..records import JobRecord
from ..runtime.planfile import RunPlan
from ..spec import command_text
from ..status import NativeState, TaskKey
from ..units import format_duration
from . import drmaa as drmaa_glue
from .base import Submission
from .batch import (
    BatchBackend,
    Directive,
    RoleGroup,
    check_choice,
    directive_lines,
    flat_argv,
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
    DRMAA = "drmaa"
    SBATCH = "sbatch"


class GpuFlag(str, enum.Enum):
    GRES = "gres"      # --gres=gpu:N
    GPUS = "gpus"      # --gpus-per-task=N


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """``backends.slurm``."""

    submitter: str = "auto"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    het: bool = False
    gpu_flag: str = "gres"
    extra: Tuple[str, ...] = ()


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


class SlurmBackend(BatchBackend):
    name = "slurm"
    script_template = "slurm.sh"
    directive_prefix = "#SBATCH"
    options_class = SlurmOptions
    scheduler = "Slurm"
    daemon = "slurmctld"
    unreachable = CONTROLLER_DOWN
    unreachable_hint = "is slurmctld running? check `scontrol ping` and SLURM_CONF"
    rejection_hint = ("check backends.slurm (partition, account, qos, constraint, extra) "
                      "against `sinfo` and `sacctmgr`")
    job_id_pattern = SBATCH_JOB_ID

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        wanted = Submitter(self.options.submitter)
        if wanted is Submitter.AUTO:
            usable = bool(os.environ.get("DRMAA_LIBRARY_PATH")) and \
                drmaa_glue.python_binding_available()
            return Submitter.DRMAA if usable and not self.options.het else Submitter.SBATCH
        return wanted

    def check(self, plan: JobPlan) -> None:
        check_choice(plan, self.name, "submitter", self.options.submitter, Submitter)
        check_choice(plan, self.name, "gpu_flag", self.options.gpu_flag, GpuFlag)
        if self.options.het and self.options.submitter == Submitter.DRMAA.value:
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
        options: SlurmOptions = self.options
        result = [Directive("--cpus-per-task", (str(task.cpus),), "=")]
        if task.memory_mib:
            if per_cpu_memory:
                per_cpu = -(-task.memory_mib // task.cpus)
                result.append(Directive("--mem-per-cpu", (f"{per_cpu}M",), "="))
            else:
                result.append(Directive("--mem", (f"{task.memory_mib}M",), "="))
        if task.gpus:
            if options.gpu_flag == GpuFlag.GPUS.value:
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
        output = str(plan.run_dir / "logs" / f"slurm-{group.role.value}.%a.out")
        return ([Directive("--job-name", (job_name(plan, group.role),), "="),
                 Directive("--array", (f"0-{group.count - 1}",), "="),
                 Directive("--ntasks", ("1",), "="),
                 Directive("--chdir", (str(plan.run_dir),), "="),
                 Directive("--output", (output,), "=")]
                + self.common_directives(plan)
                + self.resource_directives(group, per_cpu_memory=False)
                + native_directives(self.options.extra))

    def het_script(self, plan: JobPlan) -> str:
        blocks = []
        components = []
        for offset, group in enumerate(role_groups(plan.run)):
            directives = [Directive("--ntasks", (str(group.count),), "=")]
            if offset == 0:
                directives = [Directive("--job-name", (plan.job_id,), "="),
                              Directive("--chdir", (str(plan.run_dir),), "="),
                              Directive("--output",
                                        (str(plan.run_dir / "logs" / "slurm-het.out"),), "="),
                              *self.common_directives(plan), *directives]
            directives += self.resource_directives(group, per_cpu_memory=True)
            directives += native_directives(self.options.extra)
            blocks.append(directive_lines(self.directive_prefix, directives))
            argv = runtime_argv(plan, group.role)[:-2] + ["--task-from", "SLURM_PROCID"]
            components.append(f"--het-group={offset} {command_text(argv)}")
        return render_jobscript(
            "slurm-het.sh", job_id=plan.job_id,
            directives=f"\n{self.directive_prefix} hetjob\n".join(blocks),
            command="srun --kill-on-bad-exit=0 " + " : ".join(components))

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        if self.options.het:
            return {"het": self.het_script(plan)}
        return super().scripts(plan)

    def template(self, plan: JobPlan, group: RoleGroup) -> drmaa_glue.TemplateSpec:
        """The DRMAA bulk job of one group (slurm-drmaa numbers array tasks from 1)."""
        argv = runtime_argv(plan, group.role) + ["--array-base", "1"]
        native = (self.common_directives(plan)
                  + self.resource_directives(group, per_cpu_memory=False)
                  + native_directives(self.options.extra))
        return drmaa_glue.TemplateSpec(
            remote_command=argv[0], args=argv[1:], job_name=job_name(plan, group.role),
            native=" ".join(shlex.quote(a) for a in flat_argv(native)),
            output_path=":" + str(plan.run_dir / "logs" /
                                  f"slurm-{group.role.value}.$drmaa_incr_ph$.out"),
            working_directory=str(plan.run_dir), count=group.count)

    # ------------------------------------------------------------------ submitting
    def submit_groups(self, submission: Submission, scripts: Mapping[str, Path]
                      ) -> Dict[str, object]:
        plan = submission.plan
        submitter = self.submitter()
        if submitter is Submitter.DRMAA:
            groups = role_groups(plan.run)
            client = drmaa_glue.DrmaaClient(os.environ["DRMAA_LIBRARY_PATH"], "Slurm")
            ids = client.submit([self.template(plan, g) for g in groups])
            job_ids = {g.role.value: i[0].split("_")[0] for g, i in zip(groups, ids)}
            return {"submitter": submitter.value, "job_ids": job_ids, "het": False}
        job_ids: Dict[str, str] = {}
        try:
            for name, script in scripts.items():
                job_ids[name] = self._sbatch(script)
        except BaseException:
            self._scancel(list(job_ids.values()))
            raise
        return {"submitter": submitter.value, "job_ids": job_ids, "het": self.options.het}

    def _sbatch(self, script: Path) -> str:
        return self.submit_script(["sbatch", "--parsable", str(script)])

    # ------------------------------------------------------------------ watching
    def native_states(self, record: JobRecord, run: RunPlan
                      ) -> Tuple[Dict[TaskKey, NativeState], Dict[TaskKey, str]]:
        job_ids: Dict[str, str] = record.native.get("job_ids", {})
        argv = ["squeue", "--noheader", "--array", "--format", SQUEUE_FORMAT,
                "--jobs", ",".join(job_ids.values())]
        result = self.run_command(argv, timeout=30, check=False)
        if result.returncode != 0 and "Invalid job id" not in result.stderr:
            raise self.translate(CommandError(argv, result.returncode, result.stdout,
                                              result.stderr))
        queue = parse_squeue(result.stdout if result.returncode == 0 else "")
        native, ids = {}, {}
        het = record.native.get("het", False)
        offsets = {g.role.value: i for i, g in enumerate(role_groups(run))}
        for task in run.tasks:
            key = (task.role, task.rank)
            if het:
                leader = job_ids.get("het", "")
                state = queue.get((leader, str(offsets[task.role])))
                ids[key] = f"{leader}+{offsets[task.role]}"
            else:
                number = job_ids.get(task.role, "")
                state = queue.get((number, str(task.rank)))
                ids[key] = f"{number}_{task.rank}"
            native[key] = NativeState.GONE if state is None else native_state(state)
        return native, ids

    def delete(self, record: JobRecord, force: bool = False) -> None:
        self._scancel(list(record.native.get("job_ids", {}).values()), force)

    def _scancel(self, job_ids: List[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["scancel", *(["--signal=KILL", "--full"] if force else []),
                              *job_ids], check=False, timeout=30)
