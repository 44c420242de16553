"""Jobs supervised from the submit host by a controller (the ssh and MPI backends).

A ``Controller`` owns the job's connection to its hosts (the ssh sessions of the ssh
backend, the ``mpirun`` of the MPI backend) and the job's state on this machine (the
run directory, through ``FileRendezvous``):

- ``prepare``: start everything up to the point where the roles would start, and
  raise ``MxbatchError`` naming the host if that fails (unreachable, unknown host key,
  no python3...): ``abandon`` then leaves nothing started;
- ``run``: let the tasks run and relay what they need until every host has ended.
  A signal (Ctrl-C, SIGTERM) cancels the job; once the job is aborted, hosts get the
  grace period plus ``STOP_MARGIN_S`` to end before the controller cuts them off
  (``terminate``); a host that ends without its tasks' final records is *lost*: the
  controller writes the abort naming it and marks its tasks LOST. A run directory that
  cannot be written any more (full, read-only, removed: ``files.RunDirUnwritable``)
  stops the job: the controller says ``run directory unwritable: <why>`` on stderr,
  keeps what it can, cuts the hosts off, and the job ends failed (exit 1).

A controller runs one attempt of the job (``attempt``: its records and logs, the hosts
it leaves out). ``run_attempts`` drives the job's attempts (``jobloop.AttemptLoop``): a
relaunch is a new controller, new sessions or a new mpirun, without the hosts a node
failure was blamed on (the ssh and MPI backends place the tasks on the others). SIGTERM to the
controller is a preemption when ``restarts.on`` lists it (the workers checkpoint, the
job relaunches); SIGINT and SIGHUP cancel.

Attached (``submit --wait``, ``mxbatch launch``), the CLI process is the controller.
Detached (``submit``), ``python -m mxbatch.backends.hosts.controller BACKEND RUN_DIR`` is,
started in a session of its own; it reports on stdout whether ``prepare`` of the first
attempt succeeded (one JSON line), so ``submit`` fails with the same message and exit
code as an attached launch would.

``ControlledBackend`` is the ``Backend`` part every such backend shares: the handle
(the controller's pid), ``status`` (records, and whether the controller lives),
``await_stopped`` and ``remove``.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from ...errors import BackendUnavailable, ExitCode, MxbatchError
from ...quoting import shell_words
from ...runtime import notes, procs, wire
from ...runtime.attempts import AttemptEnd, AttemptsRecord, read_attempts
from ...runtime.files import RunDirUnwritable
from ...runtime.jobloop import AttemptContext, AttemptLoop, attempt_plan, file_attempt_end
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan, TaskInfo
from ...runtime.rendezvous import FileRendezvous, atomic_write_json, read_json
from ...runtime.states import AbortKind, AbortRecord, EndReason, TaskRecord, TaskState
from ...spec.plan import JobPlan
from ..base import Backend, Handle, RenderedItem, Request, Rollback, stand_in_plan
from ..records import JobRecord
from ..supervised import status_supervised_here

if TYPE_CHECKING:  # pragma: no cover: a job's roles start before anyone asks its status
    from ..status import JobStatus

#: after the abort, hosts get the grace period plus this long to end by themselves
STOP_MARGIN_S = 10.0
#: the controller's own name in the records it writes
BY = "mxbatch controller"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def controller_file(layout: RunLayout, backend: str) -> str:
    """Where a backend keeps its controller's configuration in the run directory."""
    return layout.backend_file(backend, "controller.json")


def first_attempt(plan: RunPlan) -> AttemptContext:
    return AttemptContext(0, None, (), plan.created_at)


