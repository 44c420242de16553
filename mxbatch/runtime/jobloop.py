"""The attempt loop: run a job attempt after attempt until the restart policy says stop.

Whoever supervises a job from start to end runs it (the local job manager or the
attached CLI, the ssh/MPI controller, the driver of a batch or YARN job), with a
``run_attempt`` callable that runs one attempt to its end and says how it ended
(``AttemptEnd``). The loop owns ``attempts.json`` (``attempts.AttemptsRecord``): it
alone writes it, so it is never written by two processes.

Per attempt k:

1. before a relaunch (k >= 1): wait ``restarts.backoff`` (a ``cancel`` or a signal
   meanwhile ends the job: nothing runs), then ``prepare(k)``: the attempt's own
   directories and rendezvous files (``prepare_files``: every file its tasks look
   for exists before they run, as for attempt 0);
2. record the attempt as started (with the hosts it must leave out), then
   ``run_attempt``;
3. record how it ended; ``attempts.decide`` says whether to relaunch; a node failure
   adds the blamed hosts to the job's excluded hosts (``attempts.excluded_after``).

A run directory that cannot be written (``files.RunDirUnwritable``, from ``run_attempt``
or the loop's own write) ends the job, failed, with no other attempt.

The loop's own signal handlers (SIGINT, SIGTERM, SIGHUP: cancel) are in place between
attempts; during one, ``run_attempt``'s supervisor installs its own and restores
these.
"""

import dataclasses
import os
import signal
import socket
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from . import procs
from .attempts import (
    AttemptEnd,
    AttemptRecord,
    AttemptsRecord,
    decide,
    excluded_after,
    read_attempts,
    write_attempts,
)
from .files import RunDirUnwritable
from .planfile import RunPlan
from .rendezvous import FileRendezvous, read_json
from .states import AbortRecord, EndReason, TaskState
from .watch import workers_succeeded

#: how often the loop looks for a cancel while it waits between two attempts
WAIT_STEP_S = 0.1
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class AttemptContext(NamedTuple):
    """What one attempt is: its index, why it was launched (None for attempt 0), the
    hosts it must leave out, and when it started (its start-up deadline counts from
    there)."""

    index: int
    restart_reason: Optional[EndReason]
    excluded: Tuple[str, ...]
    started_at: float

    @property
    def reason_name(self) -> str:
        return self.restart_reason.value if self.restart_reason is not None else ""


def attempt_plan(plan: RunPlan, started_at: float, index: int) -> RunPlan:
    """The plan as attempt ``index`` sees it: its deadlines count from its own start."""
    if index == 0:
        return plan
    return dataclasses.replace(plan, created_at=started_at)


def prepare_files(plan: RunPlan, index: int) -> None:
    """Attempt ``index``'s directories (0700) and rendezvous files in the run directory."""
    layout = plan.layout_of(index)
    for path in layout.attempt_subdirs:
        os.makedirs(path, mode=0o700, exist_ok=True)
    FileRendezvous(plan.run_dir, index).prepare(plan)


def job_cancel(plan: RunPlan) -> Optional[AbortRecord]:
    """The job's own cancel record (``cancel.json``), if ``mxbatch cancel`` wrote one."""
    return AbortRecord.parse(read_json(plan.layout.cancel))


def file_attempt_end(plan: RunPlan, rdv: FileRendezvous) -> AttemptEnd:
    """How an attempt ended, from its records: its abort record, else success when
    every worker succeeded."""
    abort = rdv.read_abort()
    if abort is not None:
        return AttemptEnd.of_abort(abort)
    records = rdv.read_tasks(plan.task_keys())
    if workers_succeeded(plan, records):
        return AttemptEnd(EndReason.SUCCEEDED)
    lost = [r for r in records.values() if r.state is TaskState.LOST]
    if lost:
        return AttemptEnd(EndReason.NODE_FAILURE, detail="%s[%d] lost: %s"
                          % (lost[0].role.value, lost[0].rank, lost[0].note),
                          role=lost[0].role.value, rank=lost[0].rank,
                          hosts=tuple(r.host for r in lost if r.host))
    return AttemptEnd(EndReason.FAILURE, detail="the attempt ended without recording why")


#: runs one attempt to its end
RunAttempt = Callable[[AttemptContext], AttemptEnd]


