"""The driver of a batch (SGE, Slurm) or YARN job's attempts: a small process on the
submit host.

A restart of a ps-lite job is a whole-job relaunch: on a batch system a new native
submission of every role's array, on YARN a new skein application (same job id and run
directory). Somebody must notice that an attempt ended, decide, and submit the next
one, also when nobody follows the job: the attached CLI's ``--wait`` may be gone.
``submit`` starts this driver (``Backend.started``) when the job has restarts on;
without them nothing changes: no driver, no extra process.

Why a process on the submit host, not task 0's agent in the job, nor the job scripts'
own requeue: the scheduler's supervisor is the first thing a node failure or a
preemption takes away, and a requeue of one array task cannot relaunch the other
roles' arrays; the submit host is where ``sbatch``/``qsub`` are known to work, where
the job's record and options are, and where the ssh and MPI backends' controller runs
anyway. The cost: the submit host must stay up while the job runs (as for ssh and MPI);
if the driver dies, the current attempt goes on to its end and no attempt follows
(``status`` says so).

The driver runs ``jobloop.AttemptLoop``; per attempt it:

- submits it (attempt 0 was submitted by ``submit``; a later one through
  ``Backend.relaunch``: the saved submit commands, or skein specification, with the
  attempt's options: its variables, output files, the excluded hosts), records its
  native ids at once;
- watches it every ``poll_interval_s`` through the backend's ``status`` of that
  attempt and its shared state (``Backend.attempt_rendezvous``: the attempt's files,
  or on YARN the key-value store of its application), and ends it when no
  supervisor is there to: the start-up deadline, tasks whose supervisors vanished
  (what the scheduler says of them: a node failure names the node, a preemption,
  ``Backend.lost_end``), the job's cancel record;
- once the attempt is over, removes whatever of it is left queued or running
  (``Backend.remove``), so that nothing of an old attempt outlives it.

``python -m mxbatch.backends.driver JOB_ID`` (in its own session; its output goes to
``logs/driver.log``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import List, Optional

from ..errors import MxbatchError
from ..runtime import wire
from ..runtime.attempts import AttemptEnd
from ..runtime.jobloop import (
    AttemptContext,
    AttemptLoop,
    attempt_plan,
    job_cancel,
    prepare_files,
)
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import Rendezvous
from ..runtime.roles import Role
from ..runtime.states import AbortKind, AbortRecord, EndReason, TaskState
from ..runtime.watch import missing_at_deadline, startup_abort
from . import records
from .base import Backend, Rollback, load_run_plan
from .records import JobRecord
from .status import TaskStatus

#: the driver's own name in the records it writes
BY = "mxbatch driver"


def start(record: JobRecord) -> int:
    """Start the driver of ``record``'s job (detached, its own session); its pid."""
    layout = record.layout
    os.makedirs(layout.job_logs_dir, mode=0o700, exist_ok=True)
    with open(os.path.join(layout.job_logs_dir, "driver.log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mxbatch.backends.driver", record.job_id],
            env={**os.environ, wire.JOB_ID: record.job_id}, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    return proc.pid


class Driver:
    """Drives the attempts of one submitted job (see the module docstring)."""

    def __init__(self, backend: Backend, record: JobRecord) -> None:
        self.backend = backend
        self.record = record
        self.plan = load_run_plan(record)
        self.loop = AttemptLoop(self.plan, self.run_attempt, prepare=self.prepare,
                                usable=self.usable)

    def prepare(self, index: int) -> None:
        prepare_files(self.plan, index)

    def usable(self, excluded: List[str]) -> Optional[str]:
        return None  # the scheduler places the tasks on the nodes that are left

    def run_attempt(self, ctx: AttemptContext) -> AttemptEnd:
        if ctx.index == 0:
            handle = self.backend.handle_class.from_dict(self.record.handle)
        else:
            rollback = Rollback()
            try:
                handle = self.backend.relaunch(self.record, self.plan, ctx, rollback)
            except MxbatchError as exc:
                rollback.run()
                return AttemptEnd(EndReason.FAILURE, detail=f"cannot submit attempt "
                                  f"{ctx.index}: {exc.message}".replace("\n", " "))
        self.loop.set_native(handle.to_dict())
        try:
            return self.backend.native_end(self.record, handle, self.plan, self.watch(ctx))
        finally:
            self.backend.remove(self.record, handle, self.plan)

    def watch(self, ctx: AttemptContext) -> AttemptEnd:
        """Follow attempt ``ctx`` until it is over (no task active, and its abort record
        written or every worker succeeded); how it ended."""
        rdv = self.backend.attempt_rendezvous(self.record, ctx.index)
        plan = attempt_plan(self.plan, ctx.started_at, ctx.index)
        while True:
            tasks = self.backend.status(self.record).tasks
            abort = rdv.read_abort()
            if abort is None and job_cancel(self.plan) is not None:
                rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, by=BY,
                                            reason="cancelled by the user",
                                            end=EndReason.CANCELLED))
            elif abort is None:
                self._enforce(plan, rdv, tasks)
            abort = rdv.read_abort()
            if not any(t.state.active for t in tasks):
                if abort is not None:
                    return AttemptEnd.of_abort(abort)
                workers = [t for t in tasks if t.role is Role.WORKER]
                if workers and all(t.state is TaskState.SUCCEEDED for t in workers):
                    return AttemptEnd(EndReason.SUCCEEDED)
            time.sleep(max(1.0, self.backend.poll_interval_s))

    def _enforce(self, plan: RunPlan, rdv: Rendezvous, tasks: List[TaskStatus]) -> None:
        """What no supervisor can see: a start-up deadline passed with tasks that never
        started, and tasks whose supervisors vanished (the scheduler says why: a node
        failure, a preemption, its time limit)."""
        missing = missing_at_deadline(plan, rdv.read_tasks(plan.task_keys()), time.time() - 2)
        if missing:
            rdv.write_abort(startup_abort(plan, missing, by=BY))
            return
        lost = [t for t in tasks if t.state is TaskState.LOST]
        if not lost:
            return
        first = lost[0]
        end = self.backend.lost_end(self.record, self.backend.handle_of(self.record),
                                    self.plan, lost)
        if end is None:
            end = AttemptEnd(EndReason.FAILURE, detail=f"{first.label} lost: "
                             f"{first.note or 'its supervisor is gone'}",
                             role=first.role.value, rank=first.rank)
        rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, by=BY, reason=end.detail,
                                    end=end.reason, hosts=list(end.hosts),
                                    role=first.role, rank=first.rank,
                                    log=first.log or None))

    def run(self) -> int:
        outcome = self.loop.run().outcome
        return 0 if outcome is EndReason.SUCCEEDED else 1


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m mxbatch.backends.driver JOB_ID``."""
    from .registry import backend_class

    job_id = (argv if argv is not None else sys.argv[1:])[0]
    record = records.load(job_id)
    backend = backend_class(record.backend).from_record(record)
    return Driver(backend, record).run()


if __name__ == "__main__":
    sys.exit(main())
