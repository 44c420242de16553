"""Restarts on the real SGE test cell with stand-in roles (tests/fakerole.py): a job
preempted through the scheduler (``qmod -rj`` of its worker array: SGE warns the tasks
with SIGUSR2, -notify, and reschedules them, -r y) relaunches as attempt 1 and finishes,
through both submitters; nothing of attempt 0 is left queued or running."""

from __future__ import annotations

import json
import subprocess

import pytest

from .clusterjobs import cancel_in_the_backoff, fake_spec, run_dir_of, wait_queue_empty
from .conftest import Cli, assert_no_processes, cluster_environment, wait_for
from .hostjobs import records

pytestmark = [pytest.mark.sge]


@pytest.fixture
def sge(home) -> Cli:
    return Cli(home, cluster_environment("sge"))


def queued_ids(cli: Cli, ids) -> list:
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True, env=cli.env,
                         check=True).stdout
    return [line for line in out.splitlines() if line.split()[:1] and line.split()[0] in ids]


def reschedule_the_workers(sge: Cli, spec, restarts: dict):
    """Submit ``spec`` with ``restarts``, wait until its 4 tasks run, then have SGE
    reschedule the worker array (``qmod -f -rj``): (job, run directory, attempt 0's
    job ids)."""
    data = json.loads(spec.read_text())
    data["restarts"] = restarts
    spec.write_text(json.dumps(data))
    job = sge.submit(spec, "--backend", "sge")
    run = run_dir_of(sge, job)
    wait_for(lambda: len(records(run)) == 4 and all(r.get("state") == "RUNNING"
                                                   for r in records(run).values()),
             180, "every task running")
    first = sge.handle(job)["job_ids"]
    subprocess.run(["qmod", "-f", "-rj", first["worker"]], check=True, env=sge.env,
                   capture_output=True)
    return job, run, first


@pytest.mark.parametrize("submitter", ["qsub", "drmaa"])
def test_a_rescheduled_job_relaunches_and_finishes(sge, tmp_path, submitter):
    # the workers end only when the test says so (the barrier), never by a timer that a
    # loaded machine could outrun before the preemption reaches them
    barrier = tmp_path / "barrier"
    spec = fake_spec(tmp_path, "sge", f"submitter: {submitter}",
                     name=f"sge-resched-{submitter}",
                     env={"FAKE_SLEEP": "600", "FAKE_BARRIER": str(barrier)})
    job, _, first = reschedule_the_workers(
        sge, spec, {"max": 1, "backoff": 0, "checkpoint_grace": "20s"})
    wait_for(lambda: len(sge.status(job)["attempts"]) == 2, 240, "attempt 1")
    barrier.touch()
    result = sge.run("wait", job, "--timeout", "300", timeout=330)
    assert result.returncode == 0, result.stderr
    status = sge.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["preempted", "succeeded"], status
    detail = status["attempts"][0]["detail"]
    if "SIGUSR2 (preempted)" in detail:  # the warning reached the supervisors first
        assert (tmp_path / "out" / "0.checkpoint").read_text() == "0"  # and they checkpointed
    else:  # seen in CI runs under load: SGE killed and re-ran a worker task before its
        # supervisor acted on -notify; the re-run ends the attempt (``Agent._rerun_abort``)
        assert "started a second time in attempt 0: the batch system re-ran it" in detail, \
            detail
    later = status["attempts"][1]["native"]["job_ids"]
    assert set(later.values()).isdisjoint(first.values())
    wait_queue_empty(lambda: queued_ids(sge, list(first.values()) + list(later.values())),
                     job, 60)
    assert_no_processes(job, timeout=30)


def test_cancel_of_a_driven_job_between_attempts(sge, tmp_path):
    """qmod -rj ends attempt 0; during the backoff `mxbatch cancel` ends the job: no
    attempt 1 is submitted, the driver is gone, nothing of the job is queued."""
    spec = fake_spec(tmp_path, "sge", "submitter: qsub", name="sge-cancel-driven",
                     env={"FAKE_SLEEP": "300"})
    job, run, first = reschedule_the_workers(
        sge, spec, {"max": 2, "backoff": "10m", "checkpoint_grace": "10s"})
    cancel_in_the_backoff(sge, job, run)
    wait_queue_empty(lambda: queued_ids(sge, list(first.values())), job, 60)
    assert_no_processes(job, timeout=30)
