"""One task of an agent: its role process, as a state machine the agent steps.

``Phase``: QUEUED (waiting for a slot) -> WAITING (a server or worker waiting for the
scheduler's address) -> RUNNING (a member first held at its gate) -> STOPPING (SIGTERM
sent, SIGKILL at the grace deadline) -> DONE. When an attempt ends on preemption or
walltime, teardown has one more, earlier step: a worker gets the checkpoint signal
and may end by itself until the checkpoint deadline (CHECKPOINTING), while the other
roles keep running for it (HOLDING); then STOPPING as always. ``step`` never blocks
for long: the agent calls it for every task every few tens of milliseconds.

Contract of a role process:
- it runs in its own process group (new session) and, where the agent has cgroups, in a
  cgroup of its own from before its program runs (``cgroups``: everything it starts
  stays there), dies with its agent
  (PR_SET_PDEATHSIG), and writes no core file unless the plan allows it; it is started
  without a copy of the agent (``spawn``: vfork and a tiny exec wrapper), and its
  record says when (``exec_at``) and how much CPU the agent had used by then;
- its stdout and stderr go through a pipe the agent reads into
  ``logs/<role>-<rank>.log`` (with the supervisor's notes), so the agent sees output
  without touching the file system;
- the scheduler's runner picks a free port, starts the role and publishes its
  ``SchedulerRecord`` (``listening`` false), then again with ``listening`` once the
  listening socket on that port is the role's own (``listeners``: the kernel's word,
  not a connect, which another program on the port would accept too), looked for every
  ``LISTEN_CHECK_S``, and every ``LISTEN_CHECK_FAST_S`` once the role's hook has
  reported ``connecting`` (ps-lite starts; its bind follows). Members start
  their roles on the first record, held at their start gate (``gate``: the role's hook
  holds its Python before ps-lite), and open the gate only once the scheduler listens,
  so they never join whatever else holds the address (or once the scheduler's role
  exited with 0 without listening: ``ended``, no ps-lite); a held member whose scheduler
  moved to another port is killed and started again. With ``member_start:
  after_listen``, and in containers, members start their roles only then. A port
  taken between the free-port probe and the role's bind (the role exits with an error
  before listening, or another process listens there) is retried on another port with
  ``attempt + 1``, at most ``SCHEDULER_ATTEMPTS`` times (a role killed by a signal is a
  failure, never retried);
- an exit other than 0, a passed walltime, or a failed start is the task's failure:
  ``TaskFailed`` carries the abort record for the agent to publish (``startup``: the
  role never reached the scheduler: neither did its hook say ``connected`` (a worker's
  kvstore passed ps-lite's barrier) nor did ``listeners.connected_to`` see its ps-lite
  connection); with
  restarts on, a task that reaches its walltime less ``restarts.checkpoint_lead`` ends
  the attempt (``AttemptEnds``, reason walltime) so that every worker checkpoints;
- the role's environment carries the job's attempt (``MXBATCH_ATTEMPT``,
  ``MXBATCH_RESTART_REASON``);
- to stop, the group gets SIGTERM (and SIGCONT, which a stopped process needs to see
  it), then SIGKILL after the grace period;
- the role's hook (``pyhook``) reports on its stderr what the role runs and when its
  code has finished (``rolehook``): the runner keeps both in the record; a member whose
  Python or MXNet differs from the scheduler's (``SchedulerRecord.environment``) fails
  at once, as a start-up failure; a worker still running ``exit_grace`` after every
  worker's code finished (training is over), or a role ``exit_timeout`` after its own
  code finished (MXNet's exit hang), is ended, SUCCEEDED, with ``exit_hang_s`` in its
  record (unless the process that reported it has ended meanwhile: a command of several
  Python programs goes on); servers and the scheduler end as soon as every worker has
  succeeded.

With ``plan.container`` the role process is the container runtime's client
(``runtime.container``): it gets SIGTERM rather than SIGKILL when the agent dies (docker
and podman pass SIGTERM on to the container, whose init passes it to the role), the
container is removed by name whenever the client did not end by itself, and progress
is measured on the container's processes (``container_pid``) once known.
"""

import enum
import functools
import os
import resource
import signal
import socket
import subprocess
import time
from typing import Dict, Iterator, List, Optional, Tuple

from . import limits, listeners, net, notes, osbytes, procstat, pyhook, wire
from .cgroups import JobCgroup
from .container import Moment, RoleContainer
from .environ import role_environment
from .gate import Gate, MemberStart
from .layout import RunLayout
from .logfile import TaskLog
from .metrics import MetricReader
from .planfile import RunPlan, TaskInfo
from .procstat import GroupStat
from .rendezvous import Backoff, Rendezvous
from .rolehook import HookReader, HookReport, RoleEnvironment, mismatch_reason
from .roles import Role
from .spawn import spawn_role
from .stackwatch import StackWatch, dump_after
from .states import (
    AbortKind,
    AbortRecord,
    EndReason,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)

SCHEDULER_ATTEMPTS = 3
#: how often a waiting member looks for the scheduler's record at most
MEMBER_POLL_CAP_S = 0.5
#: how often a held member looks at most: it waits for the scheduler's import (a second
#: or two), and every look it misses the listen by is start-up time (with 0.2 s, the
#: last of 4 batch members went on 0.25 s after the listen on the test clusters); 10
#: small reads a second a member, for that long, is what it costs
HELD_POLL_CAP_S = 0.1
#: how often a member looks at most when it is told of every record the scheduler
#: publishes (``TaskRunner.told_of_scheduler``: the scheduler's runner is in the same
#: agent, or the rendezvous pushes the news): a safety net, and the startup deadline's
#: check; a local job of 1,000 held members would otherwise read the record 10,000
#: times a second
TOLD_POLL_CAP_S = 1.0
#: how often the scheduler's runner asks who listens on its port, until its role does
#: (one sock_diag dump of listening sockets a look: ``listeners``)
LISTEN_CHECK_S = 0.05
#: how often it asks once the role's hook has said that ps-lite starts (``connecting``:
#: the bind follows within milliseconds), and for how long at most: a look costs a
#: sock_diag dump of listening sockets and a listing of the role's descriptors (well
#: under a millisecond), and every 50 ms look it misses the bind by is start-up time for
#: every member
LISTEN_CHECK_FAST_S = 0.003
LISTEN_FAST_FOR_S = 2.0
#: how long the scheduler's runner waits for a SIGKILLed attempt's role at most
RESTART_WAIT_S = 5.0
#: a running role's CPU use (``TaskRecord.cpu_pct``) is measured over this long at least
CPU_WINDOW_S = 5.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: past a limit that a check compares with ``>`` (``next_due``)
_PAST_S = 0.001


