"""Real MXNet dist_sync jobs through the local backend: success, and every failure path
killing or crashing a real role, each ending fast and leaving no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import assert_no_processes, copy_example, job_times, task_record, wait_for

pytestmark = pytest.mark.mxnet


#: what a lean scheduler says in its log (``rendezvous.scheduler: lean``, the default)
LEAN_LINE = "runs ps-lite's scheduler from "


def worker_summary(output: str):
    """{kv rank: (num_workers, [epoch losses])} from the example's worker lines."""
    seen = {}
    for match in re.finditer(r"\[worker rank=(\d+)\] kvstore=dist_sync rank=\d+ "
                             r"num_workers=(\d+)", output):
        seen[int(match.group(1))] = (int(match.group(2)), [])
    for match in re.finditer(r"\[worker rank=(\d+)\] epoch \d+ loss ([\d.]+)", output):
        seen[int(match.group(1))][1].append(float(match.group(2)))
    return seen


def assert_trained(output: str) -> None:
    summary = worker_summary(output)
    assert sorted(summary) == [0, 1], output  # distinct ranks
    for num_workers, losses in summary.values():
        assert num_workers == 2
        assert len(losses) >= 2 and losses[-1] < losses[0], losses


def test_example_job_trains_with_submit_wait(cli, example):
    """With ``rendezvous.scheduler: script`` (the default is lean, below): the
    scheduler's script runs, and MXNet's import of it serves, as under launch.py."""
    example.write_text(example.read_text().replace("rendezvous:\n",
                                                   "rendezvous:\n  scheduler: script\n"))
    result = cli.run("submit", "--wait", str(example), env={"EPOCHS": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert cli.status(job)["state"] == "SUCCEEDED"
    assert_no_processes(job)
    assert LEAN_LINE not in _read(cli.run_dir(job) / "logs" / "scheduler-0.log")


def test_example_job_trains_with_launch(cli, example):
    result = cli.run("launch", "-n", "2", "-s", "2", "--", "python3", "train_mlp.py",
                     "--kvstore", "dist_sync", "--epochs", "3", cwd=example.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert_no_processes(job)
    # the lean scheduler (the default): ps-lite's scheduler from MXNet's library, its
    # create reported (the supervisor then looks for the bind every few milliseconds),
    # the listen seen after it, and its end
    log = _read(cli.run_dir(job) / "logs" / "scheduler-0.log")
    assert 0 <= log.find(LEAN_LINE) < log.find("scheduler[0]: connecting") \
        < log.find("listening on") < log.find("scheduler[0]: finished"), log
    assert "exited with code 0" in log


def test_uncaught_exception_in_one_worker_fails_the_job_fast(cli, example):
    # kv rank 1 raises after 20 steps while the other worker keeps training
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "20", "STEP_SLEEP": "0.02", "EPOCHS": "50"}
    result = cli.run("submit", "--wait", str(example), env=env)
    assert result.returncode == 1
    assert "RuntimeError: simulated crash on worker rank 1" in result.stdout
    assert re.search(r"FAILED: worker\[\d\] exited with code 1", result.stderr)
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))  # the job's own clock, not the CLI's
    crashed = min(r["ended_at"] for label, r in times.tasks.items() if "worker" in label)
    assert times.abort_at - crashed < 5 and times.last_end - times.abort_at < 10
    status = cli.status(job)
    assert status["state"] == "FAILED" and "exited with code 1" in status["reason"]
    assert_no_processes(job)


def _start_long_job(cli, example) -> tuple:
    env = {"STEP_SLEEP": "0.05", "EPOCHS": "100"}
    job = cli.submit(example, env=env)
    run_dir = cli.run_dir(job)
    wait_for(lambda: "first step" in _read(run_dir / "logs" / "worker-0.log"), 60,
             "the first training step")
    return job, run_dir


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("role,rank", [("worker", 0), ("server", 1), ("scheduler", 0)])
def test_killed_role_fails_the_job_fast(cli, example, role, rank):
    job, run_dir = _start_long_job(cli, example)
    victim = task_record(run_dir, role, rank)["pid"]
    os.kill(victim, signal.SIGKILL)
    killed = time.time()
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1
    times = job_times(run_dir)  # the job's own clock, not the wait command's
    assert times.abort_at - killed < 10 and times.last_end - times.abort_at < 10
    assert f"FAILED: {role}[{rank}] was killed by SIGKILL" in result.stderr
    status = cli.status(job)
    assert status["state"] == "FAILED" and f"{role}[{rank}]" in status["reason"]
    assert_no_processes(job)


