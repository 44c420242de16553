"""Real MXNet jobs through the real SGE, Slurm and OAR test clusters, one suite for all
(each test runs once per batch system): a crashing worker aborts the job, a starved
queue hits the startup deadline (not on OAR), cancel of a running job, each leaving
nothing queued or running. What only one of them has (SGE's submitters and consumables,
Slurm's het jobs and nodes, OAR's example job and restarts) stays in tests/test_sge.py,
tests/test_slurm.py and tests/test_oar.py. Durations come from the job's own
records (a loaded machine)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, List

import pytest

from .clusterjobs import (
    NEVER_RAN,
    abort_record,
    assert_ends_soon_after_abort,
    created_at,
    example_spec,
    oar_queued,
    run_dir_of,
    sge_queued,
    slurm_queued,
    wait_queue_empty,
)
from .conftest import Cli, assert_no_processes, cluster_environment, wait_for


@dataclasses.dataclass(frozen=True)
class BatchSystem:
    """What differs between the batch systems in these tests."""

    name: str
    #: the backend options of an ordinary job
    options: str
    #: options that starve the job: too few slots for its 5 tasks
    starved: str
    #: how many of the 5 tasks never start in the starved queue, at least
    never_started: int
    #: the memory a task asks for (the test nodes advertise little)
    memory: str
    queued: Callable[[Cli, str], List[str]]

    def spec(self, tmp_path: Path, options: str, name: str, startup: str = "5m") -> Path:
        return example_spec(tmp_path, self.name, options, name=f"{self.name}-{name}",
                            startup=startup, memory=self.memory)

    def assert_queue_empty(self, cli: Cli, job: str) -> None:
        wait_queue_empty(lambda: self.queued(cli, job), job, 30)


SYSTEMS = [
    # tiny.q has 2 slots and only takes jobs asking for -l small: 3 of 5 tasks never start
    pytest.param(BatchSystem("sge", "submitter: drmaa", "submitter: qsub, native: [-l, small]",
                             3, "4G", sge_queued), id="sge",
                 marks=[pytest.mark.sge, pytest.mark.mxnet]),
    # partition tiny is one node with 1 CPU: 4 of the 5 tasks never start
    pytest.param(BatchSystem("slurm", "", "partition: tiny", 4, "1G", slurm_queued),
                 id="slurm", marks=[pytest.mark.slurm, pytest.mark.mxnet]),
    # OAR: the crash and cancel only (its starved queue adds nothing the others test)
    pytest.param(BatchSystem("oar", "", "", 0, "1G", oar_queued),
                 id="oar", marks=[pytest.mark.oar, pytest.mark.mxnet]),
]


@pytest.fixture(params=SYSTEMS)
def system(request) -> BatchSystem:
    return request.param


@pytest.fixture
def cli(home, system) -> Cli:
    return Cli(home, cluster_environment(system.name))


def test_worker_crash_aborts_the_job(cli, system, tmp_path):
    spec = system.spec(tmp_path, system.options, "crash")
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "20", "STEP_SLEEP": "0.02", "EPOCHS": "50"}
    result = cli.run("submit", "--backend", system.name, "--wait", str(spec), env=env)
    assert result.returncode == 1
    assert re.search(r"FAILED: worker\[\d\] exited with code 1", result.stderr)
    assert re.search(r"see the log: \S+/logs/worker-\d\.log", result.stderr)
    job = result.stdout.split()[0]
    assert_ends_soon_after_abort(run_dir_of(cli, job))
    system.assert_queue_empty(cli, job)
    assert_no_processes(job)


def test_starved_queue_hits_the_startup_deadline(cli, system, tmp_path):
    if not system.starved:
        pytest.skip(f"not run on {system.name}")
    spec = system.spec(tmp_path, system.starved, "starved", startup="20s")
    result = cli.run("submit", "--backend", system.name, "--wait", str(spec))
    assert result.returncode == 1
    assert "startup deadline (20s)" in result.stderr
    job = result.stdout.split()[0]
    run_dir = run_dir_of(cli, job)
    abort = abort_record(run_dir)
    # the deadline is checked every second by supervisors and `wait`: by the records
    assert abort["kind"] == "FAILED" and "startup deadline (20s)" in abort["reason"]
    assert abort["at"] - created_at(run_dir) < 20 + 10
    system.assert_queue_empty(cli, job)
    status = cli.status(job)
    assert status["state"] == "FAILED"
    # queued tasks that start after the abort exit at once ("not started: job aborted")
    never = [t for t in status["tasks"] if t["note"].startswith(NEVER_RAN)]
    assert len(never) >= system.never_started, status["tasks"]
    assert_no_processes(job)


def test_cancel_a_running_job(cli, system, tmp_path):
    spec = system.spec(tmp_path, system.options, "cancel")
    job = cli.submit(spec, "--backend", system.name,
                     env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    log = run_dir_of(cli, job) / "logs" / "worker-0.log"
    wait_for(lambda: log.exists() and "first step" in log.read_text(), 180, "training")
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert not system.queued(cli, job)
    assert cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job)
    assert cli.run("cancel", job).returncode == 0
