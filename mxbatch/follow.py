"""Following a job until it ends: log streaming with ``role[rank]`` prefixes,
deadline checks the tasks themselves cannot make, and cleanup at the end.

``follow`` returns the final ``JobStatus``. It never waits without bound: the
job's own deadlines end it, a job whose tasks vanish is marked failed, and
``timeout`` (if given) raises ``WaitTimeout``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, Optional

from .backends.base import Backend, LogReader, load_run_plan
from .errors import WaitTimeout
from .records import JobRecord
from .runtime.peers import missing_at_deadline, startup_abort
from .runtime.rendezvous import Rendezvous
from .runtime.states import AbortKind, AbortRecord
from .status import JobState, JobStatus

# Give tasks this long past the startup deadline to report it themselves.
DEADLINE_MARGIN_S = 2.0


class LogTail:
    """Yields complete new lines of one file, from the start, as it grows.
    ``reader`` (a backend's ``log_reader``) reads it instead of the local ``path``."""

    def __init__(self, path: Path, prefix: str, reader: Optional[LogReader] = None) -> None:
        self.path = path
        self.prefix = prefix
        self.reader = reader
        self.offset = 0
        self.partial = b""

    def _read_from(self, offset: int, final: bool) -> Optional[bytes]:
        if self.reader is not None:
            return self.reader(offset, final)
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                return handle.read()
        except OSError:
            return None

    def read(self, final: bool = False):
        data = self._read_from(self.offset, final)
        if data is None:
            return
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        for line in lines:
            yield self.prefix + line.decode(errors="replace")


def follow(backend: Backend, record: JobRecord, *, stream_logs: bool,
           echo: Callable[[str], None], timeout: Optional[float] = None) -> JobStatus:
    """Block until the job ends; stream logs if asked; clean up; return the final status."""
    plan = load_run_plan(record)
    rdv = backend.rendezvous(record)
    tails: Dict[str, LogTail] = {}
    if stream_logs:
        width = max(len(t.label) for t in plan.tasks)
        for task in plan.tasks:
            tails[task.label] = LogTail(Path(record.layout.task_log(task.role.value, task.rank)),
                                        f"{task.label:<{width}} | ",
                                        backend.log_reader(record, task.role, task.rank))
    give_up = None if timeout is None else time.time() + timeout
    while True:
        for tail in tails.values():
            for line in tail.read():
                echo(line)
        status = backend.status(record)
        if status.terminal:
            break
        _enforce_deadlines(plan, rdv, status)
        if give_up is not None and time.time() > give_up:
            raise WaitTimeout(f"job {record.job_id} still {status.state.value} after "
                              f"{timeout:g}s (it keeps running; `mxbatch cancel "
                              f"{record.job_id}` stops it)")
        time.sleep(backend.poll_interval_s)
    backend.cancel(record)  # idempotent: removes anything still queued or lingering
    for tail in tails.values():
        for line in tail.read(final=True):
            echo(line)
    return backend.status(record)


def _enforce_deadlines(plan, rdv: Rendezvous, status: JobStatus) -> None:
    """Startup deadline and vanished tasks, for when no supervisor is there to see them."""
    if rdv.read_abort() is not None:
        return
    missing = missing_at_deadline(plan, rdv.read_tasks(), time.time() - DEADLINE_MARGIN_S)
    if missing:
        rdv.write_abort(startup_abort(plan, missing, by="mxbatch wait"))
    elif status.state is JobState.FAILED and status.reason:
        rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=status.reason,
                                    log=status.log, by="mxbatch wait"))
