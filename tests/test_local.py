"""The local backend and the runtime end to end with stand-in roles (fast, no MXNet):
argument and environment passing, teardown on failure, cancel, deadlines, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import (
    FAKEROLE,
    assert_no_processes,
    interrupt,
    job_times,
    task_record,
    time_wait_port,
    wait_for,
)


def fake_spec(tmp_path: Path, *, workers: int = 1, servers: int = 1, extra: str = "",
              worker_command=None, startup: str = "60s", grace: str = "1s",
              name: str = "fake") -> Path:
    role = [sys.executable, str(FAKEROLE)]
    worker = worker_command or role
    text = (f"name: {name}\ncommand: {json.dumps(role)}\n"
            f"roles:\n  server: {{count: {servers}}}\n"
            f"  worker: {{count: {workers}, command: {json.dumps(worker)}}}\n"
            f"rendezvous: {{startup_timeout: {startup}, grace: {grace}}}\n{extra}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_arguments_with_spaces_quotes_and_dollars_survive(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tricky = ["a b", "it's", '"quoted"', "$HOME", "`id`", "; rm -rf /", "tab\there", "*"]
    spec = fake_spec(tmp_path, workers=2,
                     worker_command=[sys.executable, str(FAKEROLE), *tricky],
                     extra=f"env: {{FAKE_OUT: '{out}', WITH_SPACE: 'x y $z'}}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        seen = json.loads((out / f"{rank}.json").read_text())
        assert seen["argv"] == tricky
        assert seen["env"]["WITH_SPACE"] == "x y $z"


def test_environment_inherited_and_wired(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = fake_spec(tmp_path, extra=f"env: {{FAKE_OUT: '{out}'}}\n")
    result = cli.run("submit", "--wait", str(spec), env={"FROM_SUBMITTER": "yes", "PORT": "80"})
    assert result.returncode == 0, result.stderr
    env = json.loads((out / "0.json").read_text())["env"]
    assert env["FROM_SUBMITTER"] == "yes"
    assert env["PORT"] != "80"  # the submitter's never leaks; ps-lite's port is mxbatch's
    assert 9000 <= int(env["PORT"]) <= 9999
    assert env["DMLC_ROLE"] == "worker" and env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
    assert env["DMLC_NODE_HOST"] == "127.0.0.1" and int(env["DMLC_PS_ROOT_PORT"]) >= 9000
    assert env["DMLC_NUM_WORKER"] == "1" and env["DMLC_NUM_SERVER"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("/pyhook")


def test_inherit_env_false_drops_the_submitters_variables(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = fake_spec(tmp_path, extra=f"inherit_env: false\nenv: {{FAKE_OUT: '{out}'}}\n")
    result = cli.run("submit", "--wait", str(spec), env={"FROM_SUBMITTER": "yes"})
    assert result.returncode == 0, result.stderr
    env = json.loads((out / "0.json").read_text())["env"]
    assert "FROM_SUBMITTER" not in env and "PATH" in env and env["FAKE_OUT"] == str(out)


@pytest.mark.parametrize("core_dumps", [False, True])
def test_roles_write_no_core_file_unless_the_spec_allows(cli, tmp_path, core_dumps):
    out = tmp_path / "out"
    out.mkdir()
    spec = fake_spec(tmp_path, extra=f"env: {{FAKE_OUT: '{out}'}}\n"
                                     f"core_dumps: {str(core_dumps).lower()}\n")
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    limit = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)

    def allow_cores():  # the submitter's own limit, which core_dumps: true keeps
        resource.setrlimit(resource.RLIMIT_CORE, (limit, hard))

    proc = subprocess.run([sys.executable, "-m", "mxbatch", "submit", "--wait", str(spec)],
                          env=cli.env, capture_output=True, text=True, timeout=120,
                          preexec_fn=allow_cores)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((out / "0.json").read_text())["core_limit"]
    assert seen == ([limit, hard] if core_dumps else [0, 0])


def test_lingering_servers_are_stopped_after_workers_succeed(cli, tmp_path):
    spec = fake_spec(tmp_path, servers=2, grace="1s")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().splitlines()[0]
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED"
    notes = {t["role"]: t["note"] for t in status["tasks"]}
    assert "stopped after every worker succeeded" in notes["server"]
    assert_no_processes(job)


def test_worker_exit_code_fails_the_job_and_names_it(cli, tmp_path):
    spec = fake_spec(tmp_path, workers=2, extra="env: {FAKE_EXIT: '3', FAKE_SLEEP: '0.5'}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert "FAILED: worker[" in result.stderr and "exited with code 3" in result.stderr
    assert "logs/worker-" in result.stderr
    job = result.stdout.strip().splitlines()[0]
    times = job_times(cli.run_dir(job))  # the job's own clock, not the CLI's
    failed = min(r["ended_at"] for label, r in times.tasks.items() if "worker" in label)
    assert times.abort_at is not None and times.abort_at - failed < 5
    assert times.last_end - times.abort_at < 1 + 5  # grace 1s
    assert cli.status(job)["state"] == "FAILED"
    assert_no_processes(job)


def test_unstartable_command_fails_fast(cli, tmp_path):
    spec = fake_spec(tmp_path, worker_command=["/no/such/program", "x"])
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert "worker[0]: cannot start '/no/such/program'" in result.stderr
    assert_no_processes(result.stdout.split()[0])


def test_cancel_detached_job(cli, tmp_path):
    spec = fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '600'}\n", grace="2s")
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("state") == "RUNNING", 30,
             "the worker to run")
    assert cli.status(job)["state"] == "RUNNING"
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job, timeout=0)
    again = cli.run("cancel", job)
    assert again.returncode == 0 and "already ended" in again.stderr
    assert cli.status(job)["state"] == "CANCELLED"


def test_startup_deadline_names_tasks_that_never_started(cli, tmp_path):
    # Two slots for three tasks: the worker never gets one.
    spec = fake_spec(tmp_path, startup="3s", extra="backends: {local: {slots: 2}}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert "startup deadline (3s) passed" in result.stderr and "worker[0]" in result.stderr
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))  # the job's own clock, not the CLI's
    assert 0 <= times.abort_at - times.startup_deadline < 5
    assert times.last_end - times.abort_at < 1 + 5  # grace 1s
    tasks = {t["role"]: t["state"] for t in cli.status(job)["tasks"]}
    assert tasks["worker"] == "CANCELLED"
    assert_no_processes(job)


def test_a_scheduler_that_never_listens_yields_to_the_tasks_that_never_started(cli, tmp_path):
    """The startup deadline finds both: a scheduler that has not listened (``sleep``) and
    a worker that never got a slot. Whichever agent meets the deadline first, the reason
    is the tasks that never started, with the scheduler's own failure after it."""
    role = json.dumps([sys.executable, str(FAKEROLE)])
    spec = tmp_path / "silent.yaml"
    spec.write_text(f"name: silent\ncommand: [sleep, '600']\n"
                    f"roles:\n  server: {{count: 1, command: {role}}}\n"
                    f"  worker: {{count: 1, command: {role}}}\n"
                    "rendezvous: {startup_timeout: 3s, grace: 1s}\n"
                    "backends: {local: {slots: 2}}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1, result.stderr
    assert re.search(r"startup deadline \(3s\) passed and this task never started: "
                     r"worker\[0\]; (scheduler\[0\] did not listen on \S+ before the startup "
                     r"deadline|server\[0\]: the scheduler was not listening before the "
                     r"startup deadline) \(3s\)", result.stderr), result.stderr
    assert_no_processes(result.stdout.split()[0])


def test_killed_supervisor_is_detected(cli, tmp_path):
    spec = fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '600'}\n")
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    record = wait_for(lambda: (task_record(run_dir, "server", 0) or {}).get("state") == "RUNNING"
                      and task_record(run_dir, "server", 0), 30, "the server to run")
    os.kill(record["supervisor_pid"], signal.SIGKILL)
    result = cli.run("wait", job, "--timeout", "30")
    assert result.returncode == 1
    # Whoever notices first names it: the manager (killed by SIGKILL) or wait (lost).
    assert re.search(r"FAILED: .*server\[0\] (was killed by SIGKILL|lost)", result.stderr)
    assert_no_processes(job)


