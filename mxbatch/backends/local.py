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
(found by its ``MXBATCH_JOB_ID`` environment variable). The manager is named by its
pid and start time (``procs.Process``), and ``status`` takes it for gone once its
task records have not been written for the heartbeat timeout (``supervised``): a
stopped or hung manager does not leave the job RUNNING for ever; but an attached CLI
stopped by its terminal (Ctrl-Z) leaves its job paused until ``fg`` or ``bg``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Callable, ClassVar, Dict, List, Optional, Tuple

from ..errors import ExitCode, MxbatchError
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
from .bundle import runtime_command
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
    """The job manager of the job (a detached one, or the attached CLI), when it started
    (``procs.Process``: a pid given to another process later is not it), and where it
    runs; ``attached``: it is the CLI in the user's terminal, whose job control may stop
    it (Ctrl-Z) and continue it (``supervised``: the job is paused, not lost)."""

    manager_pid: int
    host: str = ""
    manager_started: Optional[int] = None
    attached: bool = False

    @property
    def manager(self) -> procs.Process:
        return procs.Process(self.manager_pid, self.manager_started)


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

    def capacity_warnings(self, plan: JobPlan) -> List[str]:
        """This machine's cores and memory against every task's (``capacity``)."""
        from .capacity import shortfalls

        return shortfalls(plan.run)

    def render(self, plan: JobPlan) -> LocalRequest:
        argv = runtime_command(sys.executable, plan.run.layout.runtime, "agent",
                               plan.run.run_dir, "--cancel-on-signal")
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
            me = procs.Process.of(os.getpid())
            return LocalHandle(manager_pid=me.pid, host=socket.gethostname(),
                               manager_started=me.started, attached=True)
        with open(layout.manager_log, "ab") as log:
            manager = subprocess.Popen(
                list(request.manager_argv),
                env={**os.environ, wire.JOB_ID: request.plan.job_id},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        handle = LocalHandle(manager_pid=manager.pid, host=socket.gethostname(),
                             manager_started=procs.start_ticks(manager.pid))
        rollback.push(f"the job manager (pid {manager.pid})",
                      lambda: _stop_manager(handle, request.plan.run.grace_s,
                                            request.plan.job_id, manager))
        return handle

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
                          restart_reason=ctx.reason_name, reap_job=True,
                          pending_signal=loop.pending_signal)
            agent.run()
            if agent.signal_received and not received:
                received.append(agent.signal_received)
            if agent.storage_error is not None:
                raise agent.storage_error  # the loop ends the job
            return file_attempt_end(plan, rdv)

        loop = AttemptLoop(plan, run_attempt, on_tick=on_tick)
        outcome = loop.run().outcome
        if loop.storage_error is not None:
            raise MxbatchError(f"job {record.job_id} FAILED: {loop.storage_error.reason} "
                               f"({record.run_dir}); nothing of it is left running",
                               exit_code=ExitCode.JOB_FAILED)
        cancelled = outcome is not None and outcome.value == "cancelled"
        if loop.signal_received:
            return loop.signal_received
        return received[0] if received and cancelled else None

    def status(self, record: JobRecord) -> JobStatus:
        handle = self.handle_of(record)
        return status_supervised_here(self.name, record, handle.manager, handle.attached)

    def await_stopped(self, record: JobRecord, handle: LocalHandle, run: RunPlan) -> None:
        """After the abort record: the manager stops the roles and exits (one that is
        stopped, SIGSTOP, is continued first: it reads the abort then)."""
        _await_manager(handle, run.grace_s)

    def remove(self, record: JobRecord, handle: LocalHandle, run: RunPlan) -> None:
        """The manager exits once its roles have (it stops them on the abort record
        within the grace period); ``Backend.cancel`` then SIGKILLs whatever of the job is
        left. An attached job's agent is this process, which has already stopped
        everything."""
        _await_manager(handle, run.grace_s)


def _await_manager(handle: LocalHandle, grace_s: float) -> None:
    """Continue the manager (if stopped) and wait until it ended, at most the grace
    period and a margin; nothing when it is this process."""
    manager = handle.manager
    if manager != procs.Process.of(os.getpid()):
        procs.kill_all([manager], signal.SIGCONT)
        procs.wait_gone([manager], grace_s + 5)


def _stop_manager(handle: LocalHandle, grace_s: float, job_id: str,
                  popen: subprocess.Popen) -> None:
    """Undo a launch: SIGINT cancels the job (the manager stops its roles), SIGKILL
    what is left after the grace period; reap the manager (our child)."""
    procs.kill_all([handle.manager], signal.SIGINT)
    procs.wait_gone([handle.manager], grace_s + 5)
    procs.reap_job(job_id)
    procs.kill_all([handle.manager], signal.SIGKILL)
    popen.wait()
