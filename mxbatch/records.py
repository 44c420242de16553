"""Job records on disk: what was submitted where, for status/logs/cancel/list.

Records live in ``$MXBATCH_HOME/jobs/<job-id>.json`` (default ``~/.mxbatch``),
created with mode 0700 and written atomically, so a later CLI process (without
the submitter's memory) can find the job's run directory and native ids.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import JobNotFound


def mxbatch_home() -> Path:
    """``$MXBATCH_HOME`` or ``~/.mxbatch``."""
    return Path(os.environ.get("MXBATCH_HOME") or Path.home() / ".mxbatch").expanduser()


@dataclasses.dataclass
class JobRecord:
    """What ``submit`` did. ``native`` holds backend-specific ids (pids, job ids...)."""

    job_id: str
    backend: str
    run_dir: str
    submitted_at: float = dataclasses.field(default_factory=time.time)
    spec_path: Optional[str] = None
    native: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)


def _jobs_dir() -> Path:
    path = mxbatch_home() / "jobs"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def save(record: JobRecord) -> Path:
    """Write ``record`` atomically; returns its path."""
    path = _jobs_dir() / f"{record.job_id}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(record), indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def load(job_id: str) -> JobRecord:
    """The record of ``job_id``, or ``JobNotFound`` listing how to find ids."""
    path = _jobs_dir() / f"{job_id}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise JobNotFound(f"no job {job_id!r} in {path.parent} (see `mxbatch list`)") from None
    except (OSError, ValueError) as exc:
        raise JobNotFound(f"cannot read the record of job {job_id!r} at {path}: {exc}") from None
    return JobRecord(**data)


def all_records() -> List[JobRecord]:
    """Every readable record, newest first."""
    records = []
    for path in _jobs_dir().glob("*.json"):
        try:
            records.append(JobRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(records, key=lambda r: r.submitted_at, reverse=True)