def test_walltime_is_enforced(cli, tmp_path):
    spec = fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '600'}\nresources: {walltime: 2s}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 1
    assert re.search(r"FAILED: the job reached its walltime \(2s; \w+\[0\], the first task "
                     r"past it, was stopped\)", result.stderr), result.stderr
    # the job's clock ended it: no role's last output is quoted as the cause
    assert "last output" not in result.stderr
    assert_no_processes(result.stdout.split()[0])


#: when the Ctrl-C tests send SIGINT: at once after the job id is printed (the CLI may
#: not supervise the job yet), once the scheduler runs (members are starting), once the
#: worker runs
CTRL_C_MOMENTS = ("at-once", "scheduler-running", "worker-running")


def _running(run_dir: Path, role: str):
    return lambda: (task_record(run_dir, role, 0) or {}).get("state") == "RUNNING"


@pytest.mark.parametrize("moment", CTRL_C_MOMENTS)
@pytest.mark.parametrize("command", ["submit", "launch"])
def test_ctrl_c_on_attached_submit_cancels(cli, tmp_path, command, moment):
    """Ctrl-C on ``submit --wait`` or ``launch`` cancels the job whenever it comes:
    exit 130 within a bounded time, CANCELLED, nothing left. bench/ctrl_c_stress.py
    runs this many times on a loaded machine (the race it once lost)."""
    if command == "submit":
        spec = fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '600'}\n")
        proc = cli.foreground("submit", "--wait", str(spec))
    else:
        proc = cli.foreground("launch", "-n", "1", "-s", "1", "--grace", "1s", "--",
                           sys.executable, str(FAKEROLE), env={"FAKE_SLEEP": "600"},
                           cwd=tmp_path)
    job = proc.stdout.readline().strip()
    assert job, proc.communicate(timeout=60)[1]
    run_dir = cli.run_dir(job)
    if moment == "scheduler-running":
        wait_for(_running(run_dir, "scheduler"), 60, "the scheduler to run")
    elif moment == "worker-running":
        wait_for(_running(run_dir, "worker"), 60, "the worker to run")
    _, err = interrupt(proc, 30, f"mxbatch {command} ({moment})")
    assert proc.returncode == 130, err
    assert "CANCELLED" in err and "Traceback" not in err, err
    assert cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job, timeout=0)


