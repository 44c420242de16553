"""One submitted YARN job as the CLI sees it: application report, containers, and the
job's shared state in the application's key-value store, mirrored into the local
run directory.

The key-value store lives in skein's application master and ends with the
application, so the CLI reads it through a ``MirroredRendezvous``: what it sees
is also written into the run directory (the file layout of ``FileRendezvous``),
which answers alone once the application has ended. The final application
report is kept in ``yarn/report.json`` and the containers (for logs, and how each
ended: ``exits``) in ``yarn/containers.json``, so a finished job needs no cluster at
all. With restarts every attempt is an application of its own, with its own
``YarnJob``: attempt k's files are in ``attempts/<k>/`` (``RunLayout.attempt``).

No skein driver (a Java process, seconds to start) is needed after submission
when the ResourceManager's REST API answers (``rest``): the report and the kill
go over HTTP, and the application master (key-value store, containers) is
reached at the RPC address the ResourceManager reports, with skein's
``ApplicationClient`` (gRPC). Without it (Kerberos clusters, or a
ResourceManager that refuses the REST call) the driver does all of this.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, Mapping, Optional

from ...runtime.attempts import AttemptEnd
from ...runtime.kvrendezvous import KeyValueRendezvous
from ...runtime.rendezvous import (
    FileRendezvous,
    MirroredRendezvous,
    Rendezvous,
    TaskKey,
    atomic_write_json,
    read_json,
)
from ...runtime.roles import Role
from ...runtime.states import AbortKind, AbortRecord, EndReason
from ...spec.typed import from_data, to_data
from ..records import JobRecord
from . import skeinimport
from .appspec import STATE_DIR
from .exits import container_exit
from .kv import SkeinKvStore, abort_from_diagnostics
from .logs import ContainerInfo
from .rest import AppNotFound, RestApp, RestRefused, RmRestClient
from .states import AppState, ContainerState, FinalStatus

#: the job's files in the run directory (``<run dir>/yarn/``)
REPORT_FILE = "report.json"
CONTAINERS_FILE = "containers.json"
#: how long an answer about a running application is reused (``mxbatch wait`` polls
#: ten times a second; the ResourceManager and the application master need not)
REPORT_TTL_S = 0.5
CONTAINERS_TTL_S = 1.0


@dataclasses.dataclass(frozen=True)
class AppReport:
    """What YARN says of the application (skein's ``ApplicationReport``, in brief)."""

    state: AppState
    final_status: FinalStatus
    diagnostics: str = ""
    tracking_url: str = ""
    #: host:port of the running application master ("" if unknown: ask the driver)
    am_address: str = ""

    @property
    def finished(self) -> bool:
        return self.state.ended

    @property
    def outcome(self) -> FinalStatus:
        """SUCCEEDED, FAILED or KILLED for a finished application."""
        if self.final_status is not FinalStatus.UNDEFINED:
            return self.final_status
        return FinalStatus.KILLED if self.state is AppState.KILLED else FinalStatus.FAILED

    @classmethod
    def from_skein(cls, report: Any) -> "AppReport":
        return cls(state=AppState(str(report.state)),
                   final_status=FinalStatus(str(report.final_status)),
                   diagnostics=report.diagnostics or "", tracking_url=report.tracking_url or "")

    @classmethod
    def from_rest(cls, app: RestApp) -> "AppReport":
        return cls(state=app.state, final_status=app.final_status, diagnostics=app.diagnostics,
                   tracking_url=app.tracking_url,
                   am_address="" if app.state.ended else app.am_rpc_address)

    @classmethod
    def unknown(cls, app_id: str, words: str) -> "AppReport":
        """The report of an application the ResourceManager no longer knows: ended, with
        nothing of it running (a forgotten or lost application cannot run)."""
        return cls(state=AppState.FAILED, final_status=FinalStatus.UNDEFINED,
                   diagnostics=f"YARN application {app_id} is unknown to the "
                               f"ResourceManager ({words}): it was lost (a restart without "
                               "recovery) or forgotten since it ended")


def abort_from_report(report: AppReport,
                      containers: Optional[Mapping[TaskKey, ContainerInfo]] = None
                      ) -> Optional[AbortRecord]:
    """The abort record of an application that did not succeed: the one a supervisor
    left in the diagnostics, else what YARN says of a container that it preempted or
    lost with its node (``exits``: the attempt's end reason), else one made of YARN's
    own words."""
    if not report.finished or report.outcome is FinalStatus.SUCCEEDED:
        return None
    data = abort_from_diagnostics(report.diagnostics)
    if data is not None:
        try:
            return AbortRecord.from_dict(data)
        except (TypeError, ValueError, KeyError):
            pass
    taken = taken_container(containers or {})
    if taken is not None:
        return taken
    kind = AbortKind.CANCELLED if report.outcome is FinalStatus.KILLED else AbortKind.FAILED
    words = report.diagnostics.strip().splitlines()[0] if report.diagnostics.strip() else ""
    return AbortRecord(kind=kind, by="yarn",
                       reason=f"YARN application {report.outcome.value}"
                              + (f": {words}" if words else ""))


class YarnJob:
    """The live and mirrored view of one job (see the module docstring).

    ``rest`` asks the ResourceManager over HTTP (None: on a Kerberos cluster);
    ``driver`` returns this process's ``skein.Client``, called only when the REST API
    cannot answer."""

    def __init__(self, record: JobRecord, app_id: str, driver: Callable[[], Any],
                 rest: Optional[RmRestClient] = None, attempt: int = 0) -> None:
        self.record = record
        self.app_id = app_id
        self.driver = driver
        self.rest = rest
        self.attempt = attempt
        self.local = FileRendezvous(record.run_dir, attempt)
        layout = record.layout.attempt(attempt)
        self._report_path = layout.attempt_backend_file(STATE_DIR, REPORT_FILE)
        self._containers_path = layout.attempt_backend_file(STATE_DIR, CONTAINERS_FILE)
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
        saved = read_json(self._report_path)
        if saved is not None:
            self._report = from_data(AppReport, saved, strict=False)
            return self._report
        self._report = self._ask_report()
        self._report_at = time.monotonic()
        if self._report.finished:
            self._app = None
            _save(self._report_path, to_data(self._report))
        return self._report

    def wait_finished(self, timeout: float, until: Callable[[], bool] = lambda: False) -> bool:
        """Poll the report until the application ended (True) or ``until()`` or the timeout."""
        deadline = time.monotonic() + timeout
        while not self.report().finished:
            if until() or time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return True

    def _ask_report(self) -> AppReport:
        if self.rest is not None:
            try:
                return AppReport.from_rest(self.rest.app(self.app_id))
            except AppNotFound as exc:
                return AppReport.unknown(self.app_id, str(exc))
            except RestRefused:
                self.rest = None  # SPNEGO or ACLs on the web service: the driver's way
        return AppReport.from_skein(self.driver().application_report(self.app_id))

    def kill(self) -> None:
        if self.rest is not None:
            try:
                self.rest.kill(self.app_id)
                return
            except AppNotFound:
                return
            except RestRefused:
                self.rest = None
        self.driver().kill_application(self.app_id)

    # ------------------------------------------------------------------ the application master
    def app(self) -> Optional[Any]:
        """A client of the running application master; None when it does not run."""
        report = self.report()
        if self._app is None and report.state is AppState.RUNNING:
            skein = skeinimport.skein()

            if report.am_address:  # no driver: straight to the application master
                self._app = skein.ApplicationClient(report.am_address, self.app_id)
                return self._app
            try:
                self._app = self.driver().connect(self.app_id, wait=False)
            except skein.exceptions.ApplicationNotRunningError:
                return None
        return self._app

    def live(self, call: Callable[[Any], Any]) -> Optional[Any]:
        """``call(app client)``; None if the application master is gone or unreachable."""
        app = self.app()
        if app is None:
            return None
        skein = skeinimport.skein()

        try:
            return call(app)
        except (skein.exceptions.SkeinError, ConnectionError, TimeoutError):
            self._app = None
            self._report = None
            return None

    def rendezvous(self) -> MirroredRendezvous:
        """The job's key-value store while the application runs, mirrored into the
        run directory."""
        if self._rendezvous is None:
            self._rendezvous = MirroredRendezvous(self._attempt, self.local)
        return self._rendezvous

    def _attempt(self, call: Callable[[Rendezvous], Any]) -> Optional[Any]:
        return self.live(lambda app: call(KeyValueRendezvous(SkeinKvStore(app))))

    # ------------------------------------------------------------------ containers
    def containers(self) -> Dict[TaskKey, ContainerInfo]:
        """Where each task runs or ran (live, at most ``CONTAINERS_TTL_S`` old, else as
        last seen), by (role, rank)."""
        if (self._containers is not None
                and time.monotonic() - self._containers_at < CONTAINERS_TTL_S):
            return self._containers
        found = self.live(lambda app: app.get_containers(
            states=[state.value for state in ContainerState]))
        if found is None:
            saved = read_json(self._containers_path) or {}
            return {_task_key(name): ContainerInfo.from_dict(info)
                    for name, info in saved.items()}
        result = {}
        for container in found:
            if not container.yarn_container_id:
                continue
            result[(Role(container.service_name), container.instance)] = ContainerInfo(
                container_id=container.yarn_container_id,
                node_http=container.yarn_node_http_address,
                state=ContainerState(str(container.state)),
                exit_message=getattr(container, "exit_message", "") or "")
        _save(self._containers_path,
              {f"{r.value}-{n}": c.to_dict() for (r, n), c in result.items()})
        self._containers, self._containers_at = result, time.monotonic()
        return result


def container_end(key: TaskKey, info: ContainerInfo) -> Optional[AttemptEnd]:
    """How the task ``key`` ended by what YARN says of its container (``exits``); None
    when its container is not known to have ended abnormally."""
    ended = container_exit(None, info.exit_message) if info.exit_message else None
    if ended is None:
        return None
    role, rank = key
    return AttemptEnd(ended.reason, detail=f"{role.value}[{rank}] lost: YARN says "
                      f"{ended.words} (container {info.container_id} on {info.host})",
                      role=role.value, rank=rank,
                      hosts=(info.host,) if ended.reason is EndReason.NODE_FAILURE else ())


def taken_container(containers: Mapping[TaskKey, ContainerInfo]) -> Optional[AbortRecord]:
    """The abort record of an attempt that the cluster ended by taking a container
    (preempted, or lost with its node), if one was."""
    for key, info in sorted(containers.items(), key=lambda item: (item[0][0].value,
                                                                   item[0][1])):
        end = container_end(key, info)
        if end is not None and end.reason in (EndReason.PREEMPTED, EndReason.NODE_FAILURE):
            return AbortRecord(kind=AbortKind.FAILED, by="yarn", reason=end.detail,
                               end=end.reason, role=key[0], rank=key[1],
                               hosts=list(end.hosts))
    return None


def _save(path: str, data: Any) -> None:
    """A mirrored file of the job (its attempt's directory made first)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write_json(path, data)


def _task_key(name: str) -> TaskKey:
    role, _, rank = name.rpartition("-")
    return Role(role), int(rank)
