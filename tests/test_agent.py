"""The per-host agent with stand-in roles (fast, no MXNet): hundreds of tasks in one
process, ending together or torn down on one failure, and stall detection (a stopped
role, an idle worker). Durations come from the job's own records."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, Cli, assert_no_processes, task_record, wait_for


def many_task_spec(tmp_path: Path, *, servers: int, workers: int, extra_env: str = "",
                   grace: str = "2s", name: str = "many") -> Path:
    role = json.dumps([sys.executable, str(FAKEROLE)])
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: {role}\nworkdir: {tmp_path}\n"
                    f"env: {{FAKE_BARRIER: '{tmp_path / 'go'}'{extra_env}}}\n"
                    f"roles: {{server: {{count: {servers}}}, worker: {{count: {workers}}}}}\n"
                    f"rendezvous: {{startup_timeout: 10m, grace: {grace}}}\n")
    return path


def digest(cli, job: str) -> dict:
    try:
        return json.loads(Path(RunLayout(str(cli.run_dir(job))).digest).read_text())
    except (OSError, ValueError):
        return {}


def all_running(cli, job: str, count: int) -> bool:
    return digest(cli, job).get("states", {}).get("RUNNING") == count


def test_hundreds_of_tasks_ending_at_the_same_moment_succeed(cli, tmp_path):
    """301 tasks; every worker exits at the same moment (a barrier file): the job
    succeeds, no task is reported lost, nothing is left."""
    spec = many_task_spec(tmp_path, servers=100, workers=200)
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 301), 300, "all 301 tasks to run", interval=0.5)
    (tmp_path / "go").touch()
    result = cli.run("wait", job, "--timeout", "120")
    assert result.returncode == 0, result.stderr[-2000:]
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED"
    assert {t["state"] for t in status["tasks"]} == {"SUCCEEDED"}
    assert_no_processes(job)


def test_a_256_task_job_is_torn_down_on_one_failure(cli, tmp_path):
    """1 scheduler, 32 servers, 224 workers in one agent; SIGKILL of one worker stops
    all of them within the grace period (measured from the records)."""
    spec = many_task_spec(tmp_path, servers=32, workers=224, name="big")
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 257), 300, "all 257 tasks to run", interval=0.5)
    run_dir = cli.run_dir(job)
    victim = task_record(run_dir, "worker", 100)
    os.kill(victim["pid"], signal.SIGKILL)
    result = cli.run("wait", job, "--timeout", "120")
    assert result.returncode == 1
    assert "FAILED: worker[100] was killed by SIGKILL" in result.stderr
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    ended = [task_record(run_dir, t["role"], t["rank"])["ended_at"]
             for t in cli.status(job)["tasks"]]
    teardown = max(ended) - abort["at"]
    sys.stderr.write(f"257 tasks: torn down {teardown:.2f}s after the abort\n")
    assert teardown < 2 + 5  # grace 2s, SIGKILL after it, and the loop's own pace
    assert_no_processes(job)


def test_members_start_in_the_loop_that_sees_their_schedulers_socket(cli, tmp_path):
    """The scheduler listens only seconds later, when the members' backoff has reached
    its cap: yet every member starts at once, not at its next look (records' times)."""
    bind = tmp_path / "bind"
    spec = many_task_spec(tmp_path, servers=1, workers=7, name="prompt",
                          extra_env=f", FAKE_SCHEDULER_BIND_AFTER: '{bind}'")
    (tmp_path / "go").touch()  # the workers end as soon as they run
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    scheduler = wait_for(lambda: (task_record(run_dir, "scheduler", 0) or {}).get("exec_at")
                         and task_record(run_dir, "scheduler", 0), 60, "the scheduler")
    # members poll at 20, 40, ... ms up to every 500 ms: in 3 s they reach that cap
    wait_for(lambda: time.time() > scheduler["exec_at"] + 3, 10, "the members' backoff cap")
    bind.touch()
    assert cli.run("wait", job, "--timeout", "120").returncode == 0
    listening = task_record(run_dir, "scheduler", 0)["reached_at"]
    members = [task_record(run_dir, role, rank)
               for role, rank in [("server", 0)] + [("worker", r) for r in range(7)]]
    execs = max(m["exec_at"] for m in members) - listening
    sys.stderr.write(f"8 members exec'd up to {execs:.3f}s after the listen\n")
    # the turn that saw the listen started every member (its time, exactly); polling,
    # each would join at its own next look, up to 0.5 s later (the spawns' own cost
    # on a loaded machine is no part of this)
    assert {m["joined_at"] for m in members} == {listening}, (listening, members)
    assert_no_processes(job)


def test_a_stopped_worker_fails_the_job_as_a_stall(cli, tmp_path):
    spec_env = ", FAKE_TICK: '0.5'"  # busy workers: output every half second
    spec = many_task_spec(tmp_path, servers=1, workers=2, extra_env=spec_env, name="stall")
    text = spec.read_text().replace("grace: 2s", "grace: 2s, stall_timeout: 4s")
    spec.write_text(text)
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 4), 60, "the tasks to run", interval=0.2)
    run_dir = cli.run_dir(job)
    victim = task_record(run_dir, "worker", 1)
    os.kill(victim["pid"], signal.SIGSTOP)
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1, result.stderr
    assert "worker[1] stalled: its process has been stopped" in result.stderr
    assert "idle time of each task:" in result.stderr
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    assert abort["role"] == "worker" and abort["rank"] == 1
    started = task_record(run_dir, "worker", 1)["started_at"]
    assert abort["at"] - started >= 4
    assert_no_processes(job)  # the stopped one included


