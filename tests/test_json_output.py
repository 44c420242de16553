"""--json on every command that reports: one JSON document on stdout, schema version
jsonout.SCHEMA (list: every row carries it); shell completion of job ids."""

from __future__ import annotations

import json
import re
import sys

from mxbatch.cli.jsonout import SCHEMA

from .conftest import FAKEROLE, assert_no_processes
from .test_local import fake_spec

#: RFC 3339 in UTC with milliseconds: every ``*_at`` of every document
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _json(result) -> object:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_reporting_command_prints_one_versioned_document(cli, tmp_path):
    spec = fake_spec(tmp_path)
    submitted = _json(cli.run("submit", str(spec), "--json"))
    job = submitted["job_id"]
    assert submitted["schema"] == SCHEMA and submitted["backend"] == "local"
    waited = _json(cli.run("wait", job, "--json", "--timeout", "60"))
    assert (waited["schema"], waited["job_id"], waited["state"]) == (SCHEMA, job, "SUCCEEDED")
    assert {t["role"] for t in waited["tasks"]} == {"scheduler", "server", "worker"}
    status = _json(cli.run("status", job, "--json"))
    assert status["schema"] == SCHEMA and status["state"] == "SUCCEEDED"
    rows = _json(cli.run("list", "--json"))
    assert [(r["schema"], r["job_id"]) for r in rows] == [(SCHEMA, job)]
    cancelled = _json(cli.run("cancel", job, "--json"))
    assert cancelled == {"schema": SCHEMA, "job_id": job, "state": "SUCCEEDED",
                         "already_ended": True, "state_before": "SUCCEEDED",
                         "submitted_at": submitted["submitted_at"], "killed": []}
    # one time field, one format, in every job document
    stamps = {d["submitted_at"] for d in (submitted, waited, status, rows[0], cancelled)}
    assert len(stamps) == 1 and TIMESTAMP.fullmatch(stamps.pop())
    times = [t[k] for t in status["tasks"] for k in ("started_at", "ended_at")]
    assert all(TIMESTAMP.fullmatch(t) for t in times + [rows[0]["ended_at"]]), times
    assert rows[0]["duration_s"] >= 0 and "submitted" not in rows[0]
    rendered = _json(cli.run("render", str(spec), "--json"))
    assert rendered["schema"] == SCHEMA and len(rendered["tasks"]) == 3
    shown = _json(cli.run("config", "show", str(spec), "--json"))
    assert shown["schema"] == SCHEMA
    assert_no_processes(job)


def test_attached_submit_and_launch_json(cli, tmp_path):
    spec = fake_spec(tmp_path)
    attached = _json(cli.run("submit", "--wait", str(spec), "--json"))
    assert attached["schema"] == SCHEMA and attached["state"] == "SUCCEEDED"
    detached = _json(cli.run("launch", "--detach", "--json", "--", sys.executable,
                             str(FAKEROLE), cwd=tmp_path))
    assert detached["schema"] == SCHEMA and detached["job_id"].startswith("launch-")
    assert _json(cli.run("wait", detached["job_id"], "--json"))["state"] == "SUCCEEDED"


def test_failed_job_json_and_exit_code(cli, tmp_path):
    spec = fake_spec(tmp_path)
    result = cli.run("submit", "--wait", "--json", str(spec), env={"FAKE_EXIT": "3"})
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["state"] == "FAILED" and "exited with code 3" in document["reason"]


def test_job_ids_complete_from_the_records(cli, tmp_path):
    job = cli.submit(fake_spec(tmp_path))
    result = cli.run(env={"_MXBATCH_COMPLETE": "bash_complete",
                          "COMP_WORDS": f"mxbatch status {job[:6]}", "COMP_CWORD": "2"})
    assert result.returncode == 0, result.stderr
    assert f"plain,{job}" in result.stdout.splitlines()
    backends = cli.run(env={"_MXBATCH_COMPLETE": "bash_complete",
                            "COMP_WORDS": "mxbatch submit --backend s", "COMP_CWORD": "3"})
    assert backends.stdout.split() == ["plain,sge", "plain,slurm", "plain,ssh"]
    script = cli.run("completion", "bash")
    assert script.returncode == 0 and "_MXBATCH_COMPLETE=bash_complete" in script.stdout
    assert cli.run("wait", job, "--timeout", "60").returncode == 0
