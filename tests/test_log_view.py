"""What a user sees of a job (issue 38, 1, 2 and 9): followed logs show the roles' own
lines and the job's events once (``--verbose`` and the log files keep mxbatch's
bookkeeping); ``logs --tail`` counts the role's lines; ``wait --timeout --json`` prints
its one document; the merged live log is in the order the lines arrived; the README's
own job, counted."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mxbatch.jobs.follow import LogStream
from mxbatch.jobs.logview import RoleLines, is_mxbatch_line
from mxbatch.runtime import logfile, notes
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.planfile import TaskInfo
from mxbatch.runtime.roles import Role

from .conftest import assert_no_processes
from .test_local import fake_spec

DUMP = ["Thread 0x00007f3c1e9fd6c0 (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait',
        "",
        "Current thread 0x00007f3c25e0b740 (most recent call first):",
        '  File "/work/train.py", line 41 in main',
        "  <no Python frame>"]
TRACEBACK = ["Traceback (most recent call last):",
             '  File "/work/train.py", line 41, in main',
             "    raise RuntimeError('boom')",
             "RuntimeError: boom"]


def test_the_roles_own_lines_are_shown_mxbatchs_are_not():
    lines = RoleLines()
    hidden = [notes.note("worker[1]", "starting on vm: python3 train.py").rstrip("\n"),
              notes.note("worker[1]", "stopping: worker[0] stalled").rstrip("\n"),
              notes.hook_line("worker[1]", "finished", '{"pid": 3}').rstrip("\n"),
              notes.LEAN_SCHEDULER + "/x/libmxnet.so, without its script",
              *DUMP]
    assert [line for line in hidden if lines.shows(line)] == []
    assert all(is_mxbatch_line(line) for line in hidden if line and "<no" not in line)
    own = ["epoch 0 loss 0.37", "", "  indented output of the role", *TRACEBACK,
           "mxbatch: uncaught RuntimeError: exiting with code 1"]
    role = RoleLines()
    assert [line for line in own if role.shows(line)] == own
    assert not any(is_mxbatch_line(line) for line in own)
    crash = ["Fatal Python error: Segmentation fault", "", *DUMP]  # the role's own
    role = RoleLines()
    assert [line for line in crash if role.shows(line)] == crash


def test_a_time_index_is_read_as_it_grows(tmp_path):
    times = tmp_path / "w.times"
    times.write_text("0 100.0\n10 100.5\n2")
    index = logfile.IndexFollower(str(times))
    index.refresh()
    assert (index.time_at(0), index.time_at(9), index.time_at(12)) == (100.0, 100.0, 100.5)
    with open(times, "a") as handle:
        handle.write("0 101.0\n")
    index.refresh()
    assert index.time_at(19) == 100.5 and index.time_at(20) == 101.0


def _stream(tmp_path: Path, logs, **kwargs):
    """A LogStream over hand-written logs: ``logs`` maps (role, rank) to (text, index)."""
    layout = RunLayout(str(tmp_path))
    tasks = []
    for index, ((role, rank), (text, times)) in enumerate(logs.items()):
        Path(layout.task_log(role.value, rank)).parent.mkdir(parents=True, exist_ok=True)
        Path(layout.task_log(role.value, rank)).write_text(text)
        Path(layout.task_log_times(role.value, rank)).write_text(times)
        tasks.append(TaskInfo(index=index, role=role, rank=rank, argv=[], env={}))
    backend = SimpleNamespace(log_reader=lambda *args: None)
    record = SimpleNamespace(layout=layout)
    shown = []
    stream = LogStream(backend, record, SimpleNamespace(tasks=tasks), shown.append,
                       **kwargs)
    return stream, shown


def test_the_merged_live_log_is_in_the_order_the_lines_arrived(tmp_path):
    """Friction 9: a scheduler line was printed before a worker line stamped 140 ms
    earlier (each look showed task after task)."""
    listening = notes.note("scheduler[0]", "listening on 127.0.0.1:9000")
    stream, shown = _stream(tmp_path, {
        (Role.SCHEDULER, 0): ("scheduler says\n" + listening, "0 100.140\n"),
        (Role.WORKER, 0): ("worker starts\nworker step 1\n", "0 100.000\n14 100.200\n")},
        merge=True, verbose=True)
    stream.pump(final=True)
    assert shown == ["worker[0]    | worker starts", "scheduler[0] | scheduler says",
                     "scheduler[0] | " + listening.rstrip("\n"),
                     "worker[0]    | worker step 1"]


def test_a_merged_log_holds_a_line_back_for_earlier_ones_read_later(tmp_path, monkeypatch):
    stream, shown = _stream(tmp_path, {(Role.SCHEDULER, 0): ("late\n", "0 100.3\n"),
                                       (Role.WORKER, 0): ("", "")}, merge=True)
    stream.pump()
    assert shown == []  # read just now: held back for MERGE_WINDOW_S
    worker_log = RunLayout(str(tmp_path)).task_log("worker", 0)
    Path(worker_log).write_text("early\n")
    Path(RunLayout(str(tmp_path)).task_log_times("worker", 0)).write_text("0 100.1\n")
    clock = time.time() + 1
    monkeypatch.setattr("mxbatch.jobs.follow.time.time", lambda: clock)
    monkeypatch.setattr("mxbatch.jobs.follow.time.monotonic", lambda: clock)
    stream.pump()  # the worker's line, read now, arrived first: both wait for it
    stream.pump(final=True)
    assert shown == ["worker[0]    | early", "scheduler[0] | late"]


def test_submit_wait_shows_the_roles_output_and_verbose_brings_the_rest(cli, tmp_path):
    spec = fake_spec(tmp_path, workers=2, extra="env: {FAKE_SLEEP: '0.3', FAKE_TICK: '0.1'}\n")
    quiet = cli.run("submit", "--wait", str(spec))
    assert quiet.returncode == 0, quiet.stderr
    job, *streamed = quiet.stdout.splitlines()
    assert streamed and all(line.split(" | ", 1)[1] == "tick" for line in streamed), streamed
    assert [line for line in quiet.stderr.splitlines() if "mxbatch supervisor" in line] == []
    log = (cli.run_dir(job) / "logs" / "worker-1.log").read_text()
    assert "mxbatch supervisor worker[1]: exited with code 0" in log  # the record: all
    verbose = cli.run("submit", "--wait", "--verbose", str(spec))
    assert verbose.returncode == 0, verbose.stderr
    assert "mxbatch supervisor worker[1]: exited with code 0" in verbose.stdout
    assert "mxbatch hook worker[1]: started" in verbose.stdout
    own = cli.run("logs", job).stdout.splitlines()
    assert own and all(line.split(" | ", 1)[1] == "tick" for line in own), own


def test_a_stall_is_said_once_for_the_job(cli, tmp_path):
    """Friction 1: the stall was printed once per role (each one's teardown note)."""
    spec = fake_spec(tmp_path, workers=2, servers=2,
                     extra="env: {FAKE_SLEEP: '120'}\n").read_text().replace(
        "grace: 1s}", "grace: 1s, stall_timeout: 3s}")
    path = tmp_path / "stall.yaml"
    path.write_text(spec)
    result = cli.run("submit", "--wait", str(path))
    assert result.returncode == 1, result.stderr
    said = re.findall(r"worker\[\d\] stalled", result.stdout + result.stderr)
    assert len(said) == 1, result.stdout + result.stderr
    assert re.search(r"^mxbatch: job \S+ FAILED: worker\[\d\] stalled", result.stderr, re.M)
    job = result.stdout.split()[0]
    verbose = cli.run("logs", job, "--verbose").stdout
    assert verbose.count("stopping: worker[") >= 3, verbose  # the files keep every note
    assert_no_processes(job)


def test_wait_timeout_json_prints_the_status_it_gave_up_at(cli, tmp_path):
    """Friction 2: ``wait --timeout 3s --json`` printed nothing (exit 124)."""
    job = cli.submit(fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '120'}\n"))
    try:
        result = cli.run("wait", job, "--timeout", "1s", "--json")
        assert result.returncode == 124, result.stderr
        document = json.loads(result.stdout)
        assert document["job_id"] == job and document["timed_out"] is True
        assert document["state"] in ("PENDING", "RUNNING") and document["schema"] == 2
        assert "still" in result.stderr
    finally:
        cli.run("cancel", job)
    done = cli.run("wait", job, "--json")
    assert json.loads(done.stdout)["timed_out"] is False
    assert_no_processes(job)


def test_a_too_big_job_suggests_only_what_its_command_takes(cli, tmp_path):
    """Friction 9: ``submit`` suggested ``--max-tasks``, which only ``launch`` has."""
    path = tmp_path / "job.yaml"
    path.write_text("command: x\nroles: {worker: {count: 2000}}\n")
    submitted = cli.run("submit", str(path))
    assert submitted.returncode == 2 and "set max_tasks: 4001" in submitted.stderr
    assert "--max-tasks" not in submitted.stderr, submitted.stderr
    launched = cli.run("launch", "-n", "2000", "--", "true", cwd=tmp_path)
    assert launched.returncode == 2 and "--max-tasks 4001" in launched.stderr


def test_mxbatch_home_is_documented_for_users():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "MXBATCH_HOME" in readme


@pytest.mark.mxnet
def test_the_readme_jobs_output_is_the_scripts_and_a_handful_of_events(cli, example):
    """The README's own job (``mxbatch submit --wait examples/mlp-ps.yaml``, real MXNet):
    by default the script's own lines and a few mxbatch lines; ``--verbose`` brings the
    supervisors' notes and the hook's reports back. Before: 33 of its 84 lines were
    mxbatch's bookkeeping."""
    plain = cli.run("submit", "--wait", str(example), timeout=300)
    assert plain.returncode == 0, plain.stderr
    job, *streamed = plain.stdout.splitlines()
    mxbatch = [line for line in streamed if re.search(r"\| mxbatch[ :]", line)]
    assert mxbatch == [], mxbatch
    assert {line.split(" | ")[0].strip() for line in streamed} == {"worker[0]", "worker[1]"}
    assert len([line for line in streamed if "done after" in line]) == 2
    events = plain.stderr.splitlines()
    assert all(line.startswith("mxbatch: ") for line in events) and len(events) <= 6, events
    assert events[-1].startswith(f"mxbatch: job {job} SUCCEEDED")
    verbose = cli.run("submit", "--wait", "--verbose", str(example), timeout=300)
    assert verbose.returncode == 0, verbose.stderr
    notes_shown = [line for line in verbose.stdout.splitlines() if "| mxbatch " in line]
    assert len(notes_shown) >= 25, verbose.stdout  # 5 starting, 5 exited, 15 hook reports...
    sys.stderr.write(f"README job: {len(plain.stdout.splitlines()) + len(events)} lines "
                     f"by default, {len(verbose.stdout.splitlines())} + "
                     f"{len(verbose.stderr.splitlines())} with --verbose\n")
