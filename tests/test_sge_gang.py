"""SGE gang start (``backends.sge.gang: true``) on the multi-host test cell: the example
job as one parallel job whose master starts every task with qrsh -inherit; a gang job
that cannot get its slots stays queued as one job, nothing started, until the startup
deadline fails it naming it; bad input exits 2."""

from __future__ import annotations

import re

import pytest

from .clusterjobs import example_spec, fake_spec, sge_queued, wait_queue_empty
from .conftest import assert_no_processes, wait_for
from .hostjobs import records
from .test_mxnet_local import assert_trained


@pytest.mark.sge
@pytest.mark.mxnet
def test_the_example_job_trains_as_one_gang_job(sge, tmp_path):
    spec = example_spec(tmp_path, "sge", "gang: true", name="sge-gang")
    result = sge.run("submit", "--backend", "sge", "--wait", str(spec), env={"EPOCHS": "2"},
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    script = (sge.run_dir(job) / "jobs" / "gang.sh").read_text()
    assert "#$ -pe mpi 5\n" in script and "-m mxbatch.backends.hosts.gang" in script
    hosts = {r["host"] for r in records(sge.run_dir(job)).values()}
    assert len(hosts) >= 2, hosts  # round robin over the test hosts
    wait_queue_empty(lambda: sge_queued(sge, job), job, 30)
    assert_no_processes(job)


@pytest.mark.sge
def test_a_gang_job_without_its_slots_stays_queued_and_the_deadline_names_it(sge, tmp_path):
    """tiny.q has 2 slots and the job needs 4 (-w n: SGE queues it anyway): one queued
    job, no task started, then the startup deadline names the gang job."""
    spec = fake_spec(tmp_path, "sge", "gang: true, native: [-l, small, -w, n]",
                     name="sge-gang-starved", startup="20s")
    proc = sge.popen("submit", "--backend", "sge", "--wait", str(spec))
    job = wait_for(lambda: next(iter(sge.run_dirs()), None), 60, "the run directory").name
    wait_for(lambda: sge_queued(sge, job), 60, "the gang job in the queue")
    handle = sge.handle(job)
    numbers = set(handle["job_ids"].values())
    assert len(numbers) == 1, handle  # one job for all 4 tasks
    number = numbers.pop()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err
    assert re.search(r"startup deadline \(20s\) passed and these tasks never started: "
                     r"scheduler\[0\], server\[0\], worker\[0\], worker\[1\] \(still queued: "
                     + number + r" \(gang, 4 slots in PE mpi\)\)", err), err
    assert all(r["state"] != "RUNNING" and not r.get("started_at")
               for r in records(sge.run_dir(job)).values())
    wait_queue_empty(lambda: sge_queued(sge, job), job, 30)
    assert_no_processes(job)


@pytest.mark.sge
def test_cancel_a_running_gang_job(sge, tmp_path):
    """The abort reaches the master's controller, which stops every host's agent; then
    qdel: the job leaves the queue and nothing of it is left on any host."""
    spec = fake_spec(tmp_path, "sge", "gang: true", name="sge-gang-cancel",
                     env={"FAKE_SLEEP": "600"})
    job = sge.submit(spec, "--backend", "sge")
    run_dir = sge.run_dir(job)
    wait_for(lambda: sum(r.get("state") == "RUNNING" for r in records(run_dir).values()) == 4,
             180, "every task running")
    result = sge.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert sge.status(job)["state"] == "CANCELLED"
    assert not sge_queued(sge, job)
    assert_no_processes(job)


@pytest.mark.sge
def test_a_gang_job_that_can_never_fit_is_rejected(sge, tmp_path):
    spec = fake_spec(tmp_path, "sge", "gang: true, native: [-l, small]",
                     name="sge-gang-never")
    result = sge.run("submit", "--backend", "sge", str(spec))
    assert result.returncode == 2, result.stderr
    assert "SGE rejected the job" in result.stderr
    assert sge.run_dirs() == [] and not sge_queued(sge, "sge-gang-never")


def test_a_gang_gives_each_task_one_slot(cli, tmp_path):
    spec = fake_spec(tmp_path, "sge", "gang: true", name="sge-gang-cpus", worker_cpus=2)
    result = cli.run("render", "--backend", "sge", str(spec))
    assert result.returncode == 2, result.stderr
    assert "backends.sge.gang: a gang job gives each task one slot, and worker[0] asks " \
           "for 2 cpus" in result.stderr
