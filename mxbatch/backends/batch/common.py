"""What the batch-queue backends (SGE, Slurm) share when they run a job: one array job
per role group, all-or-nothing submission, the queue's view merged with the records,
and cancel that waits until the queue is empty of the job. (The job's text, the
directives and job scripts, is ``jobscript``'s.)

A backend supplies the native parts: directives for a group, how its directive
parsers want values quoted (job-script lines, DRMAA native specifications), how to
submit the groups (registering an undo step for each), how to list its tasks' native
states, and how to delete its job ids.

Every process of a job carries ``MXBATCH_JOB_ID``: the job scripts export it before
they start the supervisor, DRMAA jobs get it in their job environment.

**Restarts.** With ``restarts`` on, ``started`` runs the job's driver (``driver``) and
every attempt after the first is a new native submission (``relaunch``): the submit
commands saved at submission (``jobs/submit.json``) with the attempt's own options on
the command line, which win over the job scripts' directives: its variables
(``MXBATCH_ATTEMPT``, ``MXBATCH_RESTART_REASON``), its output files (in
``attempts/<k>/logs/``) and the hosts to leave out (``attempt_options``; DRMAA: the same
in the job templates). The scheduler's own requeue is what the backend turns off or
cleans up after (``restart_directives``): the driver relaunches every role together.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

if TYPE_CHECKING:  # pragma: no cover
    from ...doctor.checks import Check

from ... import shell
from ...errors import BackendUnavailable, CommandError, MxbatchError, SubmissionRejected
from ...quoting import shell_words
from ...runtime import osbytes, wire
from ...runtime.attempts import read_attempts
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.rendezvous import FileRendezvous
from ...runtime.roles import Role
from ...runtime.states import TaskState
from ...spec.plan import JobPlan
from ...spec.typed import from_data, to_data
from .. import records
from ..base import (
    Backend,
    Handle,
    RenderedItem,
    Request,
    Rollback,
    driver_alive,
    load_run_plan,
)
from ..records import JobRecord
from ..status import (
    JobState,
    JobStatus,
    NativeState,
    TaskKey,
    merge,
    never_started,
    with_attempts,
)
from . import drmaa as drmaa_glue
from .jobscript import (
    Directive,
    RoleGroup,
    check_representable,
    directive_lines,
    flat_argv,
    job_id_export,
    job_name,
    parse_job_id,
    relative_to_run_dir,
    render_jobscript,
    role_groups,
    runtime_argv,
)
from .queueview import (
    DEFAULT_POLL_INTERVAL_S,
    LIMITS_INTERVAL_S,
    NOW,
    USUAL,
    QueueView,
    Row,
    ViewScope,
    cell_name,
    state_path,
)

#: how long cancel waits for the queue to forget the job's tasks
QUEUE_DRAIN_S = 60.0


@dataclasses.dataclass(frozen=True)
class BatchRequest(Request):
    """Job scripts by name (``jobs/<name>.sh``, written for every submitter) with the
    command that submits each (``qsub``/``sbatch``), and, for a DRMAA submitter, its
    bulk jobs."""

    submitter: str = ""
    scripts: Dict[str, str] = dataclasses.field(default_factory=dict)
    submit_commands: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    templates: Tuple[drmaa_glue.TemplateSpec, ...] = ()

    def native_items(self) -> List[RenderedItem]:
        layout = self.plan.run.layout
        items = [RenderedItem(f"DRMAA runBulkJobs {t.job_name} (1-{t.count})",
                              "\n".join(f"{k}: {v}" for k, v in dataclasses.asdict(t).items()))
                 for t in self.templates]
        if not self.templates:
            items += [RenderedItem(f"submit {name}", shell_words(argv))
                      for name, argv in self.submit_commands.items()]
        return items + [RenderedItem(f"job script {layout.job_script(name)}", text)
                        for name, text in self.scripts.items()]


#: how long undoing a submission waits for the scheduler to end what it deleted, and
#: how often it looks
WITHDRAW_TIMEOUT_S = 30.0
WITHDRAW_POLL_S = 0.25


@dataclasses.dataclass
class NativeView:
    """What the scheduler says of each task of a job: its state, its native id
    (``12.3``), and for tasks it holds in an error state (they will never start by
    themselves) the scheduler's reason."""

    states: Dict[TaskKey, NativeState]
    ids: Dict[TaskKey, str]
    held: Dict[TaskKey, str] = dataclasses.field(default_factory=dict)


