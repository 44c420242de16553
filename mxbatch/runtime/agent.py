"""An agent supervises the tasks of one process: one task (a batch array task, a YARN
container) or every task of a host (the local backend's job; an ssh host; an MPI rank,
one a host), in one event loop, like torchrun's per-node agent.

Each loop (when the next timed check is due: a task's, ``TaskRunner.next_due``, or the
agent's own periodic work below; at least every ``IDLE_S``; woken at once by role
output, by SIGCHLD, by a signal and by the rendezvous's news):
- every task steps (``TaskRunner``); a task's failure becomes the job's abort; when
  this agent's scheduler announces that members may join, this agent's members start
  in the same loop (no backoff for a record this process has just written); so do they
  when the rendezvous says the scheduler's record changed (``scheduler_news``: the ssh
  controller pushes it to every other host's agent);
- role output is copied from the pipes into the task logs;
- task records are written when they change, and every ``Schedule.heartbeat_s``
  anyway (the heartbeat counter grows);
- the abort record is read every ``Schedule.abort_poll_s``; on abort every task stops;
- the watcher (the agent of task 0, the scheduler) checks every task and publishes
  the digest every ``Schedule.watch_s``; the other agents read the digest every
  heartbeat (see ``watch``);
- running roles' progress (CPU, output, stopped) is measured every ``PROGRESS_S`` for
  stall detection (a role in a container: the container's processes);
- a signal to the agent (SIGTERM, SIGINT, SIGHUP, and those ``plan.signal_ends``
  names) aborts the job: cancelled, when the agent stands for the user (the local job
  manager, an attached ``mxbatch launch``) unless the signal means an end that
  ``restarts.on`` lists (SIGTERM: preempted); else with the end the plan gives the
  signal (a batch system's SIGTERM: preempted; its warning before the time limit:
  walltime); with ``signals_from_launcher`` (mpirun's ranks) the agent only stops its
  roles, and the launcher's controller, which knows why it ended the job, writes the
  abort;
- an abort for preemption or walltime (with restarts on) first sends every running
  worker the checkpoint signal (``restarts.checkpoint_signal``) and gives it
  ``restarts.checkpoint_grace`` to exit by itself, while the scheduler and servers
  keep running for it until every worker of the job has ended (the watcher says so in
  its digest); then the usual teardown.

The agent runs one attempt of the job (``attempt``): its records and logs are the
attempt's (``RunLayout.attempt``), and its roles see ``MXBATCH_ATTEMPT`` and
``MXBATCH_RESTART_REASON``; relaunching is the attempt loop's business (``jobloop``).

File operations on shared storage, per task and second in steady state: a heartbeat
write every 5 s (2 operations: temporary file, rename), the abort record every second
(1), the digest every 5 s (0.2): 1.6; and the watcher reads each other task's record
every ``Schedule.watch_s`` = max(3 s, N / 250 s): at most 0.33 more per task,
whatever N.

The exit status is 0 when every task of this agent succeeded, 1 otherwise.
"""

import enum
import os
import selectors
import signal
import socket
import time
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional

from . import listeners, notes, procs, procstat, wire
from .cgroups import JobCgroup
from .files import RunDirUnwritable
from .planfile import RunPlan, TaskInfo
from .rendezvous import Rendezvous, TaskKey
from .roles import Role
from .states import AbortKind, AbortRecord, EndReason, TaskRecord, TaskState
from .taskrunner import AttemptEnds, Phase, TaskFailed, TaskRunner
from .watch import (
    DigestFollower,
    JobWatch,
    code_finished,
    missing_at_deadline,
    startup_abort,
)

#: the longest an agent sleeps when nothing is due (``Agent._sleep_s``): a safety net,
#: as every timed check says when it is due and every event wakes the loop
IDLE_S = 1.0
#: the longest it sleeps with an ``on_tick`` (an attached CLI's status line)
TICK_S = 0.25
#: the longest it sleeps where no signal can wake it (not the main thread)
POLL_S = 0.05
#: periodic work this close to due is done in the turn before (``Agent._due``)
EARLY_S = 0.01
PROGRESS_S = 1.0
HEARTBEAT_S = 5.0
#: the watcher reads every other task's record at most this often per ``N / 250``
WATCH_MIN_S = 3.0
WATCH_TASKS_PER_S = 250.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Wake(enum.Enum):
    """What a descriptor in the loop's selector that is no role's output wakes it for."""

    SIGNAL = "signal"  # the signal wakeup pipe (SIGCHLD, a signal to the agent)
    NEWS = "news"      # the rendezvous's news (``Rendezvous.news_fd``)


