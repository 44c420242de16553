"""``cancel``: stop a job, whatever is left of its records.

- A readable record: the backend's ``cancel`` (abort records, native ids, then every
  process of the job still on this host: ``Backend.cancel``), with the job's state
  before and after (None where it cannot be read: an emptied or corrupted plan).
- A ``submitting`` record (its submitter died before the launch was recorded) or a
  record that cannot be read at all: every process of this host that carries the
  job's ``MXBATCH_JOB_ID`` is killed; nothing else can be known of the job. No process
  found and no readable record: the record's error (``JobNotFound``).

Either way the report says which processes were killed as leftovers: those still
running after the job's supervisors had gone (a role's children that outlived a killed
agent), so that "had already ended" is said only of a job that left nothing.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from ..backends import records
from ..backends.status import JobStatus
from ..errors import JobNotFound, MxbatchError
from ..runtime import procs
from .submit import backend_for_record


@dataclasses.dataclass(frozen=True)
class CancelReport:
    """What ``cancel`` did: the job's status before and after (None: it cannot be read,
    ``problem`` says why), the leftovers it killed, and the record when readable."""

    job_id: str
    before: Optional[JobStatus]
    after: Optional[JobStatus]
    killed: List[procs.Leftover]
    record: Optional[records.JobRecord] = None
    problem: str = ""

    @property
    def already_ended(self) -> bool:
        """The job's outcome was settled before this cancel (whatever it left running):
        it had ended, or it was ending with the outcome it then had (another cancel, or a
        failure, stopping its tasks), which this cancel did not change. A job seen
        CANCELLED whose tasks were still stopping (parallel cancels) had ended, as its
        ``state_before`` says."""
        from ..backends.status import JobState

        if self.before is None:
            return False
        outcomes = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
        return self.before.terminal or (self.after is not None
                                        and self.before.state in outcomes
                                        and self.after.state is self.before.state)


def cancel_job(job_id: str) -> CancelReport:
    """Cancel ``job_id`` (see the module docstring)."""
    try:
        record = records.load(job_id)
    except (JobNotFound, records.HomeUnusable) as exc:  # its processes here still go
        killed = procs.reap_job(job_id)
        if not killed:
            raise
        return CancelReport(job_id, None, None, killed, problem=exc.message)
    if record.submitting:
        return CancelReport(job_id, None, None, procs.reap_job(job_id), record,
                            problem=f"the submission of job {job_id} never finished (its "
                                    "submitter ended before it recorded the job's native "
                                    "ids): only its processes on this host can be found")
    backend = backend_for_record(record)
    before, problem = _status(backend, record)
    killed = backend.cancel(record)
    after, _ = _status(backend, record)
    return CancelReport(job_id, before, after, killed, record, problem)


def _status(backend, record: records.JobRecord):
    """The job's status and "", or None and why it cannot be read."""
    try:
        return backend.status(record), ""
    except MxbatchError as exc:
        return None, exc.message
