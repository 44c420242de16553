"""The ``logs`` command: the logs of a job's tasks, each line prefixed ``role[rank] |``
when several tasks are shown; ``--tail N`` starts at each task's last N lines, ``-f``
follows until the job ends (the tasks' lines merged in the order they arrived),
``--timestamps`` puts before each line when it arrived (from the log's time index,
``runtime.logfile``; logs read from the backend's own service, YARN's NodeManagers,
have none). The roles' own lines only (``jobs.logview``) unless ``--verbose``: the
files keep mxbatch's notes, hook reports and stack dumps too. What it shows is
``mxbatch.api.Job.logs``; this module presents it."""

from __future__ import annotations

from typing import Optional

import click

from ..runtime.roles import Role
from . import jsonout
from .params import JOB_HELP, JobRef

#: what stands for the time of a line the index does not cover
NO_TIME = "-"


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
    from ..api.job import Job

    for line in Job(job_id).logs(role, rank, tail_lines, follow, attempt=attempt,
                                 verbose=verbose, stamp=_stamp if timestamps else None):
        click.echo(line)


def _stamp(at: Optional[float]) -> str:
    """A line's arrival time as ``--timestamps`` shows it."""
    return jsonout.timestamp(at) or NO_TIME
