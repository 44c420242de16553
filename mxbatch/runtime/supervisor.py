"""Run one task of the job: start its role process, watch the job, tear down.

Contract (docs/design.md, "The run directory and protocol"):
- the role runs in its own process group, dies with the supervisor (PDEATHSIG),
  writes stdout+stderr to ``logs/<role>-<rank>.log``, and writes no core file
  unless the plan allows it (``core_dumps``);
- the scheduler task picks a free port, starts the role and publishes
  its ``SchedulerRecord`` at once, so every role imports MXNet in parallel (zmq retries
  the connection until the scheduler binds); once the port accepts connections it
  republishes with ``listening: true``; if the role dies first (port taken), it
  republishes another port with ``attempt + 1`` and members still waiting restart
  their role with it; members wait for the record until the startup deadline;
- every task keeps ``tasks/<role>-<rank>.json`` current with a heartbeat;
- a role that exits non-zero or by a signal, a stale peer, a passed startup
  deadline or walltime, or a signal to the supervisor writes ``abort.json``;
- on abort every supervisor SIGTERMs its role's group, SIGKILLs it after the
  grace period and records the outcome; a task started after an abort exits;
- servers and the scheduler still running ``grace`` seconds after every worker
  succeeded are stopped and count as succeeded.
The supervisor's exit status is 0 only if its own task succeeded.
"""

import dataclasses
import functools
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, Optional

from . import net, pyhook
from .environ import role_environment
from .peers import HeartbeatWatch, lost_abort, missing_at_deadline, startup_abort, workers_succeeded
from .planfile import RunPlan, TaskInfo
from .rendezvous import Backoff, Rendezvous, poll_until
from .roles import Role
from .states import AbortKind, AbortRecord, SchedulerRecord, TaskRecord, TaskState

POLL_S = 0.05
HEARTBEAT_S = 1.0
PEER_CHECK_S = 1.0
SCHEDULER_ATTEMPTS = 3


class _Stop(Exception):
    """Raised inside the loops when the task must stop; carries the abort that caused it."""

    def __init__(self, abort: AbortRecord) -> None:
        super().__init__(abort.reason)
        self.abort = abort


def signal_name(returncode: int) -> Optional[str]:
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return "signal %d" % -returncode


def _prepare_role(core_dumps: bool) -> None:  # runs in the child between fork and exec
    """Die with the supervisor (PR_SET_PDEATHSIG); no core file unless allowed."""
    if not core_dumps:
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (OSError, ValueError):
            pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # best effort: not Linux, or no libc to call
        pass


