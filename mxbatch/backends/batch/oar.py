"""OAR backend (OAR 2.5): one ``oarsub --array N`` per role group, the rest is the batch
engine's (``common``).

The dialect's facts, measured on OAR 2.5.9 (Debian 12):

- A job script's ``#OAR <flag> <value>`` lines carry the value verbatim up to the end
  of the line (no quoting, no escapes; blanks around it are dropped): a value that
  starts or ends with a blank, or has a line break, is a spec error.
- ``oarsub -S SCRIPT`` reads the script's first word as the script's path and runs the
  command line through a shell on the job's first node: the run directory (the path of
  the job scripts) must be one shell word (``RUN_DIR_WORD``).
- ``oarsub`` prints ``OAR_JOB_ID=`` for every task of an array, the first one equal to
  the array id; the tasks' job ids follow each other; ``OAR_ARRAY_INDEX`` counts from 1.
  Only ``%jobid%`` is replaced in the output paths.
- OAR exports none of the submitter's environment: with ``inherit_env`` the job scripts
  pass ``jobs/environ.json`` (mode 0600, this process's environment) to the runtime.
- Status: ``oarstat -f -J --sql "array_id IN (...)"`` (one call for every role),
  ``Terminated`` and ``Error`` are ended (OAR keeps ended jobs listed); delete:
  ``oardel --array``.

Restarts: with a walltime, the job scripts ask for OAR's checkpoint signal (``--checkpoint
LEAD --signal 10``: SIGUSR1 to the supervisor, reason walltime); a later attempt is the
same ``oarsub`` with its own output paths, the hosts to leave out (``-p``), and the
attempt's number and reason as the job script's arguments (OAR has no ``--export``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from typing import TYPE_CHECKING, ClassVar, Dict, List, Optional, Sequence, Tuple

from ...errors import BackendUnavailable, CommandError, MxbatchError
from ...runtime import wire
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.roles import Role
from ...runtime.states import EndReason
from ...spec.plan import JobPlan
from ...spec.typed import option
from ...spec.units import format_duration
from ..base import Handle, Rollback
from ..hosts.mpi import write_environ
from ..status import NativeState
from . import drmaa as drmaa_glue
from .common import BatchBackend, BatchRequest, NativeView
from .jobscript import (
    RUN_DIR_SOURCE,
    Directive,
    RoleGroup,
    Unrepresentable,
    job_name,
    native_directives,
    runtime_argv,
)

if TYPE_CHECKING:  # pragma: no cover
    from .queueview import ViewScope

#: the first job id oarsub prints is the array's id
OARSUB_JOB_ID = re.compile(r"^OAR_JOB_ID=(?P<job_id>\d+)\s*$", re.MULTILINE)
#: what oarsub/oarstat/oardel say when OAR's database or server cannot be reached
UNREACHABLE = re.compile(r"connect to (the )?database|DBI connect|Connection refused|"
                         r"Cannot connect|could not connect", re.IGNORECASE)
#: oarstat's job states -> what the queue says of a task
NATIVE_STATES: Dict[str, NativeState] = {
    **{s: NativeState.QUEUED for s in ("Waiting", "Hold", "toLaunch", "toAckReservation")},
    **{s: NativeState.ACTIVE for s in ("Launching", "Running", "Suspended", "Resuming",
                                       "Finishing", "toError")},
    **{s: NativeState.GONE for s in ("Terminated", "Error")},
}
#: the variable that holds an array task's index, and its first value
INDEX_VARIABLE, INDEX_BASE = "OAR_ARRAY_INDEX", 1
#: a run directory oarsub can take as the first word of a job's command line
RUN_DIR_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
#: the checkpoint signal the job scripts ask for (SIGUSR1), by number as OAR wants it
CHECKPOINT_SIGNAL = 10
SUBMITTER = "oarsub"


@dataclasses.dataclass(frozen=True)
class OarOptions:
    """``backends.oar``."""

    queue: Optional[str] = option(None, "the queue (-q)")
    project: Optional[str] = option(None, "the project (--project)")
    properties: Optional[str] = option(None, "resource constraints, an SQL WHERE clause (-p)")
    extra: Tuple[str, ...] = option((), "more oarsub options, passed last and unchanged")


@dataclasses.dataclass(frozen=True)
class OarHandle(Handle):
    """The array job of each role group (its array id: its first task's job id)."""

    job_ids: Dict[Role, str] = dataclasses.field(default_factory=dict)


def script_token(token: str) -> str:
    """``token`` on an ``#OAR`` line: verbatim, which it can be only without line breaks
    and blanks at its ends."""
    if "\n" in token or "\r" in token:
        raise Unrepresentable("an #OAR directive is one line")
    if token != token.strip():
        raise Unrepresentable("OAR drops the blanks around an #OAR directive's value")
    return token


def parse_oarstat(text: str) -> Dict[str, Dict[int, dict]]:
    """``{array id: {array index: job}}`` from ``oarstat -f -J`` (empty output: none)."""
    jobs: Dict[str, Dict[int, dict]] = {}
    for job in (json.loads(text) if text.strip() else {}).values():
        jobs.setdefault(str(job["array_id"]), {})[int(job["array_index"])] = job
    return jobs


def error_path(output: str) -> str:
    """The stderr file beside a task's output file (``.out`` -> ``.err``)."""
    return re.sub(r"\.out$", ".err", output)


class OarBackend(BatchBackend[OarHandle]):
    name = "oar"
    script_template = "oar.sh"
    directive_prefix = "#OAR"
    output_prefix = "oar"
    options_class = OarOptions
    handle_class = OarHandle
    options: OarOptions
    scheduler = "OAR"
    daemon = "OAR's server and database"
    unreachable = UNREACHABLE
    rejection_hint = "check backends.oar (queue, project, properties, extra) against `oarnodes`"
    job_id_pattern = OARSUB_JOB_ID
    daemon_probe = ("oarstat", "-J", "--sql", "job_id = 0")
    role_containers = False
    signal_ends: ClassVar[Dict[str, str]] = {"SIGUSR1": EndReason.WALLTIME.value}
    native_submitter = SUBMITTER

    # ------------------------------------------------------------------ checks
    def submitter_name(self) -> str:
        return SUBMITTER

    def check(self, plan: JobPlan) -> None:
        if not RUN_DIR_WORD.fullmatch(plan.run.run_dir):
            raise plan.spec.error(
                RUN_DIR_SOURCE, f"{plan.run.run_dir!r} is not one shell word: oarsub runs "
                "the job script's path through a shell", "choose a run directory of "
                "letters, digits and _@%+=:,./-")
        if any(t.gpus for t in plan.run.tasks):
            raise plan.spec.error(("resources", "gpus"), "the oar backend asks for no GPUs",
                                  "ask through backends.oar.properties or extra")
        super().check(plan)

    def check_environment(self) -> None:
        for tool in ("oarsub", "oarstat", "oardel"):
            if shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH: install the OAR client "
                                         "(oar-user) or fix PATH")

    def unreachable_hint(self) -> str:
        return ("are OAR's database and server up (`oarstat`)? /etc/oar/oar.conf names "
                "them (DB_HOSTNAME, SERVER_HOSTNAME)")

    # ------------------------------------------------------------------ rendering
    def script_token(self, token: str) -> str:
        return script_token(token)

    def drmaa_token(self, token: str) -> str:
        raise Unrepresentable("OAR has no DRMAA library")

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        return []

    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        raise BackendUnavailable("OAR has no DRMAA library: the oar backend submits with oarsub")

    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        raise BackendUnavailable("OAR has no DRMAA library")

    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """An array job of one role group: name, count, resources, directory, output."""
        task, oar = group.first, ("backends", "oar")
        resources = f"/nodes=1/core={task.cpus}"
        if task.walltime_s:
            resources += f",walltime={format_duration(task.walltime_s)}"
        output = self.output_path(plan, group, "%jobid%")
        result = [Directive("-n", (job_name(plan, group.role),)),
                  Directive("--array", (str(group.count),)),
                  Directive("-l", (resources,)),
                  Directive("-d", (plan.run.run_dir,), source=RUN_DIR_SOURCE),
                  Directive("-O", (output,), source=RUN_DIR_SOURCE),
                  Directive("-E", (error_path(output),), source=RUN_DIR_SOURCE)]
        for flag, key, value in (("-q", "queue", self.options.queue),
                                 ("--project", "project", self.options.project),
                                 ("-p", "properties", self.options.properties)):
            if value:
                result.append(Directive(flag, (value,), source=(*oar, key)))
        return result + native_directives(self.options.extra, (*oar, "extra"))

    def script_for(self, plan: JobPlan, group: RoleGroup) -> str:
        """The engine's job script, with the rank read from ``OAR_ARRAY_INDEX``, the
        submitter's environment file (``inherit_env``), and a later attempt's arguments."""
        command = runtime_argv(plan, group.role) + [
            "--task-from", INDEX_VARIABLE, "--array-base", str(INDEX_BASE)]
        if plan.run.inherit_env:
            command += ["--environ-file", environ_file(plan.run.layout)]
        return self.render_script(
            plan, group, command,
            attempt=f'if [ -n "$1" ]; then export {wire.ATTEMPT}="$1" '
                    f'{wire.RESTART_REASON}="$2"; fi')

    def prepare_run_dir(self, request: BatchRequest, layout: RunLayout) -> None:
        super().prepare_run_dir(request, layout)
        if request.plan.run.inherit_env:  # kept: every attempt's tasks read it
            write_environ(environ_file(layout))

    # ------------------------------------------------------------------ restarts
    def restart_directives(self, run: RunPlan, group: RoleGroup) -> List[Directive]:
        """With a walltime: OAR's checkpoint signal ``restarts.checkpoint_lead`` before it."""
        walltime = group.first.walltime_s
        if not (run.restarts.enabled and walltime
                and run.restarts.restarts_on(EndReason.WALLTIME)):
            return []
        lead = max(int(min(run.restarts.checkpoint_lead_s, walltime / 2)), 1)
        return [Directive("--checkpoint", (str(lead),)),
                Directive("--signal", (str(CHECKPOINT_SIGNAL),))]

    def attempt_options(self, run: RunPlan, name: str, attempt: AttemptContext) -> List[str]:
        output = run.layout_of(attempt.index).batch_output(self.output_prefix, name, "%jobid%")
        options = ["-O", output, "-E", error_path(output)]
        if attempt.excluded:
            hosts = ", ".join("'" + h.replace("'", "''") + "'" for h in attempt.excluded)
            left_out = f"network_address NOT IN ({hosts})"
            if self.options.properties:
                left_out = f"({self.options.properties}) AND {left_out}"
            options += ["-p", left_out]
        return options

    def attempt_command(self, run: RunPlan, name: str, argv: Sequence[str],
                        attempt: AttemptContext) -> List[str]:
        """The attempt's options, and its number and reason as the script's arguments."""
        return (list(argv[:-1]) + self.attempt_options(run, name, attempt)
                + [f"{argv[-1]} {attempt.index} {attempt.reason_name or 'restart'}"])

    def attempt_template(self, run, template, attempt):
        raise BackendUnavailable("OAR has no DRMAA library")

    def handle_from_ids(self, submitter: str, ids: Dict[str, str]) -> OarHandle:
        return OarHandle(job_ids={Role(name): job_id for name, job_id in ids.items()})

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout, rollback: Rollback) -> OarHandle:
        return self.handle_from_ids(SUBMITTER, self.submit_scripts(request, rollback))

    def submit_argv(self, plan: JobPlan, script: str) -> List[str]:
        return ["oarsub", "-S", script]

    # ------------------------------------------------------------------ watching
    def oarstat(self, ids: Sequence[str], column: str = "array_id") -> Dict[str, Dict[int, dict]]:
        """What OAR says of every task of these arrays (or jobs: ``column="job_id"``)."""
        if not ids or not all(i.isdigit() for i in ids):
            return {}
        argv = ["oarstat", "-f", "-J", "--sql", f"{column} IN ({','.join(ids)})"]
        result = self.run_command(argv, timeout=30, check=False)
        if result.returncode != 0:
            raise self.translate(CommandError(argv, result.returncode, result.stdout,
                                              result.stderr))
        try:
            return parse_oarstat(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise self.unavailable(f"oarstat answered no job list ({exc})") from None

    def native_view(self, handle: OarHandle, run: RunPlan,
                    scope: Optional["ViewScope"] = None) -> NativeView:
        """What OAR says of each task now: one ``oarstat`` of the job's own arrays (the
        shared queue view's ``scope`` does not apply)."""
        jobs = self.oarstat(list(handle.job_ids.values()))
        view = NativeView(states={}, ids={})
        for task in run.tasks:
            key, array = (task.role, task.rank), handle.job_ids.get(task.role, "")
            job = jobs.get(array, {}).get(task.rank + INDEX_BASE)
            view.states[key] = (NativeState.GONE if job is None
                                else NATIVE_STATES.get(job["state"], NativeState.UNKNOWN))
            view.ids[key] = str(job["Job_Id"]) if job else f"{array}[{task.rank + INDEX_BASE}]"
        return view

    def why_gone(self, native_id: str) -> str:
        """OAR's state, exit status and events of a task that ended without a record."""
        for job in (j for tasks in self.oarstat([native_id], "job_id").values()
                    for j in tasks.values()):
            events = ", ".join(e.get("type", "") for e in job.get("events") or [])
            return (f"OAR job {native_id}: {job['state']}, exit status "
                    f"{job.get('exit_code')}" + (f", events {events}" if events else ""))
        return ""

    def listed(self, job_ids: Sequence[str]) -> bool:
        """OAR lists a task of these arrays that has not ended."""
        try:
            jobs = self.oarstat(job_ids)
        except MxbatchError:
            return False
        return any(NATIVE_STATES.get(job["state"]) is not NativeState.GONE
                   for tasks in jobs.values() for job in tasks.values())

    def native_ids(self, handle: OarHandle) -> List[str]:
        return list(handle.job_ids.values())

    def delete(self, handle: OarHandle, force: bool = False) -> None:
        self.delete_ids(self.native_ids(handle), force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        """``oardel --array`` (again when forced: OAR has no stronger delete for a job
        that still runs)."""
        if job_ids:
            self.run_command(["oardel", "--array", *job_ids], check=False, timeout=30)


def environ_file(layout: RunLayout) -> str:
    """The submitter's environment for the tasks (``inherit_env``), in the jobs folder."""
    return os.path.join(layout.jobs_dir, "environ.json")
