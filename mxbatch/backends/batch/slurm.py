"""Slurm backend: one ``sbatch --array`` per role group, or with ``het: true`` one
heterogeneous job (scheduler : servers : workers) whose components start together.

Status comes from ``squeue`` (never ``sacct``: accounting is optional), cancel from
``scancel``. ``submitter: drmaa`` uses a Slurm DRMAA library named by
``DRMAA_LIBRARY_PATH`` (slurm-drmaa; none is packaged for Debian or PyPI).

Quoting (Slurm 22.05, measured): a ``#SBATCH`` line is split at blanks outside quotes;
' and " quote, a backslash escapes the next character everywhere (inside quotes too, but
it cannot escape a blank outside them), an unquoted ``#`` starts a comment. Values are
written in single quotes with ``\\`` and ``'`` backslash-escaped. In ``--output`` a
``%`` starts a file-name pattern (``%%`` is a literal one) and a backslash breaks the
task's launch, so a run directory with a backslash is a spec error. slurm-drmaa splits
its native specification at blanks with no quoting at all and takes long options only
as ``--name=value``.

Restarts: the job scripts get ``--no-requeue`` (the driver relaunches every role
together; Slurm's own requeue after a node failure or a preemption would bring back one
array task into an attempt that has ended) and, with a walltime, ``--signal=B:USR1@lead``
(Slurm's warning to the supervisor ``restarts.checkpoint_lead`` before the time limit:
reason walltime). SIGTERM to a supervisor is a preemption (Slurm sends it on preemption;
a ``scancel`` by hand looks the same: ``mxbatch cancel`` is the way to cancel). A later
attempt is ``sbatch --export=...,MXBATCH_ATTEMPT=k --output=attempts/k/... --exclude=``
the hosts of its node failures. An array task Slurm ended with its node (``NODE_FAIL``:
the supervisor's record may still say RUNNING, its node being unreachable) is a node
failure of that node (``lost_end``, from ``squeue --states=all``).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shutil
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from ...errors import BackendUnavailable, CommandError, MxbatchError
from ...quoting import shell_words
from ...runtime.attempts import AttemptEnd
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.roles import Role
from ...runtime.states import EndReason
from ...runtime.trust import user_name
from ...spec.plan import JobPlan
from ...spec.typed import Seconds, option
from ...spec.units import format_duration
from ..base import Handle, Rollback
from ..hosts import placement
from ..status import NativeState
from . import drmaa as drmaa_glue
from .common import (
    BatchBackend,
    BatchRequest,
    Inside,
    NativeView,
    attempt_variables,
    inside_help,
)
from .jobscript import (
    RUN_DIR_SOURCE,
    Directive,
    RoleGroup,
    Unrepresentable,
    directive_lines,
    job_id_export,
    job_name,
    native_directives,
    render_jobscript,
    role_groups,
    runtime_argv,
)
from .queueview import (
    DEFAULT_POLL_INTERVAL_S,
    POLL_INTERVAL_HELP,
    USUAL,
    ViewScope,
)

SBATCH_JOB_ID = re.compile(r"^(?P<job_id>\d+)(?:;\S+)?\s*$", re.MULTILINE)
#: sbatch/squeue/scancel output that means Slurm cannot be reached or is not configured
CONTROLLER_DOWN = re.compile(r"Unable to contact slurm controller|Connection refused|"
                             r"Zero Bytes were transmitted|Socket timed out|"
                             r"Could not establish a configuration source|"
                             r"Unable to process configuration file|"
                             r"Communication connection failure", re.IGNORECASE)
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
#: a token an ``#SBATCH`` line carries as it is
_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
#: a long option with its value in one token
_LONG_WITH_VALUE = re.compile(r"(?P<flag>--[A-Za-z0-9-]+=)(?P<value>.*)", re.DOTALL)
#: stands for the array index while an output path is escaped
_INDEX = "\0"


class Submitter(str, enum.Enum):
    AUTO = "auto"
    DRMAA = drmaa_glue.SUBMITTER
    SBATCH = "sbatch"


class GpuFlag(str, enum.Enum):
    GRES = "gres"      # --gres=gpu:N (per node)
    GPUS = "gpus"      # --gpus-per-task=N


#: the name of the one script of a heterogeneous job (``jobs/het.sh``)
HET_SCRIPT = "het"


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """``backends.slurm``."""

    submitter: Submitter = option(Submitter.AUTO, "how to submit: sbatch, drmaa (a Slurm "
                                  "DRMAA library in DRMAA_LIBRARY_PATH), or auto (drmaa "
                                  "when that library is a Slurm one)")
    partition: Optional[str] = option(None, "the partition (--partition)")
    account: Optional[str] = option(None, "the account (--account)")
    qos: Optional[str] = option(None, "the quality of service (--qos)")
    poll_interval: Seconds = option(Seconds(DEFAULT_POLL_INTERVAL_S), POLL_INTERVAL_HELP)
    constraint: Optional[str] = option(None, "node features (--constraint)")
    het: bool = option(False, "one heterogeneous job whose components start together, "
                              "instead of an array job per role")
    gpu_flag: GpuFlag = option(GpuFlag.GRES, "how to ask for GPUs: gres (--gres=gpu:N per "
                               "node; het components with several tasks also get "
                               "--ntasks-per-node=1) or gpus (--gpus-per-task=N)")
    extra: Tuple[str, ...] = option((), "more sbatch options, passed last and unchanged")
    inside: Inside = option(Inside.AUTO, inside_help(
        "Slurm allocation (SLURM_JOB_ID: salloc, sbatch, srun --pty), one srun step a node,"))


@dataclasses.dataclass(frozen=True)
class SlurmHandle(Handle):
    """The array job of each role group, or the one heterogeneous job."""

    submitter: Submitter
    job_ids: Dict[Role, str] = dataclasses.field(default_factory=dict)
    het_job_id: Optional[str] = None

    @property
    def array_base(self) -> int:
        """The array index of rank 0: DRMAA bulk jobs (``runBulkJobs(jt, 1, N, 1)``) are
        numbered from 1, ``sbatch --array=0-N`` from 0."""
        return 1 if self.submitter is Submitter.DRMAA else 0


def native_state(name: str) -> NativeState:
    return NATIVE_STATES.get(name.split()[0].rstrip("+") if name else "", NativeState.UNKNOWN)


#: the limits of ``scontrol show config`` that ``check_limits`` reads
LIMIT_NAMES = ("MaxArraySize", "MaxJobCount")


def parse_limits(text: str) -> Dict[str, str]:
    """``{name: value}`` of the ``LIMIT_NAMES`` in ``scontrol show config``'s
    ``Name = value`` lines."""
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() in LIMIT_NAMES:
            found[name.strip()] = value.strip()
    return found


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


def quote_value(value: str) -> str:
    """``value`` for an ``#SBATCH`` line: bare when safe, else in single quotes with
    ``\\`` and ``'`` escaped (the parser unescapes inside quotes too)."""
    if "\n" in value or "\r" in value:
        raise Unrepresentable("an #SBATCH directive is one line")
    if _BARE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def script_token(token: str) -> str:
    """One token of an ``#SBATCH`` line (``--chdir='/a b'`` keeps the flag readable)."""
    match = _LONG_WITH_VALUE.fullmatch(token)
    if match and not _BARE.fullmatch(token):
        return match.group("flag") + quote_value(match.group("value"))
    return quote_value(token)