class Controller(abc.ABC):
    """Supervises one attempt of a job from the submit host (see the module docstring)."""

    def __init__(self, plan: RunPlan, attempt: Optional[AttemptContext] = None) -> None:
        self.attempt = attempt if attempt is not None else first_attempt(plan)
        self.plan = attempt_plan(plan, self.attempt.started_at, self.attempt.index)
        self.layout = plan.layout_of(self.attempt.index)
        self.rdv = FileRendezvous(plan.run_dir, self.attempt.index)
        self._signalled: Optional[int] = None
        #: the name of the first signal that cancelled the job, if one did
        self.signal_received: Optional[str] = None
        self._abort_seen: Optional[float] = None
        self._terminated = False
        self._next_abort_read = 0.0
        self._previous_handlers: Optional[Dict[int, Any]] = None
        #: the signal was a preemption (the job goes on), not a cancel
        self.preempted = False
        #: the failed write that made this controller stop the job, if one did
        self.storage_error: Optional[RunDirUnwritable] = None

    # ------------------------------------------------------------------ subclasses
    @abc.abstractmethod
    def prepare(self) -> None:
        """Reach every host up to the start of the roles; MxbatchError naming the host
        if one cannot run its tasks (then ``abandon``)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Let the roles start (every host is ready)."""

    @abc.abstractmethod
    def step(self, timeout: float) -> bool:
        """Wait at most ``timeout`` for something to do and do it; False once every
        host has ended."""

    @abc.abstractmethod
    def terminate(self) -> None:
        """The hosts did not end in time after the abort: cut them off (kill)."""

    def abandon(self) -> None:  # noqa: B027 - optional hook
        """``prepare`` failed, or the submission is rolled back: end what it started."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """The job has ended: release what is left (files with secrets...)."""

    def prepare_failed(self, error: MxbatchError) -> AttemptEnd:
        """How a relaunch ends whose ``prepare`` failed (hosts unreachable...): a
        failure, unless the controller knows which hosts failed (then a node failure)."""
        return AttemptEnd(EndReason.FAILURE, detail=error.message.replace("\n", " "))

    def attempt_end(self, end: AttemptEnd) -> AttemptEnd:
        """``end`` (from the attempt's records) in the controller's terms: the hosts it
        blames named as the hosts' configuration names them. Default: as it is."""
        return end

    # ------------------------------------------------------------------ signals
    def take_signals(self) -> None:
        """From now on SIGINT, SIGTERM and SIGHUP cancel the job (``run`` acts on them)
        instead of interrupting this process. Called before ``prepare`` when the
        controller runs in the CLI, so a Ctrl-C while the hosts start is never lost
        between the submission and the loop. Idempotent; ``release_signals`` undoes it."""
        if self._previous_handlers is None:
            self._previous_handlers = {signum: signal.signal(signum, self._on_signal)
                                       for signum in _SIGNALS}

    def release_signals(self) -> None:
        """Give the signals back to the handlers from before ``take_signals``."""
        if self._previous_handlers is not None:
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
            self._previous_handlers = None

    @property
    def interrupted(self) -> bool:
        """A signal has asked to cancel the job (``prepare`` stops waiting then)."""
        return self._signalled is not None or self.signal_received is not None

    # ------------------------------------------------------------------ the loop
    def run(self, on_tick: Optional[Callable[[], None]] = None,
            pending_signal: Optional[Callable[[], Optional[int]]] = None) -> Optional[str]:
        """Start the roles and supervise until every host has ended; the name of the
        signal that cancelled the job, if one did. ``pending_signal()``: one that came
        before this controller's handlers were in place (the attempt loop's), acted on
        as if received."""
        self.take_signals()
        if pending_signal is not None:
            self._signalled = self._signalled or pending_signal()
        try:
            try:
                self._handle_signal()  # one that came while the hosts were prepared
                self.start()
            except RunDirUnwritable as exc:
                self._storage_lost(exc)
            while True:
                try:
                    if not self.step(0.05):
                        break
                    self._handle_signal()
                    self._watch_abort()
                except RunDirUnwritable as exc:
                    self._storage_lost(exc)
                if on_tick is not None:
                    on_tick()
            if on_tick is not None:
                on_tick()
        finally:
            self.release_signals()
            self.close()
        return self.signal_received

    def degrade(self) -> None:
        """Writes into the run directory that fail are given up from now on (the
        rendezvous'; a subclass that keeps logs of its own adds those)."""
        self.rdv.degrade()

    def _storage_lost(self, error: RunDirUnwritable) -> None:
        """A write into the run directory failed: say so, record what can still be
        recorded, and cut the hosts off at once (their agents stop their roles when
        the connection ends; the abort record may not reach them)."""
        if self.storage_error is not None:
            return
        self.storage_error = error
        self.degrade()
        notes.to_stderr("mxbatch: %s: %s: stopping the job\n" % (BY, error.reason))
        self.rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=error.reason, by=BY,
                                         end=EndReason.FAILURE))
        if not self._terminated:
            self._terminated = True
            self.terminate()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signalled = signum

    def _handle_signal(self) -> None:
        if self._signalled is None:
            return
        name = signal.Signals(self._signalled).name
        self._signalled = None
        if self.signal_received is None:
            self.signal_received = name
            if name == "SIGTERM" and self.plan.restarts.restarts_on(EndReason.PREEMPTED):
                self.preempted = True
                self.rdv.write_abort(AbortRecord(
                    kind=AbortKind.FAILED, by=BY, end=EndReason.PREEMPTED,
                    reason="preempted: the job's controller received SIGTERM"))
            else:
                reason = "interrupted (%s)" % ("Ctrl-C" if name == "SIGINT" else name)
                self.rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, reason=reason,
                                                 by=BY, end=EndReason.CANCELLED))
            sys.stderr.write("mxbatch: received %s: stopping the job\n" % name)
        elif not self._terminated:  # a second Ctrl-C: do not wait for the grace period
            self._terminated = True
            self.terminate()

    def _watch_abort(self) -> None:
        now = time.monotonic()
        if self._abort_seen is None:
            if now >= self._next_abort_read:
                self._next_abort_read = now + 0.5
                if self.rdv.read_abort() is not None:
                    self._abort_seen = now
            return
        patience = self.plan.grace_s + STOP_MARGIN_S
        abort = self.rdv.read_abort() if self.plan.restarts.enabled else None
        if abort is not None and abort.end_reason.checkpoints:
            patience += self.plan.restarts.checkpoint_grace_s  # the workers checkpoint first
        if not self._terminated and now - self._abort_seen > patience:
            self._terminated = True
            self.terminate()

    # ------------------------------------------------------------------ records
    def lose_tasks(self, tasks: Iterable[TaskInfo], reason: str,
                   end: EndReason = EndReason.FAILURE, hosts: Tuple[str, ...] = ()) -> None:
        """The supervisor of ``tasks`` is gone without their final records: abort the job
        with ``reason`` (unless it already ended otherwise; ``end``: why, ``hosts``: the
        hosts a node failure blames) and mark them LOST."""
        tasks = list(tasks)
        records = self.rdv.read_tasks((t.role, t.rank) for t in tasks)
        unfinished = [records.get((t.role, t.rank)) or TaskRecord(role=t.role, rank=t.rank,
                                                                  state=TaskState.PENDING)
                      for t in tasks]
        unfinished = [r for r in unfinished if not r.state.final]
        if not unfinished:
            return
        if self.rdv.read_abort() is None:
            first = unfinished[0]
            self.rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=reason, by=BY,
                                             role=first.role, rank=first.rank,
                                             log=first.log or None, end=end,
                                             hosts=list(hosts)))
        now = time.time()
        for record in unfinished:
            record.state = TaskState.LOST if record.state.active else TaskState.CANCELLED
            record.note = reason
            record.ended_at = now
            self.rdv.write_task(record)


