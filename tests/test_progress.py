"""The live status line: its text, plain lines off a terminal, and the real thing in a
terminal (tmux), redrawn in place while logs scroll above it."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid

import pytest

from mxbatch.backends.status import JobState, JobStatus, TaskStatus
from mxbatch.cli.progress import Progress, ProgressMode, clock, summary
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import TaskState

from .conftest import wait_for
from .test_local import fake_spec


def status(*states, started=100.0) -> JobStatus:
    roles = [Role.SCHEDULER, Role.SERVER] + [Role.WORKER] * (len(states) - 2)
    ranks = [0, 0] + list(range(len(states) - 2))
    tasks = [TaskStatus(role=r, rank=k, state=s, started_at=None if s is TaskState.PENDING
                        else started) for r, k, s in zip(roles, ranks, states)]
    return JobStatus(job_id="j-1", backend="local", state=JobState.RUNNING, tasks=tasks)


def test_summary_counts_roles_by_state_and_times():
    running = status(TaskState.RUNNING, TaskState.RUNNING, TaskState.RUNNING,
                     TaskState.PENDING)
    assert summary(running, 90.0, 155.0) == (
        "j-1 RUNNING | scheduler: 1 running | server: 1 running | "
        "worker: 1 running, 1 queued | queued 1m05s | elapsed 1m05s")
    started = status(TaskState.RUNNING, TaskState.RUNNING, TaskState.SUCCEEDED,
                     TaskState.RUNNING, started=102.0)
    assert "queued 12s | elapsed 1h00m" in summary(started, 90.0, 3690.0)
    assert "worker: 1 running, 1 succeeded" in summary(started, 90.0, 100.0)
    assert clock(59.9) == "59s"


def test_plain_lines_on_change_and_periodically():
    now = [0.0]
    out = io.StringIO()
    progress = Progress(ProgressMode.PLAIN, out, 0.0, now=lambda: now[0])
    queued = status(TaskState.PENDING, TaskState.PENDING, TaskState.PENDING)
    running = status(TaskState.RUNNING, TaskState.RUNNING, TaskState.RUNNING)
    for t, s in ((0, queued), (1, queued), (1.5, running), (3, running), (20, running),
                 (34, running)):
        now[0] = t
        progress.on_status(s)
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["mxbatch: j-1 RUNNING"] * 3
    assert "queued" in lines[0] and "elapsed 3s" in lines[1] and "elapsed 34s" in lines[2]
    assert "\r" not in out.getvalue()


def test_live_line_is_redrawn_in_place_and_cleared_for_logs():
    out = io.StringIO()
    logs = []
    progress = Progress(ProgressMode.LIVE, out, 0.0, now=lambda: 5.0)
    progress.on_status(status(TaskState.RUNNING, TaskState.RUNNING, TaskState.RUNNING))
    progress.wrap(logs.append)("worker[0] | hello")
    progress.clear()
    assert out.getvalue().startswith("\r\x1b[Kj-1 RUNNING")
    assert out.getvalue().endswith("\r\x1b[K") and "\n" not in out.getvalue()
    assert logs == ["worker[0] | hello"]
    quiet = io.StringIO()
    Progress(ProgressMode.QUIET, quiet, 0.0).on_status(status(TaskState.RUNNING,
                                                              TaskState.RUNNING))
    assert quiet.getvalue() == ""


class Tmux:
    """One tmux server of this test (its own socket), a 160x30 terminal."""

    def __init__(self) -> None:
        self.socket = f"mxbatch-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        # a clean environment: pytest's (COLUMNS...) would reach the terminal's programs
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"),
               "TERM": "xterm"}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, check=True, env=env).stdout

    def start(self, command: str, env: dict) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        self("new-session", "-d", "-x", "160", "-y", "30", "-s", "t",
             f"env {exports} {command}; echo EXIT=$?; sleep 120")

    def pane(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    terminal = Tmux()
    yield terminal
    terminal.close()


def terminal_env(cli) -> dict:
    return {name: cli.env[name] for name in ("MXBATCH_HOME", "MXBATCH_CONFIG", "PATH", "HOME")}


def _status_lines(pane: str):
    return [line for line in pane.splitlines() if "| elapsed " in line]


def test_progress_line_in_a_real_terminal(cli, tmp_path, tmux):
    spec = fake_spec(tmp_path, workers=2, extra="backends: {local: {slots: 3}}\n")
    job = cli.submit(spec, env={"FAKE_SLEEP": "6"})
    tmux.start(f"{shlex.quote(sys.executable)} -m mxbatch wait {job}", terminal_env(cli))
    seen = set()

    def line_with_worker_counts():
        pane = tmux.pane()
        lines = _status_lines(pane)
        assert len(lines) <= 1, lines  # one line, redrawn in place
        assert "EXIT=" not in pane, (pane, seen)  # the job must not end unseen
        if lines:
            seen.add(lines[0])
        waiting = r"worker: 1 running, 1 queued \| queued \d+s"  # waiting for a slot
        return lines and re.search(waiting, lines[0])

    first = wait_for(line_with_worker_counts, 60, "the status line with one worker waiting")

    def line_redrawn():
        line_with_worker_counts()
        return "1 succeeded" in " ".join(seen)

    wait_for(line_redrawn, 60, "the same line showing the first worker done")
    assert len(seen) >= 2 and first
    wait_for(lambda: "EXIT=" in tmux.pane(), 60, "mxbatch wait to end")
    pane = tmux.pane()
    assert "EXIT=0" in pane and f"job {job} SUCCEEDED" in pane
    assert _status_lines(pane) == []  # cleared at the end
    # every line is the job's status line; the first ones may come before its scheduler
    # runs (on a loaded machine `wait` can attach that early)
    early = "queued|pending|starting|running"
    assert all(re.match(rf"{job} (PENDING|RUNNING) \| scheduler: 1 ({early})", s)
               for s in seen), seen


def test_logs_scroll_above_the_status_line(cli, tmp_path, tmux):
    spec = fake_spec(tmp_path, workers=1)
    tmux.start(f"{shlex.quote(sys.executable)} -m mxbatch submit --wait {spec}",
               dict(terminal_env(cli), FAKE_SLEEP="4", FAKE_TICK="0.5"))

    def log_and_line():
        pane = tmux.pane()
        lines = [line for line in pane.splitlines() if line.strip()]
        status_lines = _status_lines(pane)
        assert len(status_lines) <= 1, pane
        return (status_lines and "worker[0]" in pane and lines[-1] == status_lines[0]
                and "RUNNING" in status_lines[0])

    wait_for(log_and_line, 60, "log lines above the status line")
    wait_for(lambda: "EXIT=" in tmux.pane(), 60, "submit --wait to end")
    assert "EXIT=0" in tmux.pane() and _status_lines(tmux.pane()) == []
