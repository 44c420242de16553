"""How tasks of one job find each other and share state.

``Rendezvous`` is the interface; ``FileRendezvous`` implements it on a run
directory on shared storage:

- ``scheduler.json``: the scheduler's ``{job_id, ip, port, host, pid, attempt}``,
  published by write-temp + fsync + rename once its port accepts connections;
- ``tasks/<role>-<rank>.json``: each supervisor's ``TaskRecord`` (with heartbeat);
- ``abort.json``: the first ``AbortRecord`` wins (hard link of a finished temp
  file, which fails if the name exists, also on NFS).

Readers always open+read (never stat first: NFS caches negative lookups) and
treat a missing or half-written file as "not there yet".
"""

import abc
import json
import os
import random
import socket
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .states import AbortRecord, TaskRecord, collect_task_records

TaskKey = Tuple[str, int]


class Rendezvous(abc.ABC):
    """Shared state of one job. Every method is safe to call from any task."""

    @abc.abstractmethod
    def publish_scheduler(self, info: Dict[str, Any]) -> None:
        """Make the scheduler's address visible to every task, atomically."""

    @abc.abstractmethod
    def read_scheduler(self) -> Optional[Dict[str, Any]]:
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


class FileRendezvous(Rendezvous):
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.tasks_dir = os.path.join(run_dir, "tasks")

    # -- files
    def _path(self, *parts: str) -> str:
        return os.path.join(self.run_dir, *parts)

    def publish_scheduler(self, info: Dict[str, Any]) -> None:
        atomic_write_json(self._path("scheduler.json"), info)

    def read_scheduler(self) -> Optional[Dict[str, Any]]:
        return read_json(self._path("scheduler.json"))

    def write_task(self, record: TaskRecord) -> None:
        os.makedirs(self.tasks_dir, exist_ok=True)
        name = "%s-%d.json" % (record.role, record.rank)
        atomic_write_json(os.path.join(self.tasks_dir, name), record.to_dict())

    def read_tasks(self) -> Dict[TaskKey, TaskRecord]:
        try:
            names = os.listdir(self.tasks_dir)
        except OSError:
            return {}
        return collect_task_records(read_json(os.path.join(self.tasks_dir, name))
                                    for name in names
                                    if name.endswith(".json") and not name.startswith("."))

    def write_abort(self, record: AbortRecord) -> bool:
        if not record.at:
            record.at = time.time()
        target = self._path("abort.json")
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
        return AbortRecord.parse(read_json(self._path("abort.json")))


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
