"""What the role hook tells the supervisor, with stand-in roles (no MXNet): a role that
hangs after its code finished is ended and the job succeeds, naming it; a worker blocked
after another finished fails the job as a dist_sync deadlock; roles with different MXNet
versions fail the job at start, naming both. Durations come from the job's records."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from mxbatch.runtime.layout import RunLayout

from .conftest import (
    FAKEROLE,
    assert_no_processes,
    job_times,
    task_record,
    wait_for,
    write_spec,
)

ROLE = json.dumps([sys.executable, str(FAKEROLE)])


def stand_in_spec(tmp_path: Path, env: str, *, rendezvous: str = "",
                  roles: str = "server: {count: 1}, worker: {count: 2}") -> Path:
    return write_spec(tmp_path / "job.yaml",
                      f"name: hook\ncommand: {ROLE}\nworkdir: {tmp_path}\nenv: {{{env}}}\n"
                      f"roles: {{{roles}}}\n"
                      f"rendezvous: {{startup_timeout: 2m, grace: 2s{rendezvous}}}\n")


def stand_in_mxnet(directory: Path, version: str) -> Path:
    """A directory holding a package ``mxnet`` whose ``libinfo.py`` says ``version``
    (what the hook reads), to put first on a role's PYTHONPATH."""
    (directory / "mxnet").mkdir(parents=True)
    (directory / "mxnet" / "__init__.py").write_text("")
    (directory / "mxnet" / "libinfo.py").write_text(f'__version__ = "{version}"\n')
    return directory


def test_roles_hanging_after_their_code_are_ended_and_the_job_succeeds(cli, tmp_path):
    spec = stand_in_spec(tmp_path, "FAKE_SLEEP: '1', FAKE_HANG_AT_EXIT_RANKS: '0,1'",
                         rendezvous=", exit_timeout: 3s")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"mxbatch: note: MXNet's exit hang: worker\[0\] \(hung [3-9]s\) and "
                     r"worker\[1\] \(hung [3-9]s\) were ended by mxbatch", result.stderr), \
        result.stderr[-2000:]
    job = result.stdout.split()[0]
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and "worker[0] (hung" in status["note"]
    times = job_times(cli.run_dir(job))
    for rank in (0, 1):
        record = times.tasks[f"worker[{rank}]"]
        assert record["state"] == "SUCCEEDED" and "exit hang" in record["note"]
        assert 3 <= record["exit_hang_s"] < 3 + 5
        # ended within exit_timeout plus the loop's pace (SIGTERM ends it at once)
        assert 3 <= record["ended_at"] - record["code_finished_at"] < 3 + 5
        assert record["environment"]["python"].startswith("%d.%d." % sys.version_info[:2])
    assert "note: MXNet's exit hang" in cli.run("status", job).stdout
    assert_no_processes(job)


def test_once_every_workers_code_finished_a_hung_worker_gets_only_the_exit_grace(
        cli, tmp_path):
    """Issue 36: training is over once every worker's code has finished: a worker still
    running ``exit_grace`` (2 s) later is ended, not ``exit_timeout`` (60 s, the
    default) later, and the server and scheduler end as soon as the workers have."""
    spec = stand_in_spec(tmp_path, "FAKE_SLEEP: '1', FAKE_HANG_AT_EXIT_RANKS: '0,1'",
                         rendezvous=", exit_grace: 2s")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))
    workers = [times.tasks[f"worker[{rank}]"] for rank in (0, 1)]
    all_finished = max(w["code_finished_at"] for w in workers)
    for record in workers:
        assert record["state"] == "SUCCEEDED" and "exit hang" in record["note"]
        # ended exit_grace after the last worker's code finished (SIGTERM ends it at once)
        assert 2 <= record["ended_at"] - all_finished < 2 + 4
    for label in ("server[0]", "scheduler[0]"):
        record = times.tasks[label]
        assert record["state"] == "SUCCEEDED", record
        assert record["ended_at"] - max(w["ended_at"] for w in workers) < 3
    ended = times.last_end - all_finished
    sys.stderr.write(f"NUMBERS exit hang (stand-ins): the job ended {ended:.1f}s after the "
                     f"last worker's code finished (exit_grace 2s)\n")
    assert ended < 2 + 5
    assert_no_processes(job)