def _interrupted_before_mxbatch(err: str) -> bool:
    """Ctrl-C in Python's own start-up (importing ``site``, ``runpy``, the package's
    ``__init__``): the interpreter's message, before any line of mxbatch could run."""
    if "Fatal Python error: init_import_site" in err:
        return True
    frames = re.findall(r'File ".*?/mxbatch/([^"]+)"', err)
    return "Traceback" in err and set(frames) <= {"__init__.py", "__main__.py"}


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4, 0.8])
def test_ctrl_c_while_starting_exits_130_and_leaves_nothing(cli, tmp_path, delay):
    """SIGINT at any moment of the start-up (importing, parsing, submitting): exit 130,
    no traceback; a job it got to submit is CANCELLED with nothing left running. The
    delays are no synchronisation: they are the moments tried."""
    proc = cli.foreground("launch", "-n", "1", "-s", "1", "--grace", "1s", "--",
                       sys.executable, str(FAKEROLE), env={"FAKE_SLEEP": "600"}, cwd=tmp_path)
    time.sleep(delay)
    out, err = interrupt(proc, 30, "mxbatch launch")
    assert "Aborted" not in err, err
    if _interrupted_before_mxbatch(err):
        assert proc.returncode in (1, 130, -signal.SIGINT) and cli.run_dirs() == [], err
        return
    # killed by SIGINT itself (Python's way when the signal comes while it is starting,
    # or after a KeyboardInterrupt inside exec'd code) is what a shell reports as 130 too
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err, err
    jobs = [path.stem for path in (cli.home / "jobs").glob("*.json")]
    assert len(jobs) == len(cli.run_dirs()) <= 1
    for job in jobs:
        assert job in out and cli.status(job)["state"] == "CANCELLED"
        assert_no_processes(job, timeout=0)


