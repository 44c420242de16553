"""Local backend: every task is a supervised process on this machine.

``submit`` creates the run directory and starts one detached job manager
(``runtime.pyz manage``, its own session) that starts the supervisors, at most
``slots`` at a time. Tasks advertise 127.0.0.1 unless an interface is given.
``cancel`` writes the abort record, gives supervisors the grace period to stop
their roles, then SIGKILLs whatever of the job is left (found by its
``MXBATCH_JOB_ID`` environment variable).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from typing import List, Optional

from .. import procs, rundir
from ..plan import JobPlan
from ..records import JobRecord
from ..runtime import net
from ..runtime.states import AbortKind, AbortRecord
from ..spec import command_text
from ..status import JobStatus, NativeState, merge
from .base import Backend, RenderedItem, Submission, load_run_plan


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """``backends.local``: ``slots`` = how many tasks may run at once (default: all)."""

    slots: Optional[int] = None


class LocalBackend(Backend):
    name = "local"
    loopback_only = True
    options_class = LocalOptions
    poll_interval_s = 0.05  # reading a few local files

    @property
    def slots(self) -> Optional[int]:
        return self.options.slots

    def check(self, plan: JobPlan) -> None:
        interface = plan.spec.network.interface
        if interface:
            try:
                net.interface_ip(interface)
            except net.NetworkError as exc:
                raise plan.spec.error(("network", "interface"), str(exc)) from None
        if self.slots is not None and self.slots < 1:
            raise plan.spec.error(("backends", "local", "slots"), "must be at least 1")

    def manager_argv(self, plan: JobPlan) -> List[str]:
        argv = [sys.executable, str(plan.run_dir / "runtime.pyz"), "manage", str(plan.run_dir)]
        if self.slots:
            argv += ["--slots", str(self.slots)]
        return argv

    def render(self, plan: JobPlan) -> Submission:
        items = [RenderedItem("job manager (detached)", command_text(self.manager_argv(plan)))]
        for task in plan.run.tasks:
            env = "\n".join(f"  {k}={v}" for k, v in sorted(task.env.items()))
            items.append(RenderedItem(
                f"task {task.index}: {task.label}",
                f"argv: {command_text(task.argv)}\ncwd: {plan.run.workdir}\n"
                f"env (added to the {'inherited' if plan.run.inherit_env else 'minimal'} "
                f"environment; DMLC_PS_ROOT_URI/PORT and DMLC_NODE_HOST at run time):\n{env}"))
        return Submission(plan=plan, items=items)

    def submit(self, submission: Submission) -> JobRecord:
        plan = submission.plan
        run_dir = rundir.create(plan)
        log = open(run_dir / "logs" / "manager.log", "ab")
        try:
            manager = subprocess.Popen(
                self.manager_argv(plan), env=dict(os.environ, MXBATCH_JOB_ID=plan.job_id),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        finally:
            log.close()
        return JobRecord(job_id=plan.job_id, backend=self.name, run_dir=str(run_dir),
                         spec_path=str(plan.spec.source) if plan.spec.source else None,
                         native={"manager_pid": manager.pid, "host": socket.gethostname()})

    def status(self, record: JobRecord) -> JobStatus:
        plan = load_run_plan(record)
        rdv = rundir.rendezvous(record.run_path)
        records = rdv.read_tasks()
        manager_alive = procs.pid_alive(record.native.get("manager_pid", 0))
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

    def cancel(self, record: JobRecord) -> None:
        plan = load_run_plan(record)
        rdv = rundir.rendezvous(record.run_path)
        if not self.status(record).terminal:
            rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, reason="cancelled by the user",
                                        by="mxbatch cancel"))
        manager = record.native.get("manager_pid")
        if manager:
            procs.wait_gone([manager], plan.grace_s + 5)
        leftovers = procs.job_processes(record.job_id)
        if leftovers:
            procs.kill_all(leftovers, signal.SIGKILL)
            procs.wait_gone(leftovers, 5)