# ---------------------------------------------------------------------- the backend part


@dataclasses.dataclass(frozen=True)
class ControllerHandle(Handle):
    """The job's controller: this CLI (attached) or a detached process, on ``host``;
    when it started (``procs.Process``: a pid given to another process later is not
    it)."""

    controller_pid: int
    host: str = ""
    controller_started: Optional[int] = None

    @property
    def controller(self) -> procs.Process:
        return procs.Process(self.controller_pid, self.controller_started)


@dataclasses.dataclass(frozen=True)
class ControlledRequest(Request):
    """``attached``: this process will be the controller (``supervise_here``);
    ``controller_backend``: the backend the detached controller loads, when it is not the
    plan's (an in-allocation variant)."""

    attached: bool = False
    controller_backend: str = ""

    def controller_item(self) -> RenderedItem:
        if self.attached:
            return RenderedItem("controller", "this mxbatch process supervises the job")
        return RenderedItem("controller (detached)",
                            shell_words(detached_argv(self.controller_backend or
                                                      self.plan.backend, self.plan.run.run_dir)))


def detached_argv(backend: str, run_dir: str) -> List[str]:
    return [sys.executable, "-m", "mxbatch.backends.hosts.controller", backend, run_dir]


RequestT = TypeVar("RequestT", bound=ControlledRequest)
OptionsT = TypeVar("OptionsT")


