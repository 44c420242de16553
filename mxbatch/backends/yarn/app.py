"""One submitted YARN job as the CLI sees it: application report, containers, and the
job's shared state in the application's key-value store, mirrored into the local
run directory.

The key-value store lives in skein's application master and ends with the
application, so every read through ``MirroredRendezvous`` also writes what it
saw into the run directory (``tasks/``, ``abort.json``: the file layout of
``FileRendezvous``); once the application has ended, reads come from there. The
final application report is kept in ``yarn/report.json`` and the containers
(for logs) in ``yarn/containers.json``, so a finished job needs no driver.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from ..records import JobRecord
from ..runtime.kvrendezvous import KeyValueRendezvous
from ..runtime.rendezvous import FileRendezvous, Rendezvous, TaskKey, atomic_write_json, read_json
from ..runtime.states import AbortKind, AbortRecord, TaskRecord
from .yarn_kv import SkeinKvStore, abort_from_diagnostics
from .yarn_logs import ContainerInfo

FINISHED_STATES = frozenset(("FINISHED", "FAILED", "KILLED"))
# skein container states -> still to come, running, ended
CONTAINER_QUEUED = frozenset(("WAITING", "REQUESTED"))
CONTAINER_RUNNING = frozenset(("RUNNING",))
ALL_CONTAINER_STATES = ("WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED")
#: how long an answer about a running application is reused (``mxbatch wait`` polls
#: ten times a second; the ResourceManager and the application master need not)
REPORT_TTL_S = 0.5
CONTAINERS_TTL_S = 1.0


@dataclasses.dataclass(frozen=True)
class AppReport:
    """What YARN says of the application (skein's ``ApplicationReport``, in brief)."""

    state: str
    final_status: str
    diagnostics: str = ""
    tracking_url: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def outcome(self) -> str:
        """SUCCEEDED, FAILED or KILLED for a finished application."""
        if self.final_status in ("SUCCEEDED", "FAILED", "KILLED"):
            return self.final_status
        return "KILLED" if self.state == "KILLED" else "FAILED"

    @classmethod
    def from_skein(cls, report: Any) -> "AppReport":
        return cls(state=str(report.state), final_status=str(report.final_status),
                   diagnostics=report.diagnostics or "", tracking_url=report.tracking_url or "")


def abort_from_report(report: AppReport) -> Optional[AbortRecord]:
    """The abort record of an application that did not succeed: the one a supervisor
    left in the diagnostics, else one made of YARN's own words."""
    if not report.finished or report.outcome == "SUCCEEDED":
        return None
    data = abort_from_diagnostics(report.diagnostics)
    if data is not None:
        try:
            return AbortRecord.from_dict(data)
        except (TypeError, ValueError, KeyError):
            pass
    kind = AbortKind.CANCELLED if report.outcome == "KILLED" else AbortKind.FAILED
    words = report.diagnostics.strip().splitlines()[0] if report.diagnostics.strip() else ""
    return AbortRecord(kind=kind, by="yarn",
                       reason=f"YARN application {report.outcome}" + (f": {words}" if words
                                                                      else ""))


class YarnJob:
    """The live and mirrored view of one job (see the module docstring).

    ``driver`` returns this process's ``skein.Client``; it is called only when the
    cluster must be asked."""

    def __init__(self, record: JobRecord, driver: Callable[[], Any]) -> None:
        self.record = record
        self.app_id: str = record.native["app_id"]
        self.driver = driver
        self.local = FileRendezvous(record.run_dir)
        self.state_dir = Path(record.run_dir) / "yarn"
        self._app: Optional[Any] = None
        self._report: Optional[AppReport] = None
        self._rendezvous: Optional[MirroredRendezvous] = None
        self._report_at = 0.0
        self._containers: Optional[Dict[TaskKey, ContainerInfo]] = None
        self._containers_at = 0.0

    # ------------------------------------------------------------------ report
    def report(self) -> AppReport:
        """The application report (at most ``REPORT_TTL_S`` old); a finished one is kept
        and never asked again."""
        if self._report is not None and (
                self._report.finished or time.monotonic() - self._report_at < REPORT_TTL_S):
            return self._report
        saved = read_json(str(self.state_dir / "report.json"))
        if saved is not None:
            self._report = AppReport(**saved)
            return self._report
        self._report = AppReport.from_skein(self.driver().application_report(self.app_id))
        self._report_at = time.monotonic()
        if self._report.finished:
            self._app = None
            atomic_write_json(str(self.state_dir / "report.json"),
                              dataclasses.asdict(self._report))
        return self._report

    def wait_finished(self, timeout: float, until: Callable[[], bool] = lambda: False) -> bool:
        """Poll the report until the application ended (True) or ``until()`` or the timeout."""
        deadline = time.monotonic() + timeout
        while not self.report().finished:
            if until() or time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return True

    def kill(self) -> None:
        self.driver().kill_application(self.app_id)

    # ------------------------------------------------------------------ the application master
    def app(self) -> Optional[Any]:
        """A client of the running application master; None when it does not run."""
        if self._app is None and self.report().state == "RUNNING":
            import skein

            try:
                self._app = self.driver().connect(self.app_id, wait=False)
            except skein.exceptions.ApplicationNotRunningError:
                return None
        return self._app

    def live(self, call: Callable[[Any], Any]) -> Optional[Any]:
        """``call(app client)``; None if the application master is gone or unreachable."""
        import skein

        app = self.app()
        if app is None:
            return None
        try:
            return call(app)
        except (skein.exceptions.SkeinError, ConnectionError, TimeoutError):
            self._app = None
            self._report = None
            return None

    def rendezvous(self) -> "MirroredRendezvous":
        if self._rendezvous is None:
            self._rendezvous = MirroredRendezvous(self)
        return self._rendezvous

    # ------------------------------------------------------------------ containers
    def containers(self) -> Dict[TaskKey, ContainerInfo]:
        """Where each task runs or ran (live, at most ``CONTAINERS_TTL_S`` old, else as
        last seen), by (role, rank)."""
        if (self._containers is not None
                and time.monotonic() - self._containers_at < CONTAINERS_TTL_S):
            return self._containers
        path = str(self.state_dir / "containers.json")
        found = self.live(lambda app: app.get_containers(states=ALL_CONTAINER_STATES))
        if found is None:
            saved = read_json(path) or {}
            return {_task_key(name): ContainerInfo.from_dict(info)
                    for name, info in saved.items()}
        result = {}
        for container in found:
            if not container.yarn_container_id:
                continue
            result[(container.service_name, container.instance)] = ContainerInfo(
                container_id=container.yarn_container_id,
                node_http=container.yarn_node_http_address, state=str(container.state))
        atomic_write_json(path, {f"{r}-{n}": c.to_dict() for (r, n), c in result.items()})
        self._containers, self._containers_at = result, time.monotonic()
        return result


def _task_key(name: str) -> TaskKey:
    role, _, rank = name.rpartition("-")
    return role, int(rank)


class MirroredRendezvous(Rendezvous):
    """The job's key-value store while the application runs, mirrored into the run
    directory; the run directory alone once it has ended."""

    def __init__(self, job: YarnJob) -> None:
        self.job = job
        self.local = job.local
        self._mirrored: Dict[str, str] = {}

    def _kv(self, call: Callable[[KeyValueRendezvous], Any]) -> Optional[Any]:
        return self.job.live(lambda app: call(KeyValueRendezvous(SkeinKvStore(app))))

    def publish_scheduler(self, info: Dict[str, Any]) -> None:
        self._kv(lambda kv: kv.publish_scheduler(info))

    def read_scheduler(self) -> Optional[Dict[str, Any]]:
        return self._kv(lambda kv: kv.read_scheduler())

    def write_task(self, record: TaskRecord) -> None:
        self._kv(lambda kv: kv.write_task(record))
        self._mirror_task(record)

    def read_tasks(self) -> Dict[TaskKey, TaskRecord]:
        records = self._kv(lambda kv: kv.read_tasks())
        if records is None:
            return self.local.read_tasks()
        for record in records.values():
            self._mirror_task(record)
        return records

    def write_abort(self, record: AbortRecord) -> bool:
        first = self._kv(lambda kv: kv.write_abort(record))
        if first is None:  # the application master is gone: the run directory only
            return self.local.write_abort(record)
        if first:
            self.local.write_abort(record)
        else:  # another writer was first: mirror theirs
            self.read_abort()
        return first

    def read_abort(self) -> Optional[AbortRecord]:
        abort = self._kv(lambda kv: kv.read_abort())
        if abort is None:
            return self.local.read_abort()
        self.local.write_abort(abort)
        return abort

    def _mirror_task(self, record: TaskRecord) -> None:
        text = json.dumps(record.to_dict(), sort_keys=True)
        key = f"{record.role}-{record.rank}"
        if self._mirrored.get(key) != text:
            self.local.write_task(record)
            self._mirrored[key] = text
