"""A submitted job from Python: ``Job`` (status, wait, logs, cancel) and ``JobStatus``
(what ``mxbatch status --json`` prints), and ``jobs()`` (what ``mxbatch list`` lists).

Each method is the flow the CLI command of the same name runs (``jobs.follow``,
``jobs.cancelling``, ``jobs.overview``, ``jobs.cause``): the CLI presents what these
return. Errors are the CLI's typed errors (``mxbatch.errors``): ``JobNotFound`` for an
unknown job, ``WaitTimeout`` when ``wait`` gives up, each with its ``exit_code``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from ..backends import records
from ..backends.base import Backend, current_attempt, load_run_plan
from ..backends.jobrefs import resolve
from ..backends.status import AttemptStatus, JobState, TaskStatus
from ..backends.status import JobStatus as MergedStatus
from ..errors import BadInput, JobNotFound
from ..jobs.cancelling import CancelReport, cancel_job
from ..jobs.cause import Cause, failure_cause
from ..jobs.follow import LogStream, LogTail, follow
from ..jobs.logview import RoleLines
from ..jobs.overview import StateFilter, select
from ..jobs.submit import backend_for_record
from ..runtime.planfile import TaskInfo
from ..runtime.roles import Role

#: how often ``Job.logs(follow=True)`` looks at the logs
FOLLOW_INTERVAL_S = 0.25


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job's state now: the job's record, the backend's merged view of its tasks and
    attempts (``detail``: every field of ``status --json``) and, for a failed job, the
    failing task's last words (``cause``). ``to_dict()`` is ``status --json``'s document
    (less its ``schema`` key)."""

    record: records.JobRecord
    detail: MergedStatus
    cause: Optional[Cause] = None

    @property
    def job_id(self) -> str:
        return self.record.job_id

    @property
    def backend(self) -> str:
        return self.record.backend

    @property
    def run_dir(self) -> Path:
        return Path(self.record.run_dir)

    @property
    def submitted_at(self) -> float:
        return self.record.submitted_at

    @property
    def state(self) -> JobState:
        """PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED."""
        return self.detail.state

    @property
    def ended(self) -> bool:
        """The job has ended (its state is final)."""
        return self.detail.terminal

    @property
    def succeeded(self) -> bool:
        return self.detail.state is JobState.SUCCEEDED

    @property
    def tasks(self) -> List[TaskStatus]:
        """One row per task (role, rank, state, host, exit code, metrics...)."""
        return self.detail.tasks

    @property
    def attempts(self) -> List[AttemptStatus]:
        """Every attempt of a job with restarts (one for the others)."""
        return self.detail.attempts

    @property
    def reason(self) -> str:
        """Why the job failed or was cancelled ("" otherwise)."""
        return self.detail.reason

    def __getattr__(self, name: str) -> Any:
        """Every other field of ``status --json`` (``samples_per_sec``, ``note``, ``log``,
        ``attempt``, ``stragglers``...): the backend's merged view's."""
        if name.startswith("__") or name == "detail":
            raise AttributeError(name)
        return getattr(self.detail, name)

    def to_dict(self) -> Dict[str, Any]:
        """The fields of ``mxbatch status --json`` (plain data; times as epoch seconds)."""
        record = self.record
        return dict({"job_id": record.job_id, "backend": record.backend,
                     "run_dir": record.run_dir, "submitted_at": record.submitted_at},
                    **self.detail.to_dict(),
                    cause=self.cause.to_dict() if self.cause else None)