HandleT = TypeVar("HandleT", bound=Handle)


class Inside(str, enum.Enum):
    """``backends.<sge|slurm>.inside``: run the job inside the allocation this process
    runs in (tasks as job steps / ``qrsh -inherit`` tasks of it) instead of submitting."""

    AUTO = "auto"    # inside when this process runs in an allocation of the system
    TRUE = "true"    # inside; no allocation here is an error (exit 2)
    FALSE = "false"  # always submit new jobs

    @classmethod
    def _missing_(cls, value: object) -> "Optional[Inside]":
        """YAML's ``true``/``false`` are booleans."""
        if isinstance(value, bool):
            return cls.TRUE if value else cls.FALSE
        return None


def inside_help(what: str) -> str:
    """The help of a batch backend's ``inside`` option (``what``: the allocation)."""
    return (f"run the job inside the {what} this process runs in instead of submitting: "
            "auto (when there is one), true, false")


class BatchBackend(Backend[object, BatchRequest, HandleT]):
    """Render/submit/status/cancel for array-job schedulers; subclasses fill in natives."""

    #: the registry name of the backend that runs a job inside an allocation of this
    #: scheduler (``hosts.allocation``), and the variable that says this process runs in one
    inside_backend: str = ""
    allocation_variable: str = ""

    def variant(self, environ: Mapping[str, str]) -> Backend:
        """The in-allocation backend when ``inside`` is true, or auto and
        ``allocation_variable`` is set; else this one."""
        inside = getattr(self.options, "inside", Inside.FALSE)
        if not self.inside_backend or inside is Inside.FALSE or (
                inside is Inside.AUTO and not environ.get(self.allocation_variable)):
            return self
        from ..registry import backend_class

        return backend_class(self.inside_backend)(self.options)

    script_template: str = ""
    role_containers = True
    #: the scheduler and its daemon, in messages: "SGE" / "SGE qmaster"
    scheduler: str = ""
    daemon: str = ""
    #: a command's output that means the scheduler cannot be reached from here
    unreachable: "re.Pattern[str]" = re.compile(r"(?!)")
    #: what to check when the scheduler rejects a job
    rejection_hint: str = ""
    #: the job id in the submit command's output (named group ``job_id``)
    job_id_pattern: "re.Pattern[str]" = re.compile(r"(?P<job_id>\S+)")
    #: prefix of the scheduler's output files in ``logs/`` (``sge``, ``slurm``)
    output_prefix: str = ""

    #: a cheap command that succeeds when the daemon answers (``mxbatch doctor``)
    daemon_probe: Tuple[str, ...] = ()

    def doctor_checks(self) -> list:
        """The tools and submitter (``check_environment``), then the daemon answering."""
        from ...doctor.checks import command_check, environment_check

        checks = [environment_check(self, f"{self.scheduler} client and submitter "
                                          f"({self.submitter_name()})")]
        if self.daemon_probe:
            checks.append(command_check(f"{self.daemon} answers", self.daemon_probe,
                                        self.unreachable_hint(), environ=self.command_env(),
                                        success=f"`{' '.join(self.daemon_probe)}` answered"))
            if checks[-1].ok:
                checks.append(self.queue_view_check())
        return checks

    def queue_view_check(self) -> "Check":
        """How the shared queue view asks (``queueview``): its poll interval, how many
        tasks of the user's jobs the queue holds and how long one query takes."""
        from ...doctor.checks import passed, warned

        view = self.queue_view()
        started = time.monotonic()
        try:
            rows = self.ask_queue()
        except (MxbatchError, NotImplementedError) as exc:
            return warned("queue view", f"cannot ask the queue for your jobs: {exc}",
                          self.unreachable_hint())
        took = time.monotonic() - started
        return passed("queue view", f"one query for your jobs ({len(rows)} tasks in the "
                      f"queue) took {took:.2f}s; every mxbatch process of yours shares one "
                      f"every {view.interval_s:g}s at most (backends.{self.name}."
                      f"poll_interval; {view.path})")

    def command_env(self) -> Optional[Dict[str, str]]:
        """The environment of the scheduler's commands (None: this process's)."""
        return None

    def unreachable_hint(self) -> str:
        """What to check or set when the scheduler cannot be reached (the settings in
        effect, e.g. ``SLURM_CONF (now: unset)``)."""
        return ""

    def unavailable(self, words: str) -> BackendUnavailable:
        return BackendUnavailable(f"{self.daemon} unreachable: {words}\n"
                                  f"{self.unreachable_hint()}")

    def translate(self, exc: CommandError, submitting: bool = False) -> MxbatchError:
        """A failed scheduler command as the user should see it, in the scheduler's words.
        A submit command that ran and refused the job is a rejection (exit 2: check the
        spec); anything else (scheduler unreachable or unconfigured, a failing status or
        delete command) means the backend is unavailable (exit 3: what to set)."""
        words = (exc.stderr or exc.stdout).strip() or str(exc)
        if not submitting or exc.returncode is None or self.unreachable.search(words):
            return self.unavailable(words)
        return rejected(self.scheduler, words, self.rejection_hint)

    def run_command(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
                    submitting: bool = False) -> subprocess.CompletedProcess:
        """Run a scheduler command; failures become ``translate``d errors."""
        try:
            return shell.run(argv, env=self.command_env(), check=check, timeout=timeout)
        except CommandError as exc:
            raise self.translate(exc, submitting) from None

    def submit_script(self, argv: Sequence[str]) -> str:
        """Run a submit command and return the job id it prints."""
        return parse_job_id(self.job_id_pattern,
                            self.run_command(argv, submitting=True).stdout, argv)

    # -- natives
    @abc.abstractmethod
    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """Native options for ``group`` (resources, names, output paths, extra last)."""

    @abc.abstractmethod
    def script_token(self, token: str) -> str:
        """``token`` quoted for the scheduler's job-script directive parser
        (``Unrepresentable`` if that parser cannot carry it)."""

    @abc.abstractmethod
    def drmaa_token(self, token: str) -> str:
        """``token`` quoted for the DRMAA library's native-specification parser
        (``Unrepresentable`` if it cannot carry it)."""

    @abc.abstractmethod
    def submitter_name(self) -> str:
        """The submitter ``launch`` will use (an enum value of the backend's options)."""

    @abc.abstractmethod
    def submit_argv(self, plan: JobPlan, script: str) -> List[str]:
        """The command that submits the job script at path ``script`` and prints its id."""

    @abc.abstractmethod
    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """The DRMAA native specification of ``group``: what the job template has no
        attribute for."""

    @abc.abstractmethod
    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        """A client of this scheduler's DRMAA library (``BackendUnavailable`` if none)."""

    #: the scheduler a DRMAA library must drive to submit here
    drm_system: drmaa_glue.DrmSystem
    #: the submitter that needs no DRMAA library (``qsub``, ``sbatch``)
    native_submitter: str = ""

    def drmaa_library(self) -> Optional[str]:
        """The DRMAA library this backend would load; None: none is named or found."""
        return None

    def drmaa_environ(self) -> Dict[str, str]:
        """The environment the DRMAA library runs with (what the helper gets)."""
        return dict(os.environ)

    def library_identity(self) -> Optional[drmaa_glue.LibraryIdentity]:
        """What the DRMAA library drives; None without a library or the binding."""
        library = self.drmaa_library()
        if library is None or not drmaa_glue.python_binding_available():
            return None
        return drmaa_glue.identify(library, self.drmaa_environ())

    def auto_uses_drmaa(self) -> bool:
        """``submitter: auto``: DRMAA only through a library of this backend's scheduler
        (another's, say Grid Engine's with ``--backend slurm``: the native CLI)."""
        return drmaa_glue.auto_uses_drmaa(self.library_identity(), self.drm_system)

    def check_drmaa_library(self) -> None:
        """``submitter: drmaa``: exit 3 naming the library unless it drives this
        backend's scheduler (call once a library and the binding are known there)."""
        identity = self.library_identity()
        if identity is not None:
            drmaa_glue.check_library(identity, self.drm_system, self.native_submitter)

    @abc.abstractmethod
    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        """The array job's id from the DRMAA ids of its tasks."""

    @abc.abstractmethod
    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        """Ask the scheduler to remove these jobs (queued or running); no error if gone."""

    #: what the DRMAA bulk job's tasks add to the runtime's command line
    drmaa_extra_args: Tuple[str, ...] = ()

    # -- checks
    def check(self, plan: JobPlan) -> None:
        """Every value the job scripts (or the DRMAA native specification) carry can be
        written for the scheduler's parser: else a spec error at the value's key."""
        for directives in self.check_directives(plan):
            check_representable(plan, directives, self.script_token,
                                f"a {self.scheduler} job script")
        if self.submitter_name() == drmaa_glue.SUBMITTER:
            for group in role_groups(plan.run):
                check_representable(plan, self.native_specification(plan, group),
                                    self.drmaa_token,
                                    f"a {self.scheduler} DRMAA native specification")

    def check_directives(self, plan: JobPlan) -> List[List[Directive]]:
        """The directives of every job script (one list per script or component)."""
        return [self.directives(plan, group) for group in role_groups(plan.run)]

    def drmaa_output(self, plan: JobPlan, group: RoleGroup) -> str:
        """A DRMAA bulk job's output path (``$drmaa_incr_ph$`` is the array index):
        relative to its working directory, the run directory, by default."""
        return relative_to_run_dir(plan, self.output_path(plan, group, "$drmaa_incr_ph$"))

    def template(self, plan: JobPlan, group: RoleGroup) -> drmaa_glue.TemplateSpec:
        """The DRMAA bulk job of one group: runs in the run directory, carries
        MXBATCH_JOB_ID in its environment."""
        argv = runtime_argv(plan, group.role) + list(self.drmaa_extra_args)
        output = self.drmaa_output(plan, group)
        return drmaa_glue.TemplateSpec(
            remote_command=argv[0], args=argv[1:], job_name=job_name(plan, group.role),
            native=" ".join(self.drmaa_token(t)
                            for t in flat_argv(self.native_specification(plan, group))),
            output_path=":" + output, working_directory=plan.run.run_dir, count=group.count,
            environment={wire.JOB_ID: plan.job_id})

    def templates(self, plan: JobPlan) -> Tuple[drmaa_glue.TemplateSpec, ...]:
        """The DRMAA bulk jobs of ``plan`` when the submitter is DRMAA (else none)."""
        if self.submitter_name() != drmaa_glue.SUBMITTER:
            return ()
        return tuple(self.template(plan, g) for g in role_groups(plan.run))

    def submit_drmaa(self, request: BatchRequest, rollback: Rollback) -> Dict[Role, str]:
        """Submit the request's bulk jobs (all or nothing); their job ids by role."""
        client = self.drmaa_client()
        ids = client.submit(request.templates)
        flat = [job_id for group_ids in ids for job_id in group_ids]
        rollback.push("the DRMAA jobs", lambda: client.terminate(flat))
        return {g.role: self.drmaa_job_number(i)
                for g, i in zip(role_groups(request.plan.run), ids)}

    def submit_scripts(self, request: BatchRequest, rollback: Rollback) -> Dict[str, str]:
        """Submit the request's job scripts, all at once (one submit command's time, not
        one per script: 90 ms each on the SGE test cell, where the last role's tasks
        queued 0.2 s after the first's); their job ids by script name. All or nothing:
        every job submitted is pushed onto ``rollback`` before the first failure (in the
        scripts' order) is raised."""
        names, commands = list(request.submit_commands), list(request.submit_commands.values())
        results = shell.run_together(commands, env=self.command_env())
        ids: Dict[str, str] = {}
        failure: Optional[MxbatchError] = None
        for name, argv, result in zip(names, commands, results):
            try:
                if isinstance(result, CommandError):
                    raise self.translate(result, submitting=True)
                job_id = parse_job_id(self.job_id_pattern, result.stdout, argv)
            except MxbatchError as exc:
                failure = failure or exc
                continue
            rollback.push(f"{self.scheduler} job {job_id}",
                          lambda job_id=job_id: self.withdraw([job_id]))
            ids[name] = job_id
        if failure is not None:
            raise failure
        return ids

    #: the variables that name the scheduler's cell (two cells never share a view)
    cell_keys: ClassVar[Tuple[str, ...]] = ()

    def ask_queue(self) -> List[Row]:
        """Ask the scheduler for every task of this user's jobs: rows of strings
        (``queueview``), the job's id first. Default: none (no shared view)."""
        raise NotImplementedError

    def queue_view(self) -> QueueView:
        """This user's shared view of the queue (``queueview``), at the poll interval
        of ``backends.<name>.poll_interval``."""
        env = self.command_env() or dict(os.environ)
        interval = getattr(self.options, "poll_interval", None) or DEFAULT_POLL_INTERVAL_S
        return QueueView(state_path(cell_name(self.name, env, self.cell_keys)),
                         self.ask_queue, interval)

    def read_limits(self) -> Dict[str, str]:
        """The limits the cluster says it has (name: value), for ``check_limits``; the
        dialect's command. Default: none."""
        return {}

    def site_limits(self) -> Dict[str, int]:
        """``read_limits`` as numbers, read at most every ``LIMITS_INTERVAL_S`` for all
        of the user's processes (a view of its own, ``queueview``); empty when they
        cannot be read."""
        env = self.command_env() or dict(os.environ)
        view = QueueView(state_path(cell_name(self.name, env, self.cell_keys) + "-limits"),
                         lambda: sorted(self.read_limits().items()), LIMITS_INTERVAL_S)
        try:
            rows = view.snapshot().rows
        except MxbatchError:
            return {}
        return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}

    @abc.abstractmethod
    def native_view(self, handle: HandleT, run: RunPlan,
                    scope: ViewScope = USUAL) -> NativeView:
        """What the scheduler says of every task of the job (``scope``: how old an
        answer of the shared view may be, since when the job's ids exist)."""

    @abc.abstractmethod
    def delete(self, handle: HandleT, force: bool = False) -> None:
        """Ask the scheduler to remove every task of the job (queued or running)."""

    # -- shared behaviour
    directive_prefix: str = "#"

    def script_for(self, plan: JobPlan, group: RoleGroup) -> str:
        return self.render_script(plan, group, runtime_argv(plan, group.role))

    def render_script(self, plan: JobPlan, group: RoleGroup, command: Sequence[str],
                      **fields: str) -> str:
        """The job script of ``group`` running ``command``: the dialect's template with
        its directives, the job id's export and any ``fields`` of its own."""
        return render_jobscript(
            self.script_template, job_id=plan.job_id, role=group.role.value,
            count=str(group.count),
            directives=directive_lines(self.directive_prefix,
                                       self.directives(plan, group)
                                       + self.restart_directives(plan.run, group),
                                       self.script_token),
            export=job_id_export(plan), command=shell_words(list(command)), **fields)

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        """Job scripts by name (``jobs/<name>.sh``): one per role group by default."""
        return {g.role.value: self.script_for(plan, g) for g in role_groups(plan.run)}

    def output_path(self, plan: JobPlan, group: RoleGroup, index_placeholder: str) -> str:
        return plan.run.layout.batch_output(self.output_prefix, group.role.value,
                                            index_placeholder)

    def render(self, plan: JobPlan) -> BatchRequest:
        scripts = self.scripts(plan)
        layout = plan.run.layout
        return BatchRequest(plan=plan, submitter=self.submitter_name(), scripts=scripts,
                            submit_commands={name: self.submit_argv(plan, layout.job_script(name))
                                             for name in scripts},
                            templates=self.templates(plan))

    def prepare_run_dir(self, request: BatchRequest, layout: RunLayout) -> None:
        Path(layout.jobs_dir).mkdir(mode=0o700)
        for name, text in request.scripts.items():
            path = Path(layout.job_script(name))
            path.write_bytes(osbytes.encode(text))  # paths and values as the OS gave them
            path.chmod(0o700)
        if request.plan.run.restarts.enabled:  # what the driver submits again, per attempt
            Path(submissions_file(layout)).write_text(json.dumps(
                {"commands": request.submit_commands,
                 "templates": [to_data(t) for t in request.templates]}, indent=1))

    def status(self, record: JobRecord) -> JobStatus:
        """The job's status; once it has ended for good, the one written into its record
        then (``JobRecord.final``: no scheduler is asked again)."""
        if record.final is not None:
            try:
                return from_data(JobStatus, record.final, strict=False)
            except ValueError:
                pass  # a record another version wrote: work it out again
        status, view = self._status_now(record)
        if _ended_for_good(status, record) and all(
                state is NativeState.GONE for state in view.states.values()):
            try:
                records.save(dataclasses.replace(record, final=status.to_dict()))
            except OSError:
                pass  # asked again next time
        return status

    def _status_now(self, record: JobRecord) -> Tuple[JobStatus, NativeView]:
        run = load_run_plan(record)
        attempts = read_attempts(record.layout.attempts_record)
        index = attempts.current.index if attempts is not None else 0
        rdv = FileRendezvous(record.run_dir, index)
        if index and not attempts.current.native:  # being submitted: nothing to ask yet
            view = NativeView(states={key: NativeState.QUEUED for key in run.task_keys()},
                              ids={})
        else:
            view = self.native_view(self.handle_of(record), run,
                                    ViewScope(known_since=_ids_saved_at(record)))
        abort = rdv.read_abort()
        records = rdv.read_tasks(run.task_keys())
        gone = never_started(run, records, view.states) if abort is None else []
        said = self.why_gone(view.ids[gone[0]]) if gone and gone[0] in view.ids else ""
        status = merge(run, self.name, records, abort, view.states, view.ids,
                       gone_notes={gone[0]: said} if said else None)
        status = self.with_held_tasks(status, view, aborted=abort is not None)
        return with_attempts(status, run, attempts, driver_alive(attempts)), view

    # -- restarts
    def restart_directives(self, run: RunPlan, group: RoleGroup) -> List[Directive]:
        """What the job scripts of a job with restarts carry more: the scheduler's
        warning before the time limit, its own requeue turned off or cleaned up after.
        Default: nothing."""
        return []

    def attempt_options(self, run: RunPlan, name: str, attempt: AttemptContext) -> List[str]:
        """The submit command's options of one job script (``name``: a role, or the one
        heterogeneous job) for a later attempt: its variables, output files, the hosts
        to leave out."""
        raise NotImplementedError

    def attempt_command(self, run: RunPlan, name: str, argv: Sequence[str],
                        attempt: AttemptContext) -> List[str]:
        """The submit command ``argv`` of one job script (the script last) as a later
        attempt runs it: ``attempt_options`` before the script."""
        return list(argv[:-1]) + self.attempt_options(run, name, attempt) + [argv[-1]]

    def attempt_template(self, run: RunPlan, template: drmaa_glue.TemplateSpec,
                         attempt: AttemptContext) -> drmaa_glue.TemplateSpec:
        """A DRMAA bulk job of the first attempt as a later attempt submits it."""
        raise NotImplementedError

    @abc.abstractmethod
    def handle_from_ids(self, submitter: str, ids: Dict[str, str]) -> HandleT:
        """The handle of a submission: the job id of each job script by its name (a
        DRMAA one: by role)."""

    def started(self, record: JobRecord) -> None:
        """With restarts on: the driver of the job's attempts (``driver``)."""
        if load_run_plan(record).restarts.enabled:
            from .. import driver

            driver.start(record)

    def relaunch(self, record: JobRecord, run: RunPlan, attempt: Any,
                 rollback: Rollback) -> HandleT:
        """Submit attempt ``attempt`` again as the first one was, with its own options."""
        saved = json.loads(Path(submissions_file(record.layout)).read_text())
        submitter = str(record.handle.get("submitter") or "")
        if submitter == drmaa_glue.SUBMITTER:
            templates = [self.attempt_template(run, from_data(drmaa_glue.TemplateSpec, t),
                                               attempt) for t in saved["templates"]]
            client = self.drmaa_client()
            ids = client.submit(tuple(templates))
            flat = [job_id for group_ids in ids for job_id in group_ids]
            rollback.push("the DRMAA jobs", lambda: client.terminate(flat))
            return self.handle_from_ids(submitter, {
                g.role.value: self.drmaa_job_number(i) for g, i in zip(role_groups(run), ids)})
        ids: Dict[str, str] = {}
        for name, argv in saved["commands"].items():
            job_id = self.submit_script(self.attempt_command(run, name, argv, attempt))
            rollback.push(f"{self.scheduler} job {job_id}",
                          lambda job_id=job_id: self.withdraw([job_id]))
            ids[name] = job_id
        return self.handle_from_ids(submitter, ids)

    def withdraw(self, job_ids: Sequence[str]) -> None:
        """Undo the submission of ``job_ids``: delete them (forced), then wait, at most
        ``WITHDRAW_TIMEOUT_S``, until the scheduler lists none of them any more (a task
        that had started is killed, and listed while it ends): nothing of a refused
        submission is left on a node when the command returns."""
        self.delete_ids(job_ids, force=True)
        deadline = time.monotonic() + WITHDRAW_TIMEOUT_S
        while self.listed(job_ids) and time.monotonic() < deadline:
            time.sleep(WITHDRAW_POLL_S)

    def listed(self, job_ids: Sequence[str]) -> bool:
        """Whether the scheduler still lists a task of ``job_ids`` (queued, running or
        ending); False when it cannot be asked. Default: never (deleted at once)."""
        return False

    def native_ids(self, handle: HandleT) -> List[str]:
        """The scheduler's ids of the jobs (arrays) of ``handle``. Default: none."""
        return []

    def still_listed(self, record: JobRecord) -> bool:
        ids = [i for handle in self.attempt_handles(record) for i in self.native_ids(handle)]
        return bool(ids) and self.listed(ids)

    def why_gone(self, native_id: str) -> str:
        """What the scheduler's accounting says of task ``native_id`` (``12.3``), which
        left its queue without starting (only the first such task of a job is asked);
        empty when it says nothing useful. Default: nothing."""
        return ""

    def with_held_tasks(self, status: JobStatus, view: NativeView, aborted: bool) -> JobStatus:
        """Tasks the scheduler holds in an error state never start: they fail the job
        with the scheduler's reason, first (``wait`` then aborts the job, and ``cancel``
        deletes them from the queue)."""
        held = []
        for task in status.tasks:
            reason = view.held.get((task.role, task.rank))
            if reason is not None and task.state is TaskState.PENDING:
                task.state = TaskState.FAILED
                task.note = f"held by {self.scheduler} in an error state: {reason}"
                held.append(task)
        if held and not aborted:
            reasons = [f"{t.label} {t.note}" for t in held]
            if status.state is JobState.FAILED and status.reason:
                reasons.append(status.reason)
            status.state = JobState.FAILED
            status.reason = "; ".join(reasons)
            status.log = status.log or held[0].log or None
            status.terminal = False  # over once the abort is recorded and the tasks deleted
        return status

    def await_stopped(self, record: JobRecord, handle: HandleT, run: RunPlan) -> None:
        """Running supervisors stop their roles themselves (SIGTERM, then SIGKILL)."""
        self._wait_native(handle, run, lambda s: s is not NativeState.ACTIVE,
                          timeout=min(run.grace_s, 10.0) + 3)

    def remove(self, record: JobRecord, handle: HandleT, run: RunPlan) -> None:
        if not self._present(handle, run):
            return
        self.delete(handle)
        if self._wait_native(handle, run, lambda s: s is NativeState.GONE,
                             timeout=QUEUE_DRAIN_S / 2):
            return
        self.delete(handle, force=True)
        if not self._wait_native(handle, run, lambda s: s is NativeState.GONE,
                                 timeout=QUEUE_DRAIN_S / 2):
            raise MxbatchError(f"tasks of {record.job_id} are still in the queue "
                               f"after {QUEUE_DRAIN_S:g}s; ask the cluster admins")

    def remove_without_plan(self, record: JobRecord, handle: HandleT) -> None:
        """``remove`` by the scheduler's ids alone (with no plan the tasks are unknown,
        so ``native_view`` sees none): delete them, forced if still listed after half
        of ``QUEUE_DRAIN_S``, until the scheduler lists none of them."""
        ids = self.native_ids(handle)
        for force in (False, True):
            if not ids or not self.listed(ids):
                return
            self.delete(handle, force=force)
            deadline = time.monotonic() + QUEUE_DRAIN_S / 2
            while self.listed(ids) and time.monotonic() < deadline:
                time.sleep(WITHDRAW_POLL_S)
        if self.listed(ids):
            raise MxbatchError(f"tasks of {record.job_id} are still in the queue after "
                               f"{QUEUE_DRAIN_S:g}s; ask the cluster admins")

    def _present(self, handle: HandleT, run: RunPlan) -> bool:
        return any(s is not NativeState.GONE
                   for s in self.native_view(handle, run, NOW).states.values())

    def _wait_native(self, handle: HandleT, run: RunPlan,
                     done: Callable[[NativeState], bool], timeout: float) -> bool:
        deadline = time.time() + timeout
        while True:
            if all(done(s) for s in self.native_view(handle, run, NOW).states.values()):
                return True
            if time.time() > deadline:
                return False
            time.sleep(0.5)