def drmaa_token(token: str) -> str:
    """One token of slurm-drmaa's native specification: no quoting exists there."""
    if re.search(r"\s", token) or not token:
        raise Unrepresentable("slurm-drmaa splits its native specification at blanks and "
                              "has no quoting")
    if token.startswith("--") and token.count("=") > 1:
        raise Unrepresentable("slurm-drmaa cuts a long option's value at its first '='")
    return token


def output_pattern(path_with_index: str, index: str) -> str:
    """An output path for ``--output``: ``%`` doubled (a literal one), then the array
    index placeholder ``index`` (``%a``) put where ``_INDEX`` stands."""
    return path_with_index.replace("%", "%%").replace(_INDEX, index)


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
    rejection_hint = ("check backends.slurm (partition, account, qos, constraint, extra) "
                      "against `sinfo` and `sacctmgr`")
    job_id_pattern = SBATCH_JOB_ID
    daemon_probe = ("scontrol", "ping")
    drmaa_extra_args = ("--array-base", "1")  # slurm-drmaa numbers array tasks from 1
    #: SIGTERM: a preemption (or a scancel by hand); SIGUSR1: --signal=B:USR1@lead
    signal_ends: ClassVar[Dict[str, str]] = {"SIGTERM": EndReason.PREEMPTED.value,
                                             "SIGUSR1": EndReason.WALLTIME.value}
    inside_backend = "slurm-steps"
    allocation_variable = placement.SLURM_JOB_ID
    drm_system = drmaa_glue.DrmSystem.SLURM
    native_submitter = Submitter.SBATCH.value

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        """The submitter to use: ``auto`` resolved (DRMAA when the library named by
        ``DRMAA_LIBRARY_PATH`` is a Slurm one and the job no heterogeneous one)."""
        if self.options.submitter is Submitter.AUTO:
            if self.options.het or not self.auto_uses_drmaa():
                return Submitter.SBATCH
            return Submitter.DRMAA
        return self.options.submitter

    def drmaa_library(self) -> Optional[str]:
        return os.environ.get("DRMAA_LIBRARY_PATH") or None

    def submitter_name(self) -> str:
        return self.submitter().value

    def unreachable_hint(self) -> str:
        conf = os.environ.get("SLURM_CONF")
        where = (f"SLURM_CONF={conf}" if conf else
                 "SLURM_CONF is unset (so /etc/slurm/slurm.conf, then DNS SRV records)")
        return (f"is slurmctld running (`scontrol ping`)? {where}: set SLURM_CONF to the "
                "cluster's slurm.conf")

    def check_config(self) -> None:
        """A SLURM_CONF naming no file: say so at once (Slurm's tools retry for 60 s)."""
        conf = os.environ.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):
            raise BackendUnavailable(f"SLURM_CONF={conf}: no such file\n"
                                     "set SLURM_CONF to the cluster's slurm.conf")

    def check_limits(self, plan: JobPlan) -> None:
        """An array larger than the cluster's ``MaxArraySize`` (``scontrol show config``,
        ``site_limits``) is refused, naming the limit and the ways around it."""
        if self.options.het:
            return  # one heterogeneous job: no arrays
        limits = self.site_limits()
        largest = limits.get("MaxArraySize")
        if not largest:
            return
        base = 1 if self.submitter() is Submitter.DRMAA else 0  # SlurmHandle.array_base
        for group in role_groups(plan.run):
            top = group.count - 1 + base
            if top >= largest:
                raise plan.spec.error(
                    ("roles", group.role.value, "count"),
                    f"{group.count} {group.role.value}s make a Slurm array with task ids up "
                    f"to {top}, but this cluster's MaxArraySize is {largest} (ids up to "
                    f"{largest - 1}; `scontrol show config`)",
                    f"use at most {largest - base} {group.role.value}s, or "
                    "backends.slurm.het: true (one heterogeneous job, no arrays), or ask the "
                    "admins for a larger MaxArraySize")

    def read_limits(self) -> Dict[str, str]:
        """``MaxArraySize`` and ``MaxJobCount`` of ``scontrol show config``."""
        result = self.run_command(["scontrol", "show", "config"], timeout=30, check=False)
        return parse_limits(result.stdout)

    def check(self, plan: JobPlan) -> None:
        slurm = ("backends", "slurm")
        drmaa = self.submitter() is Submitter.DRMAA
        if self.options.het and self.options.submitter is Submitter.DRMAA:
            raise plan.spec.error((*slurm, "het"), "heterogeneous jobs need submitter: sbatch")
        if drmaa and self.options.gpu_flag is GpuFlag.GPUS and \
                any(t.gpus for t in plan.run.tasks):
            raise plan.spec.error((*slurm, "gpu_flag"), "slurm-drmaa has no --gpus-per-task",
                                  "use gpu_flag: gres, or submitter: sbatch")
        if "\\" in plan.run.run_dir and not drmaa:
            raise plan.spec.error(
                RUN_DIR_SOURCE, f"{plan.run.run_dir!r} has a backslash, which Slurm's "
                "--output takes as 'no file-name patterns' (the task then fails to launch)",
                "choose a run directory without a backslash")
        super().check(plan)

    def check_environment(self) -> None:
        if self.submitter() is Submitter.DRMAA:
            if not os.environ.get("DRMAA_LIBRARY_PATH"):
                raise BackendUnavailable("submitter drmaa needs DRMAA_LIBRARY_PATH pointing at "
                                         "a Slurm DRMAA library (slurm-drmaa)")
            if not drmaa_glue.python_binding_available():
                raise BackendUnavailable("the drmaa package is missing: "
                                         "pip install 'mxbatch[drmaa]'")
            self.check_drmaa_library()
        for tool in ("sbatch", "squeue", "scancel"):
            if shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH: install the Slurm client "
                                         "(slurm-client) or fix PATH")
        self.check_config()

    # ------------------------------------------------------------------ rendering
    def script_token(self, token: str) -> str:
        return script_token(token)

    def drmaa_token(self, token: str) -> str:
        return drmaa_token(token)

    def gpu_directives(self, task_gpus: int) -> List[Directive]:
        """What asks for ``task_gpus`` GPUs for each task (``--gres`` is per node)."""
        if not task_gpus:
            return []
        if self.options.gpu_flag is GpuFlag.GPUS:
            return [Directive("--gpus-per-task", (str(task_gpus),), "=")]
        return [Directive("--gres", (f"gpu:{task_gpus}",), "=")]

    def resource_directives(self, group: RoleGroup, per_cpu_memory: bool,
                            memory_unit: str = "M") -> List[Directive]:
        task = group.first
        options = self.options
        slurm = ("backends", "slurm")
        result = [Directive("--cpus-per-task", (str(task.cpus),), "=")]
        if task.memory_mib:
            if per_cpu_memory:
                per_cpu = -(-task.memory_mib // task.cpus)
                result.append(Directive("--mem-per-cpu", (f"{per_cpu}{memory_unit}",), "="))
            else:
                result.append(Directive("--mem", (f"{task.memory_mib}{memory_unit}",), "="))
        result += self.gpu_directives(task.gpus)
        if task.walltime_s:
            result.append(Directive("--time", (format_duration(task.walltime_s),), "="))
        for flag, key, value in (("--partition", "partition", options.partition),
                                 ("--account", "account", options.account),
                                 ("--qos", "qos", options.qos),
                                 ("--constraint", "constraint", options.constraint)):
            if value:
                result.append(Directive(flag, (value,), "=", source=(*slurm, key)))
        return result

    def extra_directives(self) -> List[Directive]:
        return native_directives(self.options.extra, ("backends", "slurm", "extra"))

    def common_directives(self, plan: JobPlan) -> List[Directive]:
        return [Directive("--export", ("ALL" if plan.run.inherit_env else "NONE",), "=")]

    def output_directive(self, path_with_index: str, index: str) -> Directive:
        return Directive("--output", (output_pattern(path_with_index, index),), "=",
                         source=RUN_DIR_SOURCE)

    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """An array job of one role group, as its job script carries it."""
        return ([Directive("--job-name", (job_name(plan, group.role),), "="),
                 Directive("--array", (f"0-{group.count - 1}",), "="),
                 Directive("--ntasks", ("1",), "="),
                 Directive("--chdir", (plan.run.run_dir,), "=", source=RUN_DIR_SOURCE),
                 self.output_directive(self.output_path(plan, group, _INDEX), "%a")]
                + self.common_directives(plan)
                + self.resource_directives(group, per_cpu_memory=False)
                + self.extra_directives())

    def het_components(self, plan: JobPlan) -> List[List[Directive]]:
        """The directives of each component of the heterogeneous job, in task order."""
        components = []
        for offset, group in enumerate(role_groups(plan.run)):
            directives = [Directive("--ntasks", (str(group.count),), "=")]
            if offset == 0:
                output = plan.run.layout.batch_output_single(self.output_prefix, HET_SCRIPT)
                directives = [Directive("--job-name", (plan.job_id,), "="),
                              Directive("--chdir", (plan.run.run_dir,), "=",
                                        source=RUN_DIR_SOURCE),
                              self.output_directive(output, ""),
                              *self.common_directives(plan),
                              *self.restart_directives(plan.run, group), *directives]
            if group.first.gpus and self.options.gpu_flag is GpuFlag.GRES and group.count > 1:
                # --gres is per node: one task per node gets each task its GPUs
                directives.append(Directive("--ntasks-per-node", ("1",), "="))
            directives += self.resource_directives(group, per_cpu_memory=True)
            directives += self.extra_directives()
            components.append(directives)
        return components

    def het_step(self, plan: JobPlan) -> str:
        """The one ``srun`` that starts every task: per component its task's cpus and GPUs
        (Slurm 22.05's srun does not take --cpus-per-task from the job)."""
        parts = []
        for offset, group in enumerate(role_groups(plan.run)):
            options = [f"--het-group={offset}", f"--cpus-per-task={group.first.cpus}"]
            options += [t for d in self.gpu_directives(group.first.gpus) for t in d.argv()]
            argv = runtime_argv(plan, task_from="SLURM_PROCID")
            parts.append(shell_words(options + argv))
        return "srun --kill-on-bad-exit=0 " + " : ".join(parts)

    def het_script(self, plan: JobPlan) -> str:
        blocks = [directive_lines(self.directive_prefix, c, self.script_token)
                  for c in self.het_components(plan)]
        return render_jobscript(
            "slurm-het.sh", job_id=plan.job_id,
            directives=f"\n{self.directive_prefix} hetjob\n".join(blocks),
            export=job_id_export(plan), command=self.het_step(plan))

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        if self.options.het:
            return {HET_SCRIPT: self.het_script(plan)}
        return super().scripts(plan)

    # ------------------------------------------------------------------ restarts
    def restart_directives(self, run: RunPlan, group: RoleGroup) -> List[Directive]:
        """``--no-requeue``; with a walltime, the warning before it (``--signal``)."""
        restarts = run.restarts
        if not restarts.enabled:
            return []
        result = [Directive("--no-requeue")]
        walltime = group.first.walltime_s
        if walltime and restarts.restarts_on(EndReason.WALLTIME):
            lead = int(min(restarts.checkpoint_lead_s, walltime / 2, 65535))
            result.append(Directive("--signal", (f"B:USR1@{max(lead, 1)}",), "="))
        return result

    def attempt_options(self, run: RunPlan, name: str, attempt: AttemptContext) -> List[str]:
        layout = run.layout_of(attempt.index)
        if name == HET_SCRIPT:
            output = output_pattern(layout.batch_output_single(self.output_prefix, HET_SCRIPT),
                                    "")
        else:
            output = output_pattern(layout.batch_output(self.output_prefix, name, _INDEX), "%a")
        variables = ",".join(f"{k}={v}" for k, v in attempt_variables(attempt).items())
        options = [f"--output={output}",
                   f"--export={'ALL,' if run.inherit_env else ''}{variables}"]
        if attempt.excluded:
            options.append(f"--exclude={','.join(attempt.excluded)}")
        return options

    def attempt_template(self, run, template, attempt):
        raise MxbatchError("relaunching a job submitted through slurm-drmaa is not "
                           "supported: use backends.slurm.submitter: sbatch")

    def handle_from_ids(self, submitter: str, ids: Dict[str, str]) -> SlurmHandle:
        if HET_SCRIPT in ids:
            return SlurmHandle(submitter=Submitter(submitter), het_job_id=ids[HET_SCRIPT])
        return SlurmHandle(submitter=Submitter(submitter),
                           job_ids={Role(n): i for n, i in ids.items()})

    def lost_end(self, record, handle: SlurmHandle, run: RunPlan,
                 lost: List[Any]) -> Optional[AttemptEnd]:
        """What Slurm says of the lost tasks (``squeue --states=all``): their node
        failed (``NODE_FAIL``: a node failure of the node), they were preempted, or hit
        their time limit."""
        argv = ["squeue", "--noheader", "--array", "--states=all", "--format",
                "%i|%F|%K|%T|%N", "--jobs", ",".join(_job_ids(handle))]
        result = self.run_command(argv, timeout=30, check=False)
        seen: Dict[str, Tuple[str, str]] = {}
        for line in result.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 5:
                continue
            job, array_job, array_task, state, node = parts
            key = job if "+" in job else (f"{array_job}_{array_task}"
                                          if array_task not in ("", "N/A") else job)
            seen[key] = (state.split()[0] if state else "", node)
        ends = {"NODE_FAIL": EndReason.NODE_FAILURE, "PREEMPTED": EndReason.PREEMPTED,
                "TIMEOUT": EndReason.WALLTIME}
        for task in lost:
            state, node = seen.get(task.native or "", ("", ""))
            reason = ends.get(state)
            if reason is not None:
                hosts = (node or task.host,) if reason is EndReason.NODE_FAILURE else ()
                return AttemptEnd(reason, detail=f"{task.label} lost: Slurm says "
                                  f"{state} (node {node or task.host})", role=task.role.value,
                                  rank=task.rank, hosts=hosts)
        return None

    def check_directives(self, plan: JobPlan) -> List[List[Directive]]:
        if self.options.het:
            return self.het_components(plan)
        return super().check_directives(plan)

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """slurm-drmaa's options: no --export (it always passes the submitting
        environment on), memory in MB without a unit, long options as --name=value."""
        extra = [dataclasses.replace(d, joiner="=") if d.flag.startswith("--") and d.args
                 else d for d in self.extra_directives()]
        return self.resource_directives(group, per_cpu_memory=False, memory_unit="") + extra

    def drmaa_output(self, plan: JobPlan, group: RoleGroup) -> str:
        """Absolute: Slurm expands file-name patterns in the working directory joined
        with a relative path too."""
        return output_pattern(self.output_path(plan, group, _INDEX), "$drmaa_incr_ph$")

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout,
               rollback: Rollback) -> SlurmHandle:
        submitter = Submitter(request.submitter)
        if submitter is Submitter.DRMAA:
            return SlurmHandle(submitter=submitter, job_ids=self.submit_drmaa(request, rollback))
        return self.handle_from_ids(submitter.value, self.submit_scripts(request, rollback))

    def submit_argv(self, plan: JobPlan, script: str) -> List[str]:
        return ["sbatch", "--parsable", script]

    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        return drmaa_glue.DrmaaClient(os.environ["DRMAA_LIBRARY_PATH"], "Slurm",
                                      dict(os.environ), self.unreachable_hint())

    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        """``["12_1", "12_2"]`` -> ``"12"``."""
        return task_ids[0].split("_")[0]

    # ------------------------------------------------------------------ watching
    cell_keys: ClassVar[Tuple[str, ...]] = ("SLURM_CONF", "SLURM_CLUSTERS")

    def ask_queue(self) -> List[Tuple[str, ...]]:
        """Every task of this user's jobs Slurm lists (``squeue --user USER``, never every
        user's): rows ``(job id, array task id or het offset, state)``."""
        self.check_config()
        argv = ["squeue", "--noheader", "--array", "--format", SQUEUE_FORMAT,
                "--user", user_name(os.getuid())]
        result = self.run_command(argv, timeout=30, check=False)
        if result.returncode != 0:
            raise self.translate(CommandError(argv, result.returncode, result.stdout,
                                              result.stderr))
        return [(job, index, state)
                for (job, index), state in parse_squeue(result.stdout).items()]

    def native_view(self, handle: SlurmHandle, run: RunPlan,
                    scope: ViewScope = USUAL) -> NativeView:
        snapshot, unknown = self.queue_view().for_jobs(scope, _job_ids(handle))
        queue = {(row[0], row[1]): row[2] for row in snapshot.rows}
        view = NativeView(states={}, ids={})
        offsets = {g.role: i for i, g in enumerate(role_groups(run))}
        for task in run.tasks:
            key = (task.role, task.rank)
            if handle.het_job_id is not None:
                number = handle.het_job_id
                state = queue.get((number, str(offsets[task.role])))
                view.ids[key] = f"{number}+{offsets[task.role]}"
            else:
                number = handle.job_ids.get(task.role, "")
                index = str(task.rank + handle.array_base)
                state = queue.get((number, index))
                view.ids[key] = f"{number}_{index}"
            view.states[key] = (NativeState.QUEUED if number in unknown
                                else NativeState.GONE if state is None
                                else native_state(state))
        return view

    def listed(self, job_ids: Sequence[str]) -> bool:
        """``squeue`` lists a task of ``job_ids`` (pending, running or completing)."""
        argv = ["squeue", "--noheader", "--array", "--format", "%T", "--jobs", ",".join(job_ids)]
        try:
            result = self.run_command(argv, timeout=30, check=False)
        except MxbatchError:
            return False
        return result.returncode == 0 and bool(result.stdout.strip())

    def native_ids(self, handle: SlurmHandle) -> List[str]:
        return _job_ids(handle)

    def delete(self, handle: SlurmHandle, force: bool = False) -> None:
        self.delete_ids(_job_ids(handle), force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["scancel", *(["--signal=KILL", "--full"] if force else []),
                              *job_ids], check=False, timeout=30)


def _job_ids(handle: SlurmHandle) -> List[str]:
    """Every Slurm job id of the job (the arrays' or the heterogeneous job's)."""
    return [handle.het_job_id] if handle.het_job_id else list(handle.job_ids.values())
