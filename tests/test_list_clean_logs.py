"""``list`` (header, duration, filters), ``clean`` (old ended jobs only, never a running
one) and ``logs`` (every rank of a role prefixed, ``--tail``, ``--timestamps``) with
stand-in jobs (issue 21)."""

from __future__ import annotations

import json
import re

from .conftest import assert_no_processes
from .test_local import fake_spec

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _ticking(tmp_path, name: str, sleep: str = "0.6"):
    return fake_spec(tmp_path, workers=2, name=name,
                     extra=f"env: {{FAKE_SLEEP: '{sleep}', FAKE_TICK: '0.1'}}\n")


def test_list_has_a_header_durations_and_filters(cli, tmp_path):
    done = cli.run("submit", "--wait", "-q", str(_ticking(tmp_path, "done")))
    assert done.returncode == 0, done.stderr
    failed = cli.run("submit", "--wait", "-q", str(fake_spec(tmp_path, name="bad")),
                     env={"FAKE_EXIT": "3"})
    assert failed.returncode == 1
    running = cli.submit(fake_spec(tmp_path, name="long", extra="env: {FAKE_SLEEP: '120'}\n"))
    try:
        lines = cli.run("list").stdout.splitlines()
        assert lines[0].split() == ["JOB", "BACKEND", "STATE", "SUBMITTED", "DURATION"]
        assert [line.split()[0] for line in lines[1:]] == [
            running, failed.stdout.split()[0], done.stdout.split()[0]]  # newest first
        assert lines[1].split()[-1].endswith("+")  # still running: so far
        assert re.fullmatch(r"\d+s", lines[3].split()[-1])
        rows = json.loads(cli.run("list", "--json").stdout)
        assert rows[2]["duration_s"] >= 0.6 and rows[2]["ended_at"] is not None
        assert rows[0]["ended_at"] is None
        only = json.loads(cli.run("list", "--json", "--state", "failed").stdout)
        assert [r["job_id"] for r in only] == [failed.stdout.split()[0]]
        ended = json.loads(cli.run("list", "--json", "--state", "ended", "-n", "1").stdout)
        assert [r["state"] for r in ended] == ["FAILED"]
        assert json.loads(cli.run("list", "--json", "-b", "slurm").stdout) == []
        assert len(json.loads(cli.run("list", "--json", "-b", "local").stdout)) == 3
    finally:
        cli.run("cancel", running)
    assert_no_processes(running)


def test_clean_removes_old_ended_jobs_and_never_a_running_one(cli, tmp_path):
    ended = cli.run("submit", "--wait", "-q", str(fake_spec(tmp_path, name="old")))
    assert ended.returncode == 0, ended.stderr
    old = ended.stdout.split()[0]
    running = cli.submit(fake_spec(tmp_path, name="live", extra="env: {FAKE_SLEEP: '120'}\n"))
    try:
        young = cli.run("clean", "--json")  # default: ended at least 7 days ago
        assert json.loads(young.stdout)["jobs"] == []
        dry = json.loads(cli.run("clean", "--older-than", "1ms", "--dry-run", "--json").stdout)
        assert [j["job_id"] for j in dry["jobs"]] == [old] and (cli.run_dir(old)).is_dir()
        result = cli.run("clean", "--older-than", "1ms", "--state", "ended")
        assert result.returncode == 0, result.stderr
        assert f"removed {old}: {cli.home / 'runs' / old}" in result.stdout
        assert not (cli.run_dir(old)).exists()
        assert not (cli.home / "jobs" / f"{old}.json").exists()
        assert cli.run("status", old).returncode == 4
        # a running job is never removed, even when asked for every state there is
        for state in ("ended", "unknown", "succeeded"):
            cli.run("clean", "--older-than", "1ms", "--state", state)
        assert cli.status(running)["state"] == "RUNNING"
        assert (cli.run_dir(running)).is_dir()
    finally:
        cli.run("cancel", running)
    assert_no_processes(running)


def test_logs_of_a_role_prefix_every_rank_and_tail_and_timestamps(cli, tmp_path):
    result = cli.run("submit", "--wait", "-q", str(_ticking(tmp_path, "ticks")))
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    workers = cli.run("logs", job, "--role", "worker").stdout.splitlines()
    assert {line.split(" | ")[0] for line in workers} == {"worker[0]", "worker[1]"}
    tail = cli.run("logs", job, "--role", "worker", "--tail", "2", "--verbose").stdout
    tail_lines = tail.splitlines()
    assert len(tail_lines) == 4 and all("exited with code 0" in line
                                        for line in tail_lines[1::2]), tail
    single = cli.run("logs", job, "--role", "worker", "--rank", "1", "--tail", "1", "-v").stdout
    assert single == "mxbatch supervisor worker[1]: exited with code 0\n"
    # by default --tail N is the role's own last N lines, not mxbatch's
    own = cli.run("logs", job, "--role", "worker", "--rank", "1", "--tail", "3").stdout
    assert own == "tick\ntick\ntick\n", own
    stamped = cli.run("logs", job, "--role", "worker", "--rank", "0", "--timestamps")
    lines = stamped.stdout.splitlines()
    assert lines and all(re.match(STAMP + " ", line) for line in lines), lines
    ticks = [line.split()[0] for line in lines if line.endswith(" tick")]
    assert len(ticks) >= 3 and ticks == sorted(ticks) and len(set(ticks)) > 1