class ControlledBackend(Backend[OptionsT, RequestT, ControllerHandle]):
    """What the ssh and MPI backends share (see the module docstring)."""

    handle_class = ControllerHandle
    poll_interval_s: ClassVar[float] = 0.25
    #: the hosts' agents run roles in docker, podman or apptainer like any agent
    role_containers: ClassVar[bool] = True

    def __init__(self, options: Optional[OptionsT] = None) -> None:
        super().__init__(options)
        self._attached: Optional[Controller] = None

    # ------------------------------------------------------------------ subclasses
    @abc.abstractmethod
    def controller_config(self, request: RequestT) -> Dict[str, Any]:
        """The controller's configuration as plain data (kept in the run directory)."""

    @classmethod
    @abc.abstractmethod
    def make_controller(cls, plan: RunPlan, config: Dict[str, Any],
                        attempt: Optional[AttemptContext] = None) -> Controller:
        """The controller of one attempt of a job (attempt 0 by default), in the attached
        CLI or the detached process."""

    @classmethod
    def usable(cls, config: Dict[str, Any], plan: RunPlan,
               excluded: List[str]) -> Optional[str]:
        """Why the job cannot be relaunched without the hosts ``excluded``; None: it can.
        Default: it cannot leave hosts out at all."""
        return (f"the {cls.name} backend cannot relaunch without "
                f"{', '.join(excluded)}" if excluded else None)

    def sweep(self, record: JobRecord, run: RunPlan) -> None:
        """Last resort when the controller did not end cleanly: remove whatever of the
        job may be left on the hosts."""

    # ------------------------------------------------------------------ submitting
    def attach(self, request: RequestT) -> RequestT:
        return dataclasses.replace(request, attached=True)

    def prepare_run_dir(self, request: RequestT, layout: RunLayout) -> None:
        path = controller_file(layout, self.name)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        atomic_write_json(path, self.controller_config(request))

    def launch(self, request: RequestT, layout: RunLayout,
               rollback: Rollback) -> ControllerHandle:
        if request.attached:
            controller = self.make_controller(request.plan.run, self.controller_config(request))
            controller.take_signals()
            rollback.push("the job's signal handlers", controller.release_signals)
            rollback.push("the job's connections", controller.abandon)
            controller.prepare()
            self._attached = controller
            me = procs.Process.of(os.getpid())
            return ControllerHandle(controller_pid=me.pid, host=socket.gethostname(),
                                    controller_started=me.started)
        process = start_detached(self.name, request.plan)
        rollback.push(f"the controller (pid {process.pid})", lambda: _stop_pid(process))
        return ControllerHandle(controller_pid=process.pid, host=socket.gethostname(),
                                controller_started=process.started)

    def supervise_here(self, record: JobRecord,
                       on_tick: Callable[[], None]) -> Optional[str]:
        controller = self._attached
        if controller is None:
            raise MxbatchError(f"job {record.job_id} is not attached to this process")
        self._attached = None
        return run_attempts(type(self), controller, self.controller_config_of(record),
                            on_tick)[1]

    def controller_config_of(self, record: JobRecord) -> Dict[str, Any]:
        config = read_json(controller_file(record.layout, self.name))
        if not isinstance(config, dict):
            raise MxbatchError(f"no controller configuration in {record.run_dir}")
        return config

    # ------------------------------------------------------------------ watching
    def status(self, record: JobRecord) -> JobStatus:
        return status_supervised_here(self.name, record, self.handle_of(record).controller)

    # ------------------------------------------------------------------ cancelling
    def await_stopped(self, record: JobRecord, handle: ControllerHandle,
                      run: RunPlan) -> None:
        """After the abort record: the controller stops the hosts and exits (one that is
        stopped, SIGSTOP, is continued first: it reads the abort then)."""
        controller = handle.controller
        if controller != procs.Process.of(os.getpid()):
            procs.kill_all([controller], signal.SIGCONT)
            procs.wait_gone([controller], run.grace_s + STOP_MARGIN_S + 5
                            + (run.restarts.checkpoint_grace_s if run.restarts.enabled else 0))

    def remove(self, record: JobRecord, handle: ControllerHandle, run: RunPlan) -> None:
        """Stop a controller that is still there (SIGTERM: it cancels the job and cuts
        the hosts off; SIGKILL after the grace period), and sweep the hosts if some task
        never recorded its end (``Backend.cancel`` then kills this machine's leftovers)."""
        self._stop_controller(handle, run.grace_s)
        attempts = read_attempts(record.layout.attempts_record)
        index = attempts.current.index if attempts else 0
        records = FileRendezvous(record.run_dir, index).read_tasks(run.task_keys())
        if any(not r.state.final for r in records.values()) or len(records) < len(run.tasks):
            self.sweep(record, run)

    def remove_without_plan(self, record: JobRecord, handle: ControllerHandle) -> None:
        """The plan cannot be read: stop the controller and sweep every host."""
        stand_in = stand_in_plan(record)
        self._stop_controller(handle, stand_in.grace_s)
        self.sweep(record, stand_in)

    @staticmethod
    def _stop_controller(handle: ControllerHandle, grace_s: float) -> None:
        controller = handle.controller
        if controller != procs.Process.of(os.getpid()) and controller.alive():
            procs.kill_all([controller], signal.SIGCONT)  # a stopped one sees SIGTERM
            _stop_pid(controller, grace_s + STOP_MARGIN_S)


