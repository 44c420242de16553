"""Restarts on the real Slurm test cluster (a slurmd in each namespace test host), with
the resume example (a real MXNet dist_sync job):

- a node failure for real: the test stops the slurmd of the node that runs worker[0]
  mid-job (restored in a finally); Slurm ends that array task NODE_FAIL, the driver
  names the node, the job relaunches without it (``--exclude``) and finishes, every
  epoch's updates once, the node shown as excluded;
- the walltime warning for real: ``scancel --signal=USR1 --batch`` to the worker array
  (what ``--signal=B:USR1@lead`` sends before the time limit): the workers checkpoint
  at once, the attempt ends (walltime), the next resumes where it stopped (no step
  redone) and finishes.

Both print the numbers of docs/long-jobs.md: time from the fault to the next attempt's
first training step, and the steps redone against the checkpoint interval (an epoch).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .clusterjobs import run_dir_of, slurm_queued, wait_queue_empty
from .conftest import Cli, assert_no_processes, cluster_environment, task_record, wait_for
from .test_mxnet_restarts import (
    BATCHES,
    assert_every_epoch_once,
    copy_resume_example,
    last_step,
    read,
)

pytestmark = [pytest.mark.slurm, pytest.mark.mxnet]


@pytest.fixture
def slurm(home) -> Cli:
    return Cli(home, cluster_environment("slurm"))


def resume_spec(tmp_path: Path, name: str) -> Path:
    def edit(text: str) -> str:
        return (text.replace("name: resume-ps", f"name: {name}")
                .replace("memory: 4G", "memory: 600M")
                .replace("backoff: 1s", "backoff: 0"))
    return copy_resume_example(tmp_path / name, edit)


def first_step_at(log: str, attempt: int) -> float:
    match = re.search(rf"first step of attempt {attempt} at ([\d.]+)", log)
    assert match, log[-2000:]
    return float(match.group(1))


def attempt_logs(run: Path, attempt: int) -> str:
    logs = run / ("logs" if attempt == 0 else f"attempts/{attempt}/logs")
    return "".join(read(p) for p in sorted(logs.glob("worker-*.log")))


def start_training(slurm: Cli, spec: Path, epochs: int = 3, step_sleep: float = 0.15):
    job = slurm.submit(spec, "--backend", "slurm",
                       env={"EPOCHS": str(epochs), "STEP_SLEEP": str(step_sleep),
                            "PRINT_EVERY": "1"})
    run = run_dir_of(slurm, job)
    log0 = run / "logs" / "worker-0.log"
    wait_for(lambda: re.search(r"epoch 0 loss .* checkpoint saved", read(log0)), 400,
             "the first epoch's checkpoint")
    wait_for(lambda: last_step(read(log0)) >= BATCHES + 10, 120, "steps into epoch 1")
    return job, run


def slurm_base(slurm: Cli) -> Path:
    return Path(slurm.env["SLURM_CONF"]).parent.parent


def node_state(slurm: Cli, node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True,
                          text=True, env=slurm.env).stdout.strip()


def stop_slurmd(slurm: Cli, node: str) -> int:
    """SIGTERM to the node's slurmd (its job steps stay: a node that stops answering)."""
    pid = int((slurm_base(slurm) / "run" / f"slurmd-{node}.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, f"slurmd of {node} to stop")
    return pid


def restore_slurmd(slurm: Cli, node: str) -> None:
    """Start the node's slurmd again in its host (as ci/clusters/slurm-up.sh does) and wait
    until Slurm has it back (ReturnToService=2)."""
    base = slurm_base(slurm)
    pid_file = base / "run" / f"slurmd-{node}.pid"
    try:
        alive = Path(f"/proc/{int(pid_file.read_text())}").exists()
    except (OSError, ValueError):
        alive = False
    if not alive:
        pid_file.unlink(missing_ok=True)
        hosts_exec = cluster_environment("hosts")["MXBATCH_TEST_HOSTS_EXEC"]
        with open(base / "log" / f"slurmd-{node}.out", "ab") as log:
            subprocess.run([hosts_exec, node, "slurmd", "-N", node], cwd="/", env=slurm.env,
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True,
                           timeout=60)
    deadline = time.time() + 120
    while time.time() < deadline:
        state = node_state(slurm, node)
        if state and not state.startswith(("down", "drain", "fail", "unk")):
            return
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                       capture_output=True, env=slurm.env)
        time.sleep(2)
    pytest.fail(f"node {node} is {node_state(slurm, node)!r} 120 s after its slurmd restarted")


def numbers(what: str, fault_at: float, run: Path, final: dict, stopped_at: int) -> dict:
    resumed = final["resumed"][0]["steps"]
    result = {"fault_to_first_step_s": round(first_step_at(attempt_logs(run, 1), 1)
                                             - fault_at, 1),
              "steps_at_fault": stopped_at, "resumed_from_step": resumed,
              "steps_redone": max(0, stopped_at - resumed),
              "checkpoint_interval_steps": BATCHES}
    print(f"\nNUMBERS {what}: {json.dumps(result)}")
    return result


def test_node_failure_relaunches_without_the_node(slurm, tmp_path):
    spec = resume_spec(tmp_path, "slurm-nodefail")
    # slow enough that the training outlasts Slurm's SlurmdTimeout (60 s on the test
    # cluster) after the fault: only then does Slurm declare the node failed
    job, run = start_training(slurm, spec, epochs=5, step_sleep=0.4)
    node = task_record(run, "worker", 0)["host"]
    log0 = run / "logs" / "worker-0.log"
    try:
        stop_slurmd(slurm, node)
        fault_at = time.time()
        stopped_at = last_step(read(log0))
        result = slurm.run("wait", job, "--timeout", "900", timeout=960)
        assert result.returncode == 0, result.stderr
    finally:
        restore_slurmd(slurm, node)
    status = slurm.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["node_failure", "succeeded"], status
    assert f"Slurm says NODE_FAIL (node {node})" in status["attempts"][0]["detail"]
    assert status["excluded_hosts"] == [node] and status["attempts"][1]["excluded"] == [node]
    assert node not in {t["host"] for t in status["tasks"]}
    assert f"excluded hosts (node failures): {node}" in slurm.run("status", job).stdout
    final = assert_every_epoch_once(spec.parent, 5)
    numbers("slurm node failure", fault_at, run, final, last_step(read(log0)) or stopped_at)
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 60)
    assert_no_processes(job, timeout=30)