class AttemptLoop:
    """The attempts of one job (see the module docstring).

    ``run_attempt(ctx)``: run attempt ``ctx.index`` to its end; ``prepare(index)``:
    make attempt ``index`` ready before it starts (default ``prepare_files``; attempt 0
    was prepared at submission); ``usable(excluded)``: why the job cannot run without
    these hosts (None: it can), checked before a relaunch that excludes some;
    ``on_tick``: called while the loop waits between attempts."""

    def __init__(self, plan: RunPlan, run_attempt: RunAttempt, *,
                 prepare: Optional[Callable[[int], None]] = None,
                 usable: Optional[Callable[[List[str]], Optional[str]]] = None,
                 on_tick: Optional[Callable[[], None]] = None) -> None:
        self.plan = plan
        self.run_attempt = run_attempt
        self.prepare = prepare or (lambda index: prepare_files(plan, index))
        self.usable = usable
        self.on_tick = on_tick
        self.path = plan.layout.attempts_record
        self.record = read_attempts(self.path) or AttemptsRecord(
            job_id=plan.job_id, max_restarts=plan.restarts.max)
        self.record.driver_pid = os.getpid()
        self.record.driver_started = procs.start_ticks(os.getpid())
        self.record.driver_host = socket.gethostname()
        self._signalled: Optional[str] = None
        #: the failed write that ended the job, if one did (``RunDirUnwritable``)
        self.storage_error: Optional[RunDirUnwritable] = None
        #: the name of the first signal that cancelled the job between attempts
        self.signal_received: Optional[str] = None

    # ------------------------------------------------------------------ records
    def _write(self) -> None:
        """``attempts.json``; ``RunDirUnwritable`` if it cannot be written, unless the
        loop is ending because of that already (then given up)."""
        try:
            write_attempts(self.path, self.record)
        except OSError as exc:
            if self.storage_error is None:
                raise RunDirUnwritable.of(exc) from None

    def set_native(self, native: Dict[str, object]) -> None:
        """The current attempt's native ids (a batch job's array jobs...), recorded at
        once: ``status`` and ``cancel`` find the attempt by them."""
        self.record.current.native = dict(native)
        self._write()

    # ------------------------------------------------------------------ the loop
    def run(self) -> AttemptsRecord:
        previous = self._install_signals()
        try:
            try:
                return self._run()
            except RunDirUnwritable as exc:
                return self._storage_lost(exc)
        finally:
            self._restore_signals(previous)

    def _storage_lost(self, error: RunDirUnwritable) -> AttemptsRecord:
        """The run directory cannot be written (``run_attempt`` raised it: its supervisor
        stopped the attempt; or this loop's own write failed): the job ends, failed,
        without another attempt (nothing of one could be recorded)."""
        self.storage_error = error
        why = "not restarted: the %s" % error.reason
        if self.record.attempts and not self.record.current.ended:
            self.record.current.end_with(AttemptEnd(EndReason.FAILURE, detail=error.reason))
            self.record.current.decision = why
        return self._finish(EndReason.FAILURE, why)

    def _run(self) -> AttemptsRecord:
        if not self.record.attempts:
            self.record.attempts.append(AttemptRecord(index=0, started_at=self.plan.created_at))
        while True:
            attempt = self.record.current
            if attempt.ended:  # a driver that starts again on an ended attempt: decide
                end = AttemptEnd(attempt.reason or EndReason.FAILURE, attempt.detail)
            else:
                self.record.next_at = None
                self._write()
                ctx = AttemptContext(attempt.index, attempt.restart_reason,
                                     tuple(attempt.excluded), attempt.started_at)
                end = self.run_attempt(ctx)
                attempt.end_with(end)
            decision = decide(self.plan.restarts, self.record.attempts)
            excluded = excluded_after(self.record, end)
            if decision.restart and excluded != self.record.excluded_hosts and self.usable:
                why = self.usable(excluded)
                if why is not None:
                    decision = dataclasses.replace(
                        decision, restart=False, why="not restarted: %s" % why)
            attempt.decision = decision.why
            if not decision.restart:
                return self._finish(end.reason, decision.why)
            self.record.excluded_hosts = excluded
            if not self._wait_backoff():
                return self._finish(EndReason.CANCELLED, self._cancelled_why())
            try:
                self.prepare(attempt.index + 1)
            except Exception as exc:  # nothing of the next attempt runs: say why, end
                return self._finish(end.reason, "not restarted: cannot prepare attempt %d: "
                                                "%s: %s" % (attempt.index + 1,
                                                            type(exc).__name__, exc))
            self.record.attempts.append(AttemptRecord(
                index=attempt.index + 1, started_at=time.time(),
                excluded=list(self.record.excluded_hosts), restart_reason=end.reason))
            self.record.next_at = None
            self._write()
            # ``cancel`` writes cancel.json, then reads which attempt is current: had it
            # read the one before, this sees its cancel.json; else it aborts this one
            if self._cancelled():
                self.record.current.end_with(AttemptEnd(EndReason.CANCELLED,
                                                        self._cancelled_why()))
                self.record.current.decision = "cancelled"
                return self._finish(EndReason.CANCELLED, self._cancelled_why())

    def _finish(self, outcome: EndReason, note: str) -> AttemptsRecord:
        self.record.final = True
        self.record.outcome = outcome
        self.record.note = note
        self.record.next_at = None
        self._write()
        return self.record

    # ------------------------------------------------------------------ waiting
    def _cancelled(self) -> bool:
        self._take_signal()
        return self.signal_received is not None or job_cancel(self.plan) is not None

    def _cancelled_why(self) -> str:
        if self.signal_received is not None:
            return "cancelled between attempts (%s)" % self.signal_received
        cancel = job_cancel(self.plan)
        return "cancelled between attempts: %s" % (cancel.reason if cancel else "cancel")

    def _wait_backoff(self) -> bool:
        """Wait ``restarts.backoff``; False if the job was cancelled meanwhile."""
        self.record.next_at = time.time() + self.plan.restarts.backoff_s
        self._write()
        while True:
            if self._cancelled():
                return False
            if time.time() >= self.record.next_at:
                return True
            if self.on_tick is not None:
                self.on_tick()
            time.sleep(WAIT_STEP_S)

    # ------------------------------------------------------------------ signals
    def _install_signals(self) -> Dict[int, object]:
        try:
            return {signum: signal.signal(signum, self._on_signal) for signum in _SIGNALS}
        except ValueError:  # not the main thread: a cancel record only
            return {}

    def _restore_signals(self, previous: Dict[int, object]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signalled = signal.Signals(signum).name

    def pending_signal(self) -> Optional[int]:
        """The signal this loop's handler took while no attempt's supervisor handled
        signals (the moment between the loop's handlers and the attempt's own, which a
        Ctrl-C at once can hit), taken over: the attempt's supervisor, once its own
        handlers are in place, acts on it as if it had received it. None if none."""
        if self._signalled is None or self.signal_received is not None:
            return None
        name, self._signalled = self._signalled, None
        return signal.Signals[name].value

    def _take_signal(self) -> None:
        if self._signalled is not None and self.signal_received is None:
            self.signal_received = self._signalled