def _stop_pid(process: procs.Process, grace_s: float = 5.0) -> None:
    procs.kill_all([process], signal.SIGTERM)
    if procs.wait_gone([process], grace_s):
        procs.kill_all([process], signal.SIGKILL)
        procs.wait_gone([process], 5)


# ---------------------------------------------------------------------- detached


def start_detached(backend: str, plan: JobPlan) -> procs.Process:
    """Start the detached controller of ``plan``'s job and wait until it has prepared
    the job (or failed to: the same error, re-raised here). Its process."""
    layout = plan.run.layout
    with open(layout.manager_log, "ab") as log:
        proc = subprocess.Popen(
            detached_argv(backend, plan.run.run_dir),
            env={**os.environ, wire.JOB_ID: plan.job_id}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=log, start_new_session=True, close_fds=True)
    process = procs.Process.of(proc.pid)
    assert proc.stdout is not None
    deadline = time.monotonic() + max(60.0, plan.run.startup_timeout_s)
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    proc.stdout.close()
    try:
        answer = json.loads(line.decode())
    except ValueError:
        _stop_pid(process)
        raise MxbatchError("the job's controller did not start: see "
                           f"{layout.manager_log}") from None
    if not answer.get("ok"):
        proc.wait(timeout=30)
        raise MxbatchError(str(answer.get("message")),
                           exit_code=int(answer.get("exit_code") or ExitCode.JOB_FAILED))
    return process


def load_controller(backend_cls: Any, run_dir: str) -> Tuple[Controller, Dict[str, Any]]:
    """The controller of a job's first attempt, and its configuration."""
    layout = RunLayout(run_dir)
    plan = RunPlan.from_json(open(layout.plan).read())
    config = read_json(controller_file(layout, backend_cls.name))
    if not isinstance(config, dict):
        raise MxbatchError(f"no controller configuration in {run_dir}")
    return backend_cls.make_controller(plan, config), config


