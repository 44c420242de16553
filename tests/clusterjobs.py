"""Helpers shared by the real-cluster tests (SGE, Slurm): the example job and a stand-in
job as spec files for a backend, polling the queue until a job has left it, and reading
what a job's own records and processes say (durations come from the records, never
from the wall clock of a loaded machine)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import yaml

from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, Cli, copy_example, task_record, wait_for
from .polling import poll

#: how long after the abort every task of the example job may take to end: its 10 s
#: grace, plus the batch system's and the supervisors' polling
TEARDOWN_S = 10 + 10
#: the note of a task whose role never ran: never started (status) or not started
#: (a supervisor that found the job already aborted)
NEVER_RAN = ("never started", "not started")
#: what the DRMAA helper process adds to its own environment: never a task's
HELPER_ONLY = ("GLIBC_TUNABLES", "DRMAA_LIBRARY_PATH")


def example_spec(tmp_path: Path, backend: str, options: str, *, name: str,
                 startup: str = "5m", memory: str = "4G", roles: str = "",
                 command: str = "") -> Path:
    """examples/mlp-ps.yaml renamed, with ``backends.<backend>: {options}`` added, in a
    temporary directory with its training script (the roles' workdir). ``roles``
    replaces the roles block (YAML lines), ``command`` the command line."""
    text = copy_example(tmp_path / f"{name}-workdir").read_text()
    text = text.replace("name: mlp-ps", f"name: {name}")
    text = text.replace("workdir: .", f"workdir: {tmp_path / (name + '-workdir')}")
    text = text.replace("startup_timeout: 5m", f"startup_timeout: {startup}")
    text = text.replace("memory: 4G", f"memory: {memory}")
    if roles:
        head, rest = text.split("roles:\n", 1)
        text = head + "roles:\n" + roles + rest[rest.index("network:"):]
    if command:
        text = text.replace("command: python3 train_mlp.py --kvstore dist_sync",
                            f"command: {command}")
    text += f"backends:\n  {backend}: {{{options}}}\n"
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def fake_spec(tmp_path: Path, backend: str, options: str, *, name: str,
              runs: Optional[Path] = None, workers: int = 2, worker_cpus: int = 1,
              env: Optional[Dict[str, str]] = None, startup: str = "5m") -> Path:
    """A job of stand-in roles (tests/fakerole.py, no MXNet): 1 scheduler, 1 server,
    ``workers`` workers that dump their environment into ``tmp_path/out/<rank>.json``
    (see ``role_env``) and sleep ``FAKE_SLEEP`` seconds. ``runs``: the rendezvous dir."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    spec = {
        "name": name, "command": ["python3", str(FAKEROLE)], "workdir": str(tmp_path),
        "env": {"FAKE_OUT": str(out), "FAKE_SLEEP": "8", **(env or {})},
        "resources": {"cpus": 1, "memory": "512M", "walltime": "10m"},
        "roles": {"server": {"count": 1},
                  "worker": {"count": workers, "resources": {"cpus": worker_cpus}}},
        "rendezvous": {"startup_timeout": startup, "grace": "2s"},
    }
    if runs is not None:
        spec["rendezvous"]["dir"] = str(runs).replace("$", "$$")  # a literal $ in a spec
    spec["backends"] = {backend: yaml.safe_load("{" + options + "}")}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML, with every path quoted right
    return path


def role_env(tmp_path: Path, rank: int, timeout: float = 120) -> Dict[str, str]:
    """The environment worker[rank] of a ``fake_spec`` job ran with (waits for it)."""
    dump = tmp_path / "out" / f"{rank}.json"
    wait_for(dump.exists, timeout, f"worker[{rank}] to dump its environment")
    return wait_for(lambda: _json(dump), 10, f"{dump} to be complete")["env"]


def _json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def process_environ(pid: int) -> Dict[str, str]:
    """The environment of a live process (``/proc/<pid>/environ``); {} if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode(errors="replace").split("=", 1)
                for item in raw.split(b"\0") if b"=" in item)


def supervisor_environ(run_dir: Path, role: str, rank: int) -> Dict[str, str]:
    """The environment of the supervisor (``runtime.pyz run``) of one running task."""
    record = wait_for(lambda: task_record(run_dir, role, rank), 120,
                      f"the task record of {role}[{rank}]")
    pid = record["supervisor_pid"]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"run" in cmdline and any(a.endswith(b"runtime.pyz") for a in cmdline), cmdline
    return process_environ(pid)


def assert_job_environment(tmp_path: Path, run_dir: Path, job: str, rank: int
                           ) -> Dict[str, str]:
    """worker[rank] of a running ``fake_spec`` job, and the supervisors of the scheduler and
    of that worker, carry ``MXBATCH_JOB_ID=job`` and none of the DRMAA helper's own
    variables; returns the worker's environment."""
    env = role_env(tmp_path, rank)
    assert env["MXBATCH_JOB_ID"] == job
    assert not [name for name in HELPER_ONLY if name in env]
    for role, task_rank in (("scheduler", 0), ("worker", rank)):
        supervisor = supervisor_environ(run_dir, role, task_rank)
        assert supervisor.get("MXBATCH_JOB_ID") == job, (role, sorted(supervisor))
        assert not [name for name in HELPER_ONLY if name in supervisor]
    return env