class Phase(enum.Enum):
    QUEUED = "queued"
    WAITING = "waiting"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"  # a worker sent the checkpoint signal, ending itself
    HOLDING = "holding"              # another role, kept up while the workers checkpoint
    STOPPING = "stopping"
    DONE = "done"


class TaskFailed(Exception):
    """The task failed; ``abort`` is the record the job's abort should be.
    ``deadline``: it failed because the startup deadline passed while it waited (the
    scheduler for its listen, a member for the scheduler): tasks that never started by
    then are the job's cause, if there are any (``Agent._failure_abort``)."""

    def __init__(self, abort: AbortRecord, deadline: bool = False) -> None:
        super().__init__(abort.reason)
        self.abort = abort
        self.deadline = deadline


class AttemptEnds(Exception):
    """The task has not failed, but the attempt must end (``abort``): its walltime less
    the checkpoint lead has come."""

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


#: what a container runtime's exit code means, beyond the role's own
_RUNTIME_EXIT_CODES = {125: "the container runtime failed: see its message in the log",
                       126: "the container or its command could not start: see the log",
                       127: "the command was not found in the container"}


def _own_cpu_s() -> float:
    """The CPU seconds (user and system) this process has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 4)


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class TaskRunner:
    """One task (see the module docstring). ``wall`` is epoch time (records, plan
    deadlines), ``mono`` a monotonic clock (grace periods, backoff)."""

    def __init__(self, plan: RunPlan, task: TaskInfo, rdv: Rendezvous,
                 environ: Dict[str, str], agent_pid: int, queued: bool = False,
                 layout: Optional[RunLayout] = None,
                 attempt_env: Optional[Dict[str, str]] = None) -> None:
        """``queued``: it will wait for a slot (its record says so until it starts);
        ``layout``: the attempt's (default: attempt 0's); ``attempt_env``: the attempt's
        variables for the role (``MXBATCH_ATTEMPT``...)."""
        self.plan = plan
        self.task = task
        self.rdv = rdv
        self.environ = environ
        self.layout = layout if layout is not None else plan.layout
        self.task_env = dict(task.env, **(attempt_env or {}))
        self.log_path = self.layout.task_log(task.role.value, task.rank)
        self.record = TaskRecord(role=task.role, rank=task.rank,
                                 state=TaskState.PENDING if queued else TaskState.STARTING,
                                 host=socket.gethostname(), supervisor_pid=agent_pid,
                                 log=self.log_path,
                                 note="waiting for a slot" if queued else "")
        self.phase = Phase.QUEUED  # the agent calls start() when a slot is free
        #: the agent's cgroups (``cgroups``), where it has them: the role starts in its own
        self.cgroup: Optional[JobCgroup] = None
        self.dirty = True
        self.proc: Optional[subprocess.Popen] = None
        self.output_fd: Optional[int] = None
        self._log = TaskLog(self.log_path,
                            self.layout.task_log_times(task.role.value, task.rank))
        # scheduler
        self._ports: Optional[Iterator[int]] = None
        self._published: Optional[SchedulerRecord] = None
        self._next_listen_check = 0.0
        #: until when (monotonic) the listen is looked for every LISTEN_CHECK_FAST_S
        self._listen_fast_until = 0.0
        #: why earlier attempts' ports were lost (for the error when none is left)
        self._lost_ports: List[str] = []
        # members
        self._scheduler: Optional[SchedulerRecord] = None
        #: the start gate of a member started before its scheduler listened (``gate``)
        self._gate: Optional[Gate] = None
        self._backoff = Backoff(cap=MEMBER_POLL_CAP_S)
        self._next_poll = 0.0
        self._told = False  # told of every publication (``told_of_scheduler``)
        # stopping
        self._final: Optional[TaskState] = None
        self._kill_at: Optional[float] = None
        self._hold_until: Optional[float] = None  # checkpointing, holding
        # progress, for stall detection
        self._cpu_ticks: Optional[int] = None
        self._progress_at: Optional[float] = None
        self._stopped_since: Optional[float] = None
        # the role's container, if the plan has one
        self.container = (RoleContainer(plan.container, plan.job_id, plan.workdir, plan.layout,
                                        task.role.value, task.rank)
                          if plan.container is not None else None)
        self._escalated = False  # SIGKILL after the grace period was sent
        self._walltime_said = False
        self._metrics = MetricReader()
        # the role hook's reports: (pid, monotonic time) of the finished code, if any;
        # why the role cannot run with the others (its environment), if it cannot
        self._hook = HookReader()
        self._finished: Optional[Tuple[int, float]] = None
        self._mismatch: Optional[str] = None
        # where the idle role is (its stack dumps), and its CPU use over a window: the
        # (monotonic time, CPU ticks) the window started at
        self._stacks = self._stack_watch()
        self._cpu_window: Optional[Tuple[float, int]] = None

    @property
    def label(self) -> str:
        return self.task.label

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    @property
    def publication(self) -> Optional[SchedulerRecord]:
        """This task is the scheduler: the record it published last (a new object each
        time it publishes), else None."""
        return self._published

    @property
    def held(self) -> bool:
        """A member whose role runs, held at its start gate until the scheduler listens."""
        return self._gate is not None and self._gate.held and self.phase is Phase.RUNNING

    @property
    def _starts_early(self) -> bool:
        """Members start with the scheduler, held by the gate (``gate``); a container
        cannot inherit the gate, so its members start once the scheduler listens."""
        return self.plan.member_start is MemberStart.EARLY and self.container is None

    def next_due(self, wall: float, mono: float, workers_done_seen: Optional[float],
                 workers_finished_seen: Optional[float] = None) -> Optional[float]:
        """When (monotonic) this runner's next timed check falls: a member's next look
        for the scheduler's record, the scheduler's next look for its listen (for both,
        the startup deadline, at which they fail unless it listens by then), the end of
        a grace period or a hold, the exit hang's or the walltime's limit; None when
        only an event can move it on (its role's output or exit, a signal, the
        scheduler's news: each wakes the agent by itself). ``wall`` and ``mono``: one
        moment on both clocks; ``workers_done_seen`` and ``workers_finished_seen`` as for
        ``step``. The agent sleeps
        until the earliest of its runners' (and of its own periodic work): a step before
        then does no harm, one after it comes late."""
        phase = self.phase
        if phase is Phase.WAITING or (phase is Phase.RUNNING and self.held):
            if self._training_over(workers_done_seen):
                return mono  # it ends at its next step
            return min(self._next_poll, self._startup_deadline_due(wall, mono))
        if phase in (Phase.CHECKPOINTING, Phase.HOLDING):
            return self._hold_until
        if phase is Phase.STOPPING:
            return self._kill_at
        if phase is not Phase.RUNNING:
            return None
        if self._mismatch is not None:  # it fails at its next step: make that now
            return mono
        due: List[float] = []
        if self._finished is not None and self.plan.exit_timeout_s:
            due.append(self._finished[1] + self.plan.exit_timeout_s)
        grace_end = self._exit_grace_end(workers_finished_seen)
        if grace_end is not None:
            due.append(grace_end + _PAST_S)
        if self.container is not None:
            inspect = self.container.poll_due()
            if inspect is not None:
                due.append(inspect)
        if (self.task.role is Role.SCHEDULER and self._published is not None
                and not self._published.listening):
            due.append(min(self._next_listen_check, self._startup_deadline_due(wall, mono)))
        walltime = self._walltime_due()
        if walltime is not None:
            due.append(mono + walltime - wall + _PAST_S)
        if self.task.role is not Role.WORKER and workers_done_seen is not None:
            due.append(mono)  # it ends at its next step
        return min(due) if due else None

    def _exit_grace_end(self, workers_finished_seen: Optional[float]) -> Optional[float]:
        """When (monotonic) this worker, whose code has finished, is ended because every
        worker's has (``exit_grace`` after the later of the two); None otherwise."""
        if (self.task.role is not Role.WORKER or self._finished is None
                or workers_finished_seen is None):
            return None
        return max(self._finished[1], workers_finished_seen) + self.plan.exit_grace_s

    def _startup_deadline_due(self, wall: float, mono: float) -> float:
        """When (monotonic) the startup deadline has passed, for a task that fails then
        unless the scheduler listens by then (a member waiting or held, the scheduler
        itself): its own failure is checked at once, not at its next look, and comes
        first; infinity once that moment is behind (a step has checked it)."""
        passed = self.plan.startup_deadline + _PAST_S
        return mono + passed - wall if passed > wall else float("inf")

    def _walltime_due(self) -> Optional[float]:
        """When (epoch) ``_check_walltime`` acts next, once past it: the checkpoint's
        moment, then the walltime itself; None without a walltime or a start."""
        walltime = self.task.walltime_s
        if not walltime or self.record.started_at is None:
            return None
        lead = self._walltime_lead()
        if lead is not None and not self._walltime_said:
            return self.record.started_at + walltime - lead
        return self.record.started_at + walltime

    def _walltime_lead(self) -> Optional[float]:
        """How long before the walltime the attempt ends for a checkpoint (restarts on
        walltime), else None."""
        restarts = self.plan.restarts
        if not (self.task.walltime_s and restarts.restarts_on(EndReason.WALLTIME)):
            return None
        return min(restarts.checkpoint_lead_s, self.task.walltime_s / 2)

    def told_of_scheduler(self) -> None:
        """This member will be told of every record the scheduler publishes
        (``look_for_scheduler_now``): its own looks are a safety net from now on."""
        self._told = True
        self._backoff.cap = self._poll_cap(self._backoff.cap)

    def _poll_cap(self, cap: float) -> float:
        """The longest interval between a member's looks for the scheduler's record."""
        return max(cap, TOLD_POLL_CAP_S) if self._told else cap

    def look_for_scheduler_now(self) -> None:
        """A waiting (or held) member looks for the scheduler's record at its next step,
        not at the end of its backoff: the scheduler's runner, in the same agent, has just
        published it (the members of a local job start, or go on, in the loop that saw
        it)."""
        if self.phase is Phase.WAITING or self.held:
            self._next_poll = 0.0

    # ------------------------------------------------------------------ notes and records
    def say(self, message: str) -> None:
        """A supervisor note, in the task's log."""
        self.write_log(osbytes.encode(notes.note(self.label, message)))

    def write_log(self, data: bytes) -> None:
        if self.rdv.append_log(self.task.role, self.task.rank, data):
            return  # the rendezvous keeps the log (an ssh host's agent: the submit host)
        self._log.write(data)

    def on_output(self, data: bytes, mono: float) -> None:
        """The role wrote ``data`` (the agent read it from the pipe). Metrics it printed
        go into the record, which the next heartbeat writes (no extra file operations)."""
        self.write_log(data)
        if self._stacks.feed(data, mono, time.time()):  # not a stack dump, nor the hook's
            self._progress_at = mono
            self.record.output_at = time.time()
            self._stacks.busy()
        self._take_stack()
        if self._metrics.feed(data, time.time()):
            self.record.metrics = dict(self._metrics.latest)
            self.record.metrics_at = self._metrics.changed_at
        for report in self._hook.feed(data):
            self._on_report(report, mono)

    def _on_report(self, report: HookReport, mono: float) -> None:
        """The role's hook said something: its environment (a new Python program of the
        role started: its code runs again), or that its code has finished."""
        if report.event is wire.HookEvent.CONNECTING:
            if self.task.role is Role.SCHEDULER:  # it binds next: look at once, and often
                self._listen_fast_until = mono + LISTEN_FAST_FOR_S
                self._next_listen_check = mono
            return
        if report.event is wire.HookEvent.KVSTORE or (
                report.event is wire.HookEvent.FINISHED and report.pushes is not None):
            self.record.pushes, self.record.batches = report.pushes, report.batches
            self.dirty = True
            if report.event is wire.HookEvent.KVSTORE:
                return
        if report.event is wire.HookEvent.STARTED:
            self._stacks.on_started(report)
        if report.event is wire.HookEvent.CONNECTED:
            # the role's own word: its kvstore passed ps-lite's barrier over every node
            if self.record.reached_at is None:
                self.record.reached_at = time.time()
                self.dirty = True
            return
        self.dirty = True
        if report.event is wire.HookEvent.FINISHED:
            self._finished = (report.pid, mono)
            self.record.code_finished_at = time.time()
            return
        self._finished = None
        self.record.code_finished_at = None
        mine = report.environment
        if mine is None:
            return
        self.record.environment = mine.to_dict()
        self._check_environment()

    def _check_environment(self) -> None:
        """A member whose Python or MXNet differs from its scheduler's cannot run with it
        (``_mismatch``): known once both have reported (a held member learns the
        scheduler's when its gate opens)."""
        mine = RoleEnvironment.parse(self.record.environment or None)
        scheduler = RoleEnvironment.parse(self._scheduler.environment
                                          if self._scheduler is not None else None)
        if mine is not None and scheduler is not None and mine.mismatch(scheduler):
            self._mismatch = mismatch_reason(self.label, mine,
                                             self.plan.tasks_of(Role.SCHEDULER)[0].label,
                                             scheduler)

    def drain_output(self, mono: float) -> None:
        """Copy what the role has written and the agent has not read yet into the log,
        so that its last words come before any note written after them (its exit, the
        job's teardown). Never blocks; the pipe stays open for the agent to close."""
        fd = self.output_fd
        while fd is not None:
            try:
                data = os.read(fd, 65536)
            except OSError:  # BlockingIOError: nothing more for now
                return
            if not data:
                return
            self.on_output(data, mono)

    def degrade(self) -> None:
        """The run directory cannot be written: log writes that fail are given up from
        now on (``TaskLog.best_effort``), so that stopping the role goes on."""
        self._log.best_effort = True

    def close(self) -> None:
        """Release the log; wait (bounded) for the container's removal, if under way."""
        if self.container is not None:
            self.container.wait_removed()
        self._log.close()

    def _set(self, state: TaskState, note: Optional[str] = None) -> None:
        self.record.state = state
        if note is not None:
            self.record.note = note
        self.dirty = True

    def fail(self, reason: str, wall: float, mono: float, exit_code: Optional[int] = None,
             signal_: Optional[str] = None, deadline: bool = False) -> TaskFailed:
        """Record this task's failure, stop its role, and return what to raise
        (``deadline``: see ``TaskFailed``)."""
        if exit_code is not None:
            self.record.exit_code, self.record.signal = exit_code, signal_
        startup = self.record.reached_at is None
        self.stop(TaskState.FAILED, reason, wall, mono)
        return TaskFailed(AbortRecord(kind=AbortKind.FAILED, reason=reason,
                                      role=self.task.role, rank=self.task.rank,
                                      log=self.log_path, by=self.label, exit_code=exit_code,
                                      signal=signal_, end=EndReason.FAILURE,
                                      startup=startup), deadline)

    # ------------------------------------------------------------------ starting
    def start(self, wall: float, mono: float) -> None:
        """Leave the queue: the scheduler starts at once, members wait for it."""
        self.phase = Phase.WAITING
        self._set(TaskState.STARTING, "")
        self.record.started_at = wall
        if self.task.role is Role.SCHEDULER:
            self._start_scheduler(wall, mono)
        else:
            self._next_poll = mono

    def _cgroup_procs(self) -> Optional[str]:
        """The ``cgroup.procs`` of this task's cgroup, where the agent has cgroups; none
        for a container's client: the container's processes are the runtime daemon's,
        and a client killed by ``cgroup.kill`` (before its death signal's SIGTERM reached
        it) would leave its container running (``RoleContainer`` removes it by name)."""
        if self.cgroup is None or self.container is not None:
            return None
        return self.cgroup.task_procs("%s-%d" % (self.task.role.value, self.task.rank))

    def _popen(self, rendezvous_env: Dict[str, str], wall: float, mono: float,
               pass_fds: Tuple[int, ...] = ()) -> None:
        hook_dir = pyhook.install(self.plan.layout.pyhook_dir)
        argv, deathsig = list(self.task.argv), signal.SIGKILL
        if self.container is None:
            env = role_environment(self.environ, self.plan.inherit_env, self.task_env,
                                   rendezvous_env, hook_dir, self.plan.submit_path)
        else:
            if self.proc is not None and self._remove_container(Moment.RESTART):
                self.container.wait_removed()
            self._escalated = False
            try:
                started = self.container.prepare(
                    self.environ, functools.partial(
                        role_environment, inherit=self.plan.inherit_env,
                        task_env=self.task_env, rendezvous_env={}, hook_dir=hook_dir),
                    rendezvous_env, self.task.argv, self.task.gpus, self.plan.core_dumps, mono)
            except OSError as exc:
                raise self.fail("%s: cannot run its %s container: %s"
                                % (self.label, self.container.plan.runtime.value,
                                   exc.strerror or exc), wall, mono) from None
            argv, env = started.argv, started.env
            if started.skipped:
                self.say("left out of the container's environment (a value with a newline, "
                         "or a name that is no identifier): %s" % ", ".join(started.skipped))
            if started.not_utf8:
                self.say("not UTF-8, so given to the container with U+FFFD for each byte "
                         "that is not (%s takes UTF-8 only): %s"
                         % (self.container.plan.runtime.value, ", ".join(started.not_utf8)))
            # docker and podman pass SIGTERM on to the container; SIGKILL would orphan it
            if self.container.daemon:
                deathsig = signal.SIGTERM
        self.say("starting on %s with %s=%s: %s"
                 % (self.record.host, wire.DMLC_NODE_HOST,
                    rendezvous_env.get(wire.DMLC_NODE_HOST), " ".join(argv)))
        procs, data_limit = self._cgroup_procs(), None
        if limits.applies(self.plan.loopback_only):
            held = limits.enforce(self.cgroup.path if self.cgroup else None,
                                  os.path.dirname(procs) if procs else None,
                                  self.task.memory_mib, self.task.cpus,
                                  self.container is not None and self.container.daemon)
            data_limit = held.rlimit_data
            for line in held.notes:
                self.say(line)
        read_end, write_end = os.pipe()
        try:
            self.proc = spawn_role(argv, cwd=self.plan.workdir, env=env, output_fd=write_end,
                                   core_dumps=self.plan.core_dumps, deathsig=deathsig,
                                   pass_fds=pass_fds, cgroup_procs=procs,
                                   data_limit=data_limit)
        except OSError as exc:
            os.close(read_end)
            raise self.fail("%s: cannot start %r: %s" % (self.label, argv[0],
                                                         exc.strerror or exc),
                            wall, mono) from None
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)
        self.output_fd = read_end
        self.record.pid = self.proc.pid
        self.record.exec_at, self.record.exec_cpu_s = time.time(), _own_cpu_s()
        self._cpu_ticks, self._progress_at, self._stopped_since = None, mono, None
        self._stacks, self._cpu_window = self._stack_watch(), None
        self._take_stack()
        self.phase = Phase.RUNNING
        self._set(TaskState.RUNNING)

    def _start_scheduler(self, wall: float, mono: float) -> None:
        try:
            ip = net.scheduler_ip(self.plan.interface, self.plan.loopback_only)
        except net.NetworkError as exc:
            raise self.fail("scheduler[0]: %s" % exc, wall, mono) from None
        if self._ports is None:
            self._ports = net.candidate_ports(self.plan.port_low, self.plan.port_high)
        attempt = self._published.attempt + 1 if self._published else 1
        port = next(self._ports, None)
        if port is None:
            raise self.fail("scheduler[0]: no free port in %d-%d%s"
                            % (self.plan.port_low, self.plan.port_high,
                               "".join("; " + lost for lost in self._lost_ports)), wall, mono)
        self._popen(wire.rendezvous_environment(ip, port, ip), wall, mono)
        assert self.proc is not None
        self._published = SchedulerRecord(job_id=self.plan.job_id, ip=ip, port=port,
                                          host=socket.gethostname(), pid=self.proc.pid,
                                          attempt=attempt)
        self.rdv.publish_scheduler(self._published)

    def _start_member(self, info: SchedulerRecord, wall: float, mono: float) -> None:
        try:
            my_ip = net.node_ip(self.plan.interface, info.ip)
        except (net.NetworkError, OSError) as exc:
            raise self.fail("%s: %s" % (self.label, exc), wall, mono) from None
        self._scheduler = info
        env = wire.rendezvous_environment(info.ip, info.port, my_ip)
        port = None
        if self.container is None:  # (a container gets the rendezvous variables only)
            port = net.member_port(self.plan.port_low, self.plan.port_high, self.task.index,
                                   len(self.plan.tasks), my_ip, avoid=info.port,
                                   job_id=self.plan.job_id)
        if port is not None:
            env[wire.PS_NODE_PORT] = str(port)
        self.record.address = "%s:%d" % (my_ip, port) if port is not None else ""
        if info.joinable:
            self.record.joined_at = wall
            self._popen(env, wall, mono)
            return
        self._gate = Gate()
        env.update(self._gate.environment())
        try:
            self._popen(env, wall, mono, pass_fds=(self._gate.read_fd,))
        finally:
            self._gate.started()
        self._set(TaskState.RUNNING, "held before ps-lite until the scheduler listens")
        self._next_poll, self._backoff = mono, Backoff(cap=self._poll_cap(HELD_POLL_CAP_S))

    # ------------------------------------------------------------------ stepping
    def step(self, wall: float, mono: float, workers_done_seen: Optional[float],
             workers_finished_seen: Optional[float] = None) -> None:
        """Advance; raises ``TaskFailed`` when this task fails. ``workers_done_seen``:
        when (monotonic) this agent learnt that every worker succeeded (a server or the
        scheduler still running then is ended at once, SUCCEEDED: training is over);
        ``workers_finished_seen``: when it learnt that every worker's code had finished
        (a worker still running ``exit_grace`` later is ended, SUCCEEDED)."""
        if self._training_over(workers_done_seen):
            if self.phase is Phase.WAITING:  # nothing to start for
                self.say("every worker has succeeded before this role started: not "
                         "starting it")
                self._finish(TaskState.SUCCEEDED, wall)
                self._set(TaskState.SUCCEEDED, "not started: every worker had succeeded")
                return
            if self.held:  # its scheduler may never listen now: nothing to go on for
                self.say("every worker has succeeded: training is over, stopping it")
                self.stop(TaskState.SUCCEEDED, "stopped after every worker succeeded",
                          wall, mono)
                return
        if self.phase is Phase.WAITING:
            self._wait_for_scheduler(wall, mono)
        elif self.phase is Phase.RUNNING:
            self._run(wall, mono, workers_done_seen, workers_finished_seen)
        elif self.phase in (Phase.CHECKPOINTING, Phase.HOLDING):
            self._held(wall, mono)
        elif self.phase is Phase.STOPPING:
            self._stopping(mono)

    def _training_over(self, workers_done_seen: Optional[float]) -> bool:
        """A server or the scheduler whose job's workers have all succeeded."""
        return self.task.role is not Role.WORKER and workers_done_seen is not None

    def _wait_for_scheduler(self, wall: float, mono: float) -> None:
        """Start the role once this job's scheduler listens (its own socket, see
        ``_check_listening``): never on an address something else may hold."""
        if mono < self._next_poll and not self._past_startup_deadline(wall):
            return
        info = self.rdv.read_scheduler()
        if info is not None and info.job_id == self.plan.job_id and (
                info.joinable or self._starts_early):
            self._start_member(info, wall, mono)
            return
        self._check_startup_deadline(wall, mono)
        self._next_poll = mono + self._backoff.next()

    def _past_startup_deadline(self, wall: float) -> bool:
        return wall > self.plan.startup_deadline

    def _check_startup_deadline(self, wall: float, mono: float) -> None:
        """A member waiting (or held) for its scheduler past the startup deadline fails."""
        if self._past_startup_deadline(wall):
            raise self.fail("%s: the scheduler was not listening before the startup "
                            "deadline (%gs)" % (self.label, self.plan.startup_timeout_s),
                            wall, mono, deadline=True)

    def _mind_gate(self, wall: float, mono: float) -> None:
        """A held member: open its gate once the scheduler it started with listens (or
        has ended without ps-lite); start it again should the scheduler have moved to
        another port (its attempt there was lost before it listened)."""
        if mono < self._next_poll and not self._past_startup_deadline(wall):
            return
        held = self._scheduler
        assert held is not None and self._gate is not None
        info = self.rdv.read_scheduler()
        if info is not None and info.job_id == self.plan.job_id:
            if (info.ip, info.port, info.attempt) != (held.ip, held.port, held.attempt):
                self._start_again(info, wall, mono)
                return
            if info.joinable:
                self._gate.open()
                self.say("the scheduler %s: going on" % ("listens" if info.listening
                                                         else "has ended"))
                self._scheduler = info
                self.record.joined_at = wall
                self._set(TaskState.RUNNING, "")
                self._check_environment()
                return
        self._check_startup_deadline(wall, mono)
        self._next_poll = mono + self._backoff.next()

    def _start_again(self, info: SchedulerRecord, wall: float, mono: float) -> None:
        """The held role waits for a scheduler address that is gone: end it (it is held
        before ps-lite, so nothing of it has joined anything) and start it anew for
        ``info``."""
        assert self.proc is not None and self._gate is not None
        self.say("the scheduler moved to %s (its attempt %d): starting again"
                 % (info.address, info.attempt))
        _killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=RESTART_WAIT_S)
        except subprocess.TimeoutExpired:
            self.say("the role (pid %d) outlived SIGKILL for %gs: going on anyway"
                     % (self.proc.pid, RESTART_WAIT_S))
        self.drain_output(mono)
        self._gate.close()
        self._start_member(info, wall, mono)

    def _run(self, wall: float, mono: float, workers_done_seen: Optional[float],
             workers_finished_seen: Optional[float]) -> None:
        assert self.proc is not None
        if self._mismatch is not None:  # before its exit: the mismatch may be why
            failed = self.fail(self._mismatch, wall, mono)
            failed.abort.startup = True  # never worth a restart
            raise failed
        code = self.proc.poll()
        if code is not None:
            self._exited(code, wall, mono)
            return
        if self.held:
            self._mind_gate(wall, mono)
            return
        self._check_exit_hang(wall, mono, workers_finished_seen)
        if self.phase is not Phase.RUNNING:
            return
        if self.container is not None:
            self.container.poll(mono)
        if self.task.role is Role.SCHEDULER:
            self._check_listening(wall, mono)
        self._check_walltime(wall, mono)
        if self.task.role is not Role.WORKER and workers_done_seen is not None:
            self.say("every worker has succeeded: training is over, stopping it")
            self.stop(TaskState.SUCCEEDED, "stopped after every worker succeeded", wall, mono)

    def _check_exit_hang(self, wall: float, mono: float,
                         workers_finished_seen: Optional[float]) -> None:
        """End the role, SUCCEEDED, when it still runs after its code finished, and the
        process that said so still lives: ``exit_grace`` after every worker's code has
        finished (a worker: training is over), else ``exit_timeout`` after its own."""
        if self._finished is None:
            return
        pid, since = self._finished
        grace_end = self._exit_grace_end(workers_finished_seen)
        timeout = self.plan.exit_timeout_s
        if grace_end is not None and mono >= grace_end:
            why = ("%gs after every worker's code finished (rendezvous.exit_grace)"
                   % self.plan.exit_grace_s)
        elif timeout and mono - since >= timeout:
            why = "%gs after its code finished (rendezvous.exit_timeout)" % timeout
        else:
            return
        if not self._alive(pid):
            self._finished = None  # that program ended; the role's command goes on
            return
        hung = mono - since
        self.record.exit_hang_s = round(hung, 1)
        self.say("still running %s (MXNet's exit hang): ending it" % why)
        self.stop(TaskState.SUCCEEDED, "ended %.1fs after its code finished (exit hang)"
                  % hung, wall, mono)

    def _alive(self, pid: int) -> bool:
        """Whether process ``pid`` of the role (as its hook saw its own pid) still runs;
        True when that cannot be told (a docker or podman container: another pid
        namespace)."""
        assert self.proc is not None
        if self.container is not None and self.container.daemon:
            return True
        return pid in procstat.members(self.proc.pid)

    def _check_walltime(self, wall: float, mono: float) -> None:
        """The task's walltime: with restarts on, the attempt ends ``checkpoint_lead``
        before it (every worker checkpoints, the job relaunches); else the task fails
        when it passed."""
        due = self._walltime_due()
        if due is None or wall <= due:
            return
        walltime = self.task.walltime_s
        lead = self._walltime_lead()
        if lead is not None and not self._walltime_said:
            self._walltime_said = True
            raise AttemptEnds(AbortRecord(
                kind=AbortKind.FAILED, by=self.label, role=self.task.role,
                rank=self.task.rank, end=EndReason.WALLTIME,
                reason="%s reached its walltime of %gs less the checkpoint lead of %gs"
                       % (self.label, walltime, lead)))
        failed = self.fail("the job reached its walltime (%gs; %s, the first task past it, "
                           "was stopped)" % (walltime, self.label), wall, mono)
        failed.abort.end = EndReason.WALLTIME
        raise failed

    def _exited(self, code: int, wall: float, mono: float) -> None:
        self.drain_output(mono)  # the role's last words before the supervisor's
        if (self.task.role is Role.SCHEDULER and code > 0 and self._published is not None
                and not self._published.listening):  # exited (port taken?), not killed
            port = self._published.port
            state = listeners.port_state(self._published.ip, port, tuple, os.getpid())
            taken = (" (%s holds it)" % (listeners.describe_holders(state.sockets)
                                         or "another process")
                     if state.holder is listeners.Holder.OTHER else "")
            self.say("scheduler exited with %s before listening on port %d%s"
                     % (code, port, taken))
            self._lost_ports.append("the scheduler exited with %s before listening on port "
                                    "%d%s" % (code, port, taken))
            if self._published.attempt < SCHEDULER_ATTEMPTS:
                self._start_scheduler(wall, mono)
                return
            raise self.fail("scheduler[0] exited with code %s before listening (%d attempts)"
                            % (code, self._published.attempt), wall, mono, code,
                            signal_name(code))
        self.record.exit_code, self.record.signal = code, signal_name(code)
        if (code == 0 and self.task.role is Role.SCHEDULER and self._published is not None
                and not self._published.listening):
            # no ps-lite scheduler (launch -- hostname): the members run without one
            self._published = SchedulerRecord(**dict(self._published.to_dict(), ended=True))
            self.rdv.publish_scheduler(self._published)
        if code == 0:
            self.say("exited with code 0")
            self._finish(TaskState.SUCCEEDED, wall)
            return
        how = self._how(code)
        self.say(how)
        raise self.fail("%s %s" % (self.label, how), wall, mono, code, self.record.signal)

    def _how(self, code: int) -> str:
        """How the role ended: ``exited with code 2``, ``was killed by SIGKILL``."""
        how = ("was killed by %s" % signal_name(code) if code < 0
               else "exited with code %d" % code)
        if self.container is not None and code in _RUNTIME_EXIT_CODES:
            how += " (%s)" % _RUNTIME_EXIT_CODES[code]
        return how

    def _check_listening(self, wall: float, mono: float) -> None:
        """Publish ``listening`` once the role's own socket listens on its port; a port
        another process holds is lost: this attempt stops and the next takes another."""
        published = self._published
        if published is None or published.listening or (
                mono < self._next_listen_check and not self._past_startup_deadline(wall)):
            return
        self._next_listen_check = mono + (LISTEN_CHECK_FAST_S if mono < self._listen_fast_until
                                          else LISTEN_CHECK_S)
        state = self._port_state(published)
        if state is not None and state.holder is listeners.Holder.ROLE:
            self.drain_output(mono)  # the hook's report, for the members to compare
            self._published = SchedulerRecord(**dict(published.to_dict(), listening=True,
                                                     environment=self.record.environment))
            self.rdv.publish_scheduler(self._published)
            if self.record.reached_at is None:
                self.record.reached_at = wall
                self.dirty = True
            self.say("listening on %s (attempt %d)" % (published.address, published.attempt))
            return
        if state is not None and state.holder is listeners.Holder.OTHER:
            self._port_taken(published, state, wall, mono)
            return
        if self._past_startup_deadline(wall):
            raise self.fail("scheduler[0] did not listen on %s before the startup deadline "
                            "(%gs)" % (published.address, self.plan.startup_timeout_s),
                            wall, mono, deadline=True)

    def _port_state(self, published: SchedulerRecord) -> Optional[listeners.PortState]:
        """Who listens on the published port, in the role's network namespace; None
        while that cannot be known (a container whose main process is not known yet)."""
        assert self.proc is not None
        leader = netns = self.proc.pid
        roots: Tuple[int, ...] = ()
        if self.container is not None and self.container.daemon:
            if self.container.pid is None:
                return None
            netns, roots = self.container.pid, (self.container.pid,)
        return listeners.port_state(published.ip, published.port,
                                    lambda: procstat.members(leader, roots), netns)

    def _port_taken(self, published: SchedulerRecord, state: listeners.PortState,
                    wall: float, mono: float) -> None:
        """Another process listens where this attempt's role was to: stop the role (it
        could never bind there) and try another port, or fail naming the port."""
        lost = ("port %d was taken by %s after mxbatch chose it"
                % (published.port, listeners.describe_holders(state.sockets)
                   or "another process"))
        self.say("%s: stopping attempt %d" % (lost, published.attempt))
        self._lost_ports.append(lost)
        assert self.proc is not None
        _killpg(self.proc.pid, signal.SIGKILL)
        try:  # bounded: the agent loop (signals, other tasks) must go on
            self.proc.wait(timeout=RESTART_WAIT_S)
        except subprocess.TimeoutExpired:
            self.say("the role (pid %d) outlived SIGKILL for %gs: going on anyway"
                     % (self.proc.pid, RESTART_WAIT_S))
        self._escalated = True  # its container, if any, is removed before the next start
        if published.attempt >= SCHEDULER_ATTEMPTS:
            raise self.fail("scheduler[0]: %s (%d attempts)" % (lost, published.attempt),
                            wall, mono)
        self._start_scheduler(wall, mono)

    # ------------------------------------------------------------------ checkpointing
    def checkpoint(self, signum: int, deadline: float, note: str) -> None:
        """Send ``signum`` (the checkpoint signal) to the running role's group, and let
        it end by itself until ``deadline`` (monotonic): then stop it as always."""
        assert self.proc is not None and self.phase is Phase.RUNNING
        self.record.note = note
        self.say("%s: sending %s (checkpoint), then waiting up to %gs for it to exit"
                 % (note, signal.Signals(signum).name, max(0.0, deadline - time.monotonic())))
        _killpg(self.proc.pid, signum)
        _killpg(self.proc.pid, signal.SIGCONT)
        self._hold_until = deadline
        self.phase = Phase.CHECKPOINTING
        self.dirty = True

    def hold(self, deadline: float, note: str) -> None:
        """Keep the running role (a server, the scheduler) up while the workers
        checkpoint: until ``release`` or ``deadline`` (monotonic), then stop it."""
        assert self.phase is Phase.RUNNING
        self.record.note = note
        self._hold_until = deadline
        self.phase = Phase.HOLDING
        self.dirty = True

    def release(self, why: str, wall: float, mono: float) -> None:
        """Stop a held role now (the workers have ended)."""
        if self.phase is Phase.HOLDING:
            self.phase = Phase.RUNNING
            self.stop(TaskState.CANCELLED, "stopped: " + why, wall, mono)

    def _held(self, wall: float, mono: float) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            self.record.exit_code, self.record.signal = code, signal_name(code)
            if self.phase is Phase.CHECKPOINTING:
                self.say("exited with %s after the checkpoint signal"
                         % (self.record.signal or "code %d" % code))
            self._finish(TaskState.CANCELLED, wall)
            return
        if self._hold_until is not None and mono >= self._hold_until:
            if self.phase is Phase.CHECKPOINTING:
                self.say("did not exit within the checkpoint grace (%gs): stopping it"
                         % self.plan.restarts.checkpoint_grace_s)
            note = self.record.note
            self.phase = Phase.RUNNING
            self.stop(TaskState.CANCELLED, note, wall, mono)

    # ------------------------------------------------------------------ stopping
    def stop(self, final: TaskState, note: str, wall: float, mono: float) -> None:
        """End this task in state ``final``: SIGTERM (and SIGCONT) its role's group now,
        SIGKILL after the grace period; at once if no role runs."""
        if self.phase in (Phase.STOPPING, Phase.DONE):
            return
        self.record.note = note
        if self.proc is None or self.proc.poll() is not None:
            self._finish(final, wall)
            return
        self._final = final
        self._kill_at = mono + self.plan.grace_s
        _killpg(self.proc.pid, signal.SIGTERM)
        _killpg(self.proc.pid, signal.SIGCONT)  # a stopped process sees SIGTERM only now
        self.phase = Phase.STOPPING

    def stop_for_job(self, reason: str, wall: float, mono: float) -> None:
        """Stop because the job is ending for ``reason`` (another task failed, a cancel):
        CANCELLED, with a teardown note; but a role that has already ended by itself
        keeps its own outcome."""
        if self.phase in (Phase.STOPPING, Phase.DONE):
            return
        if self.phase is Phase.RUNNING and self.proc is not None \
                and self.proc.poll() is not None:
            self._ended_by_itself(self.proc.returncode, wall, mono)
            return
        self.drain_output(mono)
        self.say(notes.STOPPING + reason)
        self.stop(TaskState.CANCELLED, "stopped: " + reason, wall, mono)

    def _ended_by_itself(self, code: int, wall: float, mono: float) -> None:
        """The role ended on its own before this supervisor saw it (another task's failure
        is stopping the job meanwhile): it keeps its own outcome, FAILED with its own exit
        code (not CANCELLED by the teardown), or SUCCEEDED."""
        self.drain_output(mono)
        self.record.exit_code, self.record.signal = code, signal_name(code)
        if code == 0:
            self.say("exited with code 0")
            self.record.note = ""
            self._finish(TaskState.SUCCEEDED, wall)
            return
        how = self._how(code)
        self.say(how)
        self.record.note = how
        self._finish(TaskState.FAILED, wall)

    def _stopping(self, mono: float) -> None:
        assert self.proc is not None and self._final is not None
        if self.proc.poll() is not None:
            self._finish(self._final, None)
            return
        if self._kill_at is not None and mono >= self._kill_at:
            self.say("still running %gs after SIGTERM: SIGKILL" % self.plan.grace_s)
            _killpg(self.proc.pid, signal.SIGKILL)
            self._escalated = True
            self._remove_container(Moment.ESCALATED)
            self._kill_at = None

    def kill(self) -> None:
        """SIGKILL whatever is left of the role's group (the agent is ending), and start
        removing its container if the client may have left it behind (``close`` waits)."""
        if self.proc is None:
            return
        code = self.proc.poll()
        _killpg(self.proc.pid, signal.SIGKILL)
        if self._gate is not None:
            self._gate.close()  # after the SIGKILL: a held role never goes on to ps-lite
        self._remove_container(Moment.AGENT_ENDING, code)

    def _remove_container(self, moment: Moment, client_code: Optional[int] = -1) -> bool:
        """Remove the role's container if ``container.removal_reason`` says so (with its
        words in the task log); whether a removal started. ``client_code``: the client's
        exit code as seen before a kill (default: ask the process now)."""
        if self.container is None or self.proc is None:
            return False
        code = self.proc.poll() if client_code == -1 else client_code
        reason = self.container.removal_reason(moment, code, self._escalated,
                                               self.phase in (Phase.STOPPING,
                                                              Phase.CHECKPOINTING,
                                                              Phase.HOLDING))
        if reason is None:
            return False
        if reason:
            self.say(reason)
        self.container.remove()
        return True

    def _finish(self, state: TaskState, wall: Optional[float]) -> None:
        if self._gate is not None:
            self._gate.close()
        if self.proc is not None and self.record.exit_code is None:
            code = self.proc.poll()
            self.record.exit_code, self.record.signal = code, signal_name(code or 0)
        if self.container is not None and self.proc is not None:
            self._remove_container(Moment.FINISHED)
            self.container.forget_env_file()
        self.phase = Phase.DONE
        self.record.ended_at = wall if wall is not None else time.time()
        self._set(state)

    # ------------------------------------------------------------------ progress
    @property
    def pgid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None and self.phase is Phase.RUNNING else None

    @property
    def container_pid(self) -> Optional[int]:
        """The host pid of the role's container's main process, once known while running
        (docker/podman: the role's processes are its descendants, not the client's)."""
        if self.container is None or self.phase is not Phase.RUNNING:
            return None
        return self.container.pid

    def observe(self, stat: Optional[GroupStat], mono: float,
                connections: Optional[listeners.ConnectionTables] = None) -> None:
        """Update idle and stopped times from a snapshot of the role's process group;
        ``connections``: the round's connection tables, shared by the agent's runners
        (a fresh one otherwise)."""
        if self.phase is not Phase.RUNNING:
            self.record.idle_s = self.record.stopped_s = 0.0
            return
        if self.held:  # waiting at the gate is no stall
            self._progress_at = mono
        if stat is not None and stat.cpu_ticks != self._cpu_ticks:
            if self._cpu_ticks is not None and \
                    self._stacks.cpu_is_progress(stat.cpu_ticks - self._cpu_ticks):
                self._progress_at = mono
                self._stacks.busy()
            self._cpu_ticks = stat.cpu_ticks
        if stat is not None:
            self._measure_cpu(stat.cpu_ticks, mono)
        if stat is not None and stat.leader_stopped:
            self._stopped_since = self._stopped_since or mono
        else:
            self._stopped_since = None
        self._look_for_scheduler(stat, connections or listeners.ConnectionTables())
        self.record.idle_s = round(mono - (self._progress_at or mono), 1)
        self.record.stopped_s = round(mono - self._stopped_since, 1) \
            if self._stopped_since is not None else 0.0
        self.record.progress_at = round(time.time() - self.record.idle_s, 1)
        if self.task.role is not Role.SCHEDULER and self.proc is not None \
                and self._stopped_since is None:
            self._stacks.look(self.record.idle_s, self.proc.pid, mono)
        self._take_stack()

    def _stack_watch(self) -> StackWatch:
        """A new role process's ``StackWatch`` (a container daemon's roles live in
        another pid namespace: they are never asked)."""
        return StackWatch(dump_after(self.plan.stall_timeout_s, self.plan.exit_timeout_s),
                          self.say, self.container is None or not self.container.daemon)

    def _take_stack(self) -> None:
        """Keep the latest stack of the idle role (or none, once it is busy) in the record."""
        if self._stacks.changed:
            self._stacks.changed = False
            stack = self._stacks.stack
            self.record.stack = stack.to_dict() if stack is not None else {}
            self.dirty = True

    def _measure_cpu(self, ticks: int, mono: float) -> None:
        """The role's CPU seconds, and its CPU use over the last ``CPU_WINDOW_S`` or more."""
        self.record.cpu_s = round(ticks / _CLOCK_TICKS, 2)
        if self._cpu_window is None:
            self._cpu_window = (mono, ticks)
            return
        since, before = self._cpu_window
        if mono - since >= CPU_WINDOW_S:
            self.record.cpu_pct = round(100.0 * (ticks - before) / _CLOCK_TICKS
                                        / (mono - since), 1)
            self._cpu_window = (mono, ticks)

    def _look_for_scheduler(self, stat: Optional[GroupStat],
                            connections: listeners.ConnectionTables) -> None:
        """Whether the role (a server, a worker) has reached the scheduler: its first
        established connection to the scheduler's address. Not looked for while the
        gate holds the role: it cannot have one before its ps-lite starts, and a look
        reads the namespace's whole connection table (7 ms on the test VM; once a round
        for all the agent's members: ``listeners.ConnectionTables``)."""
        info = self._scheduler
        if (self.record.reached_at is not None or info is None or stat is None
                or self.task.role is Role.SCHEDULER or self.held):
            return
        if connections.connected_to(stat.pids, info.ip, info.port):
            self.record.reached_at = time.time()
            self.dirty = True
