"""Broken storage, for real, on the local backend with stand-in roles: a full or
read-only ``$MXBATCH_HOME/jobs`` (no job ever runs without a record), a run directory
that cannot be made, and one that fills up, is made read-only or is removed while the
job runs (the agent stops the job, says ``run directory unwritable: <why>`` and exits 1;
nothing is left running). Root only: the file systems are real tmpfs and bind mounts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from mxbatch.runtime.layout import RunLayout

from .conftest import (
    FAKEROLE,
    assert_no_processes,
    processes_of_jobs_named,
    remove_live_directory,
    task_record,
    wait_for,
)
from .mounts import fill, read_only, tmpfs

#: a job that runs until stopped, whose worker prints a line every 0.2 s (its log
#: grows: a full file system is seen at once) and whose heartbeats come every second
TICKING = "env: {FAKE_SLEEP: '600', FAKE_TICK: '0.2'}\n"


def spec(tmp_path: Path, runs: Optional[Path] = None, name: str = "store",
         extra: str = TICKING) -> Path:
    role = [sys.executable, str(FAKEROLE)]
    where = f"dir: '{runs}', " if runs is not None else ""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: {json.dumps(role)}\n"
                    "roles:\n  server: {count: 1}\n  worker: {count: 1}\n"
                    f"rendezvous: {{{where}startup_timeout: 60s, grace: 1s, "
                    f"heartbeat_timeout: 3s}}\n{extra}")
    return path


def _assert_nothing_of(cli, name: str) -> None:
    assert processes_of_jobs_named(name) == [], "a job runs without a record"
    assert cli.run_dirs() == [], "a run directory was left"
    jobs = cli.home / "jobs"
    assert not jobs.is_dir() or [p.name for p in jobs.iterdir()] == []


# ---------------------------------------------------------------------- the jobs directory


@pytest.mark.parametrize("wait", [False, True], ids=["detached", "attached"])
@pytest.mark.parametrize("broken", ["full", "read-only"])
def test_a_jobs_directory_that_takes_no_record_starts_nothing(cli, tmp_path, broken, wait):
    jobs = cli.home / "jobs"
    jobs.mkdir(parents=True)
    if broken == "full":
        mount = tmpfs(jobs, inodes=1)  # its root only: no file can be created
        why = "No space left on device"
    else:
        mount = read_only(jobs)
        why = "Read-only file system"
    with mount:
        result = cli.run("submit", *(["--wait"] if wait else []), str(spec(tmp_path)))
        assert result.returncode == 2, result.stderr
        assert "cannot write the record of job store-" in result.stderr
        assert f"{why}; nothing was started" in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        _assert_nothing_of(cli, "store")


def test_a_jobs_directory_that_fills_up_during_the_submission_rolls_the_launch_back(
        cli, tmp_path):
    """Room for one record: the ``submitting`` one is written before anything starts,
    the job manager starts, and the record with its pid cannot be written (its
    temporary file needs a second inode): the launch is undone, the record too."""
    jobs = cli.home / "jobs"
    with tmpfs(jobs, inodes=2):
        result = cli.run("submit", str(spec(tmp_path)))
        assert result.returncode == 2, result.stderr
        assert "No space left on device; the job was stopped and removed: nothing of it " \
               "runs" in result.stderr
        assert "Traceback" not in result.stderr
        _assert_nothing_of(cli, "store")


# ---------------------------------------------------------------------- the run directory


def test_a_run_directory_that_cannot_be_filled_leaves_nothing(cli, tmp_path):
    runs = tmp_path / "runs"
    with tmpfs(runs, size="48k"):  # the directory is made, runtime.pyz does not fit
        result = cli.run("submit", str(spec(tmp_path, runs)))
        assert result.returncode == 2, result.stderr
        assert "store.yaml:6: rendezvous.dir: cannot create the run directory" in result.stderr
        assert "No space left on device" in result.stderr
        assert list(runs.iterdir()) == [], "a half-made run directory was left"
        _assert_nothing_of(cli, "store")


def _running(cli, job: str, run_dir: Path) -> None:
    wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("state") == "RUNNING",
             60, f"the worker of {job} to run")


def _start(cli, tmp_path: Path, runs: Path, attached: bool):
    """The job, running; the attached CLI (a process) or None."""
    path = spec(tmp_path, runs)
    if attached:
        proc = cli.popen("submit", "--wait", str(path))
        job = proc.stdout.readline().strip()
        assert job, proc.communicate(timeout=60)[1]
    else:
        proc, job = None, cli.submit(path)
    run_dir = runs / job
    _running(cli, job, run_dir)
    return job, run_dir, proc


def _ends_unwritable(cli, job: str, proc, why: str) -> str:
    """The job ends by itself, failed, saying why; nothing of it is left. Its
    supervisor's stderr (attached: the CLI's)."""
    if proc is not None:
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the attached CLI still runs after its run directory broke:\n"
                        f"{proc.communicate()}")
        assert proc.returncode == 1, err
        assert f"run directory unwritable: {why}" in err and "Traceback" not in err, err
        assert f"job {job} FAILED: run directory unwritable: {why}" in err, err
    assert_no_processes(job, timeout=30)  # the agent stopped the roles by itself
    return err if proc is not None else ""


@pytest.mark.parametrize("attached", [False, True], ids=["detached", "attached"])
def test_a_run_directory_filled_up_mid_job(cli, tmp_path, attached):
    runs = tmp_path / "runs"
    with tmpfs(runs, size="1m"):
        job, run_dir, proc = _start(cli, tmp_path, runs, attached)
        filler = fill(runs)
        _ends_unwritable(cli, job, proc, "No space left on device")
        # the records the agent could still write (in place) say why
        status = cli.status(job)
        assert status["state"] == "FAILED", status
        assert status["reason"] == "run directory unwritable: No space left on device"
        worker = task_record(run_dir, "worker", 0)
        assert worker["state"] == "CANCELLED" and worker["exit_code"] is not None
        filler.unlink()


@pytest.mark.parametrize("attached", [False, True], ids=["detached", "attached"])
def test_a_run_directory_made_read_only_mid_job(cli, tmp_path, attached):
    runs = tmp_path / "runs"
    runs.mkdir()
    job, run_dir, proc = _start(cli, tmp_path, runs, attached)
    with read_only(run_dir):
        _ends_unwritable(cli, job, proc, "Read-only file system")
        if not attached:  # its stderr: manager.log, open since before the mount
            log = Path(RunLayout(str(run_dir)).manager_log).read_text()
            assert "run directory unwritable: Read-only file system: stopping the job" in log
            assert "Traceback" not in log
        status = cli.status(job)  # nothing could be recorded: lost, and over
        assert status["state"] == "FAILED" and "lost" in status["reason"], status


@pytest.mark.parametrize("attached", [False, True], ids=["detached", "attached"])
def test_a_run_directory_removed_mid_job(cli, tmp_path, attached):
    runs = tmp_path / "runs"
    runs.mkdir()
    job, run_dir, proc = _start(cli, tmp_path, runs, attached)
    remove_live_directory(run_dir)
    _ends_unwritable(cli, job, proc, "No such file or directory")
    result = cli.run("status", job)
    assert result.returncode == 4 and "is gone" in result.stderr, result.stderr
    cancelled = cli.run("cancel", job)  # nothing to read, nothing left: still no error
    assert cancelled.returncode == 0, cancelled.stderr
    assert "nothing of it runs on this host" in cancelled.stderr