def test_a_worker_that_finished_while_another_trains_waits_for_it(cli, tmp_path):
    """A worker whose code finished while another's has not keeps the longer wait
    (``exit_timeout``): it is ended only ``exit_grace`` after the other's code finished
    too (the other trains until the test lets it go, once the first has finished)."""
    barrier = tmp_path / "go"
    spec = stand_in_spec(tmp_path, f"FAKE_SLEEP: '0.5', FAKE_HANG_AT_EXIT_RANKS: '0,1', "
                                   f"FAKE_BARRIER: '{barrier}', FAKE_BARRIER_RANKS: '1'",
                         rendezvous=", exit_grace: 1s, exit_timeout: 2m")
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("code_finished_at"), 120,
             "worker[0]'s code to finish")
    first_seen = time.time()
    wait_for(lambda: time.time() - first_seen > 3, 10, "3 s of worker[1] alone")
    assert (task_record(run_dir, "worker", 0) or {})["state"] == "RUNNING"
    barrier.touch()
    result = cli.run("wait", job, "--timeout", "120", timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    times = job_times(run_dir)
    first, second = times.tasks["worker[0]"], times.tasks["worker[1]"]
    assert first["code_finished_at"] < second["code_finished_at"]
    for record in (first, second):
        assert record["state"] == "SUCCEEDED" and "exit hang" in record["note"]
        assert 1 <= record["ended_at"] - second["code_finished_at"] < 1 + 4
    assert first["exit_hang_s"] >= second["code_finished_at"] - first["code_finished_at"]
    assert_no_processes(job)


def test_a_worker_blocked_after_another_finished_fails_as_a_deadlock(cli, tmp_path):
    spec = stand_in_spec(tmp_path, "FAKE_SLEEP: '1', FAKE_BLOCK_RANK: '1'",
                         rendezvous=", exit_timeout: 3s")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    # where it blocks, from its stack (fakerole's stand-in of MXNet's KVStore.push); no
    # claim on batches: nothing counted them
    assert re.search(r"FAILED: worker\[0\] finished; worker\[1\] blocked \d+s in a kvstore "
                     r"call \(mxnet/kvstore/kvstore\.py:4 in push\), from fakerole\.py:\d+ in "
                     r"<module> \(STAND_IN_KVSTORE\[\"push\"\]\(3, None\)\) \(no CPU and no "
                     r"output; rendezvous\.exit_timeout 3s\)", result.stderr), result.stderr[-2000:]
    assert "batches" not in result.stderr
    job = result.stdout.split()[0]
    run_dir = cli.run_dir(job)
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    assert abort["end"] == "exit_hang" and (abort["role"], abort["rank"]) == ("worker", 1)
    times = job_times(run_dir)
    finished = times.tasks["worker[0]"]["code_finished_at"]
    assert times.tasks["worker[0]"]["state"] == "SUCCEEDED"
    assert 3 <= abort["at"] - finished < 3 + 10  # idle 3s, seen at the next heartbeat
    assert_no_processes(job)


def test_a_program_that_ends_is_not_an_exit_hang(cli, tmp_path):
    """A command of several Python programs: the first one's code finishes and it exits;
    the role goes on (longer than exit_timeout) and is not ended."""
    worker = json.dumps(["sh", "-c", f"{sys.executable} -c pass; sleep 5; "
                                     f"exec {sys.executable} {FAKEROLE}"])
    spec = stand_in_spec(tmp_path, "FAKE_SLEEP: '1'", rendezvous=", exit_timeout: 2s",
                         roles=f"server: {{count: 1}}, worker: {{count: 1, command: {worker}}}")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exit hang" not in result.stderr
    job = result.stdout.split()[0]
    record = job_times(cli.run_dir(job)).tasks["worker[0]"]
    assert record["exit_hang_s"] is None and record["exit_code"] == 0
    assert_no_processes(job)


def test_roles_with_different_mxnet_versions_fail_the_job_at_start(cli, tmp_path):
    """Every role finds a stand-in mxnet 1.9.1, the server a stand-in 1.8.0 (first on its
    PYTHONPATH): the job fails at once naming both, and is not restarted."""
    same = stand_in_mxnet(tmp_path / "same", "1.9.1")
    other = stand_in_mxnet(tmp_path / "other", "1.8.0")
    spec = stand_in_spec(
        tmp_path, f"FAKE_SLEEP: '60', PYTHONPATH: '{same}'",
        roles=f"server: {{count: 1, env: {{PYTHONPATH: '{other}'}}}}, worker: {{count: 1}}")
    spec.write_text(spec.read_text() + "restarts: {max: 1, backoff: 0}\n")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    reason = (f"environment mismatch: server[0] runs Python {sys.version_info[0]}."
              f"{sys.version_info[1]}.")
    assert reason in result.stderr, result.stderr[-2000:]
    assert f"MXNet 1.8.0 ({other}/mxnet), but scheduler[0] runs" in result.stderr
    assert f"MXNet 1.9.1 ({same}/mxnet)" in result.stderr
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))
    listening = times.tasks["scheduler[0]"]["reached_at"]  # the server's role starts then
    assert times.abort_at - listening < 5  # at once, not at a deadline
    status = cli.status(job)
    assert len(status["attempts"]) == 1  # a start-up failure: not restarted
    assert_no_processes(job)
