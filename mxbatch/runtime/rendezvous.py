"""How tasks of one job find each other and share state.

``Rendezvous`` is the interface; ``FileRendezvous`` implements it on a run
directory on shared storage (paths from ``RunLayout``):

- ``scheduler.json``: the ``SchedulerRecord``, by write-temp + fsync + rename;
- ``tasks/<role>-<rank>.json``: each supervisor's ``TaskRecord`` (with heartbeat);
- ``abort.json``: the first ``AbortRecord`` wins (hard link of a finished temp
  file, which fails if the name exists, also on NFS).

Readers always open+read (never stat first: NFS caches negative lookups) and
treat a missing or half-written file as "not there yet".

``MirroredRendezvous`` is the CLI's view of a rendezvous that lives elsewhere
(YARN's key-value store) and ends with the job: every read and write also goes
to a ``FileRendezvous`` mirror, which answers alone once the live one is gone.
"""

import abc
import json
import os
import random
import socket
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .layout import RunLayout
from .roles import Role
from .states import AbortRecord, SchedulerRecord, TaskRecord, collect_task_records

TaskKey = Tuple[Role, int]


class Rendezvous(abc.ABC):
    """Shared state of one job. Every method is safe to call from any task."""

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
    def read_tasks(self) -> Dict[TaskKey, TaskRecord]:
        """Every task record written so far, by (role, rank)."""

    @abc.abstractmethod
    def write_abort(self, record: AbortRecord) -> bool:
        """Record why the job ends early; True if this call was the first."""

    @abc.abstractmethod
    def read_abort(self) -> Optional[AbortRecord]:
        """The abort record, if any."""

    def close(self, exit_status: int) -> None:  # noqa: B027 - optional hook
        """Called once, when the supervisor using this rendezvous has ended with
        ``exit_status``. Default: nothing to release."""


class FileRendezvous(Rendezvous):
    """The rendezvous as files of a run directory (see the module docstring)."""

    def __init__(self, run_dir: str) -> None:
        self.layout = RunLayout(run_dir)

    def publish_scheduler(self, record: SchedulerRecord) -> None:
        atomic_write_json(self.layout.scheduler, record.to_dict())

    def read_scheduler(self) -> Optional[SchedulerRecord]:
        return SchedulerRecord.parse(read_json(self.layout.scheduler))

    def write_task(self, record: TaskRecord) -> None:
        os.makedirs(self.layout.tasks_dir, exist_ok=True)
        atomic_write_json(self.layout.task_record(record.role.value, record.rank),
                          record.to_dict())

    def read_tasks(self) -> Dict[TaskKey, TaskRecord]:
        try:
            names = os.listdir(self.layout.tasks_dir)
        except OSError:
            return {}
        return collect_task_records(read_json(os.path.join(self.layout.tasks_dir, name))
                                    for name in names
                                    if name.endswith(".json") and not name.startswith("."))

    def write_abort(self, record: AbortRecord) -> bool:
        if not record.at:
            record.at = time.time()
        target = self.layout.abort
        tmp = _temp_name(target)
        _write_synced(tmp, json.dumps(record.to_dict(), sort_keys=True).encode())
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            _unlink_quietly(tmp)

    def read_abort(self) -> Optional[AbortRecord]:
        return AbortRecord.parse(read_json(self.layout.abort))


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

    def read_tasks(self) -> Dict[TaskKey, TaskRecord]:
        records = self.attempt(lambda live: live.read_tasks())
        if records is None:
            return self.mirror.read_tasks()
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

    def _mirror_task(self, record: TaskRecord) -> None:
        data = record.to_dict()
        if self._mirrored.get(record.key) != data:
            self.mirror.write_task(record)
            self._mirrored[record.key] = data


# --------------------------------------------------------------------------- helpers


def _temp_name(target: str) -> str:
    head, tail = os.path.split(target)
    return os.path.join(head, ".%s.%s.%d.%d.tmp" % (tail, socket.gethostname(), os.getpid(),
                                                     random.getrandbits(32)))


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write_json(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` by temp file + fsync + rename."""
    tmp = _temp_name(path)
    try:
        _write_synced(tmp, json.dumps(data, sort_keys=True).encode())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def read_json(path: str) -> Optional[Any]:
    """The JSON in ``path``; None when missing, unreadable or incomplete."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode())
    except (OSError, ValueError):
        return None


class Backoff:
    """Sleep intervals from ``start`` doubling to ``cap``, with +-25% jitter (a quick
    first look: on one machine the record is often there within milliseconds)."""

    def __init__(self, start: float = 0.02, cap: float = 2.0) -> None:
        self.delay = start
        self.cap = cap

    def next(self) -> float:
        delay = self.delay * random.uniform(0.75, 1.25)
        self.delay = min(self.cap, self.delay * 2)
        return delay


def poll_until(read: Callable[[], Optional[Any]], deadline: float,
               on_idle: Callable[[], None] = lambda: None,
               backoff: Optional[Backoff] = None) -> Optional[Any]:
    """Call ``read`` until it returns non-None or ``deadline`` (epoch) passes.

    ``on_idle`` runs between attempts (heartbeats, abort checks; it may raise to stop).
    Returns None at the deadline.
    """
    backoff = backoff or Backoff()
    while True:
        value = read()
        if value is not None:
            return value
        remaining = deadline - time.time()
        if remaining <= 0:
            return None
        on_idle()
        time.sleep(max(0.0, min(backoff.next(), remaining)))
