"""SGE backend (Son of Grid Engine, Univa/Altair GE): one array job per role group.

Submitted through DRMAA ``runBulkJobs`` when a DRMAA library and the ``drmaa``
package are available (``submitter: drmaa``), else ``qsub -wd RUN_DIR -t 1-N`` of a
job script rendered from ``jobscripts/sge.sh`` (``submitter: qsub``). Status comes
from ``qstat -xml`` for both (a later CLI process has no DRMAA session; a task in
the error state ``Eqw`` fails the job with the reason ``qstat -j`` gives), cancel
from DRMAA terminate or ``qdel``.

Quoting (Son of Grid Engine 8.1.9, measured): a ``#$`` line is split at blanks
outside quotes and then loses every ' and "; there is no escape. So the run directory
goes on qsub's command line (any path works there) and output paths are relative to
it; other values are double-quoted when they have blanks, and a quote character in
them is a spec error. DRMAA's native specification keeps a ' inside double quotes.
SGE replaces $HOME, $USER, $JOB_ID, $JOB_NAME, $HOSTNAME and $TASK_ID in the working
directory and output paths, with no escape: a run directory with one is a spec error.

Restarts: the job scripts get ``-notify`` (SGE sends SIGUSR2 before it kills a task:
``qdel``, ``qmod -rj``, ``h_rt``; SIGUSR1 before it suspends one) and ``-r y`` (SGE may
reschedule a task whose host failed; a task of an attempt that has ended exits at once,
and the driver deletes whatever of the old attempt SGE requeued) and, with a walltime,
``-l s_rt=`` ``restarts.checkpoint_lead`` before ``h_rt`` (SIGUSR1: reason walltime).
SIGUSR2 and SIGTERM to a supervisor are a preemption. A later attempt is ``qsub -v
MXBATCH_ATTEMPT=k,... -o attempts/k/... -l h=!host&!...`` (a hard exclusion of the
hosts of its node failures); through DRMAA, the same in the job templates.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shutil
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import ClassVar, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ...errors import BackendUnavailable, MxbatchError
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.roles import Role
from ...runtime.states import EndReason
from ...runtime.trust import user_name
from ...spec.plan import JobPlan
from ...spec.typed import Seconds, option
from ...spec.units import format_duration
from ..base import Backend, Handle, Rollback
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
    parse_task_ranges,
)
from .jobscript import (
    RUN_DIR_SOURCE,
    Directive,
    RoleGroup,
    Unrepresentable,
    job_name,
    native_directives,
    relative_to_run_dir,
    role_groups,
)
from .queueview import DEFAULT_POLL_INTERVAL_S, NOW, POLL_INTERVAL_HELP, USUAL, ViewScope

QSUB_JOB_ID = re.compile(r"^(?P<job_id>\d+)(?:\.\d+-\d+:\d+)?\s*$", re.MULTILINE)
#: qsub/qstat/qdel output that means the cell cannot be reached or is not set up here
QMASTER_DOWN = re.compile(r"unable to contact qmaster|unable to send message to qmaster|"
                          r"commlib error|can't (?:find|read) act_qmaster|"
                          r"unable to read qmaster name|SGE_ROOT directory .* doesn't exist|"
                          r"cell directory .* doesn't exist|Unable to initialize environment",
                          re.IGNORECASE)
#: an error reason of ``qstat -j``: ``error reason    1:      <date> [..]: error: ...``
ERROR_REASON = re.compile(r"^error reason\s+(?P<task>\d+):\s+(?P<reason>.*\S)\s*$", re.MULTILINE)

#: SGE state letters -> what the queue says of a task (first match wins)
NATIVE_STATES: Tuple[Tuple[str, NativeState], ...] = (
    ("E", NativeState.QUEUED),    # error state: queued, never starts until qmod -cj or qdel
    ("d", NativeState.ACTIVE),    # being deleted
    ("r", NativeState.ACTIVE), ("t", NativeState.ACTIVE), ("s", NativeState.ACTIVE),
    ("S", NativeState.ACTIVE), ("T", NativeState.ACTIVE),
    ("q", NativeState.QUEUED), ("h", NativeState.QUEUED), ("w", NativeState.QUEUED),
)
#: what SGE substitutes in a job's working directory and output paths (where a "$HOME"
#: in a run directory's name became the home directory: measured, 8.1.9)
PSEUDO_VARIABLES = re.compile(r"\$(?:HOME|USER|JOB_ID|JOB_NAME|HOSTNAME|TASK_ID)")
#: directive-parser characters (Son of Grid Engine 8.1.9, measured): a job script's
#: ``#$`` line is split at blanks outside quotes, then every ' and " is removed; no escapes
SCRIPT_QUOTES = "'\""
#: a token needs quoting when it has one of these (blanks, or nothing at all)
_NEEDS_QUOTES = re.compile(r"[\s]|^$")


class Submitter(str, enum.Enum):
    AUTO = "auto"
    DRMAA = drmaa_glue.SUBMITTER
    QSUB = "qsub"


class GpuConsumable(str, enum.Enum):
    """How the site's GPU complex is debited (``qconf -sc``, column consumable)."""

    SLOT = "slot"    # YES: per slot, so SGE multiplies the request by the role's cpus
    JOB = "job"      # JOB: once per job, as requested