class Job:
    """A submitted job, named as the CLI names one: its id (``Job("mlp-ps-1a2b3c4d")``),
    a unique prefix of it, or ``"last"`` (``backends.jobrefs``). ``JobNotFound`` when no
    such job was submitted from this ``$MXBATCH_HOME``; ``BadInput`` for a prefix that
    starts several ids."""

    def __init__(self, job_id: str) -> None:
        self._record = records.load(resolve(job_id))
        self._backend: Optional[Backend] = None

    @classmethod
    def of_record(cls, record: records.JobRecord, backend: Optional[Backend] = None) -> "Job":
        """The job of a record just saved or already read; ``backend``: the one it was
        submitted through (default: rebuilt from the record when first needed)."""
        job = cls.__new__(cls)
        job._record, job._backend = record, backend
        return job

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    @property
    def id(self) -> str:
        return self._record.job_id

    @property
    def run_dir(self) -> Path:
        """Its run directory: logs under ``logs/``, every attempt's under ``attempts/``."""
        return Path(self._record.run_dir)

    @property
    def backend_name(self) -> str:
        return self._record.backend

    @property
    def record(self) -> records.JobRecord:
        return self._record

    @property
    def backend(self) -> Backend:
        """The backend the job was submitted to, with the options it was submitted with."""
        if self._backend is None:
            self._backend = backend_for_record(self._record)
        return self._backend

    def describe(self, merged: MergedStatus) -> JobStatus:
        """A ``JobStatus`` of the backend's view ``merged``, with its failure's cause."""
        return JobStatus(self._record, merged, failure_cause(self.backend, self._record,
                                                             merged))

    def status(self) -> JobStatus:
        """The job's state now, every task's, and a failure's cause."""
        return self.describe(self.backend.status(self._record))

    def wait(self, timeout: Optional[float] = None, *,
             on_log: Optional[Callable[[str], None]] = None,
             on_status: Optional[Callable[[MergedStatus], None]] = None,
             note: Optional[Callable[[str], None]] = None,
             output_busy: Callable[[], bool] = lambda: False,
             verbose: bool = False) -> JobStatus:
        """Block until the job ends and return its final status (whatever the outcome:
        look at ``state``). ``timeout`` (seconds): ``WaitTimeout`` after that long, the
        job going on. ``on_log`` gets each log line as it arrives, prefixed
        ``role[rank] |`` (the roles' own; ``verbose``: mxbatch's notes too); ``on_status``
        every status polled; ``note`` a line when an attempt ends and the next begins;
        while ``output_busy()`` no more logs are read."""
        merged = follow(self.backend, self._record, stream_logs=on_log is not None,
                        echo=on_log or (lambda line: None), timeout=timeout,
                        on_status=on_status, note=note, output_busy=output_busy,
                        verbose=verbose)
        return self.describe(merged)

    def tasks(self, role: Union[Role, str, None] = None,
              rank: Optional[int] = None) -> List[TaskInfo]:
        """The job's tasks that ``role`` and ``rank`` select; ``JobNotFound`` (exit 4)
        naming the job's tasks when they select none."""
        wanted = Role(role) if role is not None else None
        tasks = load_run_plan(self._record).tasks
        chosen = [t for t in tasks
                  if (wanted is None or t.role is wanted) and (rank is None or t.rank == rank)]
        if not chosen:
            label = f"{wanted.value if wanted else 'any role'}" \
                    f"[{'any rank' if rank is None else rank}]"
            raise JobNotFound(f"job {self.id} has no task {label}; its tasks: "
                              + ", ".join(t.label for t in tasks))
        return chosen

    def logs(self, role: Union[Role, str, None] = None, rank: Optional[int] = None,
             tail: Optional[int] = None, follow: bool = False, *,
             attempt: Optional[int] = None, verbose: bool = False,
             stamp: Optional[Callable[[Optional[float]], str]] = None) -> Iterator[str]:
        """The log lines of the chosen tasks (every task by default), each prefixed
        ``role[rank] |`` when several are chosen: the roles' own lines (``verbose``:
        mxbatch's notes, hook reports and stack dumps too, as the files keep them).
        ``tail``: from each task's last ``tail`` lines; ``follow``: until the job ends,
        the tasks' lines merged in the order they arrived. ``attempt``: that attempt's
        logs (``MXBATCH_ATTEMPT``; default: the current one). ``stamp``: what goes before
        each line, given its arrival time (None where the log's index does not say;
        ``BadInput`` for a backend whose logs keep no times). ``JobNotFound`` for a task
        or attempt the job does not have; ``BadInput`` for a log that is no file."""
        tasks = self.tasks(role, rank)
        latest = current_attempt(self._record)
        if attempt is None:
            attempt = latest
        elif not 0 <= attempt <= latest:
            raise JobNotFound(f"job {self.id} has no attempt {attempt} "
                              f"(attempts 0-{latest})")
        backend, record = self.backend, self._record
        layout = record.layout.attempt(attempt)
        for task in tasks:  # a log that is there but no file (a directory): say so first
            if backend.log_reader(record, task.role, task.rank) is None:
                LogTail(Path(layout.task_log(task.role.value, task.rank)), "").check()
        if not (follow or stamp is not None or tail is not None):
            yield from self._backend_logs(tasks, attempt, verbose)
            return
        readers = [backend.log_reader(record, t.role, t.rank, *([attempt] if attempt else []))
                   for t in tasks]
        if stamp is not None and any(reader is not None for reader in readers):
            raise BadInput(f"--timestamps: the logs of backend {record.backend} are read "
                           "from its own service, which keeps no arrival times")
        stream = LogStream(backend, record, load_run_plan(record), _unused_echo,
                           attempt=attempt, tasks=tasks, prefixed=len(tasks) > 1,
                           tail_lines=tail, stamp=stamp, verbose=verbose, merge=follow)
        while True:
            done = not follow or backend.status(record).terminal
            yield from stream.look(final=done)  # as read: a huge log is never in memory
            if done:
                return
            time.sleep(FOLLOW_INTERVAL_S)

    def _backend_logs(self, tasks: List[TaskInfo], attempt: int,
                      verbose: bool) -> Iterator[str]:
        """What the backend says each task's log is (``Backend.logs``: plugins may add
        to it), prefixed when there are several tasks."""
        width = max(len(t.label) for t in tasks)
        for task in tasks:
            prefix = f"{task.label:<{width}} | " if len(tasks) > 1 else ""
            shown = RoleLines()
            for line in self.backend.logs(self._record, task.role, task.rank,
                                          *([attempt] if attempt else [])):
                text = line.rstrip("\n")
                if verbose or shown.shows(text):
                    yield prefix + text

    def cancel(self) -> CancelReport:
        """Stop the job: nothing of it stays queued or running. Idempotent (a no-op on an
        ended job); the report says the state before and after."""
        return cancel_job(self.id)


def jobs(state: Union[StateFilter, str, None] = None, backend: Optional[str] = None,
         last: Optional[int] = None) -> List[Job]:
    """The submitted jobs, newest first, as ``mxbatch list`` selects them: in ``state``
    (pending, running, succeeded, failed, cancelled, ended, unknown), of ``backend``, at
    most ``last``. A record that cannot be read is left out."""
    chosen = StateFilter(state.lower()) if isinstance(state, str) else state
    readable, _ = records.scan()
    return [Job.of_record(summary.record)
            for summary in select(readable, backend=backend, state=chosen, last=last)]


def _unused_echo(text: str) -> None:
    """``LogStream``'s echo where its lines are taken with ``look`` instead."""
