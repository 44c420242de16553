"""The cause of a failure in the role's own words (issue 21, item 1): the failure summary
of an attached job, ``wait`` and ``status`` quote the failing task's last output; a task
that failed by itself keeps FAILED and its own exit code; a failing role's output comes
before the teardown notes; ``submit`` and ``doctor SPEC`` warn about a missing script."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from mxbatch.jobs.cause import excerpt
from mxbatch.jobs.scripts import missing_scripts, script_of
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs

from .conftest import assert_no_processes, task_record, wait_for
from .test_local import fake_spec


def test_excerpt_ends_at_the_last_traceback_and_skips_supervisor_notes():
    log = ["mxbatch supervisor worker[1]: starting on vm with DMLC_NODE_HOST=1.2.3.4: x",
           "loading data", "Traceback (most recent call last):",
           '  File "train.py", line 3, in <module>', "    main()",
           '  File "train.py", line 2, in main', "    raise RuntimeError('boom')",
           "RuntimeError: boom", "mxbatch: uncaught RuntimeError: exiting with code 1",
           "mxbatch supervisor worker[1]: exited with code 1"]
    assert excerpt(log) == ['  File "train.py", line 3, in <module>', "    main()",
                            '  File "train.py", line 2, in main',
                            "    raise RuntimeError('boom')", "RuntimeError: boom"]
    plain = ["a", "b", "c", "d", "e", "f", "", "mxbatch supervisor server[0]: exited with "
             "code 2"]
    assert excerpt(plain) == ["b", "c", "d", "e", "f"]
    assert excerpt(["mxbatch supervisor worker[0]: stopping: x"]) == []


def test_script_of_a_command():
    assert script_of(["python3", "-u", "train.py", "--lr", "0.1"]) == "train.py"
    assert script_of(["/venv/bin/python3.11", "sub/t.py"]) == "sub/t.py"
    assert script_of(["python", "-m", "mod", "x.py"]) is None
    assert script_of(["bash", "run.py"]) is None


def test_in_a_container_only_a_script_of_the_workdir_is_checked(tmp_path):
    spec = specs.parse("command: python3 /app/train.py\n"  # the image's: not checked
                       "roles: {worker: {command: python3 sub/gone.py}}\n"
                       "container: {image: example/image}\n", tmp_path / "job.yaml")
    assert [(m.script, m.roles) for m in missing_scripts(spec)] == [
        ("sub/gone.py", [Role.WORKER])]


def test_a_script_path_that_cannot_be_a_file_is_missing_not_a_crash(tmp_path):
    long_name = "a" * 300 + ".py"  # ENAMETOOLONG
    spec = specs.parse(f"command: python3 {long_name}\n"
                       "roles: {worker: {command: python3 ~nosuchuser-mxb/x.py}}\n",
                       tmp_path / "job.yaml")
    assert sorted(m.script for m in missing_scripts(spec)) == [long_name,
                                                              "~nosuchuser-mxb/x.py"]


def test_a_missing_script_is_bad_input_naming_the_command_and_nothing_is_submitted(
        cli, tmp_path):
    """Issue 38, 3: it was a warning, then a job whose every role failed."""
    (tmp_path / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text("command: python3 trian.py\nroles:\n  server: {count: 1}\n"
                    "  worker: {count: 1, command: python3 -u sub/w.py}\n")
    for args in (["submit", str(spec)], ["submit", "--wait", str(spec)]):
        result = cli.run(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("Error: 2 problems:\n"), result.stderr
        assert (f"{spec}:1: command: runs trian.py, but {tmp_path / 'trian.py'} does not "
                "exist where the roles run (the scheduler, server would fail at once) (did "
                "you mean 'train.py'? Else fix the command or workdir, or give --no-check"
                in result.stderr)
        assert (f"{spec}:4: roles.worker.command: runs sub/w.py, but "
                f"{tmp_path / 'sub' / 'w.py'} does not exist" in result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
    launched = cli.run("launch", "-n", "1", "python3", "trian.py", cwd=tmp_path)
    assert launched.returncode == 2, launched.stderr
    assert launched.stderr.startswith("Error: <command line>: command: runs trian.py")
    assert cli.run_dirs() == [] and not list((cli.home / "jobs").glob("*.json"))
    # where the script is, nothing is said; --no-check submits what is not here
    spec.write_text("command: python3 train.py\nroles: {worker: {count: 1}}\n")
    assert cli.run("submit", "--wait", "-q", str(spec)).returncode == 0
    detached = cli.run("launch", "--no-check", "--detach", "-n", "1", "python3", "gone.py",
                       cwd=tmp_path)
    assert detached.returncode == 0, detached.stderr
    assert cli.run("wait", detached.stdout.split()[0]).returncode == 1
    # the spec's (or a profile's) check_script: false is --no-check, and launch's yaml says it
    spec.write_text("command: python3 gone.py\ncheck_script: false\n")
    assert cli.run("submit", "--wait", "-q", str(spec)).returncode == 1
    rendered = cli.run("launch", "--no-check", "--render", "yaml", "python3", "gone.py")
    assert "\ncheck_script: false\n" in rendered.stdout


def test_a_missing_script_submitted_with_no_check_is_quoted_in_the_summaries(cli, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("command: python3 nope.py\nroles: {worker: {count: 2}}\n"
                    "rendezvous: {grace: 1s}\n")
    result = cli.run("submit", "--wait", "-q", "--no-check", str(spec))
    assert result.returncode == 1, result.stderr
    job = result.stdout.split()[0]
    summary = result.stderr[result.stderr.index(f"job {job} FAILED"):]
    assert "last output:\n    python3: can't open file" in summary, summary
    assert "nope.py': [Errno 2] No such file or directory" in summary

    status = cli.status(job)
    assert status["cause"]["lines"][-1].startswith("python3: can't open file")
    assert status["cause"]["task"] == status["cause_task"]
    table = cli.run("status", job).stdout
    assert "last output:\n    python3: can't open file" in table
    waited = cli.run("wait", job)
    assert waited.returncode == 1 and "can't open file" in waited.stderr
    assert_no_processes(job)


def test_a_raising_worker_prints_its_traceback_before_the_teardown(cli, tmp_path):
    trigger = tmp_path / "raise-now"
    trigger.touch()
    spec = fake_spec(tmp_path, workers=2, extra=(
        f"env: {{FAKE_SLEEP: '60', FAKE_RAISE_RANK: '1', FAKE_RAISE_ON: '{trigger}'}}\n"))
    result = cli.run("submit", "--wait", "--verbose", str(spec))  # the notes streamed too
    assert result.returncode == 1, result.stderr
    job = result.stdout.split()[0]
    lines = result.stdout.splitlines()
    error = next(i for i, line in enumerate(lines)
                 if line.startswith("worker[1]") and "RuntimeError: simulated failure" in line)
    stopping = [i for i, line in enumerate(lines) if "supervisor" in line and "stopping:" in line]
    assert stopping and min(stopping) > error, "\n".join(lines)
    summary = result.stderr[result.stderr.index(f"job {job} FAILED"):]
    after = summary.split("worker[1]'s last output:\n")[1].splitlines()
    quoted = after[:next(i for i, line in enumerate(after) if not line.startswith("    "))]
    assert quoted[-2].strip().startswith("raise RuntimeError(")
    assert quoted[-1] == "    RuntimeError: simulated failure of worker rank 1"
    worker0 = next(t for t in cli.status(job)["tasks"]
                   if t["role"] == "worker" and t["rank"] == 0)
    assert worker0["state"] == "CANCELLED"  # stopped by the teardown: it did not fail
    assert_no_processes(job)


def test_doctor_warns_about_a_missing_script(cli, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"command: {json.dumps([sys.executable, 'train.py'])}\n")
    result = cli.run("doctor", "--no-probe", str(spec))
    assert "WARN  training script" in result.stdout, result.stdout
    assert f"{tmp_path / 'train.py'} does not exist" in result.stdout
    (tmp_path / "train.py").write_text("")
    result = cli.run("doctor", "--no-probe", str(spec), "--json")
    check = next(c for c in json.loads(result.stdout)["checks"]
                 if c["name"] == "training script")
    assert check["outcome"] == "pass" and "train.py found" in check["detail"]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_workers_that_failed_before_the_teardown_reached_them_stay_failed(cli, tmp_path):
    """Both workers exit 2 by themselves while their agent is stopped (SIGSTOP), so that
    when it looks again, one failure starts the teardown and finds the other one ended:
    FAILED with its own code 2, not CANCELLED by the teardown."""
    go = tmp_path / "go"
    worker = ["sh", "-c", f"until [ -e '{go}' ]; do sleep 0.05; done; exec python3 nope.py"]
    spec = fake_spec(tmp_path, workers=2, worker_command=worker)
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    records = wait_for(lambda: _running(run_dir), 60, "both workers to run")
    agent = records[0]["supervisor_pid"]
    os.kill(agent, signal.SIGSTOP)
    try:
        go.touch()
        wait_for(lambda: all(_zombie(r["pid"]) for r in records), 30,
                 "both workers to exit while their agent is stopped")
    finally:
        os.kill(agent, signal.SIGCONT)
    result = cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1, result.stderr
    workers = [t for t in cli.status(job)["tasks"] if t["role"] == "worker"]
    assert [(t["state"], t["exit_code"]) for t in workers] == [("FAILED", 2)] * 2, workers
    table = cli.run("status", job).stdout
    rows = [line.split() for line in table.splitlines() if line.startswith("worker[")]
    assert [row[1] for row in rows if row[0] in ("worker[0]", "worker[1]")] \
        == ["FAILED", "FAILED"], table
    assert_no_processes(job)


def _running(run_dir: Path):
    records = [task_record(run_dir, "worker", rank) for rank in (0, 1)]
    return records if all(r and r["state"] == "RUNNING" for r in records) else None
