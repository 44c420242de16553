"""YARN backend: one skein application per job (see ``yarn_spec`` for its layout).

- ``render`` builds the skein specification as plain data: no skein, no cluster.
- ``submit`` creates the local run directory (the record's home and the source of
  the shipped files), checks that the ResourceManager answers and that every
  container fits on some NodeManager, and submits through this process's one
  skein driver (``yarn_client``). YARN's refusals (unknown queue...) are
  ``SubmissionRejected`` (exit 2) in YARN's words; nothing stays behind.
- ``status`` merges the application report, the skein containers and the task
  records from the key-value store (mirrored locally, ``yarn_app``).
- ``cancel`` writes the abort record (supervisors stop their roles and end the
  application), kills the application if it is still there after the grace
  period, and waits until YARN reports it ended.
- ``logs`` come from the NodeManagers (``yarn_logs``).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Dict, Iterator, Mapping, Optional

from .. import rundir
from ..errors import MxbatchError, SubmissionRejected
from ..plan import JobPlan
from ..records import JobRecord
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import Rendezvous
from ..runtime.states import AbortKind, AbortRecord, TaskRecord, TaskState
from ..spec import command_text
from ..status import JobState, JobStatus, NativeState, TaskKey, merge
from . import yarn_client, yarn_spec
from .base import Backend, LogReader, RenderedItem, Submission, load_run_plan
from .yarn_app import CONTAINER_QUEUED, CONTAINER_RUNNING, YarnJob, abort_from_report
from .yarn_logs import LogFollower, fetch
from .yarn_spec import YarnOptions

#: how long cancel waits for YARN to report a killed application as ended
KILL_WAIT_S = 30.0


class YarnBackend(Backend):
    name = "yarn"
    container_runtimes = ("docker",)
    options_class = YarnOptions

    def __init__(self, options: Optional[YarnOptions] = None) -> None:
        super().__init__(options)
        self._jobs: Dict[str, YarnJob] = {}

    # ------------------------------------------------------------------ checks
    def check(self, plan: JobPlan) -> None:
        options: YarnOptions = self.options
        if not options.queue.strip():
            raise plan.spec.error(("backends", "yarn", "queue"), "must not be empty")
        for tag in options.tags:
            if len(tag) > 100 or not tag.isascii():
                raise plan.spec.error(("backends", "yarn", "tags"),
                                      f"YARN tags are ASCII, at most 100 characters: {tag!r}")
        container = plan.spec.container
        if container is not None:
            for option in container.options:
                name, sep, _ = option.partition("=")
                if not sep or not name.startswith(yarn_spec.DOCKER_ENV_PREFIX):
                    raise plan.spec.error(
                        ("container", "options"),
                        f"on YARN an option is {yarn_spec.DOCKER_ENV_PREFIX}<NAME>=value "
                        f"(an environment variable of YARN's Docker runtime), got {option!r}")
            for mount in container.mounts:
                if not all(part.startswith("/") for part in mount.split(":")[:2]):
                    raise plan.spec.error(("container", "mounts"),
                                          f"YARN mounts absolute paths only, got {mount!r}")

    def check_environment(self) -> None:
        yarn_client.check_tools()

    # ------------------------------------------------------------------ rendering
    def render(self, plan: JobPlan, environ: Optional[Mapping[str, str]] = None) -> Submission:
        """The skein specification and the files ``submit`` writes; ``environ`` is the
        submitting environment (default: this process's)."""
        options: YarnOptions = self.options
        spec = yarn_spec.application_spec(plan, options)
        inherited = yarn_spec.inherited_environment(
            plan.run, os.environ if environ is None else environ)
        files = yarn_spec.shipped_files(plan, options)
        container_plan = yarn_spec.container_plan(plan.run, options.ship_workdir)
        items = [
            RenderedItem("skein application specification (skein.Client.submit)",
                         yarn_spec.spec_yaml(spec)),
            RenderedItem(f"{yarn_spec.PLAN_FILE} in every container ({files.plan})",
                         f"the job's plan.json with run_dir {container_plan.run_dir!r} and "
                         f"workdir {container_plan.workdir!r}"),
            RenderedItem(f"{yarn_spec.ENV_FILE} in every container ({files.env}, mode 0600)",
                         f"{len(inherited)} variables from the submitting environment "
                         f"({'inherit_env' if plan.run.inherit_env else 'PATH only'}): "
                         + ", ".join(inherited)),
        ]
        for task in plan.run.tasks:
            env = " ".join(f"{k}={v}" for k, v in sorted(task.env.items()))
            items.append(RenderedItem(f"task {task.index}: {task.label}",
                                      f"argv: {command_text(task.argv)}\nenv: {env}"))
        return Submission(plan=plan, items=items, payload={
            "spec": spec, "env_file": yarn_spec.env_file(inherited),
            "plan_json": container_plan.to_json()})

    # ------------------------------------------------------------------ submitting
    def submit(self, submission: Submission) -> JobRecord:
        plan = submission.plan
        run_dir = rundir.create(plan)
        try:
            self._write_container_files(run_dir, submission)
            client = yarn_client.driver(self.options.connect_timeout)
            self._check_fits(client, submission.payload["spec"])
            app_id = self._submit_spec(client, submission.payload["spec"])
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return JobRecord(job_id=plan.job_id, backend=self.name, run_dir=str(run_dir),
                         spec_path=str(plan.spec.source) if plan.spec.source else None,
                         native={"app_id": app_id, "queue": self.options.queue})

    @staticmethod
    def _write_container_files(run_dir, submission: Submission) -> None:
        target = run_dir / "yarn"
        target.mkdir(mode=0o700)
        (target / yarn_spec.PLAN_FILE).write_text(submission.payload["plan_json"])
        env = target / yarn_spec.ENV_FILE
        env.touch(mode=0o600)
        env.write_text(submission.payload["env_file"])
        (target / "skein.json").write_text(json.dumps(submission.payload["spec"], indent=1))

    @staticmethod
    def _check_fits(client, spec: dict) -> None:
        """``SubmissionRejected`` if a container is bigger than every NodeManager."""
        largest = yarn_client.node_capacity(client)
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
    def _submit_spec(client, spec: dict) -> str:
        import skein

        try:
            return client.submit(skein.ApplicationSpec.from_dict(spec))
        except skein.exceptions.DriverError as exc:
            words = str(exc).replace("Failed to submit application, exception:\n", "")
            raise SubmissionRejected(f"YARN rejected the job: {words.strip()}\n"
                                     "check backends.yarn (queue, node_label) and the "
                                     "resources (nothing was left queued)") from None

    # ------------------------------------------------------------------ watching
    def _job(self, record: JobRecord) -> YarnJob:
        job = self._jobs.get(record.job_id)
        if job is None:
            job = YarnJob(record, lambda: yarn_client.driver(self.options.connect_timeout))
            self._jobs[record.job_id] = job
        return job

    def rendezvous(self, record: JobRecord) -> Rendezvous:
        return self._job(record).rendezvous()

    def status(self, record: JobRecord) -> JobStatus:
        run = load_run_plan(record)
        job = self._job(record)
        report = job.report()
        rdv = job.rendezvous()
        records, abort = rdv.read_tasks(), rdv.read_abort()
        containers = job.containers()
        ids = {key: info.container_id for key, info in containers.items()}
        if report.finished:
            if abort is None:
                abort = abort_from_report(report)
                if abort is not None:
                    job.local.write_abort(abort)
            records = settle(run, records, report.outcome, abort)
            native = {(t.role, t.rank): NativeState.GONE for t in run.tasks}
        else:
            native = native_states(run, report.state,
                                   {key: info.state for key, info in containers.items()})
        status = merge(run, self.name, records, abort, native, ids)
        for task in status.tasks:  # container paths mean nothing here: the NodeManager's URL
            if (task.role, task.rank) in containers:
                url = containers[(task.role, task.rank)].log_url(f"{task.role}-{task.rank}.log")
                if status.log and status.log == task.log:
                    status.log = url
                task.log = url
        if report.finished:
            status.terminal = True
            if not status.reason and status.state is not JobState.SUCCEEDED and report.diagnostics:
                status.reason = report.diagnostics.strip()
        return status

    def cancel(self, record: JobRecord) -> None:
        job = self._job(record)
        if job.report().finished:
            return
        run = load_run_plan(record)
        status = self.status(record)
        if status.state is JobState.SUCCEEDED:
            # every worker is done: the application ends by itself in a moment
            job.wait_finished(run.grace_s + 10)
        else:
            if not status.terminal:
                job.rendezvous().write_abort(AbortRecord(
                    kind=AbortKind.CANCELLED, reason="cancelled by the user",
                    by="mxbatch cancel"))
            # supervisors stop their roles and end the application themselves; their
            # last records are read (and mirrored) meanwhile
            rdv = job.rendezvous()
            job.wait_finished(min(run.grace_s, 10.0) + 5,
                              until=lambda: rdv.read_tasks() is None or not _running(job))
        if not job.report().finished:
            job.kill()
            if not job.wait_finished(KILL_WAIT_S):
                raise MxbatchError(f"YARN application {job.app_id} of {record.job_id} has not "
                                   f"ended {KILL_WAIT_S:g}s after it was killed; ask the "
                                   "cluster admins (yarn application -status "
                                   f"{job.app_id})")

    # ------------------------------------------------------------------ logs
    def log_reader(self, record: JobRecord, role: str, rank: int) -> Optional[LogReader]:
        job = self._job(record)
        return LogFollower(lambda: job.containers().get((role, rank)), f"{role}-{rank}.log")

    def logs(self, record: JobRecord, role: str, rank: int) -> Iterator[str]:
        job = self._job(record)
        container = job.containers().get((role, rank))
        data = fetch(container, f"{role}-{rank}.log") if container is not None else None
        if data is None:
            where = (f"container {container.container_id} on {container.node_http}"
                     if container else "no container seen by mxbatch")
            raise MxbatchError(f"no log of {role}[{rank}] from YARN ({where}); with log "
                               f"aggregation: yarn logs -applicationId {job.app_id}")
        yield from data.decode(errors="replace").splitlines(keepends=True)


def _running(job: YarnJob) -> bool:
    """Whether any container of the job still runs."""
    return any(info.state in CONTAINER_RUNNING for info in job.containers().values())


def native_states(run: RunPlan, app_state: str, containers: Mapping[TaskKey, str]
                  ) -> Dict[TaskKey, NativeState]:
    """Per task, from its skein container's state while the application has not ended."""
    native = {}
    for task in run.tasks:
        key = (task.role, task.rank)
        state = containers.get(key)
        if app_state != "RUNNING" or state is None or state in CONTAINER_QUEUED:
            native[key] = NativeState.QUEUED
        elif state in CONTAINER_RUNNING:
            native[key] = NativeState.ACTIVE
        else:
            native[key] = NativeState.GONE
    return native


def settle(run: RunPlan, records: Mapping[TaskKey, TaskRecord], outcome: str,
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
        base = record.to_dict() if record is not None else {"role": task.role,
                                                             "rank": task.rank}
        if outcome == "SUCCEEDED":
            settled[key] = TaskRecord(**{**base, "state": TaskState.SUCCEEDED,
                                         "note": "ended with the YARN application"})
        elif key == blamed and abort is not None:
            settled[key] = TaskRecord(**{**base, "state": TaskState.FAILED,
                                         "exit_code": abort.exit_code, "signal": abort.signal,
                                         "note": abort.reason})
        elif record is not None and record.state is not TaskState.PENDING:
            settled[key] = TaskRecord(**{**base, "state": TaskState.CANCELLED,
                                         "note": f"ended with the YARN application ({outcome})"})
    return settled

