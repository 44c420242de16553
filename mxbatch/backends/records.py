"""Job records on disk: what was submitted where, for status/logs/cancel/list.

Records live in ``$MXBATCH_HOME/jobs/<job-id>.json`` (default ``~/.mxbatch``),
created with mode 0700 and written atomically, so a later CLI process (without
the submitter's memory) can rebuild the same backend: the record keeps the
backend's options as submitted and its typed handle (native ids), both as plain
data that the backend's own dataclasses read back.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import BadInput, ExitCode, JobNotFound, MxbatchError
from ..runtime import trust
from ..runtime.files import atomic_write_json
from ..runtime.layout import RunLayout
from ..spec.paths import HOME_ENV, jobs_dir, make_private_dirs, mxbatch_home  # noqa: F401 (mxbatch_home: plugins)
from ..spec.plan import check_job_id
from ..spec.typed import ConversionError, from_data, to_data

#: the version of the record format written by this mxbatch
RECORD_VERSION = 1


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """What ``submit`` did. ``handle``: the backend's handle (native ids) as plain data;
    ``options``: the backend options it was submitted with, as plain data;
    ``submitting``: saved before the launch, which has not finished (or whose submitter
    died before it saved the record with the handle): nothing is known of the job's
    native ids, only that its processes carry its id (``MXBATCH_JOB_ID``); ``final``:
    see below."""

    job_id: str
    backend: str
    run_dir: str
    submitted_at: float = dataclasses.field(default_factory=time.time)
    spec_path: Optional[str] = None
    handle: Dict[str, Any] = dataclasses.field(default_factory=dict)
    options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    version: int = RECORD_VERSION
    submitting: bool = False
    #: the job's final status (``status.JobStatus`` as plain data), written once when it
    #: has ended for good (every task's own record final): later looks ask no scheduler
    final: Optional[Dict[str, Any]] = None

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.run_dir)

    def to_dict(self) -> Dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: Any) -> "JobRecord":
        """Tolerant of keys a newer mxbatch may add; version 0 kept the handle as
        ``native``."""
        if isinstance(data, dict) and "native" in data and "handle" not in data:
            data = dict(data, handle=data["native"], version=0)
        return from_data(cls, data, strict=False)


class HomeUnusable(BadInput):
    """``$MXBATCH_HOME`` cannot hold the job records' folder (a regular file, a
    device, a path under a file, read-only and missing, a symlink loop): exit 2, the
    user's setting must change."""


def _jobs_dir() -> Path:
    """``$MXBATCH_HOME/jobs``, made (mode 0700) when missing; ``HomeUnusable`` when it
    cannot be, or when another user could change it or a folder above it
    (``runtime.trust``)."""
    path = jobs_dir()
    try:
        make_private_dirs(path)
    except OSError as exc:
        why = ("is behind a symlink loop" if exc.errno == errno.ELOOP
               else "is under something that is not a folder"
               if exc.errno in (errno.ENOTDIR, errno.EEXIST)
               else f"cannot be made ({exc.strerror or exc})")
        raise HomeUnusable(f"{HOME_ENV}: the job records' folder {path} {why}: set "
                           f"{HOME_ENV} to a folder of your own (or unset it: "
                           "~/.mxbatch)") from None
    found = trust.untrusted_folder(str(path))
    if found is not None:  # records name pids and job ids that cancel and clean act on
        raise HomeUnusable(f"{HOME_ENV}: the job records' folder {path} is in "
                           f"{found.describe()}: another user could plant job records "
                           f"there: make it yours alone (chmod 700) or set {HOME_ENV} to "
                           "a folder of your own")
    return path


def record_path(job_id: str) -> Path:
    """Where the record of ``job_id`` is; ``BadInput`` if ``job_id`` is no job id."""
    return _jobs_dir() / f"{check_job_id(job_id)}.json"


class RecordUnwritable(MxbatchError):
    """The jobs directory cannot take a record (full, read-only, not ours): exit 2, like
    a run directory that cannot be created (the user's settings must change)."""

    exit_code = ExitCode.USAGE


def save(record: JobRecord) -> Path:
    """Write ``record`` atomically; returns its path. ``RecordUnwritable`` when it
    cannot be written."""
    path = record_path(record.job_id)
    try:
        atomic_write_json(str(path), record.to_dict(), indent=2)
    except OSError as exc:
        raise RecordUnwritable(f"cannot write the record of job {record.job_id} in "
                               f"{jobs_dir()} ($MXBATCH_HOME/jobs): "
                               f"{exc.strerror or exc}") from None
    return path


def load(job_id: str) -> JobRecord:
    """The record of ``job_id``, or ``JobNotFound`` saying how to find ids (``BadInput``
    when ``job_id`` is no job id: it never reaches a path)."""
    path = record_path(job_id)
    try:
        return JobRecord.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise JobNotFound(f"no job {job_id!r} in {path.parent} (see `mxbatch list`)") from None
    except (OSError, ValueError) as exc:
        where = f" at {'.'.join(map(str, exc.path))}" if isinstance(exc, ConversionError) else ""
        raise JobNotFound(f"cannot read the record of job {job_id!r} at {path}{where}: "
                          f"{exc}") from None


@dataclasses.dataclass(frozen=True)
class UnreadableRecord:
    """A file in the jobs directory that is no job record (emptied, truncated,
    corrupted): its job id (the file's name), why it cannot be read, and when the file
    was last written."""

    job_id: str
    path: str
    problem: str
    modified_at: float


def scan() -> Tuple[List[JobRecord], List[UnreadableRecord]]:
    """Every record, newest first, and every file that should be one but cannot be
    read, newest first."""
    readable: List[JobRecord] = []
    unreadable: List[UnreadableRecord] = []
    for path in _jobs_dir().glob("*.json"):
        try:
            readable.append(JobRecord.from_dict(json.loads(path.read_text())))
        except FileNotFoundError:
            continue  # removed meanwhile (clean)
        except (OSError, ValueError) as exc:
            try:
                modified = path.stat().st_mtime
            except OSError:
                modified = 0.0
            unreadable.append(UnreadableRecord(path.stem, str(path),
                                               str(exc) or type(exc).__name__, modified))
    readable.sort(key=lambda r: r.submitted_at, reverse=True)
    unreadable.sort(key=lambda r: r.modified_at, reverse=True)
    return readable, unreadable


def all_records() -> List[JobRecord]:
    """Every readable record, newest first (``scan`` also says which cannot be read)."""
    return scan()[0]


def delete(job_id: str) -> Path:
    """Remove the record of ``job_id`` (``clean``, a submission rolled back); its path.
    Missing: nothing to do."""
    path = record_path(job_id)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    return path