def _ids_saved_at(record: JobRecord) -> float:
    """When the job's current native ids were saved at the latest: its record's or its
    attempts record's last write (a snapshot asked before then may not list them)."""
    times = []
    for path in (records.record_path(record.job_id), Path(record.layout.attempts_record)):
        try:
            times.append(path.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return max(times, default=record.submitted_at)


def _ended_for_good(status: JobStatus, record: JobRecord) -> bool:
    """Whether ``status`` can no longer change: the job ended (no attempt to come) and
    every task's own record says how it ended (a state read from the queue, a task lost
    or never started, may still be corrected by a record written late)."""
    if record.submitting or not status.terminal or status.state not in (
            JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        return False
    return all(t.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)
               for t in status.tasks)


def submissions_file(layout: RunLayout) -> str:
    """The submit commands (and DRMAA templates) of a job with restarts, kept for the
    driver's relaunches."""
    return os.path.join(layout.jobs_dir, "submit.json")


def attempt_variables(attempt: AttemptContext) -> Dict[str, str]:
    """What every task of a later attempt gets in its environment from the submission."""
    return {wire.ATTEMPT: str(attempt.index), wire.RESTART_REASON: attempt.reason_name}


def rejected(scheduler: str, words: str, hint: str) -> SubmissionRejected:
    """The scheduler's own words, plus what to do; nothing of the job is left queued."""
    return SubmissionRejected(f"{scheduler} rejected the job: {words.strip()}\n{hint} "
                              "(nothing was left queued)")


def parse_task_ranges(text: str) -> List[int]:
    """SGE task lists: ``3``, ``1-3:1``, ``1,4-6:2``."""
    ids: List[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not match:
            continue
        low = int(match.group(1))
        high = int(match.group(2) or low)
        step = int(match.group(3) or 1)
        ids.extend(range(low, high + 1, step))
    return ids
