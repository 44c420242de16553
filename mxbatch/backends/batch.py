"""What the batch-queue backends (SGE, Slurm) share: one array job per role group,
directives rendered from resources, job scripts from ``jobscripts/``, job-id parsing,
native pass-through, all-or-nothing submission, and cancel that waits until the
queue is empty of the job.

A backend supplies the native parts: directives for a group, how to submit one
group, how to list its tasks' native states, and how to delete job ids.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import re
import shlex
import shutil
import string
import subprocess
import time
from importlib import resources
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import rundir, shell
from ..errors import BackendUnavailable, CommandError, MxbatchError, SubmissionRejected
from ..plan import JobPlan
from ..records import JobRecord
from ..runtime.planfile import RunPlan, TaskInfo
from ..runtime.states import AbortKind, AbortRecord
from ..spec import Role, command_text
from ..status import JobStatus, NativeState, TaskKey, merge
from .base import Backend, RenderedItem, Submission, load_run_plan

#: how long cancel waits for the queue to forget the job's tasks
QUEUE_DRAIN_S = 60.0


@dataclasses.dataclass(frozen=True)
class Directive:
    """One native option: ``-pe smp 2`` is ``Directive("-pe", ("smp", "2"))``,
    ``--mem=2048M`` is ``Directive("--mem", ("2048M",), joiner="=")``."""

    flag: str
    args: Tuple[str, ...] = ()
    joiner: str = " "

    def argv(self) -> List[str]:
        if self.joiner == "=" and self.args:
            return [f"{self.flag}={','.join(self.args)}"]
        return [self.flag, *self.args]


def native_directives(extra: Sequence[str]) -> List[Directive]:
    """Raw user options (``native``/``extra``), passed through last and unchanged;
    an argument starting with ``-`` begins a directive, the ones after it are its values."""
    directives: List[Directive] = []
    for arg in extra:
        if arg.startswith("-") or not directives:
            directives.append(Directive(arg))
        else:
            last = directives[-1]
            directives[-1] = Directive(last.flag, last.args + (arg,), last.joiner)
    return directives


def directive_lines(prefix: str, directives: Sequence[Directive]) -> str:
    """Directive lines for a job script; not shell-quoted (schedulers parse them themselves)."""
    return "\n".join(f"{prefix} {' '.join(d.argv())}" for d in directives)


def flat_argv(directives: Sequence[Directive]) -> List[str]:
    return [arg for d in directives for arg in d.argv()]


@dataclasses.dataclass(frozen=True)
class RoleGroup:
    """The tasks of one role, submitted as one array job."""

    role: Role
    tasks: Tuple[TaskInfo, ...]

    @property
    def count(self) -> int:
        return len(self.tasks)

    @property
    def first(self) -> TaskInfo:
        return self.tasks[0]


def role_groups(run: RunPlan) -> List[RoleGroup]:
    return [RoleGroup(role, tuple(run.tasks_of(role.value))) for role in Role
            if run.tasks_of(role.value)]


def render_jobscript(template: str, **values: str) -> str:
    """Fill ``mxbatch/jobscripts/<template>`` (``string.Template``, ``${name}``)."""
    text = resources.files("mxbatch").joinpath("jobscripts", template).read_text()
    return string.Template(text).substitute(values)


def parse_job_id(pattern: "re.Pattern[str]", output: str, argv: Sequence[str]) -> str:
    """The ``job_id`` named group of ``pattern`` in a submit command's output."""
    match = pattern.search(output)
    if match is None:
        raise MxbatchError(f"cannot find a job id in the output of {' '.join(argv)!r}: "
                           f"{output.strip()!r}")
    return match.group("job_id")


def runtime_argv(plan: JobPlan, role: Role) -> List[str]:
    """What each array task runs: the runtime zipapp for its role (rank from the array)."""
    return [plan.run.python, str(plan.run_dir / "runtime.pyz"), "run", str(plan.run_dir),
            "--role", role.value]


def job_name(plan: JobPlan, role: Role) -> str:
    return f"{plan.job_id}-{role.value}"