def test_walltime_signal_checkpoints_and_relaunches(slurm, tmp_path):
    spec = resume_spec(tmp_path, "slurm-walltime")
    job, run = start_training(slurm, spec)
    workers = slurm.handle(job)
    array = workers["job_ids"]["worker"]
    fault_at = time.time()
    subprocess.run(["scancel", "--signal=USR1", "--batch", array], check=True, env=slurm.env)
    result = slurm.run("wait", job, "--timeout", "600", timeout=660)
    assert result.returncode == 0, result.stderr
    status = slurm.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["walltime", "succeeded"], status
    assert "supervisor received SIGUSR1 (walltime)" in status["attempts"][0]["detail"]
    log0 = run / "logs" / "worker-0.log"
    assert "sending SIGUSR1 (checkpoint)" in read(log0)
    assert "checkpoint signal: saved after step" in attempt_logs(run, 0)
    final = assert_every_epoch_once(spec.parent, 3)
    stopped_at = last_step(attempt_logs(run, 0))
    assert final["resumed"][0]["steps"] == stopped_at  # nothing redone
    numbers("slurm walltime signal", fault_at, run, final, stopped_at)
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 60)
    assert_no_processes(job, timeout=30)


def test_a_worker_that_raises_early_in_training_is_restarted(slurm, tmp_path):
    """Issue 36 on a batch system: worker rank 1 raises a few steps after the first
    epoch's checkpoint; its hook said ``connected``, so the driver relaunches the job,
    which resumes from the checkpoint and succeeds, nothing left queued."""
    spec = resume_spec(tmp_path, "slurm-crash")
    job = slurm.submit(spec, "--backend", "slurm",
                       env={"EPOCHS": "2", "FAIL_AT_STEP": str(BATCHES + 3), "FAIL_RANK": "1",
                            "PRINT_EVERY": "1000"})
    result = slurm.run("wait", job, "--timeout", "600", timeout=660)
    assert result.returncode == 0, result.stderr
    status = slurm.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"], status
    assert "exited with code 1" in status["attempts"][0]["detail"]
    final = assert_every_epoch_once(spec.parent, 2)
    assert final["resumed"][0] == {"attempt": 1, "steps": BATCHES}
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 60)
    assert_no_processes(job, timeout=30)