def test_status_logs_and_list(cli, tmp_path):
    spec = fake_spec(tmp_path, workers=2)
    result = cli.run("submit", "--wait", str(spec))
    job = result.stdout.split()[0]
    table = cli.run("status", job).stdout
    assert f"job {job}  backend local  state SUCCEEDED" in table
    assert "worker[1]" in table and "SUCCEEDED" in table
    logs = cli.run("logs", job, "--verbose").stdout
    assert "worker[0]    | mxbatch supervisor worker[0]: exited with code 0" in logs
    one = cli.run("logs", job, "--role", "worker", "--rank", "1", "-v").stdout
    assert one.startswith("mxbatch supervisor worker[1]: starting")
    assert "mxbatch " not in cli.run("logs", job).stdout  # by default: the roles' own
    listing = cli.run("list").stdout
    assert job in listing and "SUCCEEDED" in listing
    assert cli.run("status", "no-such-job-0123abcd").returncode == 4  # (no-such-job: no id, 2)
    for args in (("--role", "worker", "--rank", "7"), ("--rank", "7"),
                 ("--role", "worker", "--rank", "7", "-f")):
        missing = cli.run("logs", job, *args)
        assert missing.returncode == 4 and missing.stdout == "", missing.stderr
        assert "has no task" in missing.stderr and "Traceback" not in missing.stderr
        assert "scheduler[0], server[0], worker[0], worker[1]" in missing.stderr, \
            missing.stderr


def test_render_prints_tasks_without_creating_anything(cli, tmp_path):
    spec = fake_spec(tmp_path, workers=2)
    result = cli.run("render", str(spec))
    assert result.returncode == 0, result.stderr
    assert "task 3: worker[1]" in result.stdout and "DMLC_ROLE=worker" in result.stdout
    assert "runtime.pyz agent" in result.stdout
    assert cli.run_dirs() == []


def test_run_directory_is_private(cli, tmp_path):
    spec = fake_spec(tmp_path)
    job = cli.run("submit", "--wait", str(spec)).stdout.split()[0]
    assert (cli.run_dir(job)).stat().st_mode & 0o777 == 0o700
    assert (cli.home / "jobs").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("count", [3])
def test_launch_style_command(cli, tmp_path, count):
    result = cli.run("launch", "-n", str(count), "-s", "1", "--grace", "1s", "--",
                     sys.executable, str(FAKEROLE), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    assert len([t for t in cli.status(job)["tasks"] if t["role"] == "worker"]) == count


def test_a_port_an_ended_scheduler_left_in_time_wait_is_free(cli, tmp_path):
    port = time_wait_port()
    spec = fake_spec(tmp_path, extra=f"network: {{ports: {port}-{port}}}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    assert json.loads((cli.run_dir(job) / "scheduler.json").read_text())["port"] == port


def test_held_members_start_again_on_the_schedulers_retry_port(cli, tmp_path):
    """The scheduler's first port is lost before it listens (its role exits 1, as
    ps-lite's 'bind failed'): the members, held at their start gate with the old
    address, end and start again for the port that listened."""
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "failed-once"
    spec = fake_spec(tmp_path, extra=f"env: {{FAKE_OUT: '{out}', FAKE_SLEEP: '1', "
                                     f"FAKE_SCHEDULER_FAIL_ONCE: '{marker}'}}\n")
    result = cli.run("submit", "--wait", str(spec))
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    scheduler = json.loads((cli.run_dir(job) / "scheduler.json").read_text())
    assert scheduler["attempt"] == 2 and scheduler["listening"] is True
    seen = json.loads((out / "0.json").read_text())["env"]
    assert seen["DMLC_PS_ROOT_PORT"] == str(scheduler["port"])
    log = (cli.run_dir(job) / "logs" / "worker-0.log").read_text()
    assert log.count("the scheduler moved to") == 1, log
    assert log.count("starting on") == 2, log  # held on the lost port, then on the new one