class BatchBackend(Backend):
    """Render/submit/status/cancel for array-job schedulers; subclasses fill in natives."""

    script_template: str = ""
    #: the scheduler and its daemon, in messages: "SGE" / "SGE qmaster"
    scheduler: str = ""
    daemon: str = ""
    #: a submit or status command's output that means the daemon is not reachable
    unreachable: "re.Pattern[str]" = re.compile(r"(?!)")
    unreachable_hint: str = ""
    #: what to check when the scheduler rejects a job
    rejection_hint: str = ""
    #: the job id in the submit command's output (named group ``job_id``)
    job_id_pattern: "re.Pattern[str]" = re.compile(r"(?P<job_id>\S+)")

    def command_env(self) -> Optional[Dict[str, str]]:
        """The environment of the scheduler's commands (None: this process's)."""
        return None

    def translate(self, exc: CommandError) -> MxbatchError:
        """A failed scheduler command as the user should see it: the scheduler's words,
        as "unreachable" (exit 3) or "rejected" (exit 2), plus what to do."""
        words = (exc.stderr or exc.stdout).strip()
        if self.unreachable.search(words) or exc.returncode is None:
            return BackendUnavailable(f"{self.daemon} unreachable: {words or exc}\n"
                                      f"{self.unreachable_hint}")
        return rejected(self.scheduler, words, self.rejection_hint)

    def run_command(self, argv: Sequence[str], *, check: bool = True,
                    timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a scheduler command; failures become ``translate``d errors."""
        try:
            return shell.run(argv, env=self.command_env(), check=check, timeout=timeout)
        except CommandError as exc:
            raise self.translate(exc) from None

    def submit_script(self, argv: Sequence[str]) -> str:
        """Run a submit command and return the job id it prints."""
        return parse_job_id(self.job_id_pattern, self.run_command(argv).stdout, argv)

    # -- natives
    @abc.abstractmethod
    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """Native options for ``group`` (resources, names, output paths, extra last)."""

    @abc.abstractmethod
    def submit_groups(self, submission: Submission, scripts: Mapping[str, Path]
                      ) -> Dict[str, object]:
        """Submit every group (``scripts`` by name, as ``render`` made them); return the
        record's ``native`` dict (with ``job_ids``). On failure, raise after deleting
        what was already submitted."""

    @abc.abstractmethod
    def native_states(self, record: JobRecord, run: RunPlan
                      ) -> Tuple[Dict[TaskKey, NativeState], Dict[TaskKey, str]]:
        """Per task: its native state and native id (``12.3``)."""

    @abc.abstractmethod
    def delete(self, record: JobRecord, force: bool = False) -> None:
        """Ask the scheduler to remove every task of the job (queued or running)."""

    # -- shared behaviour
    def script_for(self, plan: JobPlan, group: RoleGroup) -> str:
        return render_jobscript(
            self.script_template, job_id=plan.job_id, role=group.role.value,
            count=str(group.count),
            directives=directive_lines(self.directive_prefix, self.directives(plan, group)),
            command=command_text(runtime_argv(plan, group.role)))

    directive_prefix: str = "#"

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        """Job scripts by name (``jobs/<name>.sh``): one per role group by default."""
        return {g.role.value: self.script_for(plan, g) for g in role_groups(plan.run)}

    def render(self, plan: JobPlan) -> Submission:
        items = []
        scripts = self.scripts(plan)
        for name, script in scripts.items():
            items.append(RenderedItem(f"job script {plan.run_dir / 'jobs' / (name + '.sh')}",
                                      script))
        for task in plan.run.tasks:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(task.env.items()))
            items.append(RenderedItem(f"task {task.index}: {task.label}",
                                      f"argv: {command_text(task.argv)}\nenv: {env}"))
        return Submission(plan=plan, items=items, payload={"scripts": scripts})

    def submit(self, submission: Submission) -> JobRecord:
        plan = submission.plan
        run_dir = rundir.create(plan)
        jobs_dir = run_dir / "jobs"
        jobs_dir.mkdir(mode=0o700)
        scripts = {}
        for name, text in submission.payload["scripts"].items():
            path = jobs_dir / f"{name}.sh"
            path.write_text(text)
            path.chmod(0o700)
            scripts[name] = path
        try:
            native = self.submit_groups(submission, scripts)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return JobRecord(job_id=plan.job_id, backend=self.name, run_dir=str(run_dir),
                         spec_path=str(plan.spec.source) if plan.spec.source else None,
                         native=native)

    def status(self, record: JobRecord) -> JobStatus:
        run = load_run_plan(record)
        rdv = rundir.rendezvous(record.run_path)
        native, ids = self.native_states(record, run)
        return merge(run, self.name, rdv.read_tasks(), rdv.read_abort(), native, ids)

    def cancel(self, record: JobRecord) -> None:
        run = load_run_plan(record)
        rdv = rundir.rendezvous(record.run_path)
        status = self.status(record)
        if not status.terminal:
            rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, reason="cancelled by the user",
                                        by="mxbatch cancel"))
            # running supervisors stop their roles themselves (SIGTERM, then SIGKILL)
            self._wait_native(record, run, lambda s: s is not NativeState.ACTIVE,
                              timeout=min(run.grace_s, 10.0) + 3)
        if self._present(record, run):
            self.delete(record)
            if not self._wait_native(record, run, lambda s: s is NativeState.GONE,
                                     timeout=QUEUE_DRAIN_S / 2):
                self.delete(record, force=True)
                if not self._wait_native(record, run, lambda s: s is NativeState.GONE,
                                         timeout=QUEUE_DRAIN_S / 2):
                    raise MxbatchError(f"tasks of {record.job_id} are still in the queue "
                                       f"after {QUEUE_DRAIN_S:g}s; ask the cluster admins")

    def _present(self, record: JobRecord, run: RunPlan) -> bool:
        native, _ = self.native_states(record, run)
        return any(s is not NativeState.GONE for s in native.values())

    def _wait_native(self, record: JobRecord, run: RunPlan, done, timeout: float) -> bool:
        deadline = time.time() + timeout
        while True:
            native, _ = self.native_states(record, run)
            if all(done(s) for s in native.values()):
                return True
            if time.time() > deadline:
                return False
            time.sleep(0.5)


def check_choice(plan: JobPlan, backend: str, key: str, value: str,
                 choices: "type[enum.Enum]") -> None:
    """SpecError at ``backends.<backend>.<key>`` unless ``value`` is one of ``choices``."""
    allowed = [c.value for c in choices]
    if value not in allowed:
        raise plan.spec.error(("backends", backend, key),
                              f"expected one of {', '.join(allowed)}, got {value!r}")


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