class Schedule(NamedTuple):
    """How often an agent of ``plan`` touches the rendezvous (seconds): its tasks'
    heartbeat (a record write; followers also read the digest then), the abort record,
    and, for the watcher, every other task's record."""

    heartbeat_s: float
    abort_poll_s: float
    watch_s: float

    @classmethod
    def of(cls, plan: RunPlan) -> "Schedule":
        third = plan.heartbeat_timeout_s / 3  # a stale heartbeat is seen in time
        return cls(heartbeat_s=min(HEARTBEAT_S, third), abort_poll_s=plan.abort_poll_s,
                   watch_s=min(max(WATCH_MIN_S, len(plan.tasks) / WATCH_TASKS_PER_S), third))


def _with_devices(env: Dict[str, str], devices: Optional[Mapping[int, str]],
                  task: TaskInfo) -> Dict[str, str]:
    """What ``task``'s role inherits: ``env``, with its own GPUs if it has a share."""
    if devices is None or task.index not in devices:
        return env
    return dict(env, **{wire.CUDA_VISIBLE_DEVICES: devices[task.index]})


class Agent:
    """Supervises ``tasks`` of ``plan`` (see the module docstring).

    ``slots``: at most this many tasks run at once, the rest queue (task order);
    ``environ``: what roles inherit (default this process's); ``signals_cancel``: a
    signal to the agent cancels the job rather than failing it; ``on_tick``: called
    once per loop (an attached CLI streams logs there); ``attempt``: which attempt of
    the job this is, ``restart_reason``: why it was launched (the previous one's end);
    ``reap_job``: this agent supervises every task of the job on this host (the local
    job manager), so that once its roles have ended, any process of this host that
    carries the job's id is a leftover (a role's child that left its process group):
    killed; ``devices``: each task's own ``CUDA_VISIBLE_DEVICES`` (by task index), over
    the inherited one (``environ.device_shares``); ``reruns``: a batch system may
    start this agent's tasks again in the same attempt (a batch array task, a YARN
    container, an MPI rank: ``runtime.pyz run``), which ``_rerun_abort`` looks for;
    ``pending_signal()``: a signal that came before this agent's handlers were in place
    (the attempt loop's ``pending_signal``), acted on once they are.
    For attempt k >= 1, ``plan.created_at`` must be the attempt's start (its start-up
    deadline counts from there: ``jobloop.attempt_plan``)."""

    def __init__(self, plan: RunPlan, tasks: List[TaskInfo], rendezvous: Rendezvous, *,
                 slots: Optional[int] = None, environ: Optional[Dict[str, str]] = None,
                 signals_cancel: bool = False, signals_from_launcher: bool = False,
                 on_tick: Optional[Callable[[], None]] = None, attempt: int = 0,
                 restart_reason: Optional[str] = None, reap_job: bool = False,
                 devices: Optional[Mapping[int, str]] = None, reruns: bool = False,
                 pending_signal: Optional[Callable[[], Optional[int]]] = None) -> None:
        self.plan = plan
        self.rdv = rendezvous
        self.on_tick = on_tick
        self.signals_cancel = signals_cancel
        self.signals_from_launcher = signals_from_launcher
        self.attempt = attempt
        env = dict(os.environ if environ is None else environ)
        limit = slots or len(tasks)
        layout = plan.layout_of(attempt)
        attempt_env = {wire.ATTEMPT: str(attempt), wire.RESTART_REASON: restart_reason or ""}
        self.runners = [TaskRunner(plan, task, rendezvous, _with_devices(env, devices, task),
                                   os.getpid(), queued=i >= limit, layout=layout,
                                   attempt_env=attempt_env)
                        for i, task in enumerate(tasks)]
        if (rendezvous.pushes_scheduler_news()
                or any(task.role is Role.SCHEDULER for task in tasks)):
            for runner in self.runners:  # each publication reaches the members at once
                runner.told_of_scheduler()
        self.slots = limit
        self.by = (tasks[0].label if len(tasks) == 1
                   else "the agent on %s" % socket.gethostname())
        self.own = {(t.role, t.rank) for t in tasks}
        #: this agent supervises every worker of the job (it knows when they all ended)
        self.owns_workers = all((t.role, t.rank) in self.own
                                for t in plan.tasks_of(Role.WORKER))
        watching = any(t.index == 0 for t in tasks)
        self.watch = JobWatch(plan, self.by) if watching else None
        self.follower = None if watching else DigestFollower(plan)
        self.schedule = Schedule.of(plan)
        self.aborted: Optional[AbortRecord] = None
        self.workers_done_seen: Optional[float] = None
        #: since when (monotonic) this agent knows that every worker's code has finished
        self.workers_finished_seen: Optional[float] = None
        self._signalled: Optional[int] = None
        #: the name of the first signal that stopped the job, if one did
        self.signal_received: Optional[str] = None
        #: the failed write that made this agent stop the job, if one did
        self.storage_error: Optional[RunDirUnwritable] = None
        self.reap_job = reap_job
        self.reruns = reruns
        self.pending_signal = pending_signal
        self._selector = selectors.DefaultSelector()
        self._wakeup: Optional[int] = None
        self._news_fd: Optional[int] = None  # the rendezvous's news_fd, while watched
        self._next = {"beat": 0.0, "abort": 0.0, "watch": 0.0, "progress": 0.0}
        #: this agent's cgroups (``cgroups``), made when it runs, where the machine allows
        self.cgroup: Optional[JobCgroup] = None

    # ------------------------------------------------------------------ entry point
    def run(self) -> int:
        self.cgroup = JobCgroup.make(self.plan.job_id)
        for runner in self.runners:
            runner.cgroup = self.cgroup
        previous = self._install_signals()
        if self.pending_signal is not None:
            self._signalled = self._signalled or self.pending_signal()
        try:
            return self._run()
        except BaseException as exc:  # the agent itself broke: take the job down with it
            try:
                self._abort(AbortRecord(kind=AbortKind.FAILED, by=self.by,
                                        end=EndReason.FAILURE,
                                        reason="%s: the supervisor failed: %s: %s"
                                               % (self.by, type(exc).__name__, exc)))
            except OSError:  # nothing can be recorded: the roles are killed all the same
                pass
            raise
        finally:
            for runner in self.runners:  # first all, then wait: removals run in parallel
                runner.kill()
            for runner in self.runners:
                runner.close()
            if self.cgroup is not None:  # everything the roles started, wherever it went
                self.cgroup.close()
            if self.reap_job:  # the last act: whatever of the job outlived its role
                procs.reap_job(self.plan.job_id)
            self._restore_signals(previous)
            self._selector.close()

    def _run(self) -> int:
        try:
            abort = self.rdv.read_abort()
            if abort is not None:
                self._stop_all(abort, time.time(), time.monotonic())
            else:
                rerun = self._rerun_abort() if self.reruns else None
                if rerun is not None:
                    self._abort(rerun)
                self._write_records(force=True)
        except RunDirUnwritable as exc:
            self._storage_lost(exc)
        while not all(r.done for r in self.runners):
            try:
                self._step()
            except RunDirUnwritable as exc:
                self._storage_lost(exc)
        try:
            self._final_records()
        except RunDirUnwritable as exc:
            self._storage_lost(exc)
            self._final_records()  # what can still be written
        if self.on_tick is not None:
            self.on_tick()
        ok = all(r.record.state is TaskState.SUCCEEDED for r in self.runners)
        return 0 if ok and self.storage_error is None else 1

    def _step(self) -> None:
        """One turn of the loop (see the module docstring)."""
        wall, mono = time.time(), time.monotonic()
        self._handle_signal(wall, mono)  # before starting anything more
        self._launch(wall, mono)
        if self.rdv.scheduler_news():  # pushed (the ssh controller): no need to poll
            for runner in self.runners:
                runner.look_for_scheduler_now()
        self._own_workers_progress(mono)
        for runner in self.runners:  # the scheduler (task 0) first
            published = runner.publication
            try:
                runner.step(wall, mono, self.workers_done_seen, self.workers_finished_seen)
            except TaskFailed as failed:
                self._abort(self._failure_abort(failed, wall))
            except AttemptEnds as ended:
                self._abort(ended.abort)
            self._register(runner)
            if runner.publication is not published:  # members here need not poll
                for member in self.runners:
                    member.look_for_scheduler_now()
        self._handle_signal(wall, mono)
        self._write_records(force=False)  # before the digest, which may count them
        self._periodic(wall, mono)
        self._write_records(force=False)
        if self.on_tick is not None:
            self.on_tick()
        if not all(r.done for r in self.runners):
            self._watch_news()
            self._wait(self._sleep_s(wall, mono))

    def _final_records(self) -> None:
        self._drain()
        self._write_records(force=True)
        if self.watch is not None:
            self.rdv.publish_digest(self.watch.digest(self._all_records(own_only=True),
                                                      time.time(), final=True))

    def _storage_lost(self, error: RunDirUnwritable) -> None:
        """A write into the run directory failed: say so on stderr, give up failing
        writes from now on (a last try in place each), and stop the job, its roles' exit
        codes kept in memory for the records that can still be written."""
        if self.storage_error is None:
            self.storage_error = error
            self.rdv.degrade()
            for runner in self.runners:
                runner.degrade()
            notes.to_stderr("mxbatch: %s: %s: stopping the job\n" % (self.by, error.reason))
        if self.aborted is None:
            self._abort(AbortRecord(kind=AbortKind.FAILED, by=self.by, end=EndReason.FAILURE,
                                    reason=error.reason))

    # ------------------------------------------------------------------ tasks
    def _active(self) -> int:
        """How many tasks hold a slot (started, not done)."""
        return sum(1 for r in self.runners if r.phase not in (Phase.QUEUED, Phase.DONE))

    def _launch(self, wall: float, mono: float) -> None:
        active = self._active()
        for runner in self.runners:
            if active >= self.slots or self.aborted is not None:
                return
            if runner.phase is Phase.QUEUED:
                active += 1
                try:
                    runner.start(wall, mono)
                except TaskFailed as failed:
                    self._abort(failed.abort)
                self._register(runner)

    def _rerun_abort(self) -> Optional[AbortRecord]:
        """The end of this attempt when the batch system has started one of this agent's
        tasks a second time in it (its record names an earlier supervisor: SGE re-ran a
        task that ``qmod -rj`` rescheduled, or one whose host failed, before anybody
        recorded the first run's end; Slurm requeued one): ps-lite cannot take a task
        back into a running job, so the attempt ends as a preemption, which restarts
        relaunch; None for a first start. One read per task, at start only."""
        for runner in self.runners:
            task = runner.task
            earlier = self.rdv.read_task(task.role, task.rank)
            if earlier is None or earlier.supervisor_pid is None:
                continue
            first = "on %s, supervisor pid %d, last recorded %s" % (
                earlier.host or "an unknown host", earlier.supervisor_pid, earlier.state.value)
            reason = ("%s started a second time in attempt %d: the batch system re-ran it "
                      "after its first run (%s) ended with no end recorded"
                      % (task.label, self.attempt, first))
            runner.record.note = reason
            return AbortRecord(kind=AbortKind.FAILED, by=self.by, end=EndReason.PREEMPTED,
                               role=task.role, rank=task.rank, reason=reason)
        return None

    def _failure_abort(self, failed: TaskFailed, wall: float) -> AbortRecord:
        """The abort for ``failed``. A task that failed because the startup deadline
        passed while it waited yields to the tasks that never started by then (a starved
        queue: the watcher's ``startup_abort``, which may run in the same turn), its own
        failure added to the reason: every agent that meets the deadline first says the
        same. Reads every task's record once."""
        if not failed.deadline:
            return failed.abort
        missing = missing_at_deadline(self.plan, self._all_records(own_only=False), wall)
        if not missing:
            return failed.abort
        abort = startup_abort(self.plan, missing, by=self.by)
        abort.reason = "%s; %s" % (abort.reason, failed.abort.reason)
        return abort

    def _abort(self, abort: AbortRecord) -> None:
        """Make ``abort`` the job's abort (unless another was first) and stop everything."""
        if self.aborted is not None:
            return
        if not self.rdv.write_abort(abort):
            abort = self.rdv.read_abort() or abort
        self._stop_all(abort, time.time(), time.monotonic())

    def _stop_all(self, abort: AbortRecord, wall: float, mono: float) -> None:
        self.aborted = abort
        checkpoint = self._checkpoint_signal(abort)
        deadline = mono + self.plan.restarts.checkpoint_grace_s
        for runner in self.runners:  # every role's last output before any teardown note
            runner.drain_output(mono)
        for runner in self.runners:
            if runner.phase is Phase.QUEUED:
                # (a re-run task's note says why it did not: ``_rerun_abort``)
                runner.record.note = runner.record.note or "never started: job aborted"
                runner.phase = Phase.DONE
                runner.record.state = TaskState.CANCELLED
                runner.record.ended_at = wall
                runner.dirty = True
            elif runner.record.state is not TaskState.FAILED:
                note = "stopped: " + abort.reason
                if checkpoint is not None and runner.phase is Phase.RUNNING \
                        and runner.proc is not None and runner.proc.poll() is None:
                    if runner.task.role is Role.WORKER:
                        runner.checkpoint(checkpoint, deadline, note)
                    else:
                        runner.say("%s: kept running while the workers checkpoint"
                                   % abort.reason)
                        runner.hold(deadline, note)
                    continue
                runner.stop_for_job(abort.reason, wall, mono)

    def _checkpoint_signal(self, abort: AbortRecord) -> Optional[int]:
        """The signal workers get before the teardown of an attempt that ends on
        preemption or walltime, with restarts on; None: no checkpoint step."""
        restarts = self.plan.restarts
        if not (restarts.enabled and abort.end_reason.checkpoints
                and restarts.checkpoint_signal):
            return None
        return int(signal.Signals[restarts.checkpoint_signal])

    def _release_held(self, wall: float, mono: float) -> None:
        """After a checkpoint abort: stop the held roles once every worker has ended
        (as this agent knows: its own workers, or the watcher's digest)."""
        held = [r for r in self.runners if r.phase is Phase.HOLDING]
        if not held:
            return
        if self.watch is not None and self._due("watch", mono, self.schedule.watch_s):
            records = self._all_records(own_only=False)
            self.rdv.publish_digest(self.watch.digest(records, wall))
        if self.owns_workers:
            ended = all(r.done for r in self.runners if r.task.role is Role.WORKER)
        elif self.watch is not None:
            ended = self.watch.workers_ended_at is not None
        else:
            ended = self.follower is not None and self.follower.workers_ended_seen is not None
        if ended:
            for runner in held:
                runner.release("every worker has ended", wall, mono)

    def _own_workers_progress(self, mono: float) -> None:
        """An agent that supervises every worker knows at once, from its own runners,
        when their code has finished and when they have succeeded (the others learn it
        from the watcher's digest)."""
        if not self.owns_workers:
            return
        workers = [r.record for r in self.runners if r.task.role is Role.WORKER]
        if not workers:
            return
        if not all(code_finished(record) for record in workers):
            self.workers_finished_seen = None  # a worker's program started again
        elif self.workers_finished_seen is None:
            self.workers_finished_seen = mono
        if self.workers_done_seen is None and all(
                record.state is TaskState.SUCCEEDED for record in workers):
            self.workers_done_seen = mono

    def _read_digest(self, mono: float) -> None:
        """A follower reads the watcher's digest: what it says of the workers."""
        assert self.follower is not None
        self.follower.observe(self.rdv.read_digest(), mono)
        self.workers_done_seen = self.follower.workers_done_seen
        if not self.owns_workers:
            self.workers_finished_seen = self.follower.workers_finished_seen

    def _training_ending(self) -> bool:
        """A follower reads the digest every abort poll, not every heartbeat, once its
        own worker's code has finished or the digest said every worker's had: the last
        seconds of a job, where each late look is time the job keeps its nodes."""
        return self.follower is not None and (
            self.workers_finished_seen is not None
            or any(r.task.role is Role.WORKER and code_finished(r.record)
                   for r in self.runners))

    # ------------------------------------------------------------------ periodic work
    def _due(self, name: str, mono: float, interval: float) -> bool:
        """Whether periodic work ``name`` is due at ``mono`` (or within ``EARLY_S``: one
        wake-up does what falls due together); if so, it is next due ``interval`` on."""
        if mono + EARLY_S < self._next[name]:
            return False
        self._next[name] = mono + interval
        return True

    def _periodic(self, wall: float, mono: float) -> None:
        if self._due("progress", mono, PROGRESS_S):
            self._observe(mono)
        if self._due("beat", mono, self.schedule.heartbeat_s):
            for runner in self.runners:
                if not runner.done:
                    runner.record.heartbeat += 1
                    runner.dirty = True
            if self.follower is not None:
                self._read_digest(mono)
                lost = self.follower.watcher_lost(mono)
                if lost and self.aborted is None:
                    scheduler = self.rdv.read_scheduler()
                    host = scheduler.host if scheduler is not None else ""
                    self._abort(AbortRecord(kind=AbortKind.FAILED, reason=lost, by=self.by,
                                            end=EndReason.NODE_FAILURE,
                                            hosts=[host] if host else []))
        if self.aborted is not None:
            self._release_held(wall, mono)
        if self.aborted is None and self._due("abort", mono, self.schedule.abort_poll_s):
            abort = self.rdv.read_abort()
            if abort is not None:
                self._stop_all(abort, wall, mono)
            elif self._training_ending():
                self._read_digest(mono)
        if self.watch is not None and self.aborted is None and self._due(
                "watch", mono, self.schedule.watch_s):
            records = self._all_records(own_only=False)
            abort = self.watch.check(records, wall, mono)
            if abort is not None:
                self._abort(abort)
            else:
                if self.watch.workers_done_at is not None and self.workers_done_seen is None:
                    self.workers_done_seen = mono
                if not self.owns_workers:
                    finished = self.watch.workers_finished_at is not None
                    if not finished:
                        self.workers_finished_seen = None
                    elif self.workers_finished_seen is None:
                        self.workers_finished_seen = mono
                self.rdv.publish_digest(self.watch.digest(records, wall))

    def _all_records(self, own_only: bool) -> Dict[TaskKey, TaskRecord]:
        records = {} if own_only else self.rdv.read_tasks(
            key for key in self.plan.task_keys() if key not in self.own)
        records.update({r.record.key: r.record for r in self.runners})
        return records

    def _observe(self, mono: float) -> None:
        """Each running role's processes: its process group, or, in a container, the
        container's main process and its descendants."""
        pgids = [r.pgid for r in self.runners if r.pgid is not None]
        roots = [r.container_pid for r in self.runners if r.container_pid is not None]
        stats = procstat.snapshot(pgids, roots) if pgids else {}
        connections = listeners.ConnectionTables()  # each namespace's table read once
        for runner in self.runners:
            key = runner.container_pid or runner.pgid
            runner.observe(stats.get(key) if key else None, mono, connections)

    def _write_records(self, force: bool) -> None:
        for runner in self.runners:
            if runner.dirty or force:
                self.rdv.write_task(runner.record)
                runner.dirty = False

    # ------------------------------------------------------------------ output and waiting
    def _register(self, runner: TaskRunner) -> None:
        fd = runner.output_fd
        if fd is not None and fd not in self._selector.get_map():
            self._selector.register(fd, selectors.EVENT_READ, runner)

    def _sleep_s(self, wall: float, mono: float) -> float:
        """How long the loop may sleep after the step at ``wall``/``mono``: until the
        earliest of its runners' timed checks (``TaskRunner.next_due``), its own periodic
        work (``_next``: an entry the step left at or before ``mono`` is one it does not
        use now) and a free slot for a queued task; at most ``IDLE_S`` (``TICK_S`` with
        an ``on_tick``, ``POLL_S`` where no signal can wake it: not the main thread).
        Role output, a role's exit (SIGCHLD), a signal and the rendezvous's news wake it
        sooner."""
        now = time.monotonic()
        cap = IDLE_S if self._wakeup is not None else POLL_S
        if self.on_tick is not None:
            cap = min(cap, TICK_S)
        due = [now + cap]
        due.extend(t for t in self._next.values() if t > mono)
        for runner in self.runners:
            at = runner.next_due(wall, mono, self.workers_done_seen, self.workers_finished_seen)
            if at is not None:
                due.append(at)
        if (self.aborted is None and any(r.phase is Phase.QUEUED for r in self.runners)
                and self._active() < self.slots):
            due.append(now)
        return max(0.0, min(due) - now)

    def _watch_news(self) -> None:
        """Wake on the rendezvous's news (``Rendezvous.news_fd``) while it has a
        descriptor for them; the next step reads them (``scheduler_news``)."""
        fd = self.rdv.news_fd()
        if fd == self._news_fd:
            return
        if self._news_fd is not None:
            self._selector.unregister(self._news_fd)
        if fd is not None:
            self._selector.register(fd, selectors.EVENT_READ, _Wake.NEWS)
        self._news_fd = fd

    def _wait(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            if key.data is _Wake.NEWS:  # read by the next step's scheduler_news
                continue
            if key.data is _Wake.SIGNAL:  # the wakeup pipe (SIGCHLD, a signal)
                try:
                    while os.read(key.fd, 512):
                        pass
                except BlockingIOError:
                    pass
                continue
            self._read_output(key.fd, key.data)

    def _read_output(self, fd: int, runner: TaskRunner) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            runner.on_output(data, time.monotonic())
            return
        self._selector.unregister(fd)
        os.close(fd)
        if runner.output_fd == fd:
            runner.output_fd = None

    def _drain(self) -> None:
        """What roles wrote last, once they have all ended."""
        for key in list(self._selector.get_map().values()):
            if not isinstance(key.data, _Wake):
                self._read_output(key.fd, key.data)
                if key.fd in self._selector.get_map():
                    self._selector.unregister(key.fd)
                    os.close(key.fd)

    # ------------------------------------------------------------------ signals
    def _install_signals(self) -> Dict[int, object]:
        previous: Dict[int, object] = {}
        try:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            old_fd = signal.set_wakeup_fd(write_end)
        except ValueError:  # not the main thread: no signals, poll only
            return previous
        self._wakeup = write_end
        self._selector.register(read_end, selectors.EVENT_READ, _Wake.SIGNAL)
        previous[-1] = old_fd
        extra = tuple(signal.Signals[name] for name in self.plan.signal_ends
                      if name in signal.Signals.__members__)
        for signum in _SIGNALS + tuple(s for s in extra if s not in _SIGNALS):
            previous[signum] = signal.signal(signum, self._on_signal)
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda *_: None)
        return previous

    def _restore_signals(self, previous: Dict[int, object]) -> None:
        if not previous:
            return
        for signum, handler in previous.items():
            if signum >= 0:
                signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(previous[-1])  # type: ignore[arg-type]
        if self._wakeup is not None:
            os.close(self._wakeup)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signalled = signum

    def _handle_signal(self, wall: float, mono: float) -> None:
        if self._signalled is None:
            return
        name = signal.Signals(self._signalled).name
        self._signalled = None
        self.signal_received = self.signal_received or name
        if self.aborted is not None:
            return
        end = EndReason.parse(self.plan.signal_ends.get(name))
        if self.signals_cancel and (end is None or not self.plan.restarts.restarts_on(end)):
            reason = ("interrupted (%s)" % ("Ctrl-C" if name == "SIGINT" else name))
            self._abort(AbortRecord(kind=AbortKind.CANCELLED, reason=reason, by=self.by,
                                    end=EndReason.CANCELLED))
        elif self.signals_from_launcher:  # stop here; the launcher's controller says why
            self._stop_all(AbortRecord(kind=AbortKind.FAILED, by=self.by,
                                       reason="stopped by the launcher (%s)" % name),
                           wall, mono)
        else:
            said = " (%s)" % end.value if end is not None else ""
            self._abort(AbortRecord(kind=AbortKind.FAILED, by=self.by,
                                    end=end or EndReason.FAILURE,
                                    reason="%s: supervisor received %s%s"
                                           % (self.by, name, said)))
        notes.to_stderr("mxbatch: %s received %s: stopping the job\n" % (self.by, name))
