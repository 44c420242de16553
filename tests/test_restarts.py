"""Restarts on the local backend with stand-in roles (fast, no MXNet): the attempt as a
first-class concept (per-attempt records and logs, MXBATCH_ATTEMPT), the policy on the
end reasons (budget exhausted, a start-up failure, the same failure twice), a cancel
while the job waits between attempts, a preemption (SIGTERM to the job manager: the
workers checkpoint, the job relaunches) and the walltime less the checkpoint lead.
The policy itself and the spec keys are unit-tested first."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from mxbatch.errors import SpecError
from mxbatch.runtime.attempts import AttemptRecord, RestartPlan, decide
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.states import EndReason
from mxbatch.spec import parse as specs

from .conftest import FAKEROLE, assert_no_processes, wait_for

# ------------------------------------------------------------------------ the policy


def _ended(index, reason, role="worker", rank=0, code=1, startup=False):
    return AttemptRecord(index=index, started_at=0.0, ended_at=1.0, reason=reason,
                         detail=f"{role}[{rank}] exited with code {code}", role=role,
                         rank=rank, exit_code=code, startup=startup)


PLAN = RestartPlan(max=3)


@pytest.mark.parametrize("history,restart,why", [
    ([_ended(0, EndReason.SUCCEEDED)], False, "succeeded"),
    ([_ended(0, EndReason.CANCELLED)], False, "cancelled"),
    ([_ended(0, EndReason.FAILURE)], True, "restarting as attempt 1 (restarts.max 3)"),
    ([_ended(0, EndReason.STALL)], False, "stall is not in restarts.on"),
    ([_ended(0, EndReason.FAILURE, startup=True)], False, "failed before it reached"),
    ([_ended(0, EndReason.FAILURE), _ended(1, EndReason.FAILURE)], False,
     "attempts 0 and 1 ended the same way"),
    ([_ended(0, EndReason.FAILURE), _ended(1, EndReason.FAILURE, rank=1)], True,
     "restarting as attempt 2"),
    ([_ended(0, EndReason.PREEMPTED), _ended(1, EndReason.PREEMPTED)], True,
     "restarting as attempt 2"),
    ([_ended(i, EndReason.WALLTIME) for i in range(4)], False, "restarts.max 3 exhausted"),
])
def test_the_policy_decides_on_the_reasons_alone(history, restart, why):
    decision = decide(PLAN, history)
    assert decision.restart is restart and why in decision.why, decision


def test_restarts_off_never_restart():
    assert not decide(RestartPlan(), [_ended(0, EndReason.PREEMPTED)]).restart


# ------------------------------------------------------------------------ spec keys


def _spec(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text("command: python3 train.py\n" + text)
    return specs.load(path)


def test_restarts_block_parses(tmp_path):
    spec = _spec(tmp_path, "restarts:\n  max: 2\n  on: [failure, preemption]\n"
                           "  backoff: 0\n  checkpoint_signal: USR2\n  checkpoint_grace: 30s\n")
    r = spec.restarts
    assert (r.max, r.on, r.backoff_s) == (2, (EndReason.FAILURE, EndReason.PREEMPTED), 0.0)
    assert (r.checkpoint_signal, r.checkpoint_grace_s) == ("SIGUSR2", 30.0)
    assert _spec(tmp_path, "restarts: {checkpoint_signal: null}\n").restarts \
        .checkpoint_signal is None


@pytest.mark.parametrize("text,problem", [
    ("restarts:\n  max: -1\n", "job.yaml:3: restarts.max: must be at least 0"),
    ("restarts:\n  on: [preemtion]\n", "did you mean 'preemption'"),
    ("restarts:\n  on: [succeeded]\n", "unknown end reason 'succeeded'"),
    ("restarts:\n  checkpoint_signal: SIGKILL\n", "restarts.checkpoint_signal: expected one of"),
    ("restarts:\n  maxx: 1\n", "did you mean 'max'"),
])
def test_bad_restarts_name_the_line_and_key(tmp_path, text, problem):
    with pytest.raises(SpecError) as error:
        _spec(tmp_path, text)
    assert problem in error.value.format_message()


def test_launch_max_restarts_is_the_spec_key(cli, tmp_path):
    result = cli.run("launch", "--max-restarts", "-1", "--", "true")
    assert result.returncode == 2 and "--max-restarts: must be at least 0" in result.stderr
    assert cli.run_dirs() == []


def test_attempt_layout():
    layout = RunLayout("/r")
    assert layout.attempt(0).task_log("worker", 1) == "/r/logs/worker-1.log"
    assert layout.attempt(2).task_log("worker", 1) == "/r/attempts/2/logs/worker-1.log"
    assert layout.attempt(2).abort == "/r/attempts/2/abort.json"
    assert layout.attempt(2).plan == "/r/plan.json" == layout.plan
    assert layout.attempt(2).attempts_record == "/r/attempts.json"


# ------------------------------------------------------------------------ local jobs


def restart_spec(tmp_path: Path, *, restarts: str, env: dict, worker_command=None,
                 name: str = "restarts", extra: str = "") -> Path:
    role = [sys.executable, str(FAKEROLE)]
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    text = (f"name: {name}\ncommand: {json.dumps(role)}\nworkdir: {tmp_path}\n"
            f"env: {json.dumps(dict(env, FAKE_OUT=str(out)))}\n"
            f"roles:\n  server: {{count: 1}}\n"
            f"  worker: {{count: 2, command: {json.dumps(worker_command or role)}}}\n"
            f"rendezvous: {{startup_timeout: 60s, grace: 2s}}\n"
            f"restarts: {restarts}\n{extra}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _attempts(cli, job):
    return json.loads((cli.run_dir(job) / "attempts.json").read_text())


def test_a_failed_attempt_is_relaunched_and_succeeds(cli, tmp_path):
    """Attempt 0's workers exit 3 (after they reached the scheduler); attempt 1 succeeds.
    Each attempt has its records and logs; the roles see MXBATCH_ATTEMPT."""
    spec = restart_spec(tmp_path, restarts="{max: 1, backoff: 1s}",
                        env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3", "FAKE_EXIT_ATTEMPTS": "0"})
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 0, result.stderr
    assert "mxbatch: attempt 0: failure (worker[" in result.stderr
    assert "restarting as attempt 1 (restarts.max 1)" in result.stderr
    job = result.stdout.split()[0]
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
    assert status["attempts"][1]["restart_reason"] == "failure"
    run = cli.run_dir(job)
    assert (run / "logs" / "worker-0.log").is_file()
    assert "exited with code 0" in (run / "attempts" / "1" / "logs" / "worker-0.log").read_text()
    env = json.loads((tmp_path / "out" / "0.json").read_text())["env"]  # attempt 1's dump
    assert env["MXBATCH_ATTEMPT"] == "1" and env["MXBATCH_RESTART_REASON"] == "failure"
    text = cli.run("status", job).stdout
    assert "attempt 1 (MXBATCH_ATTEMPT; at most 2 attempts" in text
    assert "failure" in text and "succeeded" in text
    logs = cli.run("logs", job, "--role", "worker", "--attempt", "0", "--verbose").stdout
    assert "exited with code 3" in logs
    assert_no_processes(job)


def test_the_same_failure_twice_ends_the_job(cli, tmp_path):
    """worker[0] exits 3 on every attempt (worker[1] ends well at the same moment: were
    both to fail, which one is blamed first would be a race between two exits)."""
    spec = restart_spec(tmp_path, restarts="{max: 3, backoff: 0}",
                        env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3", "FAKE_EXIT_RANKS": "0"})
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert "attempts 0 and 1 ended the same way" in result.stderr
    job = result.stdout.split()[0]
    assert len(_attempts(cli, job)["attempts"]) == 2
    assert_no_processes(job)


def test_a_start_up_failure_is_not_restarted(cli, tmp_path):
    """A typo in the worker's script (which only the nodes could have had: the check
    before submitting is off): it fails before it reaches the scheduler, so the job ends
    at once (every attempt would fail the same way)."""
    spec = restart_spec(tmp_path, restarts="{max: 3, backoff: 0}", env={},
                        worker_command=[sys.executable, str(tmp_path / "trian.py")])
    result = cli.run("submit", "--wait", "--no-check", str(spec))
    assert result.returncode == 1
    assert "exited with code 2" in result.stderr
    assert "failed before it reached the scheduler" in result.stderr
    job = result.stdout.split()[0]
    assert len(_attempts(cli, job)["attempts"]) == 1
    assert cli.status(job)["state"] == "FAILED"
    assert_no_processes(job)


def test_walltime_checkpoints_every_attempt_until_restarts_run_out(cli, tmp_path):
    """Workers whose training outlasts the walltime: each attempt ends the checkpoint
    lead before it, the workers checkpoint (SIGUSR1), and the job relaunches until
    restarts.max is exhausted."""
    # (the lead leaves a loaded machine's role time to install its SIGUSR1 handler)
    spec = restart_spec(tmp_path, restarts="{max: 1, backoff: 0, checkpoint_lead: 4s}",
                        env={"FAKE_SLEEP": "300"},
                        extra="resources: {walltime: 12s}\n")
    result = cli.run("submit", "--wait", str(spec), timeout=240)
    assert result.returncode == 1, result.stderr
    assert "restarts.max 1 exhausted (2 attempts)" in result.stderr
    job = result.stdout.split()[0]
    record = _attempts(cli, job)
    assert [a["reason"] for a in record["attempts"]] == ["walltime", "walltime"]
    assert (tmp_path / "out" / "0.checkpoint").read_text() == "1"  # attempt 1 saved last
    log = (cli.run_dir(job) / "logs" / "worker-0.log").read_text()
    assert "sending SIGUSR1 (checkpoint)" in log and "after the checkpoint signal" in log
    assert_no_processes(job)


def test_preemption_of_the_job_manager_relaunches(cli, tmp_path):
    """SIGTERM to a detached local job's manager is a preemption: workers checkpoint, the
    next attempt starts by itself and finishes."""
    spec = restart_spec(tmp_path, restarts="{max: 1, backoff: 0}",
                        env={"FAKE_SLEEP": "6"})
    job = cli.submit(spec)
    run = cli.run_dir(job)
    wait_for(lambda: (run / "tasks" / "worker-1.json").is_file() and json.loads(
        (run / "tasks" / "worker-1.json").read_text()).get("reached_at"), 60,
        "worker[1] to reach the scheduler")
    manager = cli.handle(job)
    os.kill(manager["manager_pid"], signal.SIGTERM)
    result = cli.run("wait", job, "--timeout", "120")
    assert result.returncode == 0, result.stderr
    record = _attempts(cli, job)
    assert [a["reason"] for a in record["attempts"]] == ["preempted", "succeeded"]
    assert (tmp_path / "out" / "0.checkpoint").read_text() == "0"
    assert_no_processes(job)


def test_cancel_while_waiting_between_attempts(cli, tmp_path):
    spec = restart_spec(tmp_path, restarts="{max: 2, backoff: 10m}",
                        env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3"})
    job = cli.submit(spec)
    wait_for(lambda: (_attempts(cli, job) if (cli.run_dir(job) / "attempts.json")
                      .stat().st_size > 2 else {}).get("next_at"), 60,
             "the wait before attempt 1")
    status = cli.status(job)
    assert status["state"] == "RUNNING" and "attempt 1 starts in" in status["reason"]
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert f"job {job} CANCELLED" in result.stderr
    record = _attempts(cli, job)
    assert record["final"] and record["outcome"] == "cancelled"
    assert len(record["attempts"]) == 1
    assert cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job, timeout=0)
