"""The rendezvous on a key-value store instead of a shared directory (YARN: skein's).

``KeyValueRendezvous`` implements ``Rendezvous`` on any object with the
``KeyValueStore`` methods below; the store itself (skein's, which needs grpc)
lives outside the runtime and is named at run time with ``--kv-store
MODULE:FACTORY`` (see ``__main__``), so this package stays standard-library only.

Keys and values (JSON, UTF-8, sorted keys), the same for every store:

- ``scheduler``: the ``SchedulerRecord`` (a put is atomic: readers see all of it
  or nothing);
- ``task/<role>-<rank>``: each supervisor's ``TaskRecord`` (with heartbeat);
- ``abort``: the first ``AbortRecord``; ``put_new`` only creates it, so the
  first writer wins, as with ``abort.json``;
- ``digest``: the watcher's ``DigestRecord``.

The store is duck-typed: a store class from another copy of this module (the
CLI's ``mxbatch.runtime`` versus the zipapp's ``mxbatch_runtime``) works too.
"""

import json
import time
from typing import Any, Dict, Iterable, Optional

from .rendezvous import Rendezvous, TaskKey
from .roles import Role
from .states import (
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    collect_task_records,
)

SCHEDULER_KEY = "scheduler"
TASK_PREFIX = "task/"
ABORT_KEY = "abort"
DIGEST_KEY = "digest"


class KeyValueStore:
    """What ``KeyValueRendezvous`` needs of a store. Keys are str, values bytes."""

    def get(self, key: str) -> Optional[bytes]:
        """The value of ``key``, or None if it is not set."""
        raise NotImplementedError

    def put(self, key: str, value: bytes) -> None:
        """Set ``key`` (atomically replacing any value)."""
        raise NotImplementedError

    def put_new(self, key: str, value: bytes) -> bool:
        """Set ``key`` only if it is not set yet, atomically; True if this call set it."""
        raise NotImplementedError

    def get_prefix(self, prefix: str) -> Dict[str, bytes]:
        """Every key starting with ``prefix``, with its value."""
        raise NotImplementedError

    def close(self, exit_status: int, abort: Optional[bytes]) -> None:
        """Called once when this task's supervisor has ended with ``exit_status``;
        ``abort`` is the job's abort record, if any. Default: nothing."""


def task_key(role: str, rank: int) -> str:
    return "%s%s-%d" % (TASK_PREFIX, role, rank)


def encode(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True).encode()


def decode(value: Optional[bytes]) -> Optional[Any]:
    """The JSON in ``value``; None when missing or not JSON."""
    if value is None:
        return None
    try:
        return json.loads(value.decode())
    except (UnicodeDecodeError, ValueError):
        return None


class KeyValueRendezvous(Rendezvous):
    """``Rendezvous`` on a key-value store (see the module docstring for the layout)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def publish_scheduler(self, record: SchedulerRecord) -> None:
        self.store.put(SCHEDULER_KEY, encode(record.to_dict()))

    def read_scheduler(self) -> Optional[SchedulerRecord]:
        return SchedulerRecord.parse(decode(self.store.get(SCHEDULER_KEY)))

    def write_task(self, record: TaskRecord) -> None:
        self.store.put(task_key(record.role.value, record.rank), encode(record.to_dict()))

    def read_task(self, role: Role, rank: int) -> Optional[TaskRecord]:
        return TaskRecord.parse(decode(self.store.get(task_key(role.value, rank))))

    def read_tasks(self, keys: Iterable[TaskKey]) -> Dict[TaskKey, TaskRecord]:
        """One request for all of them (the store answers a prefix at once)."""
        wanted = set(keys)
        records = collect_task_records(
            decode(value) for value in self.store.get_prefix(TASK_PREFIX).values())
        return {key: record for key, record in records.items() if key in wanted}

    def write_abort(self, record: AbortRecord) -> bool:
        if not record.at:
            record.at = time.time()
        return self.store.put_new(ABORT_KEY, encode(record.to_dict()))

    def read_abort(self) -> Optional[AbortRecord]:
        return AbortRecord.parse(decode(self.store.get(ABORT_KEY)))

    def publish_digest(self, record: DigestRecord) -> None:
        self.store.put(DIGEST_KEY, encode(record.to_dict()))

    def read_digest(self) -> Optional[DigestRecord]:
        return DigestRecord.parse(decode(self.store.get(DIGEST_KEY)))

    def close(self, exit_status: int) -> None:
        """Tell the store this task has ended (see ``KeyValueStore.close``)."""
        close = getattr(self.store, "close", None)
        if close is not None:
            close(exit_status, self.store.get(ABORT_KEY))
