"""The contract every backend implements, and the steps they share, written once.

A backend is generic over three dataclasses (like torchx's ``Scheduler`` over its
request and handle):

- its **options** (``options_class``): the spec's ``backends.<name>:`` block,
  parsed by the fields' types; kept in the job record as submitted;
- its **request** (``render``'s result): everything ``submit`` will do (job
  scripts, argv lists, a skein specification), decided up front, pure, printable
  by ``mxbatch render`` and ``render --json``;
- its **handle** (``launch``'s result): the native ids ``status`` and ``cancel``
  need later, in another process; kept in the job record.

Template methods (here, once): ``submit`` creates the run directory, lets the
backend write its files and launch, rolls everything back if any step fails
(the ``Rollback`` undo steps the backend registered, then the run directory),
and builds the job record; ``cancel`` writes the abort record, lets the backend
wait for the supervisors to stop their roles, then remove whatever is left. A
backend supplies only its native steps: ``render``, ``launch``, ``status``,
``await_stopped``, ``remove``.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import socket
import sys
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    Generic,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    TypeVar,
)

from ..errors import BadInput, JobNotFound, MxbatchError
from ..quoting import env_assignments, shell_words
from ..runtime import logfile, osbytes, procs
from ..runtime.attempts import AttemptsRecord, read_attempts
from ..runtime.layout import RunLayout
from ..runtime.planfile import DEFAULT_ABORT_POLL_S, RunPlan
from ..runtime.rendezvous import FileRendezvous, Rendezvous, atomic_write_json
from ..runtime.roles import Role
from ..runtime.states import AbortKind, AbortRecord, EndReason
from ..spec.plan import DEFAULT_MAX_TASKS, JobPlan
from ..spec.schema import ContainerRuntime, JobSpec
from ..spec.typed import from_data, to_data
from . import containers, records, rundir
from .records import JobRecord

if TYPE_CHECKING:  # pragma: no cover
    from ..doctor.checks import Check
    from .status import JobStatus

#: reads one task's log from a byte offset: ``reader(offset, final)`` -> the bytes
#: from there on (None: nothing yet); ``final`` asks for a last, complete read
LogReader = Callable[[int, bool], Optional[bytes]]
#: what backends whose runtime runs roles in containers (``role_containers``) accept
ROLE_CONTAINER_RUNTIMES = tuple(ContainerRuntime)


@dataclasses.dataclass(frozen=True)
class RenderedItem:
    """One thing a submission would execute or write, for display."""

    title: str
    text: str


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A backend without a ``backends.<name>:`` block of its own."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What ``submit`` will do; subclasses add the backend's native parts as fields
    (plain data or dataclasses) and show them in ``native_items``."""

    plan: JobPlan

    def native_items(self) -> List[RenderedItem]:
        """The backend's own part, for display (job scripts, specifications...)."""
        return []

    def native_data(self) -> Dict[str, Any]:
        """The backend's own part as plain data: every field but ``plan``."""
        return {f.name: to_data(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name != "plan"}

    def task_items(self) -> List[RenderedItem]:
        """Every task's argv, working directory and environment, quoted for a shell (in
        a container: its command line and environment file, and the launch recipe)."""
        run = self.plan.run
        if run.container is not None:
            return [RenderedItem(f"every task in its {run.container.runtime.value} container "
                                 "(a launch recipe: paste it into bash)", containers.recipe(run))]
        return [RenderedItem(f"task {task.index}: {task.label}",
                             f"argv: {shell_words(task.argv)}\ncwd: {run.workdir}\n"
                             f"env: {env_assignments(task.env)}")
                for task in run.tasks]

    def describe(self) -> str:
        run = self.plan.run
        parts = [f"# job {run.job_id} on backend {self.plan.backend} (a placeholder id: "
                 "submit gives the job a new one, and its run directory that name)",
                 f"# run directory {run.run_dir}",
                 "# task environments: added to the "
                 + ("inherited" if run.inherit_env else "minimal")
                 + " environment; DMLC_PS_ROOT_URI/PORT and DMLC_NODE_HOST are set at run time"]
        for item in self.native_items() + self.task_items():
            parts.append(f"## {item.title}\n{item.text.rstrip()}")
        return "\n".join(parts) + "\n"

    def to_dict(self) -> Dict[str, Any]:
        """``render --json`` (the CLI adds ``schema``): the plan's tasks and the backend's
        native part."""
        run = self.plan.run
        return {"job_id": run.job_id, "backend": self.plan.backend,
                "run_dir": run.run_dir, "workdir": run.workdir,
                "inherit_env": run.inherit_env,
                "tasks": [dict({"index": t.index, "role": t.role.value, "rank": t.rank,
                                "argv": list(t.argv), "env": dict(t.env)},
                               **({"container": containers.task_data(run, t)}
                                  if run.container is not None else {}))
                          for t in run.tasks],
                "native": self.native_data()}


@dataclasses.dataclass(frozen=True)
class Handle:
    """What a backend needs later of a submitted job (native ids). Plain data in the
    job record through ``to_dict``/``from_dict``."""

    def to_dict(self) -> Dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Handle":
        return from_data(cls, data, strict=False)


class Rollback:
    """Undo steps a backend registers while it launches (``push`` after each native
    step that succeeded); ``run`` undoes them in reverse when a later step fails."""

    def __init__(self) -> None:
        self._steps: List[Tuple[str, Callable[[], None]]] = []

    def push(self, what: str, undo: Callable[[], None]) -> None:
        self._steps.append((what, undo))

    def run(self) -> None:
        while self._steps:
            what, undo = self._steps.pop()
            try:
                undo()
            except Exception as exc:  # keep undoing the rest; the user must know
                sys.stderr.write(f"mxbatch: could not undo {what}: {exc}\n")


OptionsT = TypeVar("OptionsT")
RequestT = TypeVar("RequestT", bound=Request)
HandleT = TypeVar("HandleT", bound=Handle)


def cancel_abort() -> AbortRecord:
    """The abort record ``mxbatch cancel`` writes."""
    return AbortRecord(kind=AbortKind.CANCELLED, reason="cancelled by the user",
                       by="mxbatch cancel", end=EndReason.CANCELLED)


def attempts_of(record: JobRecord) -> Optional[AttemptsRecord]:
    """The job's attempts (``attempts.json``); None before its attempt loop started, or
    for a job that has none (a batch job with restarts off)."""
    return read_attempts(record.layout.attempts_record)


def driver_alive(attempts: Optional[AttemptsRecord]) -> bool:
    """Whether the process that drives the job's attempts still runs, as far as this
    host can tell (one on another host, or none recorded: taken as alive)."""
    if attempts is None or attempts.driver_pid is None \
            or attempts.driver_host != socket.gethostname():
        return True
    return procs.Process(attempts.driver_pid, attempts.driver_started).alive()


def current_attempt(record: JobRecord) -> int:
    """The index of the job's current attempt (0 without an attempts record)."""
    attempts = attempts_of(record)
    return attempts.current.index if attempts is not None else 0


class Backend(abc.ABC, Generic[OptionsT, RequestT, HandleT]):
    """A place to run the tasks of a job (see the module docstring)."""

    name: ClassVar[str]
    options_class: ClassVar[type] = NoOptions
    handle_class: ClassVar[type]
    #: every task runs on this machine: advertise 127.0.0.1
    loopback_only: ClassVar[bool] = False
    #: the ``container.runtime`` values this backend's own system runs roles in (YARN)
    container_runtimes: ClassVar[Tuple[ContainerRuntime, ...]] = ()
    #: the runtime itself runs every role in ``container`` (``runtime.container``), in
    #: any of ``ROLE_CONTAINER_RUNTIMES``: local, SGE, Slurm (ssh, MPI)
    role_containers: ClassVar[bool] = False
    #: how often ``wait``/``--wait`` asks for the status (a batch system's qstat or
    #: squeue should not be asked many times a second)
    poll_interval_s: ClassVar[float] = 1.0
    #: how often supervisors look for the abort record (the file on shared storage)
    abort_poll_s: ClassVar[float] = DEFAULT_ABORT_POLL_S
    #: the most tasks a job may have here unless its spec's ``max_tasks`` says otherwise
    #: (a count beyond it is a mistake far more often than a plan)
    max_tasks: ClassVar[int] = DEFAULT_MAX_TASKS
    #: what a signal to a task's supervisor means here (signal name -> ``EndReason``
    #: value): a batch system's SIGTERM is a preemption, its warning before the time
    #: limit the walltime
    signal_ends: ClassVar[Dict[str, str]] = {}

    def __init__(self, options: Optional[OptionsT] = None) -> None:
        """``options``: an ``options_class`` instance; its defaults when None."""
        self.options: OptionsT = options if options is not None else self.options_class()

    def variant(self, environ: Mapping[str, str]) -> "Backend":
        """The backend that runs a job submitted from a process with ``environ``: this one,
        or, for a batch backend run inside an allocation of its own system (a Slurm
        allocation, an SGE parallel job), its in-allocation variant (same options)."""
        return self

    @classmethod
    def from_record(cls, record: JobRecord) -> "Backend":
        """The backend as it was when ``record`` was submitted (same options)."""
        return cls(from_data(cls.options_class, record.options, strict=False))

    def handle_of(self, record: JobRecord) -> HandleT:
        """The native ids of the job's current attempt: those of the attempt's native
        submission (``attempts.json``) for a batch job's relaunch, else the record's.
        ``JobNotFound`` for a record saved before the launch finished (no ids yet)."""
        if record.submitting:
            raise JobNotFound(f"job {record.job_id} has no native ids: its submission has "
                              "not finished, or its submitter ended before it recorded "
                              f"them (`mxbatch cancel {record.job_id}` stops its processes "
                              "on this host)")
        attempts = attempts_of(record)
        if attempts is not None and attempts.current.native:
            return self.handle_class.from_dict(attempts.current.native)
        return self.handle_class.from_dict(record.handle)

    def attempt_handle(self, record: JobRecord, index: int) -> Optional[HandleT]:
        """The native ids of attempt ``index`` (attempt 0: the submission's); None for
        an attempt not submitted yet, or one the job does not have."""
        attempts = attempts_of(record)
        known = [a for a in (attempts.attempts if attempts is not None else [])
                 if a.index == index]
        if known and known[0].native:
            return self.handle_class.from_dict(known[0].native)
        if index == 0 and record.handle:
            return self.handle_class.from_dict(record.handle)
        return None

    def attempt_handles(self, record: JobRecord) -> List[HandleT]:
        """The native ids of every attempt of the job, the first's first (cancel makes
        sure nothing of any of them is left)."""
        handles = [self.handle_class.from_dict(record.handle)]
        attempts = attempts_of(record)
        for attempt in attempts.attempts if attempts is not None else []:
            handle = self.handle_class.from_dict(attempt.native) if attempt.native else None
            if handle is not None and handle not in handles:
                handles.append(handle)
        return handles

    # ------------------------------------------------------------------ checks
    def check(self, plan: JobPlan) -> None:
        """Raise ``SpecError`` if ``plan`` makes no sense for this backend. No cluster I/O."""

    def check_environment(self) -> None:
        """Raise ``BackendUnavailable`` with a hint if this backend cannot submit from here
        (missing tools or libraries). Not called by ``render``."""

    def check_limits(self, plan: JobPlan) -> None:
        """Raise ``SpecError`` (exit 2, before anything is queued) if ``plan`` breaks a
        limit the cluster says it has (an array larger than its maximum...), naming the
        limit and what to do. May ask the cluster; not called by ``render``. Default:
        none known."""

    def capacity_warnings(self, plan: JobPlan) -> List[str]:
        """Sentences saying where the machines the job runs on, as seen from here, cannot
        hold ``plan`` (``submit`` warns, ``doctor SPEC`` shows them); no exception.
        Default: none known (a batch system queues what does not fit)."""
        return []

    def doctor_checks(self) -> List["Check"]:
        """What ``mxbatch doctor`` checks of this backend from here (tools, libraries, the
        daemon answering), as ``doctor.Check``s with a fix for each failure. Default:
        ``check_environment`` as one check."""
        from ..doctor.checks import environment_check

        return [environment_check(self)]

    def workdir_is_here(self) -> bool:
        """Whether the spec's ``workdir`` as this machine sees it is what the roles run in
        (shipped or synced from here, or on storage shared with the nodes), so that a
        file missing here is missing for them too. Default: true."""
        return True

    def check_container(self, spec: JobSpec) -> None:
        """SpecError at ``container`` if the spec asks for a container runtime this
        backend does not run roles in. No cluster I/O."""
        container = spec.container
        runtimes = ROLE_CONTAINER_RUNTIMES if self.role_containers else self.container_runtimes
        if container is None or container.runtime in runtimes:
            return
        runs = (f"it runs {', '.join(r.value for r in runtimes)}"
                if runtimes else "remove the key or set it to null")
        raise spec.error(("container",), f"{container.runtime.value} containers are not "
                                         f"supported by backend {self.name!r}", runs)

    # ------------------------------------------------------------------ submitting
    @abc.abstractmethod
    def render(self, plan: JobPlan) -> RequestT:
        """What ``submit`` would do. Pure: no I/O, no cluster probing."""

    def ships_runtime(self, request: RequestT) -> bool:
        """Whether the job's run directory needs ``runtime.pyz`` (some process other than
        this one runs the runtime: a job manager, a batch script, a host's agent).
        Default: true."""
        return True

    def prepare_run_dir(self, request: RequestT, layout: RunLayout) -> None:
        """Write the backend's own files into the new run directory (job scripts...)."""

    @abc.abstractmethod
    def launch(self, request: RequestT, layout: RunLayout, rollback: Rollback) -> HandleT:
        """Start or queue every task; ``rollback.push`` an undo step after each native
        step that succeeded (submitted array job...), so a later failure leaves nothing."""

    def submit(self, request: RequestT) -> JobRecord:
        """Save the job's record (``submitting``) before anything starts, create the run
        directory, launch, and save the record with the handle; on any failure undo
        everything, records included (``Rollback``: a job never runs without a record,
        and a submission that fails leaves nothing running). A record that cannot be
        written (a full or read-only ``$MXBATCH_HOME/jobs``) is ``RecordUnwritable``."""
        plan = request.plan
        rollback = Rollback()
        launched = False
        try:
            records.save(self.record_of(request))
            rollback.push("the job's record", lambda: records.delete(plan.job_id))
            layout = rundir.create(plan, rollback.push, runtime=self.ships_runtime(request))
            self.prepare_run_dir(request, layout)
            handle = self.launch(request, layout, rollback)
            launched = True
            record = self.record_of(request, handle)
            records.save(record)
        except records.RecordUnwritable as exc:
            rollback.run()
            raise records.RecordUnwritable(
                exc.message + ("; the job was stopped and removed: nothing of it runs"
                               if launched else "; nothing was started")) from None
        except BaseException:
            rollback.run()
            raise
        return record

    def record_of(self, request: RequestT, handle: Optional[HandleT] = None) -> JobRecord:
        """The job record of ``request``; without ``handle``, the one saved before the
        launch (``submitting``: nothing is known of the job's native ids yet)."""
        plan = request.plan
        return JobRecord(job_id=plan.job_id, backend=self.name, run_dir=plan.run.run_dir,
                         spec_path=str(plan.spec.source) if plan.spec.source else None,
                         handle=handle.to_dict() if handle is not None else {},
                         options=to_data(self.options), submitting=handle is None)

    def started(self, record: JobRecord) -> None:
        """The job is submitted and its record saved: start what drives it beyond this
        process (a batch job's driver of attempts, with restarts on). Default: nothing."""

    #: a batch or YARN job with restarts has a driver process of its attempts
    #: (``driver``), which relaunches it through ``relaunch``
    def relaunch(self, record: JobRecord, run: RunPlan, attempt: Any,
                 rollback: Rollback) -> HandleT:
        """Submit attempt ``attempt`` (a ``jobloop.AttemptContext``: its index, why, the
        hosts to leave out) of a submitted job natively; its handle."""
        raise NotImplementedError(f"backend {self.name!r} cannot relaunch a job")

    def lost_end(self, record: JobRecord, handle: HandleT, run: RunPlan,
                 lost: List[Any]) -> Optional[Any]:
        """What the scheduler says of tasks whose supervisors vanished (``lost``: their
        ``TaskStatus``): an ``attempts.AttemptEnd`` (node failure, preemption, time
        limit), or None when it knows nothing more."""
        return None

    def native_end(self, record: JobRecord, handle: HandleT, run: RunPlan, end: Any) -> Any:
        """How an attempt ended (``end``, an ``attempts.AttemptEnd`` from its records),
        corrected by what the cluster says of it: a failure the supervisors saw (a
        SIGTERM) that the cluster knows as a preemption or a lost node. Default: ``end``."""
        return end

    def attach(self, request: RequestT) -> Optional[RequestT]:
        """The request for supervising the job in this process (``supervise_here``),
        for an attached ``submit --wait``/``launch``; None when this backend cannot."""
        return None

    def supervise_here(self, record: JobRecord,
                       on_tick: Callable[[], None]) -> Optional[str]:
        """Supervise an attached job in this process until it ended, calling ``on_tick``
        often; returns the name of the signal that cancelled it (Ctrl-C), if any."""
        raise NotImplementedError(f"backend {self.name!r} cannot supervise a job here")

    # ------------------------------------------------------------------ watching
    @abc.abstractmethod
    def status(self, record: JobRecord) -> JobStatus:
        """Per-task and job state, merged from records and the backend's view."""

    def rendezvous(self, record: JobRecord) -> Rendezvous:
        """The shared state (task records, abort) of the job's current attempt as the CLI
        reads and writes it (``attempt_rendezvous`` of the current attempt)."""
        return self.attempt_rendezvous(record, current_attempt(record))

    def attempt_rendezvous(self, record: JobRecord, index: int) -> Rendezvous:
        """The shared state of attempt ``index`` of the job (the driver of its attempts
        watches and aborts each through this): by default that attempt's files in the
        run directory; YARN: the key-value store of the attempt's application."""
        return FileRendezvous(record.run_dir, index)

    # ------------------------------------------------------------------ cancelling
    def await_stopped(self, record: JobRecord, handle: HandleT,
                      run: RunPlan) -> None:
        """After the abort record was written: wait (bounded) until the supervisors
        stopped their roles themselves."""

    @abc.abstractmethod
    def remove(self, record: JobRecord, handle: HandleT, run: RunPlan) -> None:
        """Make sure nothing of the job is left queued or running. Idempotent."""

    def remove_without_plan(self, record: JobRecord, handle: HandleT) -> None:
        """``remove`` for a job whose plan cannot be read (emptied, corrupted): by the
        native ids alone. Default: ``remove`` with a plan that knows no task."""
        self.remove(record, handle, stand_in_plan(record))

    def still_listed(self, record: JobRecord) -> bool:
        """Whether the scheduler still lists a task of any attempt of the job (queued,
        running or ending), by the record's native ids alone, with no plan (``clean``
        asks it of a job whose state cannot be read). Default: False (no scheduler)."""
        return False

    def cancel(self, record: JobRecord) -> List[procs.Leftover]:
        """Stop the job; idempotent; nothing remains queued or running afterwards (its
        containers on this host included, whatever killed their supervisors). The
        job's own cancel record comes first (an attempt loop waiting between two
        attempts starts no other), then the current attempt's abort record. A job that
        ended lost (its supervisor killed, stopped or hung) gets the abort record that
        says so: a supervisor that was only stopped reads it once it runs again.

        A plan that cannot be read stops nothing from being cancelled: the records are
        written all the same (the supervisors have the plan in memory), and the job is
        removed by its native ids (``remove_without_plan``). Last, every process of the
        job still on this host (``MXBATCH_JOB_ID``: a role's children that outlived a
        killed agent...) is killed: those are returned."""
        from .status import JobState

        handle = self.handle_of(record)
        try:
            run: Optional[RunPlan] = load_run_plan(record)
        except MxbatchError:
            run = None
        status = self.status(record) if run is not None else None
        if status is None or not status.terminal:
            self._write_quietly(record, lambda: atomic_write_json(record.layout.cancel,
                                                                  cancel_abort().to_dict()))
            self._write_quietly(record,
                                lambda: self.rendezvous(record).write_abort(cancel_abort()))
            self.await_stopped(record, handle, run or stand_in_plan(record))
            self.await_driver(record, run or stand_in_plan(record))
        elif status.state is JobState.FAILED and status.reason:
            lost = AbortRecord(kind=AbortKind.FAILED, reason=status.reason, log=status.log,
                               by="mxbatch cancel")
            self._write_quietly(record, lambda: self.rendezvous(record).write_abort(lost))
        for each in self.attempt_handles(record):  # the current one, any queued one
            if run is None:
                self.remove_without_plan(record, each)
            else:
                self.remove(record, each, run)
        if run is not None:
            containers.remove_leftovers(run)
        return procs.reap_job(record.job_id)

    @staticmethod
    def _write_quietly(record: JobRecord, write: Callable[[], Any]) -> None:
        """A record for the job's supervisors, unless its run directory cannot be written
        (full, read-only, gone): then they are stopped by the steps that follow."""
        try:
            write()
        except OSError as exc:
            sys.stderr.write(f"mxbatch: cannot write to the run directory of "
                             f"{record.job_id}: {exc.strerror or exc}: stopping it by "
                             "signal\n")

    def await_driver(self, record: JobRecord, run: RunPlan) -> None:
        """After a cancel: wait (bounded) until the driver of the job's attempts has
        ended (it starts no other attempt once the cancel record is there)."""
        attempts = attempts_of(record)
        if attempts is None or attempts.final or attempts.driver_pid is None:
            return
        driver = procs.Process(attempts.driver_pid, attempts.driver_started)
        if driver != procs.Process.of(os.getpid()) and attempts.driver_host == socket.gethostname():
            procs.wait_gone([driver], run.grace_s + 60)

    # ------------------------------------------------------------------ logs
    def log_reader(self, record: JobRecord, role: Role, rank: int,
                   attempt: int = 0) -> Optional[LogReader]:
        """How the CLI reads one task's log of ``attempt`` while following the job; None:
        the file ``RunLayout.attempt(attempt).task_log`` on this machine."""
        return None

    def logs(self, record: JobRecord, role: Role, rank: int,
             attempt: int = 0) -> Iterator[str]:
        """Lines of one task's log of ``attempt`` (stdout and stderr of the role,
        supervisor notes), with their newline; a line longer than ``logfile.MAX_LINE``
        in pieces. ``BadInput`` when the log is there but cannot be read (a directory)."""
        path = record.layout.attempt(attempt).task_log(role.value, rank)
        try:
            with open(path, "rb") as handle:
                for line in logfile.read_lines(handle):
                    yield osbytes.decode(line)  # printed as the role wrote it
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BadInput(f"cannot read the log of {role.value}[{rank}] at {path}: "
                           f"{exc.strerror or exc}") from None


def stand_in_plan(record: JobRecord) -> RunPlan:
    """What is known of a job's plan without its ``plan.json``: its id and run directory,
    and the defaults (no task)."""
    return RunPlan(job_id=record.job_id, run_dir=record.run_dir, workdir=record.run_dir,
                   python=sys.executable, created_at=record.submitted_at)


def load_run_plan(record: JobRecord) -> RunPlan:
    """The plan of a submitted job, from its run directory; a clear error if it is gone."""
    path = Path(record.layout.plan)
    try:
        return RunPlan.from_json(path.read_text())
    except FileNotFoundError:
        raise MxbatchError(f"the run directory of job {record.job_id} is gone ({path} does "
                           "not exist): nothing more is known of it", exit_code=4) from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise MxbatchError(f"cannot read the plan of job {record.job_id} at {path}: {exc}",
                           exit_code=4) from None
