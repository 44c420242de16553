"""The ``logs`` command: the logs of a job's tasks, each line prefixed ``role[rank] |``
when several tasks are shown; ``--tail N`` starts at each task's last N lines, ``-f``
follows until the job ends (the tasks' lines merged in the order they arrived),
``--timestamps`` puts before each line when it arrived (from the log's time index,
``runtime.logfile``; logs read from the backend's own service, YARN's NodeManagers,
have none). The roles' own lines only (``jobs.logview``) unless ``--verbose``: the
files keep mxbatch's notes, hook reports and stack dumps too."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import click

from ..backends import records
from ..backends.base import current_attempt, load_run_plan
from ..errors import JobNotFound, MxbatchError
from ..jobs import submit as jobs
from ..jobs.follow import LogStream, LogTail
from ..jobs.logview import RoleLines
from ..runtime.planfile import TaskInfo
from ..runtime.roles import Role
from . import jsonout
from .params import JOB_HELP, JobRef

#: how often ``logs -f`` looks at the logs
FOLLOW_INTERVAL_S = 0.25
#: what stands for the time of a line the index does not cover
NO_TIME = "-"


def chosen_tasks(record: records.JobRecord, role: Optional[str],
                 rank: Optional[int]) -> List[TaskInfo]:
    """The job's tasks that ``--role``/``--rank`` select; JobNotFound (exit 4) naming the
    job's tasks when they select none."""
    tasks = load_run_plan(record).tasks
    chosen = [t for t in tasks
              if (role is None or t.role == role) and (rank is None or t.rank == rank)]
    if not chosen:
        wanted = f"{role or 'any role'}[{'any rank' if rank is None else rank}]"
        raise JobNotFound(f"job {record.job_id} has no task {wanted}; its tasks: "
                          + ", ".join(t.label for t in tasks))
    return chosen


@click.command(name="logs", epilog=JOB_HELP)
@click.argument("job_id", type=JobRef())
@click.option("--role", type=click.Choice([r.value for r in Role]), default=None,
              help="Only this role's tasks (every rank of it, prefixed).")
@click.option("--rank", type=int, default=None,
              help="Only tasks of this rank; a task the job does not have is an error (exit 4).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option("--tail", "tail_lines", type=click.IntRange(min=0), default=None, metavar="N",
              help="Start at the last N lines of each task's log.")
@click.option("--timestamps", "-t", is_flag=True,
              help="Put before each line when it arrived (UTC, as in --json documents).")
@click.option("--attempt", type=int, default=None,
              help="The logs of this attempt (MXBATCH_ATTEMPT; default: the current one).")
@click.option("--verbose", "-v", is_flag=True,
              help="mxbatch's own lines too (notes, the role hook's reports, stack dumps), "
                   "as the log files keep them.")
def logs_command(job_id: str, role: Optional[str], rank: Optional[int], follow: bool,
                 tail_lines: Optional[int], timestamps: bool, attempt: Optional[int],
                 verbose: bool) -> None:
    """Print the logs of JOB_ID (every task, prefixed role[rank]; one task as it is)."""
    record = records.load(job_id)
    backend = jobs.backend_for_record(record)
    tasks = chosen_tasks(record, role, rank)
    latest = current_attempt(record)
    if attempt is None:
        attempt = latest
    elif not 0 <= attempt <= latest:
        raise JobNotFound(f"job {job_id} has no attempt {attempt} (attempts 0-{latest})")
    layout = record.layout.attempt(attempt)
    width = max(len(t.label) for t in tasks)
    for task in tasks:  # a log that is there but no file (a directory): say so first
        if backend.log_reader(record, task.role, task.rank) is None:
            LogTail(Path(layout.task_log(task.role.value, task.rank)), "").check()
    if not (follow or timestamps or tail_lines is not None):
        # what the backend says a task's log is (Backend.logs: plugins may add to it)
        for task in tasks:
            prefix = f"{task.label:<{width}} | " if len(tasks) > 1 else ""
            shown = RoleLines()
            for line in backend.logs(record, task.role, task.rank,
                                     *([attempt] if attempt else [])):
                text = line.rstrip("\n")
                if verbose or shown.shows(text):
                    click.echo(prefix + text)
        return
    readers = [backend.log_reader(record, t.role, t.rank, *([attempt] if attempt else []))
               for t in tasks]
    if timestamps and any(reader is not None for reader in readers):
        raise MxbatchError(f"--timestamps: the logs of backend {record.backend} are read "
                           "from its own service, which keeps no arrival times",
                           exit_code=2)
    stream = LogStream(backend, record, load_run_plan(record), click.echo, attempt=attempt,
                       tasks=tasks, prefixed=len(tasks) > 1, tail_lines=tail_lines,
                       stamp=_stamp if timestamps else None, verbose=verbose, merge=follow)
    while True:
        done = not follow or backend.status(record).terminal
        stream.pump(final=done)
        if done:
            return
        time.sleep(FOLLOW_INTERVAL_S)


def _stamp(at: Optional[float]) -> str:
    """A line's arrival time as ``--timestamps`` shows it."""
    return jsonout.timestamp(at) or NO_TIME
