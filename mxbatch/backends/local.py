"""Local backend: every task is a process on this machine, all of them supervised by
one agent (``runtime.agent``), which runs at most ``slots`` at a time.

Detached (``submit``), ``launch`` starts the agent as a job manager of its own
(``runtime.pyz agent``, its own session). Attached (``submit --wait``, ``mxbatch
launch``), the CLI process itself is the agent (``supervise_here``): no other process
stands between the user and the roles, and Ctrl-C cancels the job. Either runs the
job's attempts (``jobloop.AttemptLoop``): with ``restarts``, a relaunch is the next
attempt in the same process; SIGTERM to it is a preemption when ``restarts.on`` lists
it (the workers checkpoint, the job relaunches), else a cancel. Tasks advertise
127.0.0.1 unless an interface is given. ``cancel`` writes the abort record, gives the
agent the grace period to stop the roles, then SIGKILLs whatever of the job is left
(found by its ``MXBATCH_JOB_ID`` environment variable).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Callable, ClassVar, Dict, List, Optional, Tuple

from ..quoting import shell_words
from ..runtime import net, procs, wire
from ..runtime.agent import Agent
from ..runtime.jobloop import AttemptContext, AttemptLoop, attempt_plan, file_attempt_end
from ..runtime.layout import RunLayout
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import FileRendezvous
from ..spec.plan import JobPlan
from ..spec.typed import option
from .base import Backend, Handle, RenderedItem, Request, Rollback, load_run_plan
from .records import JobRecord
from .supervised import status_supervised_here

if TYPE_CHECKING:  # pragma: no cover
    from .status import JobStatus


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
    """The command line of the job manager that ``launch`` starts; ``attached``: no
    manager, this process supervises the job (``supervise_here``)."""

    manager_argv: Tuple[str, ...] = ()
    attached: bool = False

    def native_items(self) -> List[RenderedItem]:
        if self.attached:
            return [RenderedItem("job agent", "this mxbatch process supervises every task")]
        return [RenderedItem("job manager (detached)", shell_words(self.manager_argv))]


class LocalBackend(Backend[LocalOptions, LocalRequest, LocalHandle]):
    """Every task a supervised process here, started by one detached job manager."""

    name = "local"
    loopback_only = True
    role_containers = True
    options_class = LocalOptions
    handle_class = LocalHandle
    poll_interval_s = 0.05  # reading a few local files
    max_tasks = 1_000  # processes of one machine
    #: when restarts.on lists it; else a cancel
    signal_ends: ClassVar[Dict[str, str]] = {"SIGTERM": "preempted"}

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
        argv = [sys.executable, plan.run.layout.runtime, "agent", plan.run.run_dir,
                "--cancel-on-signal"]
        if self.options.slots:
            argv += ["--slots", str(self.options.slots)]
        return LocalRequest(plan=plan, manager_argv=tuple(argv))

    def attach(self, request: LocalRequest) -> LocalRequest:
        """The request for supervising the job in this process (see ``supervise_here``)."""
        return dataclasses.replace(request, attached=True)

    def ships_runtime(self, request: LocalRequest) -> bool:
        """An attached job's agent is this process: only a job manager runs runtime.pyz."""
        return not request.attached

    def launch(self, request: LocalRequest, layout: RunLayout,
               rollback: Rollback) -> LocalHandle:
        if request.attached:
            return LocalHandle(manager_pid=os.getpid(), host=socket.gethostname())
        with open(layout.manager_log, "ab") as log:
            manager = subprocess.Popen(
                list(request.manager_argv),
                env={**os.environ, wire.JOB_ID: request.plan.job_id},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        return LocalHandle(manager_pid=manager.pid, host=socket.gethostname())

    def supervise_here(self, record: JobRecord,
                       on_tick: Callable[[], None]) -> Optional[str]:
        """Run the agent of an attached job in this process, attempt after attempt, until
        the job ended; a signal (Ctrl-C) cancels the job."""
        plan = load_run_plan(record)
        received = []

        def run_attempt(ctx: AttemptContext):
            rdv = FileRendezvous(record.run_dir, ctx.index)
            agent = Agent(attempt_plan(plan, ctx.started_at, ctx.index), list(plan.tasks),
                          rdv, slots=self.options.slots, signals_cancel=True,
                          on_tick=on_tick, attempt=ctx.index,
                          restart_reason=ctx.reason_name)
            agent.run()
            if agent.signal_received and not received:
                received.append(agent.signal_received)
            return file_attempt_end(plan, rdv)

        loop = AttemptLoop(plan, run_attempt, on_tick=on_tick)
        outcome = loop.run().outcome
        cancelled = outcome is not None and outcome.value == "cancelled"
        if loop.signal_received:
            return loop.signal_received
        return received[0] if received and cancelled else None

    def status(self, record: JobRecord) -> JobStatus:
        return status_supervised_here(self.name, record, self.handle_of(record).manager_pid)

    def remove(self, record: JobRecord, handle: LocalHandle, run: RunPlan) -> None:
        """The manager exits once its roles have (it stops them on the abort record
        within the grace period); then SIGKILL whatever is left. An attached job's agent
        is this process, which has already stopped everything."""
        if handle.manager_pid != os.getpid():
            procs.wait_gone([handle.manager_pid], run.grace_s + 5)
        leftovers = procs.job_processes(record.job_id)
        if leftovers:
            procs.kill_all(leftovers, signal.SIGKILL)
            procs.wait_gone(leftovers, 5)