def run_attempts(backend_cls: Any, first: Controller, config: Dict[str, Any],
                 on_tick: Optional[Callable[[], None]] = None
                 ) -> Tuple[AttemptsRecord, Optional[str]]:
    """Run the job attempt after attempt, the first with ``first`` (prepared already),
    each later one with a new controller (without the excluded hosts); the attempts,
    and the signal that cancelled the job, if one did."""
    plan = RunPlan.from_json(open(first.plan.layout.plan).read())
    cancelled_by: List[str] = []

    def run_attempt(ctx: AttemptContext) -> AttemptEnd:
        controller = first if ctx.index == 0 else backend_cls.make_controller(plan, config,
                                                                             ctx)
        if ctx.index > 0:
            controller.take_signals()
            try:
                controller.prepare()
            except MxbatchError as exc:
                controller.abandon()
                controller.release_signals()
                return controller.prepare_failed(exc)
        received = controller.run(on_tick, loop.pending_signal)
        if received and not controller.preempted and not cancelled_by:
            cancelled_by.append(received)
        if controller.storage_error is not None:
            raise controller.storage_error  # the loop ends the job: nothing more is kept
        return controller.attempt_end(file_attempt_end(plan, controller.rdv))

    loop = AttemptLoop(plan, run_attempt, on_tick=on_tick,
                       usable=lambda excluded: backend_cls.usable(config, plan, excluded))
    # the handlers nest: the loop's (between attempts) under each controller's; the
    # first took its own before it prepared (a signal then is kept in it, and acted on)
    first.release_signals()
    record = loop.run()
    if loop.storage_error is not None:
        raise MxbatchError(f"job {plan.job_id} FAILED: {loop.storage_error.reason} "
                           f"({plan.run_dir}); its hosts were cut off",
                           exit_code=ExitCode.JOB_FAILED)
    signal_name = loop.signal_received or (cancelled_by[0] if cancelled_by else None)
    return record, signal_name


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m mxbatch.backends.hosts.controller BACKEND RUN_DIR``: the detached
    controller. Says on stdout (one JSON line) whether the job could be prepared."""
    from ..registry import backend_class

    backend_name, run_dir = (argv if argv is not None else sys.argv[1:])[:2]
    backend_cls = backend_class(backend_name)
    controller: Optional[Controller] = None
    try:
        controller, config = load_controller(backend_cls, run_dir)
        controller.prepare()
    except MxbatchError as exc:
        if controller is not None:
            controller.abandon()
        _answer({"ok": False, "message": exc.message, "exit_code": exc.exit_code})
        return exc.exit_code
    except BaseException as exc:
        if controller is not None:
            controller.abandon()
        _answer({"ok": False, "message": f"the controller failed: {type(exc).__name__}: {exc}",
                  "exit_code": ExitCode.BACKEND_UNAVAILABLE})
        raise
    _answer({"ok": True})
    try:
        record, _ = run_attempts(backend_cls, controller, config)
    except MxbatchError as exc:  # the run directory broke: said on stderr (our log)
        notes.to_stderr(f"mxbatch: {exc.message}\n")
        return 1
    return 0 if record.outcome is EndReason.SUCCEEDED else 1


def _answer(data: Dict[str, Any]) -> None:
    """The one line the submitting process waits for; stdout then goes to stderr (the log)."""
    os.write(1, (json.dumps(data) + "\n").encode())
    os.dup2(2, 1)


def unavailable(problems: List[Tuple[str, str]], what: str,
                hint: Optional[str] = None, stopped: Sequence[str] = ()) -> BackendUnavailable:
    """One error naming every host that failed: ``problems`` = (host, message); then
    what became of the others (``stopped``: the hosts whose roles had started, and were
    stopped), and ``hint``, what to do, when there is one."""
    lines = [f"{host}: {message}" for host, message in problems]
    fate = (f"the roles that had started on {', '.join(stopped)} were stopped: nothing is "
            "left running" if stopped else "nothing was started")
    return BackendUnavailable(f"{what}:\n  " + "\n  ".join(lines) + f"\n{fate}"
                              + (f"\n{hint}" if hint else ""))


if __name__ == "__main__":
    sys.exit(main())
