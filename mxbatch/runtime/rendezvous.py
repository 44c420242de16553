"""How tasks of one job find each other and share state.

``Rendezvous`` is the interface. ``FileRendezvous`` implements it on a run
directory on shared storage (paths from ``RunLayout``), correct under the caches of
an NFS client, whose lookups (negative ones too), attributes and directory listings
may be stale for a minute, and whose only promise is close-to-open consistency (an
``open`` sees the file as last closed by its writer):

- every name a reader looks for exists before any task runs (``prepare``, by the
  CLI): ``scheduler.json``, ``digest.json`` and ``abort.json`` hold ``{}`` until
  published, ``tasks/<role>-<rank>.json`` a PENDING record; so no reader ever caches
  a negative lookup, and no reader lists a directory;
- a record is replaced by write-temp + fsync + rename, and read by open + read:
  close-to-open shows the new file; a missing, partial or unreadable file reads as
  "not there yet";
- the first abort wins: its record is hard-linked to ``abort.lock`` (a link fails
  when the name exists, on NFS too, whatever the client cached), then renamed over
  ``abort.json``; a loser republishes the winner's record if ``abort.json`` does not
  show it yet (the winner may have died in between).

``ops`` counts the file operations (opens, renames, links, unlinks) a
``FileRendezvous`` made, for the benchmarks: the protocol costs O(1) per task and
second, whatever the job's size (see ``agent``).

``MirroredRendezvous`` is the CLI's view of a rendezvous that lives elsewhere
(YARN's key-value store) and ends with the job: every read and write also goes to a
``FileRendezvous`` mirror, which answers alone once the live one is gone.
"""

import abc
import json
import os
import random
import time
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from .files import (
    RunDirUnwritable,
    atomic_write_json,
    read_json,
    temp_name,
    unlink_quietly,
    write_in_place,
    write_synced,
)
from .layout import RunLayout
from .planfile import RunPlan
from .roles import Role
from .states import (
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)

TaskKey = Tuple[Role, int]


class Rendezvous(abc.ABC):
    """Shared state of one job. Every method is safe to call from any task."""

    def prepare(self, plan: RunPlan) -> None:  # noqa: B027 - optional hook
        """Create, before any task runs, what readers will look for. Default: nothing."""

    @abc.abstractmethod
    def publish_scheduler(self, record: SchedulerRecord) -> None:
        """Make the scheduler's address visible to every task, atomically."""

    @abc.abstractmethod
    def read_scheduler(self) -> Optional[SchedulerRecord]:
        """The published scheduler address, or None if not (completely) there yet."""

    @abc.abstractmethod
    def write_task(self, record: TaskRecord) -> None:
        """Replace this task's record, atomically."""

    @abc.abstractmethod
    def read_task(self, role: Role, rank: int) -> Optional[TaskRecord]:
        """One task's record, or None if it has none yet."""

    def read_tasks(self, keys: Iterable[TaskKey]) -> Dict[TaskKey, TaskRecord]:
        """The records of these tasks (those that have one), by (role, rank)."""
        records = {}
        for role, rank in keys:
            record = self.read_task(role, rank)
            if record is not None:
                records[(role, rank)] = record
        return records

    @abc.abstractmethod
    def write_abort(self, record: AbortRecord) -> bool:
        """Record why the job ends early; True if this call was the first."""

    @abc.abstractmethod
    def read_abort(self) -> Optional[AbortRecord]:
        """The abort record, if any."""

    @abc.abstractmethod
    def publish_digest(self, record: DigestRecord) -> None:
        """Replace the watcher's digest, atomically."""

    @abc.abstractmethod
    def read_digest(self) -> Optional[DigestRecord]:
        """The watcher's latest digest, if any."""

    def append_log(self, role: Role, rank: int, data: bytes) -> bool:
        """Keep ``data`` (a task's output or a supervisor note) in the task's log
        elsewhere; False (the default): the supervisor writes its own log file."""
        return False

    def scheduler_news(self) -> bool:
        """Whether whoever holds the job's state has said, since the last call, that the
        scheduler's record changed (published, listening): the members waiting for it
        look at once instead of at the end of their backoff. False (the default): nobody
        says so, the members poll."""
        return False

    def pushes_scheduler_news(self) -> bool:
        """Whether ``scheduler_news`` says so for every record the scheduler publishes
        (members may then look for it seldom). False (the default)."""
        return False

    def news_fd(self) -> Optional[int]:
        """A descriptor that becomes readable when ``scheduler_news`` may have news (the
        agent's loop wakes on it instead of finding the news at its next turn); None
        (the default): no such descriptor, or none any more."""
        return None

    def close(self, exit_status: int) -> None:  # noqa: B027 - optional hook
        """Called once, when the supervisor using this rendezvous has ended with
        ``exit_status``. Default: nothing to release."""

    def degrade(self) -> None:  # noqa: B027 - optional hook
        """The supervisor saw a write fail (``files.RunDirUnwritable``) and is stopping
        the job: from now on a write that fails is given up (after a try in place), never
        raised, so that the teardown goes on and keeps what it still can. Default:
        nothing to change."""


