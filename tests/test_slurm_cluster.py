"""Stand-in jobs (tests/fakerole.py, no MXNet) through the real Slurm test cluster (a
slurmd in each namespace test host), arrays and heterogeneous: odd run directories and
extra values, what every job process carries, the cpus each het component's tasks get,
and a controller that cannot be reached or is not configured."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from mxbatch.backends.batch.slurm import SlurmBackend, SlurmOptions

from .clusterjobs import (
    assert_job_environment,
    fake_spec,
    run_dir_of,
    slurm_jobs,
    slurm_queued,
    wait_queue_empty,
)
from .conftest import Cli, assert_no_processes, wait_for

pytestmark = [pytest.mark.slurm]

#: a rendezvous directory with what an #SBATCH line must quote: blank, ', ", $, #, %
ODD_RUNS = "runs a'b\"c$d #e%j"



@pytest.mark.parametrize("het", [False, True], ids=["arrays", "heterogeneous"])
def test_odd_run_directory_extra_values_and_job_processes(slurm, tmp_path, het):
    """The job runs from a run directory with a blank, ', ", $, # and %; an extra value
    with a blank reaches Slurm as one value; every supervisor carries MXBATCH_JOB_ID; in a
    heterogeneous job each component's tasks get its cpus."""
    options = f'het: {str(het).lower()}, extra: [--comment, "a b"]'
    spec = fake_spec(tmp_path, "slurm", options, name=f"slurm-env-{'het' if het else 'arr'}",
                     runs=tmp_path / ODD_RUNS, worker_cpus=2)
    job = slurm.submit(spec, "--backend", "slurm")
    run_dir = run_dir_of(slurm, job)
    assert run_dir.parent.name == ODD_RUNS
    env = assert_job_environment(tmp_path, run_dir, job, 1)
    if het:  # srun --het-group=2 --cpus-per-task=2 (22.05's srun does not inherit it)
        assert env.get("SLURM_CPUS_PER_TASK") == "2", sorted(env)
    lines = slurm_jobs(slurm, job)
    assert lines and all(" Comment=a b " in line for line in lines), lines
    assert all(f"WorkDir={run_dir} " in line for line in lines), lines
    result = slurm.run("wait", job, "--timeout", "120")
    assert result.returncode == 0, result.stderr
    assert slurm.status(job)["state"] == "SUCCEEDED"
    outputs = sorted(p.name for p in (run_dir / "logs").glob("slurm-*.out"))
    assert outputs == (["slurm-het.out"] if het else
                       ["slurm-scheduler.0.out", "slurm-server.0.out", "slurm-worker.0.out",
                        "slurm-worker.1.out"])
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 30)
    assert_no_processes(job)


def dead_controller_conf(cli: Cli, tmp_path: Path) -> Path:
    """The test cluster's slurm.conf with slurmctld on a port where nothing listens."""
    text = Path(cli.env["SLURM_CONF"]).read_text()
    text = re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=6999", text)
    text = re.sub(r"(?m)^MessageTimeout=.*$", "MessageTimeout=2", text)
    path = tmp_path / "dead.conf"
    path.write_text(text)
    return path


def test_an_unconfigured_slurm_is_backend_unavailable(slurm, tmp_path):
    """SLURM_CONF unset on a machine without /etc/slurm: exit 3 with what to set."""
    env = dict(slurm.env)
    env.pop("SLURM_CONF")
    cli = Cli(slurm.home, env)
    result = cli.run("launch", "--backend", "slurm", "--", "true")
    assert result.returncode == 3, result.stderr
    assert "Could not establish a configuration source" in result.stderr
    assert "SLURM_CONF is unset" in result.stderr and "set SLURM_CONF" in result.stderr
    assert "backends.slurm" not in result.stderr and "Traceback" not in result.stderr
    assert cli.run_dirs() == []


def test_a_dead_controller_is_backend_unavailable_at_submit_and_status(slurm, tmp_path):
    dead = {"SLURM_CONF": str(dead_controller_conf(slurm, tmp_path))}
    result = slurm.run("launch", "--backend", "slurm", "--", "true", env=dead)
    assert result.returncode == 3, result.stderr
    assert "Unable to contact slurm controller" in result.stderr
    assert f"SLURM_CONF={dead['SLURM_CONF']}" in result.stderr
    assert "backends.slurm" not in result.stderr and slurm.run_dirs() == []
    # a job submitted while slurmctld answered; then squeue fails during status
    spec = fake_spec(tmp_path, "slurm", "", name="slurm-status-down", env={"FAKE_SLEEP": "600"})
    job = slurm.submit(spec, "--backend", "slurm")
    result = slurm.run("status", job, env=dead)
    assert result.returncode == 3, result.stderr
    assert "slurmctld unreachable" in result.stderr and "Traceback" not in result.stderr
    missing = {"SLURM_CONF": str(tmp_path / "nosuch.conf")}
    result = slurm.run("status", job, env=missing)
    assert result.returncode == 3 and "nosuch.conf: no such file" in result.stderr
    assert slurm.run("cancel", job).returncode == 0
    assert not slurm_queued(slurm, job)
    assert_no_processes(job)


def test_one_roles_rejected_array_takes_the_others_submitted_with_it(slurm, tmp_path):
    """The roles' arrays are submitted at once: the workers' asks for more memory than any
    node has (Slurm refuses it at once), the scheduler's and the server's were queued
    meanwhile, and the submission still ends with nothing queued and no run directory."""
    spec = fake_spec(tmp_path, "slurm", "het: false", name="slurm-one-rejected")
    data = json.loads(spec.read_text())
    data["roles"]["worker"]["resources"]["memory"] = "100G"  # the nodes have 4096 MB
    spec.write_text(json.dumps(data))
    result = slurm.run("submit", "--backend", "slurm", str(spec))
    assert result.returncode == 2, result.stderr
    assert "Slurm rejected the job" in result.stderr and "Traceback" not in result.stderr
    states = {re.search(r" JobName=\S+-(\w+) ", line).group(1):
              re.search(r" JobState=(\S+)", line).group(1)
              for line in slurm_jobs(slurm, "slurm-one-rejected")}
    assert states["scheduler"] == states["server"] == "CANCELLED", states
    assert states.get("worker") in (None, "FAILED"), states  # a record of the refusal
    assert not slurm_queued(slurm, "slurm-one-rejected")
    assert slurm.run_dirs() == []


def test_withdrawing_a_started_job_returns_once_slurm_lists_nothing_of_it(slurm, monkeypatch):
    """What a refused submission's rollback does to the roles' jobs already queued
    (``BatchBackend.withdraw``): a job that had started is killed, and withdraw returns
    only once squeue no longer lists it (not while it is COMPLETING on its node)."""
    for name, value in slurm.env.items():
        monkeypatch.setenv(name, value)
    submitted = subprocess.run(["sbatch", "--parsable", "--job-name", "mxbatch-withdraw",
                                "-o", "/dev/null", "--wrap", "sleep 300"],
                               env=slurm.env, capture_output=True, text=True, check=True)
    job = submitted.stdout.strip().split(";")[0]

    def state() -> str:
        return subprocess.run(["squeue", "--noheader", "--format", "%T", "--jobs", job],
                              env=slurm.env, capture_output=True, text=True).stdout.strip()

    wait_for(lambda: state() == "RUNNING", 60, "the job running")
    SlurmBackend(SlurmOptions()).withdraw([job])
    assert state() == ""