class Supervisor:
    def __init__(self, plan: RunPlan, task: TaskInfo, rendezvous: Rendezvous,
                 environ: Optional[Dict[str, str]] = None) -> None:
        self.plan = plan
        self.task = task
        self.rdv = rendezvous
        self.environ = dict(os.environ if environ is None else environ)
        self.log_path = plan.layout.task_log(task.role.value, task.rank)
        self.record = TaskRecord(role=task.role, rank=task.rank, state=TaskState.STARTING,
                                 host=socket.gethostname(), supervisor_pid=os.getpid(),
                                 started_at=time.time(), log=self.log_path)
        self.proc: Optional[subprocess.Popen] = None
        self.signalled: Optional[int] = None
        self.heartbeats = HeartbeatWatch(plan.heartbeat_timeout_s)
        self.workers_done_at: Optional[float] = None
        self.scheduler_info: Optional[SchedulerRecord] = None
        self._next_scheduler_check = 0.0
        self._next_beat = 0.0
        self._next_peer_check = 0.0
        self._log = None

    # ------------------------------------------------------------------ entry point
    def run(self) -> int:
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        abort = self.rdv.read_abort()
        if abort is not None:
            self.say("job already aborted (%s): not starting" % abort.reason)
            return self._finish(TaskState.CANCELLED, "not started: job aborted")
        self._save()
        try:
            if self.task.role is Role.SCHEDULER:
                self._start_scheduler()
            else:
                self._start_member()
            return self._monitor()
        except _Stop as stop:
            return self._stop_for(stop.abort)
        finally:
            self._kill_group(signal.SIGKILL)

    # ------------------------------------------------------------------ helpers
    def say(self, message: str) -> None:
        line = "mxbatch supervisor %s: %s\n" % (self.task.label, message)
        if self._log is not None:
            self._log.write(line.encode())
        sys.stderr.write(line)
        sys.stderr.flush()

    def _save(self) -> None:
        self.rdv.write_task(self.record)

    def _on_signal(self, signum: int, _frame) -> None:
        self.signalled = signum

    def _fail(self, reason: str, **details) -> _Stop:
        """Record this task's own failure as the job's abort (if first) and stop."""
        abort = AbortRecord(kind=AbortKind.FAILED, reason=reason, role=self.task.role,
                            rank=self.task.rank, log=self.log_path, by=self.task.label,
                            **details)
        self.rdv.write_abort(abort)
        self.record.exit_code = details.get("exit_code", self.record.exit_code)
        self.record.signal = details.get("signal", self.record.signal)
        self.record.note = reason
        self.record.state = TaskState.FAILED
        return _Stop(abort)

    def _tick(self) -> None:
        """Heartbeat, signals, abort and peer checks; raises _Stop when the task must end."""
        now = time.time()
        if now >= self._next_beat:
            self.record.heartbeat += 1
            self._save()
            self._next_beat = now + HEARTBEAT_S
        if self.signalled is not None:
            name = signal.Signals(self.signalled).name
            self.signalled = None
            existing = self.rdv.read_abort()
            if existing is not None:
                raise _Stop(existing)
            raise self._fail("%s: supervisor received %s" % (self.task.label, name))
        abort = self.rdv.read_abort()
        if abort is not None:
            raise _Stop(abort)
        if now >= self._next_peer_check:
            self._next_peer_check = now + PEER_CHECK_S
            self._check_peers(now)
        walltime = self.task.walltime_s
        if walltime and self.proc is not None and now - (self.record.started_at or now) > walltime:
            raise self._fail("%s exceeded its walltime of %gs" % (self.task.label, walltime))

    def _check_peers(self, now: float) -> None:
        records = self.rdv.read_tasks()
        missing = missing_at_deadline(self.plan, records, now)
        if missing:
            abort = startup_abort(self.plan, missing, by=self.task.label)
            self.rdv.write_abort(abort)
            raise _Stop(self.rdv.read_abort() or abort)
        for record in self.heartbeats.stale(records):
            if (record.role, record.rank) == (self.task.role, self.task.rank):
                continue
            abort = lost_abort(record, self.plan.heartbeat_timeout_s, by=self.task.label)
            self.rdv.write_abort(abort)
            raise _Stop(self.rdv.read_abort() or abort)
        if self.workers_done_at is None and workers_succeeded(self.plan, records):
            self.workers_done_at = now

    # ------------------------------------------------------------------ starting
    def _popen(self, rendezvous_env: Dict[str, str]) -> None:
        hook_dir = pyhook.install(self.plan.layout.pyhook_dir)
        env = role_environment(self.environ, self.plan.inherit_env, self.task.env,
                               rendezvous_env, hook_dir, self.plan.submit_path)
        self.say("starting %s" % " ".join(self.task.argv))
        try:
            self.proc = subprocess.Popen(
                self.task.argv, cwd=self.plan.workdir, env=env, stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=functools.partial(_prepare_role, self.plan.core_dumps))
        except OSError as exc:
            raise self._fail("%s: cannot start %r: %s" % (
                self.task.label, self.task.argv[0], exc.strerror or exc)) from None
        self.record.pid = self.proc.pid
        self.record.state = TaskState.RUNNING
        self._save()

    def _start_scheduler(self) -> None:
        """Start the scheduler on a free port and publish its address at once (members
        start in parallel: zmq retries the connection); if it dies before listening
        (port taken meanwhile), republish another port with attempt+1."""
        try:
            ip = net.scheduler_ip(self.plan.interface, self.plan.loopback_only)
        except net.NetworkError as exc:
            raise self._fail("scheduler[0]: %s" % exc) from None
        ports = net.candidate_ports(self.plan.port_low, self.plan.port_high)
        for attempt in range(1, SCHEDULER_ATTEMPTS + 1):
            port = next(ports, None)
            if port is None:
                raise self._fail("scheduler[0]: no free port in %d-%d"
                                 % (self.plan.port_low, self.plan.port_high))
            self._popen({"DMLC_PS_ROOT_URI": ip, "DMLC_PS_ROOT_PORT": str(port),
                         "DMLC_NODE_HOST": ip})
            info = SchedulerRecord(job_id=self.plan.job_id, ip=ip, port=port,
                                   host=socket.gethostname(), pid=self.proc.pid,
                                   attempt=attempt)
            self.rdv.publish_scheduler(info)
            if self._wait_listening(ip, port):
                self.rdv.publish_scheduler(dataclasses.replace(info, listening=True))
                self.say("listening on %s:%d (attempt %d)" % (ip, port, attempt))
                return
            code = self.proc.returncode
            self.say("scheduler exited with %s before listening on port %d" % (code, port))
            if attempt == SCHEDULER_ATTEMPTS:
                raise self._fail("scheduler[0] exited with code %s before listening "
                                 "(%d attempts)" % (code, attempt), exit_code=code,
                                 signal=signal_name(code) if code is not None else None)

    def _wait_listening(self, ip: str, port: int) -> bool:
        while True:
            if net.accepts_connections(ip, port, timeout=0.5):
                return True
            if self.proc.poll() is not None:
                return False
            self._tick()
            if time.time() > self.plan.startup_deadline:
                raise self._fail("scheduler[0] did not listen on %s:%d before the startup "
                                 "deadline (%gs)" % (ip, port, self.plan.startup_timeout_s))
            time.sleep(0.1)

    def _start_member(self) -> None:
        def published() -> Optional[SchedulerRecord]:
            info = self.rdv.read_scheduler()
            return info if info is not None and info.job_id == self.plan.job_id else None

        info = poll_until(published, self.plan.startup_deadline, on_idle=self._tick,
                          backoff=Backoff(cap=HEARTBEAT_S))
        if info is None:
            raise self._fail("%s: the scheduler did not publish its address before the "
                             "startup deadline (%gs)" % (self.task.label,
                                                         self.plan.startup_timeout_s))
        self._start_member_role(info)

    def _start_member_role(self, info: SchedulerRecord) -> None:
        try:
            my_ip = net.node_ip(self.plan.interface, info.ip)
        except (net.NetworkError, OSError) as exc:
            raise self._fail("%s: %s" % (self.task.label, exc)) from None
        self.scheduler_info = info
        self._popen({"DMLC_PS_ROOT_URI": info.ip, "DMLC_PS_ROOT_PORT": str(info.port),
                     "DMLC_NODE_HOST": my_ip})

    def _follow_scheduler(self) -> None:
        """Until the scheduler listens, restart this role if it moved to another port."""
        info = self.scheduler_info
        if info is None or info.listening:
            return
        now = time.time()
        if now < self._next_scheduler_check:
            return
        self._next_scheduler_check = now + 0.5
        latest = self.rdv.read_scheduler()
        if latest is None or latest.job_id != self.plan.job_id:
            return
        if latest.attempt != info.attempt:
            self.say("the scheduler moved to %s (attempt %d): restarting the role"
                     % (latest.address, latest.attempt))
            self._kill_group(signal.SIGKILL)
            self.proc.wait()
            self._start_member_role(latest)
        else:
            self.scheduler_info = latest

    # ------------------------------------------------------------------ running
    def _monitor(self) -> int:
        while True:
            self._follow_scheduler()
            code = self.proc.poll()
            if code is not None:
                return self._on_exit(code)
            self._tick()
            lingering = (self.task.role is not Role.WORKER and self.workers_done_at is not None
                         and time.time() - self.workers_done_at > self.plan.grace_s)
            if lingering:
                self.say("still running %gs after every worker succeeded: stopping it"
                         % self.plan.grace_s)
                self._terminate()
                return self._finish(TaskState.SUCCEEDED, "stopped after every worker succeeded")
            time.sleep(POLL_S)

    def _on_exit(self, code: int) -> int:
        self.record.exit_code = code
        self.record.signal = signal_name(code)
        if code == 0:
            self.say("exited with code 0")
            return self._finish(TaskState.SUCCEEDED)
        how = ("was killed by %s" % self.record.signal if code < 0
               else "exited with code %d" % code)
        self.say(how)
        self._fail("%s %s" % (self.task.label, how), exit_code=code, signal=self.record.signal)
        return self._finish(TaskState.FAILED)

    def _stop_for(self, abort: AbortRecord) -> int:
        """End this task because of ``abort`` (ours or another task's)."""
        if self.record.state is TaskState.FAILED:
            self._terminate()
            return self._finish(TaskState.FAILED, self.record.note)
        self.say("stopping: %s" % abort.reason)
        self._terminate()
        return self._finish(TaskState.CANCELLED, "stopped: " + abort.reason)

    def _terminate(self) -> None:
        """SIGTERM the role's process group, SIGKILL it after the grace period."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self._kill_group(signal.SIGTERM)
        deadline = time.time() + self.plan.grace_s
        while time.time() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.say("still running %gs after SIGTERM: SIGKILL" % self.plan.grace_s)
            self._kill_group(signal.SIGKILL)
            self.proc.wait()

    def _kill_group(self, signum: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _finish(self, state: TaskState, note: str = "") -> int:
        if self.proc is not None and self.record.exit_code is None:
            self.record.exit_code = self.proc.returncode
            self.record.signal = signal_name(self.proc.returncode or 0)
        self.record.state = state
        self.record.note = note or self.record.note
        self.record.ended_at = time.time()
        self._save()
        return 0 if state is TaskState.SUCCEEDED else 1