@dataclasses.dataclass(frozen=True)
class SgeOptions:
    """``backends.sge``."""

    submitter: Submitter = option(Submitter.AUTO, "how to submit: drmaa (DRMAA runBulkJobs), "
                                  "qsub, or auto (DRMAA when a Grid Engine library is found)")
    queue: Optional[str] = option(None, "the queue (-q)")
    pe: str = option("smp", "the parallel environment that grants a role's cpus (-pe PE N)")
    project: Optional[str] = option(None, "the project (-P)")
    memory_resource: str = option("h_vmem", "the per-slot memory resource (-l NAME=...)")
    poll_interval: Seconds = option(Seconds(DEFAULT_POLL_INTERVAL_S), POLL_INTERVAL_HELP)
    gpu_resource: str = option("gpu", "the GPU consumable (-l NAME=N)")
    gpu_consumable: GpuConsumable = option(
        GpuConsumable.SLOT, "how the gpu_resource complex is debited: slot (consumable YES: "
        "per slot, so a role asks for gpus/cpus per slot, which must divide) or job "
        "(consumable JOB: once per job)")
    native: Tuple[str, ...] = option((), "more qsub options, passed last and unchanged")
    inside: Inside = option(Inside.AUTO, inside_help(
        "SGE parallel-environment job (PE_HOSTFILE), one qrsh -inherit agent a host,"))
    gang: bool = option(False, "submit the job as one parallel job (-pe gang_pe N, N = its "
                               "tasks) whose master starts every task with qrsh -inherit: all "
                               "tasks start together or none does")
    gang_pe: str = option("mpi", "the parallel environment of a gang job: control_slaves "
                                 "TRUE, job_is_first_task FALSE, allocation_rule $round_robin "
                                 "or $fill_up")


@dataclasses.dataclass(frozen=True)
class SgeHandle(Handle):
    """The array job of each role group, and how they were submitted."""

    submitter: Submitter
    job_ids: Dict[Role, str]


def native_state(letters: str) -> NativeState:
    for letter, state in NATIVE_STATES:
        if letter in letters:
            return state
    return NativeState.UNKNOWN


def in_error_state(letters: str) -> bool:
    """``Eqw``: SGE could not start the task and holds it until someone clears or deletes it."""
    return "E" in letters


def parse_qstat_xml(text: str) -> Dict[Tuple[str, int], str]:
    """``{(job number, task id): state letters}`` from ``qstat -xml -g d``."""
    states: Dict[Tuple[str, int], str] = {}
    root = ElementTree.fromstring(text)
    for job in root.iter("job_list"):
        number = (job.findtext("JB_job_number") or "").strip()
        letters = (job.findtext("state") or "").strip()
        tasks = (job.findtext("tasks") or "").strip()
        for task_id in parse_task_ranges(tasks) if tasks else [1]:
            states[(number, task_id)] = letters
    return states