class FileRendezvous(Rendezvous):
    """The rendezvous as files of a run directory (see the module docstring), of one
    attempt of the job (``attempt``: its records, ``RunLayout.attempt``)."""

    def __init__(self, run_dir: str, attempt: int = 0) -> None:
        self.layout = RunLayout(run_dir, attempt)
        self.ops = 0
        #: writes that fail are given up, never raised (``degrade``)
        self.best_effort = False

    def prepare(self, plan: RunPlan) -> None:
        os.makedirs(self.layout.tasks_dir, mode=0o700, exist_ok=True)
        for path in (self.layout.scheduler, self.layout.digest, self.layout.abort):
            self._write(path, {})  # unpublished
        for task in plan.tasks:
            self.write_task(TaskRecord(role=task.role, rank=task.rank,
                                       state=TaskState.PENDING))

    # -- files
    def _read(self, path: str) -> Optional[Any]:
        self.ops += 1
        return read_json(path)

    def degrade(self) -> None:
        self.best_effort = True

    def _write(self, path: str, data: Any) -> None:
        """Replace ``path`` atomically; ``RunDirUnwritable`` when it cannot be (best
        effort: overwrite it in place if that works, else give up)."""
        self.ops += 2  # the temporary file, the rename
        try:
            atomic_write_json(path, data)
        except OSError as exc:
            if not self.best_effort:
                raise RunDirUnwritable.of(exc) from None
            try:
                write_in_place(path, json.dumps(data, sort_keys=True).encode())
            except OSError:
                pass

    # -- records
    def publish_scheduler(self, record: SchedulerRecord) -> None:
        self._write(self.layout.scheduler, record.to_dict())

    def read_scheduler(self) -> Optional[SchedulerRecord]:
        return SchedulerRecord.parse(self._read(self.layout.scheduler))

    def write_task(self, record: TaskRecord) -> None:
        self._write(self.layout.task_record(record.role.value, record.rank), record.to_dict())

    def read_task(self, role: Role, rank: int) -> Optional[TaskRecord]:
        return TaskRecord.parse(self._read(self.layout.task_record(role.value, rank)))

    def write_abort(self, record: AbortRecord) -> bool:
        if not record.at:
            record.at = time.time()
        try:
            return self._write_abort(record)
        except OSError as exc:
            if not self.best_effort:
                raise RunDirUnwritable.of(exc) from None
        if self.read_abort() is not None:  # the first abort is there: it stays
            return False
        self._write(self.layout.abort, record.to_dict())  # in place, if at all
        return True

    def _write_abort(self, record: AbortRecord) -> bool:
        tmp = temp_name(self.layout.abort)
        self.ops += 1
        try:
            write_synced(tmp, json.dumps(record.to_dict(), sort_keys=True).encode())
            self.ops += 1
            os.link(tmp, self.layout.abort_lock)
        except FileExistsError:
            self.ops += 1
            unlink_quietly(tmp)
            self._republish_first_abort()
            return False
        except BaseException:
            unlink_quietly(tmp)
            raise
        self.ops += 1
        os.replace(tmp, self.layout.abort)  # the lock's own file: abort.json is it now
        return True

    def _republish_first_abort(self) -> None:
        """After losing the race: make sure ``abort.json`` shows the winner's record."""
        if self.read_abort() is not None:
            return
        first = self._read(self.layout.abort_lock)
        if AbortRecord.parse(first) is not None:
            self._write(self.layout.abort, first)

    def read_abort(self) -> Optional[AbortRecord]:
        return AbortRecord.parse(self._read(self.layout.abort))

    def publish_digest(self, record: DigestRecord) -> None:
        self._write(self.layout.digest, record.to_dict())

    def read_digest(self) -> Optional[DigestRecord]:
        return DigestRecord.parse(self._read(self.layout.digest))


