"""A live job survives whatever happens to the terminal that follows it (issue 34, 3):
the attached CLI stopped (Ctrl-Z, SIGTSTP; SIGSTOP) for longer than the heartbeat
timeout while another shell runs ``status``, ``wait`` and ``clean``; its stdout a pipe
whose reader has gone (``| head -3``), closed (``>&-``), full (``>/dev/full``), or a
pipe nobody reads. Local backend, stand-in roles, real signals, real pipes."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from mxbatch.runtime import procs

from .conftest import FAKEROLE, assert_no_processes, task_record, wait_for
from .test_progress import Tmux, terminal_env, tmux  # noqa: F401 (the fixture)

HEARTBEAT_TIMEOUT_S = 3  # the least a spec may set
#: how long after its last record the stopped supervisor's silence counts (the
#: heartbeat timeout and supervised.HEARTBEAT_MARGIN_S), with a second to spare
SILENT_AFTER_S = HEARTBEAT_TIMEOUT_S + 2 + 1

#: a worker that writes 20 kB of output a second for $LOUD_S seconds, then exits 0: a
#: stopped supervisor's pipe from it fills within seconds
LOUD_WORKER = ("import os, time\n"
               "end = time.time() + float(os.environ['LOUD_S'])\n"
               "while time.time() < end:\n"
               "    print('x' * 499, flush=True)\n"
               "    time.sleep(0.025)\n")


def spec(tmp_path: Path, *, seconds: float, loud: bool = False, extra: str = "") -> Path:
    """Two servers, two workers ticking for ``seconds`` (``loud``: a third worker that
    fills its pipe), a short heartbeat timeout and stall timeout."""
    fake = [sys.executable, str(FAKEROLE)]
    workers = 3 if loud else 2
    worker = fake
    if loud:  # worker[2] is loud: a bash wrapper picks by rank
        script = tmp_path / "loud.py"
        script.write_text(LOUD_WORKER)
        worker = ["bash", "-c", f'if [ "$MXBATCH_RANK" = 2 ]; then exec {sys.executable} '
                  f'{script}; else exec {shlex.join(fake)}; fi']
    path = tmp_path / "follow.yaml"
    path.write_text(
        f"name: follow\ncommand: {json.dumps(fake)}\n"
        f"roles:\n  server: {{count: 2}}\n"
        f"  worker: {{count: {workers}, command: {json.dumps(worker)}}}\n"
        "rendezvous: {startup_timeout: 60s, grace: 1s, stall_timeout: 3s, "
        f"heartbeat_timeout: {HEARTBEAT_TIMEOUT_S}s}}\n"
        f"env: {{FAKE_SLEEP: '{seconds}', FAKE_TICK: '0.2', LOUD_S: '{seconds}'}}\n"
        + extra)
    return path


def _running(cli, job: str) -> None:
    run_dir = cli.run_dir(job)
    wait_for(lambda: all((task_record(run_dir, "worker", r) or {}).get("state") == "RUNNING"
                         for r in (0, 1)), 60, "the workers to run")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rpartition(")")[2].split()[0]


def _job_of(out: Path, proc: subprocess.Popen) -> str:
    def job():
        assert proc.poll() is None, proc.communicate()
        text = out.read_text()
        return text.split("\n")[0] if "\n" in text else None
    return wait_for(job, 60, "the job id")


def _role_pids(cli, job: str) -> list:
    run_dir = cli.run_dir(job)
    return [task_record(run_dir, role, rank)["pid"]
            for role, rank in (("scheduler", 0), ("server", 0), ("server", 1),
                               ("worker", 0), ("worker", 1))]


def _while_stopped(cli, job: str, cli_pid: int) -> subprocess.Popen:
    """What another shell does while the attached CLI is stopped, past the heartbeat
    timeout: ``status`` says RUNNING (and why nothing moves), ``clean`` removes nothing,
    a ``wait`` waits (returned: it runs on), every role runs on."""
    roles = _role_pids(cli, job)
    time.sleep(SILENT_AFTER_S)
    assert _state(cli_pid) == "T"
    status = cli.status(job)
    assert status["state"] == "RUNNING", status
    assert "is stopped" in status["note"] and "without a heartbeat" in status["note"], status
    assert {t["state"] for t in status["tasks"]} == {"RUNNING"}, status
    waiter = cli.popen("wait", job)
    for how in (["--state", "failed"], []):
        cleaned = cli.run("clean", "--older-than", "1s", *how)
        assert cleaned.returncode == 0, cleaned.stderr
        assert job not in cleaned.stdout + cleaned.stderr, cleaned
    assert (cli.home / "jobs" / f"{job}.json").is_file() and cli.run_dir(job).is_dir()
    time.sleep(1.5)
    assert waiter.poll() is None, waiter.communicate()
    assert all(procs.pid_alive(pid) for pid in roles), roles
    assert cli.status(job)["state"] == "RUNNING"
    return waiter


def test_a_stopped_attached_cli_pauses_its_job_and_fg_carries_on(cli, tmp_path):
    out = tmp_path / "out"
    with open(out, "w") as stdout:  # a process group of its own, as a shell's job has
        proc = subprocess.Popen([sys.executable, "-m", "mxbatch", "submit", "--wait",
                                 str(spec(tmp_path, seconds=14, loud=True))],
                                stdout=stdout, stderr=subprocess.PIPE, text=True,
                                env=cli.env, process_group=0)
    job = _job_of(out, proc)
    _running(cli, job)
    os.kill(proc.pid, signal.SIGTSTP)  # Ctrl-Z
    wait_for(lambda: _state(proc.pid) == "T", 10, "the CLI to stop")
    waiter = _while_stopped(cli, job, proc.pid)
    time.sleep(3)  # stopped longer than the stall timeout: the loud worker's pipe is full
    os.kill(proc.pid, signal.SIGCONT)  # fg
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert f"job {job} SUCCEEDED" in err, err
    waited = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, waited
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and not status["note"], status
    assert out.read_text().count("x" * 499) > 100  # the loud worker's output, all of it
    assert_no_processes(job)


def test_sigstop_of_an_attached_launch_pauses_its_job(cli, tmp_path):
    config = tmp_path / "config.yaml"  # launch has no flag for it: the site's default
    config.write_text("defaults:\n  rendezvous: {heartbeat_timeout: %ds}\n"
                      % HEARTBEAT_TIMEOUT_S)
    proc = cli.popen("launch", "-n", "2", "-s", "1", "--", sys.executable, str(FAKEROLE),
                     env={"FAKE_SLEEP": "12", "FAKE_TICK": "0.5",
                          "MXBATCH_CONFIG": str(config)}, cwd=tmp_path, process_group=0)
    job = proc.stdout.readline().strip()
    run_dir = cli.run_dir(job)
    wait_for(lambda: (task_record(run_dir, "worker", 1) or {}).get("state") == "RUNNING",
             60, "the workers to run")
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(SILENT_AFTER_S)
    status = cli.status(job)
    assert status["state"] == "RUNNING" and "is stopped" in status["note"], status
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0 and f"job {job} SUCCEEDED" in err, err


def _shell(cli, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=cli.env, timeout=timeout)


def _mxbatch() -> str:
    return f"{shlex.quote(sys.executable)} -m mxbatch"


def _last_job(cli) -> str:
    return max((cli.home / "jobs").glob("*.json"), key=os.path.getmtime).stem


def _clean_stderr(err: str) -> None:
    for word in ("Traceback", "Exception ignored", "BrokenPipeError", "internal error"):
        assert word not in err, err


def test_submit_wait_piped_to_head_keeps_its_job(cli, tmp_path):
    path = spec(tmp_path, seconds=5)
    result = _shell(cli, f"{_mxbatch()} submit --wait {path} | head -3; "
                         'echo "mxbatch exited ${PIPESTATUS[0]}" >&2')
    job = _last_job(cli)
    assert len(result.stdout.splitlines()) == 3, result.stdout
    assert "mxbatch exited 0" in result.stderr, result.stderr
    assert f"job {job} SUCCEEDED" in result.stderr, result.stderr
    assert "cannot write to stdout (broken pipe" in result.stderr, result.stderr
    _clean_stderr(result.stderr)
    assert cli.status(job)["state"] == "SUCCEEDED"


def test_launch_piped_to_head_blocks_until_its_job_ended_and_says_so(cli, tmp_path):
    result = _shell(cli, f"FAKE_SLEEP=4 FAKE_TICK=0.2 {_mxbatch()} launch -n 2 -s 1 -- "
                         f"{shlex.quote(sys.executable)} {FAKEROLE} | head -3; "
                         'echo "mxbatch exited ${PIPESTATUS[0]}" >&2')
    job = _last_job(cli)
    assert "mxbatch exited 0" in result.stderr, result.stderr
    assert f"this process supervises {job} until it ends" in result.stderr, result.stderr
    _clean_stderr(result.stderr)
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and status["terminal"], status


def test_stdout_closed_or_full_changes_nothing_of_the_job(cli, tmp_path):
    path = spec(tmp_path, seconds=3)
    for redirect, said in ((">&-", ""), (">/dev/full", "No space left on device")):
        result = _shell(cli, f"{_mxbatch()} submit --wait {path} {redirect}")
        job = _last_job(cli)
        assert result.returncode == 0, (redirect, result.stderr)
        assert f"job {job} SUCCEEDED" in result.stderr, result.stderr
        assert said in result.stderr, result.stderr
        _clean_stderr(result.stderr)
        assert cli.status(job)["state"] == "SUCCEEDED"


def test_a_reader_that_does_not_read_stalls_nothing(cli, tmp_path):
    """``| less`` at a full page: the supervisor writes its records and the job goes on
    while nothing reads its logs; they all come once the reader reads."""
    path = spec(tmp_path, seconds=16, loud=True)
    reader = subprocess.Popen(["bash", "-c", f"{_mxbatch()} submit --wait {path} | "
                               f"(sleep 20; wc -l)"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=cli.env)
    job = wait_for(lambda: next((p.stem for p in (cli.home / "jobs").glob("*.json")), None),
                   60, "the job's record")
    _running(cli, job)
    until = time.monotonic() + 4 + SILENT_AFTER_S  # the pipe to `sleep` is full in 4s
    while time.monotonic() < until:
        status = cli.status(job)
        assert status["state"] == "RUNNING" and not status["note"], status
        time.sleep(1)
    out, err = reader.communicate(timeout=90)
    assert f"job {job} SUCCEEDED" in err, err
    assert int(out.strip()) > 300  # every line of the loud worker came, late
    assert cli.status(job)["state"] == "SUCCEEDED"


def test_a_follower_whose_stdout_breaks_ends_and_the_job_goes_on(cli, tmp_path):
    job = cli.submit(spec(tmp_path, seconds=6))  # detached: `wait` only follows it
    result = _shell(cli, f"{_mxbatch()} wait {job} --logs | head -2; "
                         'echo "mxbatch exited ${PIPESTATUS[0]}" >&2')
    assert "mxbatch exited 1" in result.stderr, result.stderr
    assert f"no longer following {job}, which goes on" in result.stderr, result.stderr
    _clean_stderr(result.stderr)
    assert cli.status(job)["state"] == "RUNNING"
    assert cli.run("wait", job, "--timeout", "60").returncode == 0


def test_ctrl_z_in_a_real_terminal_then_fg(cli, tmp_path, tmux):  # noqa: F811
    """A real Ctrl-Z in an interactive bash (its job control), a `status`, `wait` and
    `clean` from another shell, then `fg`: the job succeeds."""
    path = spec(tmp_path, seconds=12)
    env = dict(terminal_env(cli), PS1="$ ")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    tmux("new-session", "-d", "-x", "160", "-y", "30", "-s", "t",
         f"env {exports} bash --norc --noprofile -i")
    tmux("send-keys", "-t", "t", f"{_mxbatch()} submit --wait {path}", "Enter")
    job = wait_for(lambda: next((p.stem for p in (cli.home / "jobs").glob("*.json")), None),
                   60, "the job's record")
    _running(cli, job)
    tmux("send-keys", "-t", "t", "C-z")
    wait_for(lambda: "Stopped" in tmux.pane(), 10, "bash to say the job stopped")
    pid = task_record(cli.run_dir(job), "worker", 0)["supervisor_pid"]
    waiter = _while_stopped(cli, job, pid)
    tmux("send-keys", "-t", "t", "fg; echo EXIT=$?", "Enter")  # fg: the job's status
    wait_for(lambda: re.search(r"EXIT=\d", tmux.pane()), 90, "the job to end after fg")
    pane = tmux.pane()
    assert "EXIT=0" in pane and f"job {job} SUCCEEDED" in pane, pane
    assert waiter.wait(timeout=60) == 0


def test_exiting_the_shell_of_a_stopped_cli_cancels_its_job(cli, tmp_path, tmux):  # noqa: F811
    """A stopped CLI never outlives its shell unseen: bash ends its stopped jobs on exit
    (SIGTERM and SIGCONT), and the job is cancelled, nothing of it left."""
    path = spec(tmp_path, seconds=60)
    env = dict(terminal_env(cli), PS1="$ ")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    tmux("new-session", "-d", "-x", "160", "-y", "30", "-s", "t",
         f"env {exports} bash --norc --noprofile -i")
    tmux("send-keys", "-t", "t", f"{_mxbatch()} submit --wait {path}", "Enter")
    job = wait_for(lambda: next((p.stem for p in (cli.home / "jobs").glob("*.json")), None),
                   60, "the job's record")
    _running(cli, job)
    tmux("send-keys", "-t", "t", "C-z")
    wait_for(lambda: "Stopped" in tmux.pane(), 10, "bash to say the job stopped")
    tmux("send-keys", "-t", "t", "exit", "Enter")  # "There are stopped jobs."
    wait_for(lambda: "stopped jobs" in tmux.pane(), 10, "bash's warning")
    tmux("send-keys", "-t", "t", "exit", "Enter")
    status = wait_for(lambda: (lambda s: s if s["terminal"] else None)(cli.status(job)), 60,
                      "the job to end")
    assert status["state"] == "CANCELLED" and "interrupted" in status["reason"], status
    assert_no_processes(job)
