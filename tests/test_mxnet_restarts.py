"""Must-show 1 of restarts, locally: a real MXNet dist_sync job (examples/resume-ps.yaml)
whose worker is SIGKILLed at attempt 0 with restarts.max 1 finishes SUCCEEDED on attempt
1, resumed from its checkpoint: the final model has every epoch's updates exactly once
(the steps per epoch it records), and status shows both attempts and why."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from .conftest import EXAMPLES, assert_no_processes, task_record, wait_for

pytestmark = pytest.mark.mxnet
#: batches per epoch of each of 2 workers: 8192 samples / 2 / batch size 64
BATCHES = 64


def copy_resume_example(directory: Path, text_edit=None) -> Path:
    """examples/resume-ps.yaml and train_resume.py in ``directory`` (the roles' workdir:
    the checkpoint goes there)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "train_resume.py", directory / "train_resume.py")
    text = (EXAMPLES / "resume-ps.yaml").read_text().replace("max: 3", "max: 1") \
        .replace("backoff: 10s", "backoff: 1s")
    if text_edit is not None:
        text = text_edit(text)
    path = directory / "resume-ps.yaml"
    path.write_text(text)
    return path


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def last_step(log: str) -> int:
    steps = [int(m) for m in re.findall(r"\] step (\d+) epoch", log)]
    return max(steps, default=0)


def assert_every_epoch_once(workdir: Path, epochs: int) -> dict:
    final = json.loads((workdir / "checkpoint" / "final.json").read_text())
    assert final["epoch_steps"] == {str(e): BATCHES for e in range(epochs)}, final
    assert final["steps"] == BATCHES * epochs
    return final


def test_killed_worker_resumes_from_its_checkpoint(cli, tmp_path):
    workdir = tmp_path / "resume"
    spec = copy_resume_example(workdir)
    job = cli.submit(spec, env={"EPOCHS": "3", "STEP_SLEEP": "0.03"})
    run = cli.run_dir(job)
    log0 = run / "logs" / "worker-0.log"
    wait_for(lambda: re.search(r"epoch 0 loss .* checkpoint saved", read(log0)), 300,
             "the first epoch's checkpoint")
    wait_for(lambda: last_step(read(log0)) >= BATCHES + 10, 120, "steps into epoch 1")
    victim = task_record(run, "worker", 0)["pid"]
    os.kill(victim, signal.SIGKILL)
    killed, stopped_at = time.time(), last_step(read(log0))
    result = cli.run("wait", job, "--timeout", "400", timeout=420)
    assert result.returncode == 0, result.stderr
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
    assert "killed by SIGKILL" in status["attempts"][0]["detail"]
    final = assert_every_epoch_once(workdir, 3)
    assert final["resumed"][0]["attempt"] == 1 and final["resumed"][0]["steps"] == BATCHES
    resumed = read(run / "attempts" / "1" / "logs" / "worker-0.log") + \
        read(run / "attempts" / "1" / "logs" / "worker-1.log")
    assert "attempt=1 restart_reason=failure" in resumed
    assert f"resumed from the checkpoint: epoch 1 batch 0 ({BATCHES} steps)" in resumed
    first = float(re.search(r"first step of attempt 1 at ([\d.]+)", resumed).group(1))
    print(f"\nNUMBERS local SIGKILL: fault to first step {first - killed:.1f} s, steps redone "
          f"{stopped_at - BATCHES} of a checkpoint interval of {BATCHES}")
    text = cli.run("status", job).stdout
    assert re.search(r"\n  0 .* failure +worker\[0\] was killed by SIGKILL", text), text
    assert re.search(r"\n  1 .* succeeded", text), text
    assert_no_processes(job)


def test_a_worker_that_raises_early_in_training_is_restarted(cli, tmp_path):
    """Issue 36: worker rank 1 raises a few steps after the first epoch's checkpoint (about
    a second of training, after many pushes and pulls). Its own hook said its kvstore
    passed ps-lite's barrier (``connected``), so the failure is training's, not a
    start-up one: with one restart allowed the job resumes from the checkpoint and
    succeeds. (Before, a socket sample once a second decided, and a fast crash outran
    it: "not restarted: worker[1] failed before it reached the scheduler".)"""
    workdir = tmp_path / "crash"
    spec = copy_resume_example(workdir)
    job = cli.submit(spec, env={"EPOCHS": "2", "FAIL_AT_STEP": str(BATCHES + 3),
                                "FAIL_RANK": "1", "PRINT_EVERY": "1000"})
    result = cli.run("wait", job, "--timeout", "400", timeout=420)
    assert result.returncode == 0, result.stderr
    status = cli.status(job)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1, status
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
    assert "exited with code 1" in status["attempts"][0]["detail"]
    run = cli.run_dir(job)
    crashed = read(run / "logs" / "worker-1.log")
    assert f"FAIL_AT_STEP: failing after step {BATCHES + 3}" in crashed
    first = float(re.search(r"first step of attempt 0 at ([\d.]+)", crashed).group(1))
    ended = task_record(run, "worker", 1)["ended_at"]
    print(f"\nNUMBERS local crash after {ended - first:.2f} s of training: restarted")
    final = assert_every_epoch_once(workdir, 2)
    assert final["resumed"][0] == {"attempt": 1, "steps": BATCHES}
    assert_no_processes(job)


def test_a_worker_that_fails_before_its_kvstore_is_not_restarted(cli, tmp_path):
    """The other side of the same fact: a worker that raises before it creates its
    kvstore never reached the scheduler (its hook said no ``connected``, no connection
    was seen): a start-up failure, which every attempt would repeat, is not restarted."""
    workdir = tmp_path / "early"
    spec = copy_resume_example(workdir)
    job = cli.submit(spec, env={"EPOCHS": "1", "FAIL_AT_STEP": "0", "FAIL_RANK": "1"})
    result = cli.run("wait", job, "--timeout", "300", timeout=320)
    assert result.returncode == 1, result.stderr
    assert "failed before it reached the scheduler" in result.stderr, result.stderr
    status = cli.status(job)
    assert status["state"] == "FAILED" and len(status["attempts"]) == 1, status
    assert_no_processes(job)