#: ``attempt(call)`` runs ``call`` against the live rendezvous; None when it is gone
LiveAttempt = Callable[[Callable[[Rendezvous], Any]], Optional[Any]]


class MirroredRendezvous(Rendezvous):
    """A live rendezvous mirrored into a run directory (see the module docstring).

    ``attempt`` reaches the live one (None: unreachable or ended); ``mirror`` keeps
    what was read or written, and answers alone when the live one does not."""

    def __init__(self, attempt: LiveAttempt, mirror: FileRendezvous) -> None:
        self.attempt = attempt
        self.mirror = mirror
        self._mirrored: Dict[TaskKey, Dict[str, Any]] = {}

    def publish_scheduler(self, record: SchedulerRecord) -> None:
        self.attempt(lambda live: live.publish_scheduler(record))
        self.mirror.publish_scheduler(record)

    def read_scheduler(self) -> Optional[SchedulerRecord]:
        record = self.attempt(lambda live: live.read_scheduler())
        if record is None:
            return self.mirror.read_scheduler()
        self.mirror.publish_scheduler(record)
        return record

    def write_task(self, record: TaskRecord) -> None:
        self.attempt(lambda live: live.write_task(record))
        self._mirror_task(record)

    def read_task(self, role: Role, rank: int) -> Optional[TaskRecord]:
        return self.read_tasks([(role, rank)]).get((role, rank))

    def read_tasks(self, keys: Iterable[TaskKey]) -> Dict[TaskKey, TaskRecord]:
        keys = list(keys)
        records = self.attempt(lambda live: live.read_tasks(keys))
        if records is None:
            return self.mirror.read_tasks(keys)
        for record in records.values():
            self._mirror_task(record)
        return records

    def write_abort(self, record: AbortRecord) -> bool:
        first = self.attempt(lambda live: live.write_abort(record))
        if first is None:  # the live rendezvous is gone: the mirror only
            return self.mirror.write_abort(record)
        if first:
            self.mirror.write_abort(record)
        else:  # another writer was first: mirror theirs
            self.read_abort()
        return bool(first)

    def read_abort(self) -> Optional[AbortRecord]:
        abort = self.attempt(lambda live: live.read_abort())
        if abort is None:
            return self.mirror.read_abort()
        self.mirror.write_abort(abort)
        return abort

    def publish_digest(self, record: DigestRecord) -> None:
        self.attempt(lambda live: live.publish_digest(record))
        self.mirror.publish_digest(record)

    def read_digest(self) -> Optional[DigestRecord]:
        digest = self.attempt(lambda live: live.read_digest())
        return digest if digest is not None else self.mirror.read_digest()

    def _mirror_task(self, record: TaskRecord) -> None:
        data = record.to_dict()
        if self._mirrored.get(record.key) != data:
            self.mirror.write_task(record)
            self._mirrored[record.key] = data


class Backoff:
    """Intervals from ``start`` doubling to ``cap``, with +-25% jitter (a quick first
    look: on one machine the record is often there within milliseconds)."""

    def __init__(self, start: float = 0.02, cap: float = 2.0) -> None:
        self.delay = start
        self.cap = cap

    def next(self) -> float:
        delay = self.delay * random.uniform(0.75, 1.25)
        self.delay = min(self.cap, self.delay * 2)
        return delay
