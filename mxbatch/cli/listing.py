"""The ``list`` and ``clean`` commands: submitted jobs at a glance, and removing old
ones. Formatting only; the work is in ``jobs.overview`` and ``jobs.clean``."""

from __future__ import annotations

import sys
import time
from typing import List, Optional, Tuple

import click

from ..backends import records
from ..errors import ExitCode
from ..jobs.clean import clean, clean_named
from ..jobs.overview import JobSummary, StateFilter, select
from ..spec.units import parse_duration
from . import jsonout
from .params import BackendName, Duration, JobRef, RegistryHelpOption
from .progress import clock

#: the state ``list`` shows of a job whose record cannot be read
UNREADABLE = "UNREADABLE"
_STATES = click.Choice([s.value for s in StateFilter], case_sensitive=False)


def _row(summary: JobSummary, now: float) -> dict:
    record = summary.record
    return {"job_id": record.job_id, "backend": record.backend, "state": summary.state_text,
            "submitted_at": record.submitted_at,
            "ended_at": summary.ended_at if summary.ended else None,
            "duration_s": round(summary.duration_s(now), 1), "run_dir": record.run_dir}


def _unreadable_row(record: records.UnreadableRecord) -> dict:
    return {"job_id": record.job_id, "backend": None, "state": UNREADABLE,
            "submitted_at": None, "ended_at": None, "duration_s": None, "run_dir": None,
            "problem": record.problem}


def _table(rows: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                   + "\n" for row in rows)


@click.command(name="list")
@click.option("--state", type=_STATES, default=None,
              help="Only jobs in this state (ended: succeeded, failed or cancelled; "
                   "unknown: the state cannot be read).")
@click.option("--backend", "-b", type=BackendName(), default=None, cls=RegistryHelpOption,
              help="Only jobs of this backend: {backends}.")
@click.option("-n", "--last", type=click.IntRange(min=1), default=None,
              help="Only the newest N jobs (of those the filters select).")
@click.option("--json", "as_json", is_flag=True,
              help=jsonout.OPTION_HELP)
def list_command(state: Optional[str], backend: Optional[str], last: Optional[int],
                 as_json: bool) -> None:
    """List submitted jobs, newest first: state, submission time, duration."""
    now = time.time()
    readable, unreadable = records.scan()
    chosen = select(readable, backend=backend,
                    state=StateFilter(state.lower()) if state else None, last=last, now=now)
    summaries = list(chosen)
    # a record that cannot be read is a job whose state is unknown: shown, never dropped
    broken = unreadable if backend is None and state in (None, StateFilter.UNKNOWN.value) \
        else []
    for each in broken:
        click.echo(f"mxbatch: cannot read the record of job {each.job_id} ({each.path}): "
                   f"{each.problem}; `mxbatch cancel {each.job_id}` still stops its "
                   "processes on this host", err=True)
    if as_json:
        click.echo(jsonout.dumps([jsonout.document(_row(s, now)) for s in summaries]
                                 + [jsonout.document(_unreadable_row(b)) for b in broken]))
        return
    rows = [["JOB", "BACKEND", "STATE", "SUBMITTED", "DURATION"]]
    for summary in summaries:
        submitted = time.strftime("%Y-%m-%d %H:%M:%S",
                                  time.localtime(summary.record.submitted_at))
        duration = clock(summary.duration_s(now)) + ("" if summary.ended else "+")
        rows.append([summary.record.job_id, summary.record.backend, summary.state_text,
                     submitted, duration])
    for each in broken:
        rows.append([each.job_id, "?", UNREADABLE, "?", "?"])
    click.echo(_table(rows), nl=False)


#: ``clean``'s filters when no job is named
CLEAN_OLDER_THAN, CLEAN_STATE = "7d", StateFilter.ENDED.value


@click.command(name="clean", epilog="JOB: a job's id, a unique prefix of it, or 'last' "
                                    "(the newest job); several may be named.")
@click.argument("jobs", nargs=-1, type=JobRef(), metavar="[JOB]...")
@click.option("--older-than", "older_than", type=Duration(zero_ok=True), default=None,
              help=f"Only jobs that ended at least this long ago (12h, 7d, 0...; default "
                   f"{CLEAN_OLDER_THAN}, none for the JOBs named).")
@click.option("--state", type=click.Choice(["ended", "succeeded", "failed", "cancelled",
                                            "unknown"], case_sensitive=False),
              default=None,
              help="Which jobs: ended (succeeded, failed or cancelled), one of those, or "
                   "unknown (the state cannot be read, e.g. the run directory is gone); "
                   f"default {CLEAN_STATE}, ended or unknown for the JOBs named.")
@click.option("--backend", "-b", type=BackendName(), default=None, cls=RegistryHelpOption,
              help="Only jobs of this backend: {backends}.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help=jsonout.OPTION_HELP)
def clean_command(jobs: Tuple[str, ...], older_than: Optional[float], state: Optional[str],
                  backend: Optional[str], dry_run: bool, as_json: bool) -> None:
    """Remove the run directories and records of old ended jobs (never a running one).

    With JOBs: those jobs (ended, or of a state that cannot be read, and no process of
    theirs still running), whatever their age unless --older-than is given; exit 1 if
    one of them is not removed.
    """
    chosen_state = StateFilter(state.lower()) if state else None
    if jobs:
        named = [records.load(job) for job in jobs]  # every one is a job, or nothing goes
        results = clean_named(named, backend=backend, state=chosen_state,
                              older_than_s=older_than, dry_run=dry_run)
    else:
        chosen = select(records.all_records(), backend=backend,
                        state=chosen_state or StateFilter(CLEAN_STATE),
                        older_than_s=(parse_duration(CLEAN_OLDER_THAN) if older_than is None
                                      else older_than))
        results = [clean(summary, dry_run=dry_run) for summary in chosen]
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(
            {"dry_run": dry_run, "jobs": [r.to_dict() for r in results]})))
    else:
        verb = "would remove" if dry_run else "removed"
        for result in results:
            if result.problem:
                click.echo(f"mxbatch: {result.job_id}: {result.problem}", err=True)
            else:
                what = result.run_dir or "(no run directory)"
                click.echo(f"{verb} {result.job_id}: {what}")
        done = sum(1 for r in results if not r.problem)
        click.echo(f"mxbatch: {verb} {done} job{'s' if done != 1 else ''}", err=True)
    if jobs and any(r.problem for r in results):  # a job named stays: as rm does
        sys.exit(ExitCode.JOB_FAILED)