def parse_error_reasons(text: str) -> Dict[int, str]:
    """``{task id: reason}`` from ``qstat -j JOB`` (tasks in the error state)."""
    return {int(m.group("task")): m.group("reason") for m in ERROR_REASON.finditer(text)}


#: how long ``why_gone`` waits for a gone task's accounting record, and how often it asks
ACCOUNTING_WAIT_S = 3.0
ACCOUNTING_POLL_S = 0.5


def accounting_failure(text: str) -> str:
    """Why SGE ended a task, from its accounting record (``qacct -j JOB -t TASK``; the
    last record when it was rescheduled): ``failed 1: assumedly before job`` (the
    execd could not start it) or the exit status of a task whose supervisor died before
    writing a record; empty when the record says neither (or there is none)."""
    failed = status = ""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "failed":
            failed = " ".join(value.split())
        elif name == "exit_status":
            status = value.strip()
    code, _, words = failed.partition(":")
    if code.strip() not in ("", "0"):
        return f"failed {code.strip()}: {words.strip()}" if words.strip() \
            else f"failed {code.strip()}"
    if status not in ("", "0"):
        return f"exit status {status} before its supervisor wrote a record"
    return ""


def script_token(token: str) -> str:
    """One token of a ``#$`` line: in double quotes if it has blanks; a quote character
    cannot be written at all (SGE's parser removes every one)."""
    if any(c in token for c in SCRIPT_QUOTES) or "\n" in token:
        raise Unrepresentable("SGE's job-script parser removes every ' and \" and ends a "
                              "directive at a newline (Son of Grid Engine 8.1.9)")
    return f'"{token}"' if _NEEDS_QUOTES.search(token) else token


def drmaa_token(token: str) -> str:
    """One token of SGE's DRMAA native specification: in double quotes if it has blanks
    or a ' (kept inside them); a " cannot be written (measured, libdrmaa 8.1.9)."""
    if '"' in token or "\n" in token:
        raise Unrepresentable("SGE's DRMAA native specification cannot carry a \" or a "
                              "newline")
    return f'"{token}"' if _NEEDS_QUOTES.search(token) or "'" in token else token


