"""A job named as a user types it (issue 38, 4): a unique prefix of its id or ``last`` on
every command that takes a job (status, logs, wait, cancel, clean) and in shell
completion; an ambiguous prefix lists the candidates (exit 2); ``clean JOB...`` and
``clean --older-than 0``; ``launch --name``; ``render``'s placeholder id."""

from __future__ import annotations

import json
import re

import pytest

from mxbatch.backends import records
from mxbatch.backends.jobrefs import MAX_CANDIDATES, AmbiguousJob, resolve
from mxbatch.cli.reference import cli_reference
from mxbatch.errors import JobNotFound

from .conftest import assert_no_processes
from .test_local import fake_spec


def _done(cli, tmp_path, name: str) -> str:
    spec = fake_spec(tmp_path, name=name, extra="env: {FAKE_SLEEP: '0.3', FAKE_TICK: '0.1'}\n")
    result = cli.run("submit", "--wait", "-q", str(spec))
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[0]


def _completions(cli, words: str, index: int):
    result = cli.run(env={"_MXBATCH_COMPLETE": "bash_complete", "COMP_WORDS": words,
                          "COMP_CWORD": str(index)})
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_a_prefix_or_last_names_a_job_on_every_command(cli, tmp_path):
    first = _done(cli, tmp_path, "alpha")
    second = _done(cli, tmp_path, "alpha")
    other = _done(cli, tmp_path, "beta")
    # an ambiguous prefix: exit 2, the candidates newest first, nothing done
    for command in ("status", "logs", "wait", "cancel", "clean"):
        result = cli.run(command, "alpha")
        assert result.returncode == 2, (command, result.stderr)
        lines = result.stderr.splitlines()
        assert lines[0] == "Error: 'alpha' is the start of 2 job ids (newest first):"
        assert [line.split()[0] for line in lines[1:3]] == [second, first]
        assert lines[3] == "type more of the id" and "Traceback" not in result.stderr
    assert cli.run_dir(first).is_dir() and cli.run_dir(second).is_dir()
    # a unique prefix and last, on every command
    unique = first[:len(first) - 8] + next(
        first[-8:][:n] for n in range(1, 9) if not second[-8:].startswith(first[-8:][:n]))
    assert cli.status(unique)["job_id"] == first
    assert cli.status("bet")["job_id"] == other
    assert cli.status("last")["job_id"] == other
    assert cli.run("status", "last").stdout.startswith(f"job {other}  ")
    assert cli.run("logs", unique, "--role", "worker").stdout.strip()
    assert cli.run("logs", "last", "--tail", "1").stdout.strip()
    for ref in (unique, "last"):
        assert cli.run("wait", ref, "-q").returncode == 0
        cancelled = cli.run("cancel", ref, "--json")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["job_id"] in (first, other)
    # none, or no job at all: exit 4, saying how a job is named
    missing = cli.run("status", "gamma")
    assert missing.returncode == 4 and "no job id starts with 'gamma'" in missing.stderr
    assert "'last' (the newest job)" in missing.stderr
    # clean JOB: that job only, young as it is; then last is the one before
    cleaned = cli.run("clean", "last")
    assert cleaned.returncode == 0, cleaned.stderr
    assert cleaned.stdout.startswith(f"removed {other}: ")
    assert not cli.run_dir(other).exists() and cli.run_dir(second).is_dir()
    assert cli.status("last")["job_id"] == second
    assert cli.run("status", "beta").returncode == 4


def test_completion_offers_the_ids_and_last_on_every_command(cli, tmp_path):
    job = _done(cli, tmp_path, "alpha")
    for command in ("status", "logs", "wait", "cancel", "clean"):
        assert _completions(cli, f"mxbatch {command} ", 2) == [job, "last"], command
        assert _completions(cli, f"mxbatch {command} alp", 2) == [job], command
        assert _completions(cli, f"mxbatch {command} la", 2) == ["last"], command
    assert _completions(cli, f"mxbatch clean {job} ", 3) == [job, "last"]


