"""Real MXNet jobs through the real Slurm test cluster (ci/clusters/slurm-up.sh): arrays and
a heterogeneous job, a crashing worker, a starved partition, cancel, a rejected partition."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from .clusterjobs import example_spec, wait_queue_empty
from .conftest import Cli, assert_no_processes, cluster_environment, wait_for
from .test_mxnet_local import assert_trained

pytestmark = [pytest.mark.slurm, pytest.mark.mxnet]


@pytest.fixture
def slurm(home) -> Cli:
    return Cli(home, cluster_environment("slurm"))


def spec_file(tmp_path: Path, options: str = "", *, name: str = "slurm-mlp",
              startup: str = "5m") -> Path:
    # the test nodes advertise 4096 MB: ask for 1G per task
    return example_spec(tmp_path, "slurm", options, name=name, startup=startup, memory="1G")


def queued_jobs(cli: Cli, job: str) -> list:
    out = subprocess.run(["squeue", "--noheader", "--array", "--format", "%i %j %T"],
                         capture_output=True, text=True, env=cli.env, check=True).stdout
    return [line for line in out.splitlines() if job in line]


def nodes_used(cli: Cli, job: str) -> set:
    """Node names Slurm ran the job's tasks on (finished jobs stay visible: MinJobAge)."""
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], capture_output=True,
                         text=True, env=cli.env, check=True).stdout
    nodes = set()
    for line in out.splitlines():
        if f"JobName={job}" in line:
            listing = re.search(r" NodeList=(\S+)", line).group(1)
            expanded = subprocess.run(["scontrol", "show", "hostnames", listing],
                                      capture_output=True, text=True, env=cli.env).stdout
            nodes.update(expanded.split())
    return nodes


@pytest.mark.parametrize("het", [False, True], ids=["arrays", "heterogeneous"])
def test_example_job_runs_on_slurm_across_nodes(slurm, tmp_path, het):
    spec = spec_file(tmp_path, f"het: {str(het).lower()}", name=f"slurm-{'het' if het else 'arr'}")
    result = slurm.run("submit", "--backend", "slurm", "--wait", str(spec), env={"EPOCHS": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert slurm.status(job)["state"] == "SUCCEEDED"
    assert len(nodes_used(slurm, job)) >= 2
    wait_queue_empty(lambda: queued_jobs(slurm, job), job, 5)
    assert_no_processes(job)


def test_worker_crash_aborts_the_slurm_job(slurm, tmp_path):
    spec = spec_file(tmp_path, name="slurm-crash")
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "20", "STEP_SLEEP": "0.02", "EPOCHS": "50"}
    result = slurm.run("submit", "--backend", "slurm", "--wait", str(spec), env=env)
    ended = time.time()
    assert result.returncode == 1
    assert re.search(r"FAILED: worker\[\d\] exited with code 1", result.stderr)
    assert re.search(r"see the log: \S+/logs/worker-\d\.log", result.stderr)
    job = result.stdout.split()[0]
    wait_queue_empty(lambda: queued_jobs(slurm, job), job, max(0.0, 20 - (time.time() - ended)))
    assert_no_processes(job)


def test_starved_partition_hits_the_startup_deadline(slurm, tmp_path):
    # partition tiny is one node with 1 CPU: 4 of the 5 tasks never start
    spec = spec_file(tmp_path, "partition: tiny", name="slurm-starved", startup="20s")
    started = time.time()
    result = slurm.run("submit", "--backend", "slurm", "--wait", str(spec))
    elapsed = time.time() - started
    assert result.returncode == 1
    assert "startup deadline (20s) passed" in result.stderr
    assert re.search(r"never started: .*worker\[0\], worker\[1\]", result.stderr)
    assert elapsed < 20 + 5 + 5
    job = result.stdout.split()[0]
    wait_queue_empty(lambda: queued_jobs(slurm, job), job, 5)
    assert slurm.status(job)["state"] == "FAILED"
    assert_no_processes(job)


def test_cancel_running_slurm_job(slurm, tmp_path):
    spec = spec_file(tmp_path, name="slurm-cancel")
    job = slurm.submit(spec, "--backend", "slurm", env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    log = slurm.home / "runs" / job / "logs" / "worker-0.log"
    wait_for(lambda: log.exists() and "first step" in log.read_text(), 90, "training")
    result = slurm.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert not queued_jobs(slurm, job)
    assert slurm.status(job)["state"] == "CANCELLED"
    assert_no_processes(job)
    assert slurm.run("cancel", job).returncode == 0


def test_rejected_partition_exits_2_with_slurms_reason(slurm, tmp_path):
    spec = spec_file(tmp_path, "partition: nosuchpartition", name="slurm-rejected")
    result = slurm.run("submit", "--backend", "slurm", str(spec))
    assert result.returncode == 2
    assert "Slurm rejected the job" in result.stderr
    assert re.search(r"[Ii]nvalid partition", result.stderr)
    assert not queued_jobs(slurm, "slurm-rejected")
    assert slurm.run_dirs() == []
