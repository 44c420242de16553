"""The local backend's per-job manager: starts supervisors on this machine
(forked children, see ``ForkedSupervisor``).

It starts at most ``slots`` supervisors at a time, scheduler first, then
servers, then workers (like a queue with that many free slots); the rest wait
for a slot. It also watches the job: a supervisor that dies without a final
record (SIGKILL) aborts the job at once, and so does a passed startup deadline.
On SIGTERM, or once the job is aborted, it starts nothing more, marks what never
started as cancelled, and gives supervisors ``grace + 5`` seconds before
SIGKILLing their process groups. It exits when no supervisor is left.
"""

import os
import signal
import sys
import time
import traceback
from typing import Dict, List, Optional

from .peers import missing_at_deadline, startup_abort
from .planfile import RunPlan, TaskInfo
from .rendezvous import Rendezvous
from .states import AbortKind, AbortRecord, TaskRecord, TaskState
from .supervisor import Supervisor, signal_name

POLL_S = 0.05


class LocalManager:
    def __init__(self, plan: RunPlan, rendezvous: Rendezvous, slots: Optional[int]) -> None:
        self.plan = plan
        self.rdv = rendezvous
        self.slots = slots or len(plan.tasks)
        self.queue: List[TaskInfo] = list(plan.tasks)
        self.running: Dict[int, ForkedSupervisor] = {}
        self.signalled = False
        self.stop_deadline: Optional[float] = None

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for task in self.queue:
            self.rdv.write_task(TaskRecord(role=task.role, rank=task.rank,
                                           state=TaskState.PENDING, note="waiting for a slot"))
        while self.queue or self.running:
            self._reap()
            aborted = self.signalled or self.rdv.read_abort() is not None
            if aborted:
                self._drop_queue()
                self._enforce_stop_deadline()
            else:
                self._launch()
                self._check_startup()
            time.sleep(POLL_S)
        return 0

    def _on_signal(self, _signum, _frame) -> None:
        self.signalled = True
        self.rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, by="local manager",
                                         reason="the local job manager was stopped"))

    def _launch(self) -> None:
        while self.queue and len(self.running) < self.slots:
            task = self.queue.pop(0)
            log = self.plan.layout.supervisor_log(task.role.value, task.rank)
            self.running[task.index] = ForkedSupervisor(self.plan, task, self.rdv, log)

    def _reap(self) -> None:
        records = None
        for index, proc in list(self.running.items()):
            code = proc.poll()
            if code is None:
                continue
            del self.running[index]
            task = self.plan.tasks[index]
            records = records if records is not None else self.rdv.read_tasks()
            record = records.get((task.role, task.rank))
            if record is not None and record.state.final:
                continue
            how = "was killed by %s" % signal_name(code) if code < 0 else "exited with %d" % code
            reason = "the supervisor of %s %s" % (task.label, how)
            self.rdv.write_task(TaskRecord(
                role=task.role, rank=task.rank, state=TaskState.LOST, note=reason,
                host=record.host if record else "", pid=record.pid if record else None,
                supervisor_pid=proc.pid, ended_at=time.time(),
                log=self.plan.layout.task_log(task.role.value, task.rank)))
            self.rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=reason,
                                             role=task.role, rank=task.rank, by="local manager"))
            if record is not None and record.pid:
                _killpg(record.pid, signal.SIGKILL)

    def _drop_queue(self) -> None:
        for task in self.queue:
            self.rdv.write_task(TaskRecord(role=task.role, rank=task.rank,
                                           state=TaskState.CANCELLED,
                                           note="never started: job aborted",
                                           ended_at=time.time()))
        self.queue = []
        if self.signalled:
            for proc in self.running.values():
                _signal(proc, signal.SIGTERM)

    def _enforce_stop_deadline(self) -> None:
        now = time.time()
        if self.stop_deadline is None:
            self.stop_deadline = now + self.plan.grace_s + 5
        elif now > self.stop_deadline:
            records = self.rdv.read_tasks()
            for index, proc in self.running.items():
                task = self.plan.tasks[index]
                record = records.get((task.role, task.rank))
                if record is not None and record.pid:
                    _killpg(record.pid, signal.SIGKILL)
                _signal(proc, signal.SIGKILL)

    def _check_startup(self) -> None:
        missing = missing_at_deadline(self.plan, self.rdv.read_tasks(), time.time())
        if missing:
            self.rdv.write_abort(startup_abort(self.plan, missing, by="local manager"))


class ForkedSupervisor:
    """A task's supervisor in a forked child of the manager: no new interpreter to
    start (about 1 ms instead of 50 per task), the runtime is already imported.
    Its stdout and stderr go to ``log``. Offers the ``Popen`` calls the manager uses."""

    def __init__(self, plan: RunPlan, task: TaskInfo, rendezvous: Rendezvous,
                 log: str) -> None:
        self.returncode: Optional[int] = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child never returns from here
            code = 1
            try:
                _redirect(log)
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, signal.SIG_DFL)
                os.environ["MXBATCH_TASK"] = str(task.index)
                code = Supervisor(plan, task, rendezvous).run()
            except BaseException:  # a crash of the supervisor itself: show it in its log
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                                   else os.WEXITSTATUS(status))
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def _signal(proc: ForkedSupervisor, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except ProcessLookupError:
        pass


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