def test_clean_named_jobs_never_a_running_one_and_older_than_zero(cli, tmp_path):
    ended = _done(cli, tmp_path, "ended")
    kept = _done(cli, tmp_path, "kept")
    running = cli.submit(fake_spec(tmp_path, name="live", extra="env: {FAKE_SLEEP: '120'}\n"))
    try:
        refused = cli.run("clean", "live", "--json")
        assert refused.returncode == 1  # a job named that stays, as rm says
        [result] = json.loads(refused.stdout)["jobs"]
        assert result["job_id"] == running and result["problem"] == "not removed: it is RUNNING"
        assert cli.status(running)["state"] == "RUNNING"
        filtered = cli.run("clean", "ended", "--state", "failed")
        assert filtered.returncode == 1
        assert f"{ended}: not removed: it is SUCCEEDED, not failed" in filtered.stderr
        zero = cli.run("clean", "--older-than", "0", "--dry-run", "--json")
        assert zero.returncode == 0, zero.stderr
        assert {j["job_id"] for j in json.loads(zero.stdout)["jobs"]} == {ended, kept}
        both = cli.run("clean", "ended", kept, "--older-than", "0s")
        assert both.returncode == 0, both.stderr
        assert not cli.run_dir(ended).exists() and not cli.run_dir(kept).exists()
        assert cli.run("clean", "--older-than", "-1s").returncode == 2
    finally:
        cli.run("cancel", running)
    assert_no_processes(running)


def test_launch_name_and_render_placeholder(cli, tmp_path):
    spec = fake_spec(tmp_path, name="shown")
    rendered = cli.run("render", str(spec))
    assert rendered.returncode == 0, rendered.stderr
    first = rendered.stdout.splitlines()[0]
    assert re.fullmatch(r"# job shown-[0-9a-f]{8} on backend local \(a placeholder id: "
                        r"submit gives the job a new one, and its run directory that "
                        r"name\)", first), first
    assert "placeholder" in cli.run("render", "--help").stdout
    launched = cli.run("launch", "--name", "try1", "--detach", "-n", "1", "--", "true")
    assert launched.returncode == 0, launched.stderr
    job = launched.stdout.split()[0]
    assert re.fullmatch(r"try1-[0-9a-f]{8}", job)
    assert cli.run("wait", "try1").returncode == 0


def test_the_help_and_the_cli_reference_say_how_a_job_is_named(cli):
    page = cli_reference()
    for command in ("status", "logs", "wait", "cancel", "clean"):
        helped = cli.run(command, "--help")
        assert "a unique prefix of it, or 'last' (the newest job)" in helped.stdout, command
        section = page.split(f"## mxbatch {command}\n", 1)[1].split("\n## ", 1)[0]
        assert "a unique prefix of it, or 'last' (the newest job)" in section, command


def test_many_candidates_are_capped_and_a_broken_record_is_still_a_job(home):
    for index in range(MAX_CANDIDATES + 2):
        records.save(records.JobRecord(job_id=f"many-{index:08x}", backend="local",
                                       run_dir=f"/nonexistent/many-{index:08x}",
                                       submitted_at=1e300 if index == 0 else index))
    with pytest.raises(AmbiguousJob) as caught:
        resolve("many")
    assert caught.value.message.endswith("\n  and 2 more\ntype more of the id")
    assert "many-00000000 (submitted at an unknown time)" in caught.value.message
    assert len(caught.value.candidates) == MAX_CANDIDATES + 2
    (home / "jobs" / "broken-0000abcd.json").write_text("{not json")
    assert resolve("broken") == "broken-0000abcd"  # cancel still stops its processes
    assert resolve("many-0000000b") == "many-0000000b"
    assert resolve("many-0000000c") == "many-0000000c"  # a whole id: as it is (cancel)
    with pytest.raises(JobNotFound):
        resolve("many-00000c")
