"""YARN backend: one skein application per job (see ``appspec`` for its layout).

- ``render`` builds the skein specification as plain data: no skein, no cluster
  (``backends.yarn.python_env: auto`` reads which distributions this environment has,
  to name its cached archive; ``pyenv``).
- ``launch`` (after ``submit`` created the local run directory, the record's home
  and the source of the shipped files, and ``prepare_run_dir`` wrote the
  container files into it) packs the Python environment if ``auto`` has none cached
  yet, checks that the ResourceManager answers and that every
  container fits on some NodeManager, and submits through this process's one
  skein driver (``yarn_client``). YARN's refusals (unknown queue...) are
  ``SubmissionRejected`` (exit 2) in YARN's words; nothing stays behind.
- ``status`` merges the application report, the skein containers and the task
  records from the key-value store (mirrored locally, ``app``), without a skein
  driver: the report comes from the ResourceManager's REST API (``rest``, at the
  address kept in the handle) and the rest from the application master itself.
- ``cancel`` writes the abort record (supervisors stop their roles and end the
  application), kills the application if it is still there after the grace
  period (``PUT .../state``), and waits until YARN reports it ended.
- ``logs`` come from the NodeManagers (``logs``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ...errors import BackendUnavailable, MxbatchError, SubmissionRejected
from ...runtime import osbytes
from ...runtime.attempts import AttemptEnd
from ...runtime.layout import RunLayout, task_log_name
from ...runtime.planfile import RunPlan
from ...runtime.rendezvous import FileRendezvous, Rendezvous
from ...runtime.roles import Role
from ...runtime.states import AbortRecord, EndReason, TaskRecord, TaskState
from ...spec.plan import JobPlan
from ...spec.schema import ContainerRuntime
from ...spec.typed import to_data
from ..base import (
    Backend,
    Handle,
    LogReader,
    RenderedItem,
    Request,
    Rollback,
    attempts_of,
    current_attempt,
    driver_alive,
    load_run_plan,
)
from ..hosts.hostfile import spec_dir
from ..records import JobRecord
from ..status import JobState, JobStatus, NativeState, TaskKey, merge, with_attempts
from . import appspec, client, pyenv, rest
from .app import YarnJob, abort_from_report, container_end, taken_container
from .appspec import YarnOptions
from .logs import ContainerInfo, LogFollower, fetch
from .states import AppState, ContainerState, FinalStatus

#: how long cancel waits for YARN to report a killed application as ended
KILL_WAIT_S = 30.0
#: the skein specification of the job's first attempt (``yarn/``), which relaunches reuse
SPEC_FILE = "skein.json"


@dataclasses.dataclass(frozen=True)
class YarnRequest(Request):
    """The skein specification, and the files every container gets."""

    application: Dict[str, Any] = dataclasses.field(default_factory=dict)
    files: Optional[appspec.ShippedFiles] = None
    env_file: str = ""
    container_plan: str = ""
    inherited: Tuple[str, ...] = ()
    python_env: Optional[pyenv.PythonEnv] = None

    def native_items(self) -> List[RenderedItem]:
        run = self.plan.run
        files = self.files
        assert files is not None
        env = self.python_env
        shipped = ([RenderedItem(f"{pyenv.ARCHIVE_DIR}/ in every container "
                                 "(backends.yarn.python_env)", env.describe())]
                   if env is not None else [])
        return shipped + [
            RenderedItem("skein application specification (skein.Client.submit)",
                         appspec.spec_yaml(self.application)),
            RenderedItem(f"{appspec.PLAN_FILE} in every container ({files.plan})",
                         "the job's plan.json with run_dir '.' and workdir "
                         f"{json.loads(self.container_plan)['workdir']!r}"),
            RenderedItem(f"{appspec.ENV_FILE} in every container ({files.env}, mode 0600)",
                         f"{len(self.inherited)} variables from the submitting environment "
                         f"({'inherit_env' if run.inherit_env else 'PATH only'}): "
                         + ", ".join(self.inherited)),
        ]

    def native_data(self) -> Dict[str, Any]:
        # the environment file holds the submitter's variables: names only
        return {"application": self.application, "files": to_data(self.files),
                "inherited": list(self.inherited),
                "python_env": (dict(to_data(self.python_env),
                                    interpreter=self.python_env.interpreter)
                               if self.python_env is not None else None)}


@dataclasses.dataclass(frozen=True)
class YarnHandle(Handle):
    """The job's YARN application, the queue it was submitted to, and the
    ResourceManager's web service URL(s) (empty on a Kerberos cluster, and in records
    older than them: found again then)."""

    app_id: str
    queue: str = ""
    rm_urls: Tuple[str, ...] = ()


class YarnBackend(Backend[YarnOptions, YarnRequest, YarnHandle]):
    """One skein application per job (see the module docstring)."""

    name = "yarn"
    container_runtimes = (ContainerRuntime.DOCKER,)
    options_class = YarnOptions
    handle_class = YarnHandle
    options: YarnOptions

    def workdir_is_here(self) -> bool:
        """With ``ship_workdir`` the containers get a copy of this workdir; else they
        use the path on their nodes."""
        return bool(self.options.ship_workdir)

    def __init__(self, options: Optional[YarnOptions] = None) -> None:
        super().__init__(options)
        self._jobs: Dict[str, YarnJob] = {}

    # ------------------------------------------------------------------ checks
    def check(self, plan: JobPlan) -> None:
        options = self.options
        if not options.queue.strip():
            raise plan.spec.error(("backends", "yarn", "queue"), "must not be empty")
        if options.rm_url and not options.rm_url.startswith(("http://", "https://")):
            raise plan.spec.error(("backends", "yarn", "rm_url"),
                                  f"a URL, http://host:port, got {options.rm_url!r}")
        for tag in options.tags:
            if len(tag) > 100 or not tag.isascii():
                raise plan.spec.error(("backends", "yarn", "tags"),
                                      f"YARN tags are ASCII, at most 100 characters: {tag!r}")
        container = plan.spec.container
        if container is not None:
            for option in container.options:
                name, sep, _ = option.partition("=")
                if not sep or not name.startswith(appspec.DOCKER_ENV_PREFIX):
                    raise plan.spec.error(
                        ("container", "options"),
                        f"on YARN an option is {appspec.DOCKER_ENV_PREFIX}<NAME>=value "
                        f"(an environment variable of YARN's Docker runtime), got {option!r}")
            for mount in container.mounts:
                if not all(part.startswith("/") for part in mount.split(":")[:2]):
                    raise plan.spec.error(("container", "mounts"),
                                          f"YARN mounts absolute paths only, got {mount!r}")
        self.python_env(plan)

    def python_env(self, plan: JobPlan) -> Optional[pyenv.PythonEnv]:
        """The environment archive of ``backends.yarn.python_env`` (None: not set);
        ``SpecError`` at that key if it cannot be used. Packs nothing."""
        if self.options.python_env is None:
            return None
        try:
            return pyenv.resolve(self.options.python_env, spec_dir(plan))
        except pyenv.PythonEnvError as exc:
            raise plan.spec.error(("backends", "yarn", "python_env"), exc.problem,
                                  exc.hint) from None

    def check_environment(self) -> None:
        client.check_tools()

    def doctor_checks(self) -> list:
        """skein, Java and ``yarn`` (``check_environment``), then the ResourceManager."""
        from ...doctor.checks import environment_check, failed, passed

        checks = [environment_check(self, "skein, java and yarn")]
        try:
            address = client.wait_for_resourcemanager(min(self.options.connect_timeout, 10))
            checks.append(passed("YARN ResourceManager", f"{address} accepts connections"))
        except BackendUnavailable as exc:
            first, _, rest = exc.format_message().partition("\n")
            checks.append(failed("YARN ResourceManager", first, rest or first))
        return checks

    # ------------------------------------------------------------------ rendering
    def render(self, plan: JobPlan, environ: Optional[Mapping[str, str]] = None) -> YarnRequest:
        """The skein specification and the files ``submit`` writes; ``environ`` is the
        submitting environment (default: this process's)."""
        inherited = appspec.inherited_environment(
            plan.run, os.environ if environ is None else environ)
        python_env = self.python_env(plan)
        archive = python_env.archive if python_env is not None else None
        container_plan = appspec.container_plan(plan.run, self.options.ship_workdir,
                                                python_env is not None)
        return YarnRequest(plan=plan,
                           application=appspec.application_spec(plan, self.options, archive),
                           files=appspec.shipped_files(plan, self.options, archive),
                           env_file=appspec.env_file(inherited),
                           container_plan=container_plan.to_json(),
                           inherited=tuple(inherited), python_env=python_env)

    # ------------------------------------------------------------------ submitting
    def prepare_run_dir(self, request: YarnRequest, layout: RunLayout) -> None:
        """The files every container gets (``yarn/``): plan, environment (0600), spec."""
        target = Path(layout.backend_dir(appspec.STATE_DIR))
        target.mkdir(mode=0o700)
        (target / appspec.PLAN_FILE).write_text(request.container_plan)
        env = target / appspec.ENV_FILE
        env.touch(mode=0o600)
        env.write_bytes(osbytes.encode(request.env_file))  # values as the OS gave them
        (target / SPEC_FILE).write_text(json.dumps(request.application, indent=1))

    def launch(self, request: YarnRequest, layout: RunLayout, rollback: Rollback) -> YarnHandle:
        if request.python_env is not None:
            pyenv.ensure_packed(request.python_env)
        driver = client.driver(self.options.connect_timeout)
        self._check_fits(driver, request.application)
        app_id = self._submit_spec(driver, request.application)
        rollback.push(f"YARN application {app_id}", lambda: driver.kill_application(app_id))
        urls = rest.resolve(self.options.rm_url)
        return YarnHandle(app_id=app_id, queue=self.options.queue,
                          rm_urls=urls.urls if urls is not None else ())

    @staticmethod
    def _check_fits(driver: Any, spec: Dict[str, Any]) -> None:
        """``SubmissionRejected`` if a container is bigger than every NodeManager."""
        largest = client.node_capacity(driver)
        if largest is None:
            return
        memory, vcores, gpus = largest
        for name, service in spec["services"].items():
            wants = service["resources"]
            if (wants["memory"] > memory or wants["vcores"] > vcores
                    or wants.get("gpus", 0) > gpus):
                raise SubmissionRejected(
                    f"YARN cannot run the job: a {name} container asks for <memory:"
                    f"{wants['memory']}, vCores:{wants['vcores']}, gpus:{wants.get('gpus', 0)}>"
                    f" and the largest NodeManager has <memory:{memory}, vCores:{vcores}, "
                    f"gpus:{gpus}>: lower roles.{name}.resources (nothing was submitted)")

    @staticmethod
    def _submit_spec(driver: Any, spec: Dict[str, Any]) -> str:
        import skein

        try:
            return driver.submit(skein.ApplicationSpec.from_dict(spec))
        except skein.exceptions.DriverError as exc:
            words = str(exc).replace("Failed to submit application, exception:\n", "")
            raise SubmissionRejected(f"YARN rejected the job: {words.strip()}\n"
                                     "check backends.yarn (queue, node_label) and the "
                                     "resources (nothing was left queued)") from None

    # ------------------------------------------------------------------ restarts
    def started(self, record: JobRecord) -> None:
        """With restarts on: the driver of the job's attempts (``driver``)."""
        if load_run_plan(record).restarts.enabled:
            from .. import driver

            driver.start(record)

    def relaunch(self, record: JobRecord, run: RunPlan, attempt: Any,
                 rollback: Rollback) -> YarnHandle:
        """Attempt ``attempt`` as a new application: the first one's skein specification
        (``yarn/skein.json``) with the attempt's variables, and, when node failures
        excluded hosts, its containers held to the other running NodeManagers."""
        saved = json.loads(Path(record.layout.backend_file(appspec.STATE_DIR, SPEC_FILE))
                           .read_text())
        driver = client.driver(self.options.connect_timeout)
        nodes = None
        if attempt.excluded:
            nodes = usable_nodes([n.id for n in driver.get_nodes(states=["RUNNING"])],
                                 attempt.excluded)
            if not nodes:
                raise MxbatchError("no running NodeManager is left without the excluded "
                                   f"hosts ({', '.join(attempt.excluded)})")
        spec = appspec.attempt_spec(saved, attempt.index, attempt.reason_name, nodes)
        app_id = self._submit_spec(driver, spec)
        rollback.push(f"YARN application {app_id}", lambda: driver.kill_application(app_id))
        first = self.handle_class.from_dict(record.handle)
        return YarnHandle(app_id=app_id, queue=first.queue, rm_urls=first.rm_urls)

    def lost_end(self, record: JobRecord, handle: YarnHandle, run: RunPlan,
                 lost: List[Any]) -> Optional[AttemptEnd]:
        """What YARN says of the containers of lost tasks (``exits``): preempted, lost
        with their node, or killed."""
        containers = self._job_of(record, handle).containers()
        for task in lost:
            info = containers.get((task.role, task.rank))
            end = container_end((task.role, task.rank), info) if info is not None else None
            if end is not None:
                return end
        return None

    def native_end(self, record: JobRecord, handle: YarnHandle, run: RunPlan,
                   end: AttemptEnd) -> AttemptEnd:
        """A failure of an attempt one of whose containers YARN preempted or lost with
        its node (as last seen from its application master) is that preemption or
        node failure: the supervisors only saw a SIGTERM, or their peer vanish."""
        if end.reason is not EndReason.FAILURE:
            return end
        taken = taken_container(self._job_of(record, handle).containers())
        if taken is None:
            return end
        return AttemptEnd(taken.end_reason, detail=taken.reason,
                          role=taken.role.value if taken.role else None, rank=taken.rank,
                          hosts=tuple(taken.hosts))

    # ------------------------------------------------------------------ watching
    def _job(self, record: JobRecord, attempt: Optional[int] = None) -> YarnJob:
        """The application of attempt ``attempt`` (default: the current one)."""
        index = current_attempt(record) if attempt is None else attempt
        handle = self.attempt_handle(record, index)
        if handle is None:
            raise MxbatchError(f"attempt {index} of {record.job_id} has no YARN "
                               "application (yet)")
        job = self._jobs.get(handle.app_id)
        if job is None:
            urls = (rest.RmUrls(handle.rm_urls, f"kept in the record of {record.job_id}")
                    if handle.rm_urls else rest.resolve(self.options.rm_url))
            job = YarnJob(record, handle.app_id,
                          lambda: client.driver(self.options.connect_timeout),
                          rest.RmRestClient(urls, self.options.connect_timeout)
                          if urls is not None else None, attempt=index)
            self._jobs[handle.app_id] = job
        return job

    def _job_of(self, record: JobRecord, handle: YarnHandle) -> YarnJob:
        """The ``YarnJob`` of whichever attempt ``handle`` is."""
        attempts = attempts_of(record)
        for attempt in attempts.attempts if attempts is not None else []:
            if attempt.native.get("app_id") == handle.app_id:
                return self._job(record, attempt.index)
        return self._job(record, 0)

    def attempt_rendezvous(self, record: JobRecord, index: int) -> Rendezvous:
        """The key-value store of the attempt's application, mirrored into the attempt's
        files; those alone before its application is submitted."""
        if self.attempt_handle(record, index) is None:
            return FileRendezvous(record.run_dir, index)
        return self._job(record, index).rendezvous()

    def status(self, record: JobRecord) -> JobStatus:
        """The current attempt's tasks (``attempt_status``) with the job's attempts."""
        run = load_run_plan(record)
        attempts = attempts_of(record)
        index = attempts.current.index if attempts is not None else 0
        if self.attempt_handle(record, index) is None:  # being submitted: nothing to ask
            rdv = FileRendezvous(record.run_dir, index)
            status = merge(run, self.name, rdv.read_tasks(run.task_keys()), rdv.read_abort(),
                           {key: NativeState.QUEUED for key in run.task_keys()}, {})
        else:
            status = self.attempt_status(record, run, index)
        return with_attempts(status, run, attempts, driver_alive(attempts))

    def attempt_status(self, record: JobRecord, run: RunPlan, index: int) -> JobStatus:
        """Attempt ``index``'s status: its application's report, containers and task
        records."""
        job = self._job(record, index)
        report = job.report()
        rdv = job.rendezvous()
        records, abort = rdv.read_tasks(run.task_keys()), rdv.read_abort()
        containers = job.containers()
        ids = {key: info.container_id for key, info in containers.items()}
        if report.finished:
            if abort is None:
                abort = abort_from_report(report, containers)
                if abort is not None:
                    job.local.write_abort(abort)
            records = settle(run, records, report.outcome, abort)
            native = {(t.role, t.rank): NativeState.GONE for t in run.tasks}
        else:
            native = native_states(run, report.state,
                                   {key: info.state for key, info in containers.items()
                                    if info.state is not None})
        status = merge(run, self.name, records, abort, native, ids)
        for task in status.tasks:  # container paths mean nothing here: the NodeManager's URL
            if (task.role, task.rank) in containers:
                url = containers[(task.role, task.rank)].log_url(
                    task_log_name(task.role.value, task.rank))
                if status.log and status.log == task.log:
                    status.log = url
                task.log = url
        if report.finished:
            status.terminal = True
            if not status.reason and status.state is not JobState.SUCCEEDED and report.diagnostics:
                status.reason = report.diagnostics.strip()
        return status

    # ------------------------------------------------------------------ cancelling
    def remove(self, record: JobRecord, handle: YarnHandle, run: RunPlan) -> None:
        """Let the application of ``handle`` (any attempt's) end by itself (after
        success, or once the supervisors stopped on the abort record: they end it),
        else kill it; wait until it ended."""
        job = self._job_of(record, handle)
        if job.report().finished:
            return
        if self.attempt_status(record, run, job.attempt).state is JobState.SUCCEEDED:
            job.wait_finished(run.grace_s + 10)
        else:
            job.wait_finished(min(run.grace_s, 10.0) + 5, until=lambda: not _running(job))
        if job.report().finished:
            return
        job.kill()
        if not job.wait_finished(KILL_WAIT_S):
            raise MxbatchError(f"YARN application {job.app_id} of {record.job_id} has not "
                               f"ended {KILL_WAIT_S:g}s after it was killed; ask the "
                               f"cluster admins (yarn application -status {job.app_id})")

    # ------------------------------------------------------------------ logs
    def log_reader(self, record: JobRecord, role: Role, rank: int,
                   attempt: int = 0) -> Optional[LogReader]:
        """From the NodeManager of the task's container of ``attempt`` (none before its
        application is submitted)."""
        name = task_log_name(role.value, rank)

        def locate() -> Optional[ContainerInfo]:
            if self.attempt_handle(record, attempt) is None:
                return None
            return self._job(record, attempt).containers().get((role, rank))
        return LogFollower(locate, name)

    def logs(self, record: JobRecord, role: Role, rank: int,
             attempt: int = 0) -> Iterator[str]:
        if self.attempt_handle(record, attempt) is None:
            return
        job = self._job(record, attempt)
        container = job.containers().get((role, rank))
        data = (fetch(container, task_log_name(role.value, rank))
                if container is not None else None)
        if data is None:
            where = (f"container {container.container_id} on {container.node_http}"
                     if container else "no container seen by mxbatch")
            raise MxbatchError(f"no log of {role.value}[{rank}] from YARN ({where}); with "
                               f"log aggregation: yarn logs -applicationId {job.app_id}")
        yield from osbytes.decode(data).splitlines(keepends=True)


def _running(job: YarnJob) -> bool:
    """Whether any container of the job still runs."""
    return any(info.state is ContainerState.RUNNING for info in job.containers().values())


def usable_nodes(node_ids: List[str], excluded: List[str]) -> List[str]:
    """The host names of NodeManagers (``host:port`` ids) that no node failure
    excluded, sorted; an excluded host matches by its name or short name."""
    left = set()
    for node in node_ids:
        host = node.rpartition(":")[0] or node
        if host in excluded or host.split(".")[0] in excluded:
            continue
        left.add(host)
    return sorted(left)


def native_states(run: RunPlan, app_state: AppState,
                  containers: Mapping[TaskKey, ContainerState]) -> Dict[TaskKey, NativeState]:
    """Per task, from its skein container's state while the application has not ended."""
    native = {}
    for task in run.tasks:
        key = (task.role, task.rank)
        state = containers.get(key)
        if app_state is not AppState.RUNNING or state is None or state.queued:
            native[key] = NativeState.QUEUED
        elif state.running:
            native[key] = NativeState.ACTIVE
        else:
            native[key] = NativeState.GONE
    return native


def settle(run: RunPlan, records: Mapping[TaskKey, TaskRecord], outcome: FinalStatus,
           abort: Optional[AbortRecord] = None) -> Dict[TaskKey, TaskRecord]:
    """Task records once the application has ended, for what was last seen running:
    after SUCCEEDED every task succeeded (its container exited 0); the task the abort
    record blames failed as it says; the others ended with the application."""
    settled: Dict[TaskKey, TaskRecord] = dict(records)
    blamed = (abort.role, abort.rank) if abort is not None and abort.role else None
    for task in run.tasks:
        key = (task.role, task.rank)
        record = settled.get(key)
        if record is not None and record.state.final:
            continue
        base = (dataclasses.asdict(record) if record is not None
                else {"role": task.role, "rank": task.rank})
        if outcome is FinalStatus.SUCCEEDED:
            settled[key] = TaskRecord(**{**base, "state": TaskState.SUCCEEDED,
                                         "note": "ended with the YARN application"})
        elif key == blamed and abort is not None:
            settled[key] = TaskRecord(**{**base, "state": TaskState.FAILED,
                                         "exit_code": abort.exit_code, "signal": abort.signal,
                                         "note": abort.reason})
        elif record is not None and record.state is not TaskState.PENDING:
            settled[key] = TaskRecord(**{**base, "state": TaskState.CANCELLED,
                                         "note": "ended with the YARN application "
                                                 f"({outcome.value})"})
    return settled