def test_an_idle_worker_fails_the_job_as_a_stall(cli, tmp_path):
    spec = many_task_spec(tmp_path, servers=1, workers=1, name="idle")
    spec.write_text(spec.read_text().replace("grace: 2s", "grace: 2s, stall_timeout: 3s"))
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1, result.stderr
    assert "worker[0] stalled: it has used no CPU and written no output for" in result.stderr
    assert_no_processes(result.stdout.split()[0])


def test_killed_agent_of_a_detached_job_is_noticed(cli, tmp_path):
    """The local job's agent dies (SIGKILL): its roles die with it, and `wait` reports
    the tasks lost."""
    spec = many_task_spec(tmp_path, servers=2, workers=2, name="agentkill")
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 5), 60, "the tasks to run", interval=0.2)
    agent = task_record(cli.run_dir(job), "server", 0)["supervisor_pid"]
    os.kill(agent, signal.SIGKILL)
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1
    # every task of the dead agent is named lost, none is left running
    assert re.search(r"(scheduler|server|worker)\[\d\] lost: ", result.stderr), result.stderr
    assert cli.status(job)["state"] == "FAILED"
    assert_no_processes(job)


def test_a_task_started_a_second_time_in_its_attempt_ends_it_as_a_preemption(cli, tmp_path):
    """What a batch system does when it re-runs a task (SGE after ``qmod -rj`` or a lost
    host, Slurm's requeue) before anybody recorded the first run's end: a second
    supervisor of worker[0] starts in the same attempt. It starts no role; the attempt
    ends as a preemption naming the re-run and the first run, and nothing is left."""
    spec = many_task_spec(tmp_path, servers=1, workers=2, name="rerun")
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 4), 60, "the tasks to run", interval=0.2)
    run_dir = cli.run_dir(job)
    first = task_record(run_dir, "worker", 0)
    index = next(t["index"] for t in json.loads(Path(RunLayout(str(run_dir)).plan)
                                                .read_text())["tasks"]
                 if t["role"] == "worker" and t["rank"] == 0)
    rerun = subprocess.run([sys.executable, "-m", "mxbatch.runtime", "run", str(run_dir),
                            "--task", str(index)], env=cli.env, capture_output=True,
                           text=True, timeout=60)
    assert rerun.returncode == 1, rerun.stderr
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1, result.stderr
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    assert abort["end"] == "preempted" and (abort["role"], abort["rank"]) == ("worker", 0)
    assert ("worker[0] started a second time in attempt 0: the batch system re-ran it after "
            f"its first run (on {first['host']}, supervisor pid {first['supervisor_pid']}, "
            "last recorded RUNNING) ended with no end recorded") in abort["reason"], abort
    assert abort["reason"] in result.stderr
    assert_no_processes(job)


