"""Local backend: every task is a supervised process on this machine.

``launch`` starts one detached job manager (``runtime.pyz manage``, its own
session) that starts the supervisors, at most ``slots`` at a time. Tasks
advertise 127.0.0.1 unless an interface is given. ``cancel`` writes the abort
record, gives supervisors the grace period to stop their roles, then SIGKILLs
whatever of the job is left (found by its ``MXBATCH_JOB_ID`` environment variable).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from typing import List, Optional, Tuple

from .. import procs
from ..plan import JobPlan
from ..quoting import shell_words
from ..records import JobRecord
from ..runtime import net
from ..runtime.layout import RunLayout
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import FileRendezvous
from ..status import JobStatus, NativeState, merge
from ..typed import option
from .base import Backend, Handle, RenderedItem, Request, Rollback, load_run_plan


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """``backends.local``."""

    slots: Optional[int] = option(None, "at most this many tasks run at once (default: all)")


@dataclasses.dataclass(frozen=True)
class LocalHandle(Handle):
    """The detached job manager of the job, and where it runs."""

    manager_pid: int
    host: str = ""


@dataclasses.dataclass(frozen=True)
class LocalRequest(Request):
    """The command line of the job manager that ``launch`` starts."""

    manager_argv: Tuple[str, ...] = ()

    def native_items(self) -> List[RenderedItem]:
        return [RenderedItem("job manager (detached)", shell_words(self.manager_argv))]


class LocalBackend(Backend[LocalOptions, LocalRequest, LocalHandle]):
    """Every task a supervised process here, started by one detached job manager."""

    name = "local"
    loopback_only = True
    options_class = LocalOptions
    handle_class = LocalHandle
    poll_interval_s = 0.05  # reading a few local files

    def check(self, plan: JobPlan) -> None:
        interface = plan.spec.network.interface
        if interface:
            try:
                net.interface_ip(interface)
            except net.NetworkError as exc:
                raise plan.spec.error(("network", "interface"), str(exc)) from None
        if self.options.slots is not None and self.options.slots < 1:
            raise plan.spec.error(("backends", self.name, "slots"), "must be at least 1")

    def render(self, plan: JobPlan) -> LocalRequest:
        argv = [sys.executable, plan.run.layout.runtime, "manage", plan.run.run_dir]
        if self.options.slots:
            argv += ["--slots", str(self.options.slots)]
        return LocalRequest(plan=plan, manager_argv=tuple(argv))

    def launch(self, request: LocalRequest, layout: RunLayout,
               rollback: Rollback) -> LocalHandle:
        with open(layout.manager_log, "ab") as log:
            manager = subprocess.Popen(
                list(request.manager_argv),
                env=dict(os.environ, MXBATCH_JOB_ID=request.plan.job_id),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        return LocalHandle(manager_pid=manager.pid, host=socket.gethostname())

    def status(self, record: JobRecord) -> JobStatus:
        plan = load_run_plan(record)
        rdv = FileRendezvous(record.run_dir)
        records = rdv.read_tasks()
        manager_alive = procs.pid_alive(self.handle_of(record).manager_pid)
        native = {}
        for task in plan.tasks:
            rec = records.get((task.role, task.rank))
            if rec is not None and rec.supervisor_pid:
                alive = procs.pid_alive(rec.supervisor_pid)
                native[(task.role, task.rank)] = NativeState.ACTIVE if alive else NativeState.GONE
            else:
                native[(task.role, task.rank)] = (NativeState.QUEUED if manager_alive
                                                  else NativeState.GONE)
        return merge(plan, self.name, records, rdv.read_abort(), native)

    def remove(self, record: JobRecord, handle: LocalHandle, run: RunPlan) -> None:
        """The manager exits once its supervisors have (they stop their roles on the
        abort record within the grace period); then SIGKILL whatever is left."""
        procs.wait_gone([handle.manager_pid], run.grace_s + 5)
        leftovers = procs.job_processes(record.job_id)
        if leftovers:
            procs.kill_all(leftovers, signal.SIGKILL)
            procs.wait_gone(leftovers, 5)