def run_dir_of(cli: Cli, job: str) -> Path:
    """The job's run directory, from its job record."""
    return cli.run_dir(job)


def abort_record(run_dir: Path) -> dict:
    return json.loads(Path(RunLayout(str(run_dir)).abort).read_text())


def task_records(run_dir: Path) -> List[dict]:
    """Every task record of the job (tasks that never started have none)."""
    found = []
    for path in sorted(Path(RunLayout(str(run_dir)).tasks_dir).glob("*.json")):
        record = _json(path)
        if record is not None:
            found.append(record)
    return found


def created_at(run_dir: Path) -> float:
    return json.loads(Path(RunLayout(str(run_dir)).plan).read_text())["created_at"]


def wait_queue_empty(queued: Callable[[], List[str]], job: str, timeout: float) -> None:
    wait_for(lambda: not queued(), timeout, f"{job} to leave the queue")


def without_helper_variables(cli: Cli) -> Cli:
    """``cli`` with an environment that has none of the DRMAA helper's own variables, so
    that any found in a task came from mxbatch."""
    for name in HELPER_ONLY:
        cli.env.pop(name, None)
    return cli


def assert_ends_soon_after_abort(run_dir: Path) -> dict:
    """Every task that started ended within TEARDOWN_S of the abort, by the records (not
    the wall clock of a loaded machine); returns the abort record."""
    abort = abort_record(run_dir)
    ended = [r["ended_at"] for r in task_records(run_dir) if r.get("ended_at")]
    assert ended and max(ended) - abort["at"] < TEARDOWN_S, (abort, ended)
    return abort


def sge_queued(cli: Cli, job: str) -> List[str]:
    """Lines of qstat that belong to ``job`` (its array jobs are named <job>-<role>)."""
    out = subprocess.run(["qstat", "-u", "*", "-r"], capture_output=True, text=True,
                         env=cli.env, check=True).stdout
    return [line for line in out.splitlines() if job in line]


def slurm_queued(cli: Cli, job: str) -> List[str]:
    """Lines of squeue (every array task) that belong to ``job``."""
    out = subprocess.run(["squeue", "--noheader", "--array", "--format", "%i %j %T"],
                         capture_output=True, text=True, env=cli.env, check=True).stdout
    return [line for line in out.splitlines() if job in line]


def oar_queued(cli: Cli, job: str) -> List[str]:
    """OAR jobs of ``job`` (its arrays are named <job>-<role>) that have not ended, as
    "id state" (OAR lists ended jobs too: Terminated, Error)."""
    out = subprocess.run(["oarstat", "-J", "--sql", f"job_name LIKE '{job}-%'"],
                         capture_output=True, text=True, env=cli.env, check=True).stdout
    jobs = json.loads(out) if out.strip() else {}
    return [f"{i} {j['state']}" for i, j in jobs.items()
            if j["state"] not in ("Terminated", "Error")]


def slurm_jobs(cli: Cli, job: str) -> List[str]:
    """``scontrol show job`` lines (one per job, array task or component) of ``job``;
    finished jobs stay visible (MinJobAge)."""
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], capture_output=True,
                         text=True, env=cli.env, check=True).stdout
    return [line for line in out.splitlines() if f"JobName={job}" in line]


def cancel_in_the_backoff(cli: Cli, job: str, run: Path, timeout: float = 180) -> None:
    """A driven job whose attempt 0 has ended: once its status says it waits before
    attempt 1, ``cancel`` ends it CANCELLED after that one attempt, and its driver of
    attempts ends too (the batch and YARN backends' driver, ``backends/driver.py``)."""

    def backing_off(status: dict) -> bool:
        return "attempt 1 starts in" in (status["reason"] or "")

    status = poll(lambda: cli.status(job), backing_off, timeout, 1)
    if not backing_off(status):  # say what the job was doing instead
        pytest.fail(f"timed out after {timeout}s waiting for the wait before attempt 1; "
                    f"the job's status: {json.dumps(status)[:3000]}")
    assert status["state"] == "RUNNING"
    driver = json.loads((run / "attempts.json").read_text())["driver_pid"]
    result = cli.run("cancel", job)
    assert result.returncode == 0 and f"job {job} CANCELLED" in result.stderr, result.stderr
    record = json.loads((run / "attempts.json").read_text())
    assert record["final"] and record["outcome"] == "cancelled"
    assert len(record["attempts"]) == 1
    wait_for(lambda: not os.path.exists(f"/proc/{driver}"), 30, "the driver to end")