def _voluntary_switches(pid: int) -> int:
    """How often process ``pid``'s main thread has gone to sleep (its voluntary context
    switches): an agent's loop sleeps once a turn."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no context switch count for pid {pid}")


@pytest.fixture
def memory_cli(home):
    """A ``Cli`` whose run directories are in memory (/dev/shm): record writes' fsyncs
    return at once there, so an agent's sleeps are its loop's alone, not the disk's
    (a loaded disk makes one fsync sleep many times). ``home`` sets the test's
    environment (no site config), which the ``Cli`` inherits."""
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="mxbatch-test-") as memory:
        yield Cli(Path(memory) / "home")


def test_an_idle_agent_sleeps_until_something_is_due(memory_cli, tmp_path):
    """An agent whose roles run and say nothing wakes for what is due (the abort poll,
    the progress look, the watcher's look, a heartbeat: a few times a second), not at a
    fixed fast pace: 1,000 idle MPI ranks are 1,000 such agents. Its turns are counted
    as its sleeps between two of its own heartbeats (Schedule.heartbeat_s, 5 s): a loop
    at 20 turns a second would sleep 100 times in that span."""
    cli = memory_cli
    spec = many_task_spec(tmp_path, servers=1, workers=2, name="idleagent")
    job = cli.submit(spec)
    wait_for(lambda: all_running(cli, job, 4), 60, "the tasks to run", interval=0.2)
    run_dir = cli.run_dir(job)
    agent = task_record(run_dir, "worker", 0)["supervisor_pid"]

    def next_heartbeat(after: int) -> int:
        return wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get(
            "heartbeat", after) > after and task_record(run_dir, "worker", 0)["heartbeat"],
            60, "the next heartbeat", interval=0.05)

    beat = next_heartbeat(task_record(run_dir, "worker", 0)["heartbeat"])
    first = _voluntary_switches(agent)
    next_heartbeat(beat)
    sleeps = _voluntary_switches(agent) - first
    sys.stderr.write(f"an idle agent of 4 tasks: {sleeps} sleeps between two heartbeats\n")
    # (5 here at ease; its records live in memory, where an fsync never sleeps)
    assert sleeps < 50
    (tmp_path / "go").touch()
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 0, result.stderr[-2000:]
    assert_no_processes(job)


def test_a_runner_says_when_its_next_timed_check_falls(tmp_path):
    """``TaskRunner.next_due`` for each phase: the agent sleeps until the earliest."""
    from mxbatch.runtime.rendezvous import FileRendezvous
    from mxbatch.runtime.taskrunner import Phase, TaskRunner

    from .test_rendezvous import small_plan

    plan = small_plan(str(tmp_path), created_at=time.time(), grace_s=3.0, exit_timeout_s=60.0)
    plan.tasks[1] = dataclasses.replace(plan.tasks[1], walltime_s=100.0)
    os.makedirs(plan.layout.logs_dir, exist_ok=True)
    server = TaskRunner(plan, plan.tasks[1], FileRendezvous(str(tmp_path)), {}, os.getpid())
    wall, mono = 1000.0, 50.0
    try:
        assert server.next_due(wall, mono, None) is None  # queued: the agent's business
        server.phase, server._next_poll = Phase.WAITING, 51.0
        assert server.next_due(wall, mono, None) == 51.0
        # the startup deadline, when it comes before the next look: checked at once
        before_deadline = plan.startup_deadline - 0.5
        assert server.next_due(before_deadline, mono, None) == pytest.approx(mono + 0.5, abs=0.01)
        server.phase, server.record.started_at = Phase.RUNNING, wall - 40
        assert server.next_due(wall, mono, None) == pytest.approx(mono + 60, abs=0.01)
        server._finished = (os.getpid(), mono - 10)  # its code finished: the exit hang
        assert server.next_due(wall, mono, None) == mono - 10 + 60
        # every worker succeeded: a server ends at its next step (training is over)
        assert server.next_due(wall, mono, mono - 1) == mono
        server._mismatch = "server[0] runs another MXNet than its scheduler"
        assert server.next_due(wall, mono, None) == mono  # it fails at its next step
        server._mismatch = None
        server.phase, server._hold_until = Phase.HOLDING, 70.0
        assert server.next_due(wall, mono, None) == 70.0
        server.phase, server._kill_at = Phase.STOPPING, 53.0
        assert server.next_due(wall, mono, None) == 53.0
        server._kill_at = None  # SIGKILLed: its exit wakes the agent
        assert server.next_due(wall, mono, None) is None
    finally:
        server.close()


def test_the_loop_sleeps_until_the_earliest_due_and_no_longer_than_its_cap(tmp_path):
    """``Agent._sleep_s``: at once for a queued task with a free slot; else until the
    earliest timed check, at most IDLE_S (TICK_S with an on_tick)."""
    from mxbatch.runtime.agent import IDLE_S, TICK_S, Agent
    from mxbatch.runtime.rendezvous import FileRendezvous
    from mxbatch.runtime.taskrunner import Phase

    from .test_rendezvous import small_plan

    plan = small_plan(str(tmp_path), created_at=time.time())
    os.makedirs(plan.layout.logs_dir, exist_ok=True)
    files = FileRendezvous(str(tmp_path))
    files.prepare(plan)
    agent = Agent(plan, [plan.tasks[1], plan.tasks[2]], files)
    previous = agent._install_signals()  # (a signal can wake it: the long cap)
    try:
        mono = time.monotonic()
        assert agent._sleep_s(time.time(), mono) == 0.0  # queued, slots free
        for runner in agent.runners:
            runner.phase = Phase.RUNNING
        assert IDLE_S - 0.1 < agent._sleep_s(time.time(), mono) <= IDLE_S
        kill_in = 0.5  # (a stall of the test itself only shortens the sleep)
        agent.runners[1].phase = Phase.STOPPING
        agent.runners[1]._kill_at = time.monotonic() + kill_in
        assert agent._sleep_s(time.time(), mono) <= kill_in < IDLE_S
        agent.runners[1].phase = Phase.RUNNING
        agent.on_tick = lambda: None
        assert agent._sleep_s(time.time(), mono) <= TICK_S
    finally:
        agent._restore_signals(previous)
        for runner in agent.runners:
            runner.close()
