"""Following a job until it ends: log streaming with ``role[rank]`` prefixes,
deadline checks the tasks themselves cannot make, and cleanup at the end.

``follow`` returns the final ``JobStatus``. It never waits without bound: the
job's own deadlines end it, a job whose tasks vanish is marked failed, and
``timeout`` (if given) raises ``WaitTimeout``. A job with restarts is followed across
its attempts: when one ends and the next starts, the logs streamed are the new one's
(``AttemptLogs``), and ``note`` says how the last one ended.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import stat
import time
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Callable,
    Deque,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

from ..backends import records
from ..backends.base import Backend, LogReader, attempts_of, current_attempt, load_run_plan
from ..backends.records import JobRecord
from ..errors import BadInput, MxbatchError, WaitTimeout
from ..runtime import logfile, notes, osbytes
from ..runtime.planfile import RunPlan, TaskInfo
from ..runtime.rendezvous import Rendezvous
from ..runtime.states import AbortKind, AbortRecord, TaskState
from ..runtime.watch import missing_at_deadline, startup_abort
from ..spec.inputfile import describe_mode
from .interrupts import HeldSignals, check_interrupted
from .logview import RoleLines, is_mxbatch_line

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.status import JobStatus

#: how often an attached job's status is read for ``on_status`` while this process
#: supervises it
STATUS_INTERVAL_S = 0.5
# Give tasks this long past the startup deadline to report it themselves.
DEADLINE_MARGIN_S = 2.0


class LogTail:
    """Yields complete new lines of one file, from the start, as it grows.
    ``reader`` (a backend's ``log_reader``) reads it instead of the local ``path``.
    Holds at most ``logfile.READ_CHUNK`` of the file and ``logfile.MAX_LINE`` of an
    unfinished line at a time: a longer line comes in pieces (``logfile.LineSplitter``)."""

    def __init__(self, path: Path, prefix: str, reader: Optional[LogReader] = None) -> None:
        self.path = path
        self.prefix = prefix
        self.reader = reader
        self.offset = 0
        self._lines = logfile.LineSplitter()

    def check(self) -> None:
        """``BadInput`` when the local log is there but no file (a directory, say): what
        the ``logs`` command cannot show. A log not there yet is no problem."""
        if self.reader is not None:
            return
        try:
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BadInput(f"cannot read the log {self.path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise BadInput(f"cannot read the log {self.path}: it is no regular file "
                           f"({describe_mode(mode)})")

    def _read_from(self, offset: int, final: bool) -> Optional[bytes]:
        if self.reader is not None:
            return self.reader(offset, final)
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                return handle.read(logfile.READ_CHUNK)
        except OSError:
            return None

    def read(self, final: bool = False) -> Iterator[str]:
        """The new complete lines, prefixed (``final``: a last incomplete one too)."""
        for _, line in self.read_lines(final):
            yield self.prefix + line

    def read_lines(self, final: bool = False) -> Iterator[Tuple[int, str]]:
        """``(offset, line)`` of each new complete line, not prefixed: where it starts
        in the file (for its time, ``logfile.time_at``)."""
        start = self.offset - len(self._lines.partial)
        while True:
            data = self._read_from(self.offset, final)
            if not data:
                break
            self.offset += len(data)
            for line in self._lines.feed(data):
                yield start, osbytes.decode(line.rstrip(b"\n"))
                start += len(line)
            if self.reader is not None or len(data) < logfile.READ_CHUNK:
                break
        rest = self._lines.rest() if final else b""
        if rest:
            yield start, osbytes.decode(rest)  # printed as the role wrote it

    def skip_to_last(self, count: int,
                     counts: Callable[[str], bool] = lambda line: True) -> None:
        """Start at the last ``count`` lines of what the file holds now (``logs --tail``)
        that ``counts`` (the others before the first of them are shown or hidden as the
        reader decides), walking the local file backwards from its end."""
        self._lines = logfile.LineSplitter()
        if self.reader is not None:
            data = self.reader(0, True) or b""
            self.offset = _start_of_last(data, count, counts)
            return
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - 1))
                end = size - (1 if handle.read(1) == b"\n" else 0)
                self.offset = size if count == 0 else 0
                found = 0
                for newline in logfile.newlines_backwards(handle, end):
                    if count == 0:
                        break
                    handle.seek(newline + 1)
                    head = handle.read(_HEAD)
                    found += counts(osbytes.decode(head.partition(b"\n")[0]))
                    if found == count:
                        self.offset = newline + 1
                        break
        except OSError:
            self.offset = 0


#: how much of a line ``skip_to_last`` reads to judge it (notes are told by their start)
_HEAD = 512


def _start_of_last(data: bytes, count: int,
                   counts: Callable[[str], bool] = lambda line: True) -> int:
    """Where the last ``count`` lines of ``data`` that ``counts`` start (a log in
    memory)."""
    end = len(data) - (1 if data.endswith(b"\n") else 0)
    if count == 0:
        return len(data)
    found = 0
    while True:
        start = data.rfind(b"\n", 0, end)
        found += counts(osbytes.decode(data[start + 1:end]))
        if start < 0 or found == count:
            return start + 1
        end = start


class _Line(NamedTuple):
    """A line read, waiting in a merged stream: ordered by when it arrived (``at``, the
    log's time index), then by when it was read (``seq``)."""

    at: float
    seq: int
    read_at: float
    text: str
    teardown: bool


class _Source(NamedTuple):
    """One task's log in a ``LogStream``: its tail, its time index, which lines show."""

    tail: LogTail
    index: logfile.IndexFollower
    lines: Optional[RoleLines]  # None: every line (verbose)


class LogStream:
    """The logs of a job's tasks (``tasks``: all of the plan's by default), each line
    prefixed ``role[rank] |`` (``prefixed``), as they grow; nothing when not ``enabled``.
    The one follower of logs: ``submit --wait`` streams every task's, ``logs -f`` those
    it chose, from their last ``tail_lines`` lines, each line after its arrival time
    as ``stamp`` writes it (from the log's time index; ``stamp(None)`` where the index
    does not say). Only the roles' own lines unless ``verbose`` (``jobs.logview``:
    notes, hook reports and stack dumps stay in the files). ``merge``: the tasks' lines
    in the order they arrived (the logs' time indexes), each held back at most
    ``MERGE_WINDOW_S`` after it was read for lines of other tasks that arrived before it
    but are read later; else each look shows task after task."""

    #: the least time between two looks at the logs (each look opens every log file
    #: anew: on NFS only an open shows what another host wrote)
    MIN_INTERVAL_S = 0.1
    #: how long a merged stream holds a line it has read back (see the class docstring)
    MERGE_WINDOW_S = 0.3
    #: how much text a merged stream holds back at most: past it the oldest lines go out
    #: at once (a role that writes 100 MiB within the window costs no memory)
    MERGE_HELD_MAX = 1 << 20

    def __init__(self, backend: Backend, record: JobRecord, plan: RunPlan,
                 echo: Callable[[str], None], enabled: bool = True, attempt: int = 0, *,
                 tasks: Optional[Sequence[TaskInfo]] = None, prefixed: bool = True,
                 tail_lines: Optional[int] = None,
                 stamp: Optional[Callable[[Optional[float]], str]] = None,
                 verbose: bool = False, merge: bool = False) -> None:
        self.echo = echo
        self.stamp = stamp
        self.merge = merge
        self._next = 0.0
        self._held: List[_Line] = []
        self._seq = itertools.count()
        self.sources: List[_Source] = []
        if not enabled:
            return
        chosen = plan.tasks if tasks is None else tasks
        width = max(len(t.label) for t in chosen)
        layout = record.layout.attempt(attempt)
        for task in chosen:
            tail = LogTail(Path(layout.task_log(task.role.value, task.rank)),
                           f"{task.label:<{width}} | " if prefixed else "",
                           # (attempt 0 as before: a plugin's may not know attempts)
                           backend.log_reader(record, task.role, task.rank,
                                              *([attempt] if attempt else [])))
            if tail_lines is not None:
                tail.skip_to_last(tail_lines, counts=_every_line if verbose
                                  else lambda line: not is_mxbatch_line(line))
            self.sources.append(_Source(tail, logfile.IndexFollower(
                layout.task_log_times(task.role.value, task.rank)),
                None if verbose else RoleLines()))

    def pump(self, final: bool = False) -> None:
        """Echo the complete new lines (``final``: the rest too, nothing held back).
        Within one look, the supervisors' teardown notes (``stopping: <why>``, shown
        when verbose) come after every task's own lines, so that a failing role's last
        output precedes the others' stopping."""
        for text in self.look(final):
            self.echo(text)

    def look(self, final: bool = False) -> Iterator[str]:
        """``pump``'s lines, as they are read (a log of 100 MiB is never in memory), for
        a caller that gives them on itself (``api.Job.logs``)."""
        now = time.monotonic()
        if not final and now < self._next:
            return
        self._next = now + self.MIN_INTERVAL_S
        wall = time.time()
        teardown: List[str] = []
        if self.merge:
            ready_until = float("inf") if final else wall - self.MERGE_WINDOW_S
            held: Deque[_Line] = collections.deque()
            held_size = 0
            merged = heapq.merge(self._held, *(self._read(source, wall, final)
                                               for source in self.sources))
            for line in merged:
                if held or line.read_at > ready_until:
                    held.append(line)  # and every later one: they are shown in order
                    held_size += len(line.text)
                    while held_size > self.MERGE_HELD_MAX:  # the oldest go out now
                        out = held.popleft()
                        held_size -= len(out.text)
                        if out.teardown:
                            teardown.append(out.text)
                        else:
                            yield out.text
                elif line.teardown:
                    teardown.append(line.text)
                else:
                    yield line.text
            self._held = list(held)
        else:
            for source in self.sources:
                for line in self._read(source, wall, final):
                    if line.teardown:
                        teardown.append(line.text)
                    else:
                        yield line.text
        yield from teardown

    def _read(self, source: _Source, wall: float, final: bool) -> Iterator[_Line]:
        """The new lines of one task's log that show, in order (their times never go
        back: a clock stepped back does not move a line before one of its own task's)."""
        tail, index, shown = source
        timed = self.merge or self.stamp is not None
        latest = float("-inf")
        refreshed = False  # the index is read only when the log has new lines to time
        for offset, text in tail.read_lines(final=final):
            if shown is not None and not shown.shows(text):
                continue
            if timed and not refreshed:
                index.refresh()
                refreshed = True
            at = index.time_at(offset) if timed else None
            stamp = "" if self.stamp is None else self.stamp(at) + " "
            latest = max(latest, wall if at is None else at)
            yield _Line(latest, next(self._seq), wall, tail.prefix + stamp + text,
                        notes.is_teardown(text))


def _every_line(line: str) -> bool:
    return True


class AttemptLogs:
    """The logs of the job's current attempt, merged in time order: a ``LogStream``
    that moves on to the next attempt when the job relaunches (the last lines of the
    one before first), saying through ``note`` how the one before ended. Only the
    roles' own lines unless ``verbose``."""

    def __init__(self, backend: Backend, record: JobRecord, plan: RunPlan,
                 echo: Callable[[str], None], enabled: bool,
                 note: Optional[Callable[[str], None]] = None, verbose: bool = False) -> None:
        self.backend, self.record, self.plan = backend, record, plan
        self.echo, self.enabled, self.note, self.verbose = echo, enabled, note, verbose
        self.attempt = current_attempt(record)
        self.stream = self._stream()

    def _stream(self) -> LogStream:
        return LogStream(self.backend, self.record, self.plan, self.echo, self.enabled,
                         self.attempt, verbose=self.verbose, merge=True)

    def pump(self, final: bool = False) -> None:
        self.stream.pump(final)

    def follow_attempt(self, attempt: int) -> None:
        """The job's current attempt is ``attempt``: stream its logs from now on."""
        if attempt == self.attempt:
            return
        self.stream.pump(final=True)
        attempts = attempts_of(self.record)
        if self.note is not None and attempts is not None:
            for ended in attempts.attempts[self.attempt:attempt]:
                self.note(f"mxbatch: {ended.summary()}: {ended.decision}")
        self.attempt = attempt
        self.stream = self._stream()


def follow(backend: Backend, record: JobRecord, *, stream_logs: bool,
           echo: Callable[[str], None], timeout: Optional[float] = None,
           on_status: Optional[Callable[[JobStatus], None]] = None,
           note: Optional[Callable[[str], None]] = None,
           output_busy: Callable[[], bool] = lambda: False,
           verbose: bool = False) -> JobStatus:
    """Block until the job ends; stream logs if asked; clean up; return the final status.
    ``on_status`` (a progress display) sees every status polled, the final one included;
    ``note`` gets a line when an attempt ends and the next one starts; while
    ``output_busy()`` (what was echoed is not written yet) no more logs are read;
    ``verbose``: the logs with mxbatch's own lines (``LogStream``)."""
    plan = load_run_plan(record)
    stream = AttemptLogs(backend, record, plan, echo, stream_logs, note, verbose)
    give_up = None if timeout is None else time.time() + timeout
    while True:
        check_interrupted()  # a Ctrl-C Python dropped (interrupts.SigintLatch)
        if not output_busy():
            stream.pump()
        status = backend.status(record)
        stream.follow_attempt(status.attempt)
        if on_status is not None:
            on_status(status)
        if status.terminal:
            break
        _enforce_deadlines(plan, backend.rendezvous(record), status)
        if give_up is not None and time.time() > give_up:
            raise WaitTimeout(f"job {record.job_id} still {status.state.value} after "
                              f"{timeout:g}s (it keeps running; `mxbatch cancel "
                              f"{record.job_id}` stops it)")
        time.sleep(backend.poll_interval_s)
    if not _final_written(record):  # else nothing of it is left to remove (nor to ask)
        backend.cancel(record)  # idempotent: removes anything still queued or lingering
    stream.pump(final=True)
    status = backend.status(record)
    if on_status is not None:
        on_status(status)
    return status


def _final_written(record: JobRecord) -> bool:
    """Whether the job's final status is in its record (``JobRecord.final``: written once
    it ended for good, its scheduler holding nothing of it any more)."""
    try:
        return records.load(record.job_id).final is not None
    except (MxbatchError, OSError):
        return False


def supervise(backend: Backend, record: JobRecord, *, stream_logs: bool,
              echo: Callable[[str], None],
              on_status: Optional[Callable[[JobStatus], None]] = None,
              held: Optional[HeldSignals] = None,
              note: Optional[Callable[[str], None]] = None,
              output_busy: Callable[[], bool] = lambda: False,
              verbose: bool = False) -> Tuple[JobStatus, Optional[str]]:
    """Supervise an attached job in this process (``Backend.supervise_here``) while
    streaming its logs; the final status, and the signal that cancelled it, if any.
    ``on_status`` (a progress display) sees the status every ``STATUS_INTERVAL_S``;
    ``held``: a signal held back until the supervisor handles signals is replayed to it
    at its first tick; while ``output_busy()`` (what was echoed is not written yet: a
    reader that does not read) no more logs are read, and they are left for later.
    ``echo``, ``note`` and ``on_status`` must neither raise nor block: they run in the
    supervisor's loop, and the job's outcome must not depend on its follower's output
    (``cli.output``). ``verbose``: the logs with mxbatch's own lines."""
    stream = AttemptLogs(backend, record, load_run_plan(record), echo, stream_logs, note,
                         verbose)
    next_status = [0.0]

    def tick() -> None:
        if held is not None:
            held.replay()  # the supervisor's handlers are in place: it cancels the job
        if not output_busy():
            stream.pump()
        now = time.monotonic()
        if now >= next_status[0]:
            next_status[0] = now + STATUS_INTERVAL_S
            stream.follow_attempt(current_attempt(record))
            if on_status is not None:
                try:
                    on_status(backend.status(record))
                except MxbatchError:  # its run directory is gone: the agent stops the job
                    pass

    interrupted = backend.supervise_here(record, on_tick=tick)
    backend.cancel(record)  # idempotent: SIGKILLs anything of the job that is left
    stream.follow_attempt(current_attempt(record))
    stream.pump(final=True)
    status = backend.status(record)
    if on_status is not None:
        on_status(status)
    return status, interrupted


def _enforce_deadlines(plan, rdv: Rendezvous, status: JobStatus) -> None:
    """Startup deadline and vanished tasks, for when no supervisor is there to see them.
    A job with restarts has a driver of its attempts that does it (and names the end
    reason, which this could not)."""
    from ..backends.status import JobState

    if plan.restarts.enabled or rdv.read_abort() is not None:
        return
    missing = missing_at_deadline(plan, rdv.read_tasks(plan.task_keys()),
                                  time.time() - DEADLINE_MARGIN_S)
    if missing:
        queued = sorted({t.native for t in status.tasks if t.label in missing and t.native
                         and t.state is TaskState.PENDING})
        rdv.write_abort(startup_abort(plan, missing, by="mxbatch wait", queued=queued))
    elif status.state is JobState.FAILED and status.reason:
        rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=status.reason,
                                    log=status.log, by="mxbatch wait"))