class SgeBackend(BatchBackend[SgeHandle]):
    name = "sge"
    script_template = "sge.sh"
    directive_prefix = "#$"
    output_prefix = "sge"
    options_class = SgeOptions
    handle_class = SgeHandle
    options: SgeOptions
    scheduler = "SGE"
    daemon = "SGE qmaster"
    unreachable = QMASTER_DOWN
    rejection_hint = ("check backends.sge (queue, pe, project, native) against `qconf -sql`, "
                      "`qconf -spl`")
    job_id_pattern = QSUB_JOB_ID
    daemon_probe = ("qstat", "-g", "c")
    #: -notify: SIGUSR2 before a kill (qdel, qmod -rj, h_rt), SIGUSR1 before a suspension
    #: and at s_rt (the walltime less the checkpoint lead)
    signal_ends: ClassVar[Dict[str, str]] = {
        "SIGTERM": EndReason.PREEMPTED.value, "SIGUSR2": EndReason.PREEMPTED.value,
        "SIGUSR1": EndReason.WALLTIME.value}
    inside_backend = "sge-pe"
    allocation_variable = placement.PE_HOSTFILE
    drm_system = drmaa_glue.DrmSystem.GRID_ENGINE
    native_submitter = Submitter.QSUB.value

    def variant(self, environ: Mapping[str, str]) -> Backend:
        """Inside a parallel job: ``sge-pe``; else with ``gang: true``: ``sge-gang``."""
        chosen = super().variant(environ)
        if chosen is self and self.options.gang:
            from ..registry import backend_class

            return backend_class("sge-gang")(self.options)
        return chosen

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        """The submitter to use: ``auto`` resolved (DRMAA when the binding is there and
        the library found is a Grid Engine one)."""
        if self.options.submitter is Submitter.AUTO:
            return Submitter.DRMAA if self.auto_uses_drmaa() else Submitter.QSUB
        return self.options.submitter

    def drmaa_library(self) -> Optional[str]:
        return drmaa_glue.find_library(self._environ())

    def drmaa_environ(self) -> Dict[str, str]:
        return self._environ()

    def submitter_name(self) -> str:
        return self.submitter().value

    def command_env(self) -> Optional[Dict[str, str]]:
        return self._environ()

    def _environ(self) -> Dict[str, str]:
        env = dict(os.environ)
        if not env.get("SGE_ROOT") and Path("/var/lib/gridengine/default/common").is_dir():
            env["SGE_ROOT"] = "/var/lib/gridengine"  # Debian's layout
        return env

    def unreachable_hint(self) -> str:
        env = self._environ()
        return (f"is sge_qmaster running, and is this its cell? SGE_ROOT="
                f"{env.get('SGE_ROOT') or '(unset)'}, SGE_CELL={env.get('SGE_CELL') or 'default'}"
                " must name the cell (source $SGE_ROOT/$SGE_CELL/common/settings.sh); "
                "$SGE_ROOT/$SGE_CELL/common/act_qmaster names the qmaster host")

    def read_limits(self) -> Dict[str, str]:
        """``max_aj_tasks`` (the most tasks of one array job) of ``qconf -sconf``."""
        result = self.run_command(["qconf", "-sconf"], timeout=30, check=False)
        words = (line.split() for line in result.stdout.splitlines())
        return {w[0]: w[1] for w in words if len(w) == 2 and w[0] == "max_aj_tasks"}

    def check_limits(self, plan: JobPlan) -> None:
        """An array of more tasks than the cell's ``max_aj_tasks`` is refused, naming the
        limit and the ways around it (0: no limit)."""
        largest = self.site_limits().get("max_aj_tasks")
        if not largest:
            return
        for group in role_groups(plan.run):
            if group.count > largest:
                raise plan.spec.error(
                    ("roles", group.role.value, "count"),
                    f"{group.count} {group.role.value}s make an SGE array job of "
                    f"{group.count} tasks, but this cell's max_aj_tasks is {largest} "
                    "(`qconf -sconf`)",
                    f"use at most {largest} {group.role.value}s, or ask the admins for a "
                    "larger max_aj_tasks")

    def check(self, plan: JobPlan) -> None:
        """GPU requests SGE can debit as asked (see ``gpu_request``), and values every
        directive parser can carry."""
        for group in role_groups(plan.run):
            self.gpu_request(plan, group)
        pseudo = PSEUDO_VARIABLES.search(plan.run.run_dir)
        if pseudo:
            raise plan.spec.error(
                RUN_DIR_SOURCE, f"{plan.run.run_dir!r} has {pseudo.group(0)}, which SGE "
                "replaces in a job's working directory and output paths",
                "choose a run directory without $HOME, $USER, $JOB_ID, $JOB_NAME, "
                "$HOSTNAME or $TASK_ID in its name")
        super().check(plan)

    def check_environment(self) -> None:
        env = self._environ()
        if not env.get("SGE_ROOT"):
            raise BackendUnavailable("SGE_ROOT is not set: source your cell's settings "
                                     "(e.g. . $SGE_ROOT/$SGE_CELL/common/settings.sh)")
        if self.submitter() is Submitter.DRMAA:
            if drmaa_glue.find_library(env) is None:
                raise BackendUnavailable(
                    "no DRMAA library found (looked in: "
                    + ", ".join(drmaa_glue.library_candidates(env) or
                                ["$SGE_ROOT/lib/*/libdrmaa.so*",
                                 "/usr/lib/gridengine-drmaa/lib/libdrmaa.so*"])
                    + "); set DRMAA_LIBRARY_PATH, install gridengine-drmaa1.0, or use "
                      "backends.sge.submitter: qsub")
            if not drmaa_glue.python_binding_available():
                raise BackendUnavailable("the drmaa package is missing: "
                                         "pip install 'mxbatch[drmaa]'")
            self.check_drmaa_library()
        for tool in ("qsub", "qstat", "qdel"):
            needed = tool != "qsub" or self.submitter() is Submitter.QSUB
            if needed and shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH: install the SGE client "
                                         "(gridengine-client) or fix PATH")

    # ------------------------------------------------------------------ rendering
    def script_token(self, token: str) -> str:
        return script_token(token)

    def drmaa_token(self, token: str) -> str:
        return drmaa_token(token)

    def gpu_request(self, plan: JobPlan, group: RoleGroup) -> Optional[int]:
        """The value of ``-l <gpu_resource>=N`` for one task of ``group`` (None: no GPUs).

        SGE debits a consumable complex (consumable YES) once per slot, and a role gets
        ``cpus`` slots (``-pe``): so its request is gpus/cpus per slot, and a spec error
        when cpus does not divide gpus. A JOB consumable is debited once, as asked.
        """
        task = group.first
        if not task.gpus:
            return None
        if self.options.gpu_consumable is GpuConsumable.JOB or task.cpus == 1:
            return task.gpus
        if task.gpus % task.cpus:
            raise plan.spec.error(
                ("roles", group.role.value, "resources", "gpus"),
                f"{task.gpus} GPUs cannot be requested from SGE for a role with cpus "
                f"{task.cpus}: SGE multiplies a per-slot consumable by the role's "
                f"{task.cpus} slots (-pe {self.options.pe} {task.cpus})",
                f"ask for a multiple of {task.cpus} GPUs (each slot gets gpus/cpus), or set "
                "backends.sge.gpu_consumable: job if the site's "
                f"{self.options.gpu_resource} complex is consumable JOB (qconf -sc)")
        return task.gpus // task.cpus

    def resource_directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        task = group.first
        options = self.options
        sge = ("backends", "sge")
        result = []
        if task.cpus > 1:
            result.append(Directive("-pe", (options.pe, str(task.cpus)), source=(*sge, "pe")))
        if task.memory_mib:
            per_slot = -(-task.memory_mib // task.cpus)
            result.append(Directive("-l", (f"{options.memory_resource}={per_slot}M",),
                                    source=(*sge, "memory_resource")))
        gpus = self.gpu_request(plan, group)
        if gpus:
            result.append(Directive("-l", (f"{options.gpu_resource}={gpus}",),
                                    source=(*sge, "gpu_resource")))
        if task.walltime_s:
            result.append(Directive("-l", (f"h_rt={format_duration(task.walltime_s)}",)))
        if options.queue:
            result.append(Directive("-q", (options.queue,), source=(*sge, "queue")))
        if options.project:
            result.append(Directive("-P", (options.project,), source=(*sge, "project")))
        return result

    def common_directives(self, plan: JobPlan) -> List[Directive]:
        env = [Directive("-V")] if plan.run.inherit_env else []
        return env + [Directive("-S", ("/bin/sh",)), Directive("-w", ("e",))]

    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """Everything the qsub job script carries (the run directory is given as -wd on
        qsub's command line; -o is relative to it)."""
        output = relative_to_run_dir(plan, self.output_path(plan, group, "$TASK_ID"))
        return ([Directive("-N", (job_name(plan, group.role),)),
                 Directive("-t", (f"1-{group.count}",)),
                 Directive("-o", (output,)),
                 Directive("-j", ("y",))]
                + self.common_directives(plan) + self.resource_directives(plan, group)
                + native_directives(self.options.native, ("backends", "sge", "native")))

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        return (self.common_directives(plan) + self.resource_directives(plan, group)
                + self.restart_directives(plan.run, group)
                + native_directives(self.options.native, ("backends", "sge", "native")))

    # ------------------------------------------------------------------ restarts
    def restart_directives(self, run: RunPlan, group: RoleGroup) -> List[Directive]:
        """``-notify``, ``-r y``; with a walltime, ``-l s_rt`` the checkpoint lead before."""
        restarts = run.restarts
        if not restarts.enabled:
            return []
        result = [Directive("-notify"), Directive("-r", ("y",))]
        walltime = group.first.walltime_s
        if walltime and restarts.restarts_on(EndReason.WALLTIME):
            lead = min(restarts.checkpoint_lead_s, walltime / 2)
            result.append(Directive("-l", (f"s_rt={format_duration(walltime - lead)}",)))
        return result

    def _attempt_output(self, run: RunPlan, role: str, attempt: AttemptContext,
                        placeholder: str) -> str:
        path = run.layout_of(attempt.index).batch_output(self.output_prefix, role, placeholder)
        return os.path.relpath(path, run.run_dir)

    @staticmethod
    def _exclusion(attempt: AttemptContext) -> List[str]:
        return (["-l", "h=" + "&".join(f"!{h}" for h in attempt.excluded)]
                if attempt.excluded else [])

    def attempt_options(self, run: RunPlan, name: str, attempt: AttemptContext) -> List[str]:
        variables = ",".join(f"{k}={v}" for k, v in attempt_variables(attempt).items())
        return (["-o", self._attempt_output(run, name, attempt, "$TASK_ID"), "-v", variables]
                + self._exclusion(attempt))

    def attempt_template(self, run: RunPlan, template: drmaa_glue.TemplateSpec,
                         attempt: AttemptContext) -> drmaa_glue.TemplateSpec:
        role = template.job_name.rsplit("-", 1)[-1]
        native = " ".join([template.native] + [self.drmaa_token(t)
                                                for t in self._exclusion(attempt)])
        return dataclasses.replace(
            template, native=native.strip(),
            output_path=":" + self._attempt_output(run, role, attempt, "$drmaa_incr_ph$"),
            environment=dict(template.environment, **attempt_variables(attempt)))

    def handle_from_ids(self, submitter: str, ids: Dict[str, str]) -> SgeHandle:
        return SgeHandle(submitter=Submitter(submitter),
                         job_ids={Role(name): job_id for name, job_id in ids.items()})

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout,
               rollback: Rollback) -> SgeHandle:
        submitter = Submitter(request.submitter)
        if submitter is Submitter.DRMAA:
            return SgeHandle(submitter=submitter,
                             job_ids=self.submit_drmaa(request, rollback))
        return self.handle_from_ids(submitter.value, self.submit_scripts(request, rollback))

    def submit_argv(self, plan: JobPlan, script: str) -> List[str]:
        """qsub, with the run directory as -wd here: qsub's command line takes any path,
        a ``#$`` line does not."""
        return ["qsub", "-terse", "-wd", plan.run.run_dir, script]

    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        env = self._environ()
        library = drmaa_glue.find_library(env)
        if library is None:
            raise BackendUnavailable("no DRMAA library found; set DRMAA_LIBRARY_PATH")
        return drmaa_glue.DrmaaClient(library, "SGE", env, self.unreachable_hint())

    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        """``["12.1", "12.2"]`` -> ``"12"``."""
        return task_ids[0].split(".")[0]

    # ------------------------------------------------------------------ watching
    cell_keys: ClassVar[Tuple[str, ...]] = ("SGE_ROOT", "SGE_CELL")

    def ask_queue(self) -> List[Tuple[str, ...]]:
        """Every task SGE holds of this user's, from ``qstat -xml -g d -u USER``
        (``parse_qstat_xml``): never the whole cell, whose answer on a busy queue is
        megabytes of other users' tasks for every look (mxbatch's jobs are always its
        user's own). Rows ``(job number, task id, state letters)``."""
        result = self.run_command(["qstat", "-xml", "-g", "d", "-u", user_name(os.getuid())],
                                  timeout=30)
        try:
            queue = parse_qstat_xml(result.stdout)
        except ElementTree.ParseError as exc:
            raise BackendUnavailable(f"cannot parse qstat output: {exc}") from None
        return [(number, str(task), letters) for (number, task), letters in queue.items()]

    def read_queue(self, job_ids: Sequence[str], scope: ViewScope
                   ) -> Tuple[Dict[Tuple[str, int], str], Set[str]]:
        """This user's tasks in SGE's queue, from the shared view (``queueview``), and
        those of ``job_ids`` it cannot answer for yet (``QueueView.for_jobs``)."""
        snapshot, unknown = self.queue_view().for_jobs(scope, job_ids)
        return {(row[0], int(row[1])): row[2] for row in snapshot.rows}, unknown

    def native_view(self, handle: SgeHandle, run: RunPlan,
                    scope: ViewScope = USUAL) -> NativeView:
        queue, unknown = self.read_queue(sorted(set(handle.job_ids.values())), scope)
        view = NativeView(states={}, ids={})
        reasons: Dict[str, Dict[int, str]] = {}
        for task in run.tasks:
            number = handle.job_ids.get(task.role)
            key = (task.role, task.rank)
            if number is None:
                view.states[key] = NativeState.GONE
                continue
            letters = queue.get((number, task.rank + 1))
            view.states[key] = (NativeState.QUEUED if number in unknown
                                else NativeState.GONE if letters is None
                                else native_state(letters))
            view.ids[key] = f"{number}.{task.rank + 1}"
            if letters is not None and in_error_state(letters):
                if number not in reasons:
                    reasons[number] = self.error_reasons(number)
                reason = reasons[number].get(task.rank + 1) or "no reason given"
                view.held[key] = f"{letters}: {reason} (qstat -j {number})"
        return view

    def error_reasons(self, number: str) -> Dict[int, str]:
        """Why SGE holds the tasks of job ``number`` in the error state (``qstat -j``)."""
        result = self.run_command(["qstat", "-j", number], timeout=30, check=False)
        return parse_error_reasons(result.stdout)

    def listed(self, job_ids: Sequence[str]) -> bool:
        """``qstat`` lists a task of ``job_ids`` (queued, running or being deleted), in a
        snapshot at most ``RECHECK_S`` old (a cancel waits on it)."""
        try:
            queue, _ = self.read_queue(job_ids, NOW)
        except MxbatchError:
            return False
        return any(number in job_ids for number, _ in queue)

    def why_gone(self, native_id: str) -> str:
        """SGE's accounting of the task (``accounting_failure``); a failure to start is
        the execd's, whose messages file on the task's host says more. The qmaster
        writes a task's record just after it has left the queue (``qstat``): a task
        without one yet is asked again for up to ``ACCOUNTING_WAIT_S`` (a cell that
        flushes its accounting later, 15 s by default, then gets the generic hint)."""
        number, _, task = native_id.partition(".")
        argv = ["qacct", "-j", number, "-t", task or "1"]
        deadline = time.monotonic() + ACCOUNTING_WAIT_S
        while True:
            try:
                result = self.run_command(argv, check=False, timeout=10)
            except MxbatchError:  # no accounting here (or too slow): the generic hint
                return ""
            if result.returncode == 0 or time.monotonic() >= deadline:
                break
            time.sleep(ACCOUNTING_POLL_S)
        said = accounting_failure(result.stdout)
        if not said:
            return ""
        where = ("; the execd's messages file on its host says why"
                 if said.startswith("failed") else "")
        return f"SGE says {said} (`{' '.join(argv)}`{where})"

    def native_ids(self, handle: SgeHandle) -> List[str]:
        return sorted(set(handle.job_ids.values()))

    def delete(self, handle: SgeHandle, force: bool = False) -> None:
        job_ids = list(handle.job_ids.values())
        if handle.submitter is Submitter.DRMAA and not force:
            self.drmaa_client().terminate(job_ids)
        else:
            self.delete_ids(job_ids, force=force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["qdel", *(["-f"] if force else []), *job_ids], check=False,
                             timeout=30)