def test_startup_deadline_when_workers_never_start(cli, example, tmp_path):
    # Three slots: the scheduler and both servers start, the workers never do.
    spec = tmp_path / "starved.yaml"
    spec.write_text(example.read_text().replace("startup_timeout: 5m", "startup_timeout: 20s")
                    .replace("workdir: .", f"workdir: {example.parent}")
                    + "backends:\n  local: {slots: 3}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert "startup deadline (20s) passed" in result.stderr
    assert "worker[0], worker[1]" in result.stderr
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))  # the job's own clock, not the CLI's
    assert 0 <= times.abort_at - times.startup_deadline < 5
    assert_no_processes(job)


def test_stopped_worker_fails_the_job_within_40s(cli, example):
    """A worker frozen with SIGSTOP (like a deadlock or a frozen node) with a 20 s stall
    timeout: the job fails within 40 s naming it, and nothing is left, the stopped
    process included."""
    example.write_text(example.read_text().replace("grace: 10s", "grace: 10s\n"
                                                                 "  stall_timeout: 20s"))
    job, run_dir = _start_long_job(cli, example)
    victim = task_record(run_dir, "worker", 1)["pid"]
    os.kill(victim, signal.SIGSTOP)
    stopped = time.time()
    result = cli.run("wait", job, "--timeout", "90")
    assert result.returncode == 1, result.stderr
    assert "FAILED: worker[1] stalled: its process has been stopped" in result.stderr
    abort = json.loads((run_dir / "abort.json").read_text())
    assert 20 <= abort["at"] - stopped < 40
    ended = max(task_record(run_dir, t["role"], t["rank"])["ended_at"]
                for t in cli.status(job)["tasks"])
    assert ended - abort["at"] < 15  # grace 10 s: SIGTERM, SIGCONT, SIGKILL
    assert_no_processes(job)


def test_cancel_running_training(cli, example):
    job, _ = _start_long_job(cli, example)
    result = cli.run("cancel", job)
    assert result.returncode == 0
    assert cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job, timeout=0)
    assert cli.run("cancel", job).returncode == 0


def test_two_jobs_sharing_a_one_port_range_never_join_each_other(cli, tmp_path):
    # Both schedulers start on the same free port before either binds it (the sleep):
    # one job's scheduler gets it; the other's must not take that listener for its own
    # (its members would join the first job's ps-lite): it fails naming the port.
    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    scheduler = ["sh", "-c", "sleep 3; exec python3 train_mlp.py --kvstore dist_sync"]
    specs = []
    for name in ("first", "second"):
        spec = copy_example(tmp_path / name)
        spec.write_text(spec.read_text().replace("ports: 9000-9999", f"ports: {port}-{port}")
                        .replace("  worker: {count: 2}", "  worker: {count: 2}\n"
                                 f"  scheduler: {{command: {json.dumps(scheduler)}}}"))
        specs.append(spec)
    procs_ = [cli.popen("submit", "--wait", str(spec), env={"EPOCHS": "2"}) for spec in specs]
    outputs = []  # (exit status, stdout, stderr) of each
    try:
        for proc in procs_:
            stdout, stderr = proc.communicate(timeout=300)
            outputs.append((proc.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        pytest.fail("a job did not end within 300 s (one joined the other's scheduler?)")
    finally:
        for proc in procs_:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    jobs = [out.split()[0] for _, out, _ in outputs]
    for job in jobs:
        assert json.loads((cli.run_dir(job) / "scheduler.json").read_text())["port"] \
            == port  # both chose it: the race happened
    codes = [code for code, _, _ in outputs]
    assert sorted(codes) == [0, 1], [err[-2000:] for _, _, err in outputs]
    assert_trained(outputs[codes.index(0)][1])
    lost = jobs[codes.index(1)]
    reason = cli.status(lost)["reason"]
    assert re.search(rf"scheduler\[0\]: no free port in {port}-{port}; .*port {port}\b", reason), \
        reason
    for role in ("server", "worker"):  # its members never went past their start gate
        record = task_record(cli.run_dir(lost), role, 0) or {}
        assert not record.get("joined_at") and not record.get("reached_at"), record
    for job in jobs:
        assert_no_processes(job)
