"""One view of a batch queue per user, backend and cell on this machine (issue 35).

A campus scheduler is a shared service: every ``status``, ``wait``, ``submit --wait``,
``list`` and restart driver of a user used to ask it on its own, once a second each. The
queue view answers all of them from one small file under the user's state directory
(``$MXBATCH_HOME/cache/queue/<backend>-<cell>.json``, mode 0600): a process that needs
the state of some of the user's jobs reads the file when its snapshot is fresh enough
(younger than the poll interval), else takes the file's lock (``fcntl.flock``), reads it
again (another process may have just asked) and only then asks the scheduler, for the
user's own jobs, and writes the answer for everyone. So a user's mxbatch processes ask
at most once per poll interval together, however many follow how many jobs.

A snapshot cannot know of a job submitted after it was taken: a job id a snapshot does
not list counts as gone only when the snapshot was asked after the id was saved (the
job record's or the attempts record's time, ``ViewScope.known_since``); before that it
is still queued as far as anyone knows (``for_jobs``).
Rows are the listing as the backend parses it, each a tuple of strings; what they mean
is the backend's. A failed ask raises and writes nothing. Standard library only.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ...errors import BackendUnavailable
from ...runtime.files import atomic_write
from ...spec.paths import cache_dir, make_private_dirs

#: the poll interval's default (``backends.<name>.poll_interval``): how old a snapshot
#: may be and still answer
DEFAULT_POLL_INTERVAL_S = 5.0
#: the help of ``backends.<name>.poll_interval``
POLL_INTERVAL_HELP = ("how old the shared view of this user's jobs in the queue may be "
                      "(one query per interval for all of the user's mxbatch processes; "
                      "a site may set it in its profile)")
#: how old a snapshot may be to answer for a job id it does not list
RECHECK_S = 1.0
#: how often a cluster's limits are read at most (they change with an admin's edit)
LIMITS_INTERVAL_S = 600.0
#: how long after its ids were saved a snapshot may still not list a job (clocks of
#: two hosts that write and read a record on shared storage)
SUBMIT_MARGIN_S = 2.0
#: how long a process waits for another's ask (the lock) at most
LOCK_WAIT_S = 90.0

Row = Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ViewScope:
    """How a look at the queue may be answered: a snapshot at most ``max_age`` old
    (None: the poll interval), for job ids saved at ``known_since`` (epoch seconds)."""

    max_age: Optional[float] = None
    known_since: float = 0.0


#: a look at the poll interval's pace, for ids saved long ago
USUAL = ViewScope()
#: a cancel's look: what the scheduler says now, give or take ``RECHECK_S``
NOW = ViewScope(max_age=RECHECK_S)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the scheduler said of the user's jobs at ``asked_at`` (epoch seconds), and
    how long the ask took."""

    asked_at: float
    rows: Tuple[Row, ...]
    took_s: float = 0.0

    def age(self, now: Optional[float] = None) -> float:
        return (time.time() if now is None else now) - self.asked_at

    def to_json(self) -> str:
        return json.dumps({"asked_at": self.asked_at, "took_s": self.took_s,
                           "rows": [list(row) for row in self.rows]})

    @classmethod
    def from_json(cls, text: str) -> Optional["Snapshot"]:
        """The snapshot in ``text``; None when it is not one (partial, another format)."""
        try:
            data = json.loads(text)
            rows = tuple(tuple(str(field) for field in row) for row in data["rows"])
            return cls(asked_at=float(data["asked_at"]), rows=rows,
                       took_s=float(data.get("took_s", 0.0)))
        except (ValueError, KeyError, TypeError):
            return None


def cell_name(backend: str, environ: Dict[str, str], keys: Sequence[str]) -> str:
    """``sge-1a2b3c4d``: the backend and a short digest of the variables that name its
    cell (``SGE_ROOT``, ``SGE_CELL``; ``SLURM_CONF``), so two cells never share a view."""
    text = "\0".join(f"{key}={environ.get(key, '')}" for key in keys)
    return f"{backend}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


class QueueView:
    """The shared view of one queue (see the module docstring). ``ask`` asks the
    scheduler for the user's jobs and returns the rows; ``interval_s`` is the poll
    interval."""

    def __init__(self, path: Path, ask: Callable[[], List[Row]],
                 interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        self.path = path
        self.ask = ask
        self.interval_s = max(float(interval_s), RECHECK_S)
        #: how many times this process asked the scheduler (tests, doctor)
        self.asked = 0

    def snapshot(self, max_age: Optional[float] = None) -> Snapshot:
        """A snapshot at most ``max_age`` old (default: the poll interval), asking the
        scheduler only when none is (one process at a time)."""
        limit = self.interval_s if max_age is None else max_age
        cached = self._read()
        if cached is not None and 0 <= cached.age() < limit:
            return cached
        make_private_dirs(self.path.parent)
        with open(self._lock_path(), "a") as lock:
            self._lock(lock)
            cached = self._read()  # asked by another process while this one waited?
            if cached is not None and 0 <= cached.age() < limit:
                return cached
            started = time.time()
            rows = self.ask()
            self.asked += 1
            fresh = Snapshot(asked_at=started, rows=tuple(rows),
                             took_s=round(time.time() - started, 3))
            atomic_write(str(self.path), fresh.to_json().encode(), 0o600)
            return fresh

    def for_jobs(self, scope: "ViewScope", job_ids: Sequence[str]) -> Tuple[Snapshot, Set[str]]:
        """A snapshot for the jobs ``job_ids`` (``scope``: how old it may be, since when
        the ids exist), and those of them it cannot answer for: not listed, and asked
        before ``scope.known_since`` (plus ``SUBMIT_MARGIN_S``): submitted after it was
        taken, so queued as far as anyone knows, not gone."""
        found = self.snapshot(scope.max_age)
        listed = {row[0] for row in found.rows}
        unknown = {job_id for job_id in job_ids if job_id not in listed
                   and found.asked_at < scope.known_since + SUBMIT_MARGIN_S}
        return found, unknown

    def _read(self) -> Optional[Snapshot]:
        try:
            with open(self.path) as handle:
                return Snapshot.from_json(handle.read())
        except OSError:
            return None

    def _lock_path(self) -> str:
        return str(self.path) + ".lock"

    @staticmethod
    def _lock(handle) -> None:
        """Take the lock, waiting at most ``LOCK_WAIT_S`` (another process's ask)."""
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"another mxbatch process has held the queue view's lock "
                        f"({handle.name}) for {LOCK_WAIT_S:g}s") from None
                time.sleep(0.05)


def state_path(cell: str) -> Path:
    """Where the view of ``cell`` lives: ``$MXBATCH_HOME/cache/queue/<cell>.json``."""
    return cache_dir() / "queue" / f"{cell}.json"


def rows_by_key(rows: Sequence[Row]) -> Dict[Tuple[str, str], str]:
    """``{(job, index): state}`` of rows ``(job, index, state)``."""
    return {(row[0], row[1]): row[2] for row in rows if len(row) >= 3}
