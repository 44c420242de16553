"""``mxbatch clean``: remove the run directories and records of old, ended jobs.

Only a job that has ended (or whose state cannot be read, when asked for) is removed:
a pending or running job never is, whatever the filters say, nor one whose state is
unknown while a process of this host still carries its job id or its scheduler still
lists a task of it. The run directory is
removed only when it is the job's own (its name is the job id, and it is no symbolic
link); the record last, so that a failure leaves the job listed.

``clean JOB...`` (``clean_named``) removes the jobs named, whatever their age or state
(still never a pending or running one, nor one still running or listed as above), unless
a filter is given: then a named job it leaves out is reported, not removed.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..backends import records
from ..errors import MxbatchError
from ..runtime import procs
from ..spec.plan import JOB_ID
from .overview import JobSummary, StateFilter, summarize
from .submit import backend_for_record


def _still_listed(record: records.JobRecord) -> bool:
    """Whether the job's scheduler still lists a task of it (``Backend.still_listed``);
    False when there are no native ids (an unfinished submission) or no one to ask."""
    if record.submitting:
        return False
    try:
        return backend_for_record(record).still_listed(record)
    except (MxbatchError, OSError, ValueError):
        return False


@dataclasses.dataclass(frozen=True)
class Cleaned:
    """What ``clean`` did to one job: the run directory it removed (None: there was
    none) and whether it removed the record; ``problem``: why it stopped."""

    job_id: str
    run_dir: Optional[str]
    record_removed: bool
    problem: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def clean(summary: JobSummary, dry_run: bool = False) -> Cleaned:
    """Remove ``summary``'s job (see the module docstring); ``dry_run``: say what would
    go and remove nothing."""
    record = summary.record
    if not JOB_ID.fullmatch(record.job_id):  # a record written by hand: touch nothing
        return Cleaned(record.job_id, None, False, "not removed: its record's job id is no "
                                                   "job id")
    if summary.state is not None and not summary.ended:
        return Cleaned(record.job_id, None, False, f"not removed: it is {summary.state_text}")
    if summary.state is None:  # unknown (its plan lost, its submission unfinished)
        alive = procs.job_processes(record.job_id)
        if alive:
            return Cleaned(record.job_id, None, False,
                           f"not removed: its state is {summary.state_text}, but "
                           f"{len(alive)} of its processes still run here (pid "
                           f"{', '.join(map(str, alive[:5]))}): `mxbatch cancel "
                           f"{record.job_id}` first")
        if _still_listed(record):
            return Cleaned(record.job_id, None, False,
                           f"not removed: its state is {summary.state_text}, but its "
                           f"scheduler still lists a task of it: `mxbatch cancel "
                           f"{record.job_id}` first")
    run_dir = Path(record.run_dir)
    own = run_dir.name == record.job_id and run_dir.is_dir() and not run_dir.is_symlink()
    if dry_run:
        return Cleaned(record.job_id, str(run_dir) if own else None, True)
    if own:
        try:
            shutil.rmtree(run_dir)
        except OSError as exc:
            return Cleaned(record.job_id, None, False,
                           f"cannot remove {run_dir}: {exc.strerror or exc}")
    records.delete(record.job_id)
    return Cleaned(record.job_id, str(run_dir) if own else None, True)


def clean_named(named: Sequence[records.JobRecord], *, backend: Optional[str] = None,
                state: Optional[StateFilter] = None, older_than_s: Optional[float] = None,
                dry_run: bool = False, now: Optional[float] = None) -> List[Cleaned]:
    """``clean JOB...``: each job of ``named`` once, in order, removed as ``clean``
    removes one; a filter given (``backend``, ``state``, ``older_than_s``) that leaves a
    job out makes its ``Cleaned`` say so (``problem``) instead."""
    now = time.time() if now is None else now
    results: List[Cleaned] = []
    seen = set()
    for record in named:
        if record.job_id in seen:
            continue
        seen.add(record.job_id)
        if backend is not None and record.backend != backend:
            results.append(Cleaned(record.job_id, None, False, "not removed: its backend "
                                   f"is {record.backend}, not {backend}"))
            continue
        summary = summarize(record)
        if state is not None and not state.matches(summary):
            results.append(Cleaned(record.job_id, None, False, "not removed: it is "
                                   f"{summary.state_text}, not {state.value}"))
        elif (older_than_s is not None and (summary.ended or summary.state is None)
              and summary.age_s(now) < older_than_s):
            when = "ended" if summary.ended_at else "was submitted"
            results.append(Cleaned(record.job_id, None, False, f"not removed: it {when} "
                                   f"{summary.age_s(now):.0f}s ago, less than "
                                   f"--older-than ({older_than_s:g}s)"))
        else:
            results.append(clean(summary, dry_run=dry_run))
    return results
