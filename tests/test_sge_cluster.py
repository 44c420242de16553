"""Stand-in jobs (tests/fakerole.py, no MXNet) through the real SGE test cell, both
submitters: odd run directories, what every job process carries in its environment, a
task SGE holds in the error state, and a cell that cannot be reached."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from .clusterjobs import (
    assert_job_environment,
    fake_spec,
    run_dir_of,
    sge_queued,
    wait_queue_empty,
    without_helper_variables,
)
from .conftest import assert_no_processes, wait_for

pytestmark = [pytest.mark.sge]

DRMAA_LIBRARY = "/usr/lib/gridengine-drmaa/lib/libdrmaa.so.1.0"  # Debian's, as sge-up.sh
#: a rendezvous directory with what SGE's #$ parser cannot carry: a blank, ', " and $
ODD_RUNS = "runs a'b\"c$d"



@pytest.mark.parametrize("submitter", ["qsub", "drmaa"])
def test_odd_run_directory_job_ids_and_a_clean_environment(sge, tmp_path, submitter):
    """A job whose run directory has a blank, a ', a " and a $ runs; every supervisor
    carries MXBATCH_JOB_ID (so no-process-left checks see it); no role gets the DRMAA
    helper's GLIBC_TUNABLES / DRMAA_LIBRARY_PATH."""
    cli = without_helper_variables(sge)
    spec = fake_spec(tmp_path, "sge", f"submitter: {submitter}", name=f"sge-env-{submitter}",
                     runs=tmp_path / ODD_RUNS)
    job = cli.submit(spec, "--backend", "sge")
    run_dir = run_dir_of(cli, job)
    assert run_dir.parent.name == ODD_RUNS
    assert_job_environment(tmp_path, run_dir, job, 1)
    result = cli.run("wait", job, "--timeout", "120")
    assert result.returncode == 0, result.stderr
    assert cli.status(job)["state"] == "SUCCEEDED"
    assert (run_dir / "logs" / "sge-worker.1.out").exists()
    wait_queue_empty(lambda: sge_queued(cli, job), job, 30)
    assert_no_processes(job)


def test_a_task_in_the_error_state_fails_the_job_and_cancel_removes_it(sge, tmp_path):
    # SGE cannot open a task's output file in a missing directory: it holds it in Eqw
    spec = fake_spec(tmp_path, "sge", "submitter: qsub, native: [-o, /nonexistent-mxbatch/out]",
                     name="sge-eqw")
    job = sge.submit(spec, "--backend", "sge")
    status = wait_for(lambda: (lambda s: s if s["state"] == "FAILED" else None)(
        sge.status(job)), 120, "the job to fail on SGE's error state")
    assert "held by SGE in an error state: Eqw" in status["reason"]
    assert "can't open output file \"/nonexistent-mxbatch/out\"" in status["reason"]
    assert sge_queued(sge, job), "the tasks in Eqw stay queued until deleted"
    result = sge.run("status", job)
    assert result.returncode == 0 and "FAILED" in result.stdout
    result = sge.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert not sge_queued(sge, job)
    assert sge.status(job)["state"] == "CANCELLED"
    assert_no_processes(job)


def test_a_task_whose_supervisor_never_ran_is_lost_in_sges_words(sge, tmp_path):
    """Held in the queue (qsub -h) while its run directory loses the runtime (as a node
    that cannot see the run directory would), each task's supervisor cannot start once
    released: the job fails, and the note of a task lost so quotes SGE's accounting (the
    task's exit status) and the qacct command of that task's own SGE job. Which task
    leaves the queue first is SGE's race, so ``wait`` names whichever was lost when it
    looked; once every task has left the queue, ``status`` names them all in plan
    order, the first (the scheduler) in SGE's words."""
    spec = fake_spec(tmp_path, "sge", "submitter: qsub, native: [-h]", name="sge-gone",
                     workers=1)
    job = sge.submit(spec, "--backend", "sge")
    run_dir = run_dir_of(sge, job)
    (run_dir / "runtime.pyz").unlink()
    numbers = sorted(set(sge.handle(job)["job_ids"].values()), key=int)
    subprocess.run(["qrls", *numbers], env=sge.env, check=True, capture_output=True)
    result = sge.run("wait", job, "--timeout", "120")
    assert result.returncode == 1, result.stderr
    job_ids = sge.handle(job)["job_ids"]
    lost = re.compile(r"(\w+)\[0\] lost: left the queue without starting: SGE says exit "
                      r"status 2 before its supervisor wrote a record \(`qacct -j (\d+) -t 1`\)")
    named = lost.search(result.stderr)
    assert named and job_ids[named.group(1)] == named.group(2), result.stderr
    assert "Traceback" not in result.stderr
    wait_queue_empty(lambda: sge_queued(sge, job), job, 30)
    reason = sge.status(job)["reason"]
    first = lost.match(reason)
    assert first and first.groups() == ("scheduler", job_ids["scheduler"]), reason
    assert re.findall(r"(\w+\[0\]) lost", reason) == ["scheduler[0]", "server[0]",
                                                      "worker[0]"], reason
    assert_no_processes(job)


def fake_cell(tmp_path: Path) -> Path:
    """An SGE cell whose act_qmaster names this host, on a port where no qmaster listens:
    what a client sees of a stopped qmaster, without stopping the shared one."""
    common = tmp_path / "cell" / "default" / "common"
    common.mkdir(parents=True)
    shutil.copy("/var/lib/gridengine/default/common/bootstrap", common / "bootstrap")
    (common / "act_qmaster").write_text(socket.gethostname() + "\n")
    return tmp_path / "cell"


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("submitter", ["qsub", "drmaa"])
@pytest.mark.parametrize("cell", ["missing", "stopped"])
def test_an_unreachable_cell_is_backend_unavailable(sge, tmp_path, submitter, cell):
    """Exit 3 with SGE's words and what to set; nothing created or left queued."""
    if cell == "missing":
        env = {"SGE_ROOT": str(tmp_path / "no-such-cell")}
    else:
        env = {"SGE_ROOT": str(fake_cell(tmp_path)), "SGE_QMASTER_PORT": str(dead_port())}
    spec = fake_spec(tmp_path, "sge", f"submitter: {submitter}", name=f"sge-down-{cell}")
    result = sge.run("submit", "--backend", "sge", str(spec), env=env)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    if submitter == "qsub":
        assert "SGE qmaster unreachable: " in result.stderr
        assert f"SGE_ROOT={env['SGE_ROOT']}" in result.stderr
        # (SGE cuts its own message at a fixed length: "... doesn't exist" may end early)
        words = "SGE_ROOT directory" if cell == "missing" else "unable to send message to qmaster"
        assert words in result.stderr
    else:
        assert f"DRMAA ({DRMAA_LIBRARY}) failed: " in result.stderr
        assert f"SGE_ROOT={env['SGE_ROOT']}" in result.stderr
    assert "rejected" not in result.stderr and "backends.sge" not in result.stderr
    assert sge.run_dirs() == []


def test_launch_and_status_with_an_unreachable_cell_exit_3(sge, tmp_path):
    bogus = {"SGE_ROOT": str(tmp_path / "no-such-cell")}
    result = sge.run("launch", "--backend", "sge", "--", "true", env=bogus)
    assert result.returncode == 3, result.stderr
    assert f"SGE_ROOT={bogus['SGE_ROOT']}" in result.stderr and "Traceback" not in result.stderr
    assert sge.run_dirs() == []
    # a job submitted while the cell was reachable; then qstat fails during status
    spec = fake_spec(tmp_path, "sge", "submitter: qsub", name="sge-status-down",
                     env={"FAKE_SLEEP": "600"})
    job = sge.submit(spec, "--backend", "sge")
    result = sge.run("status", job, env=bogus)
    assert result.returncode == 3, result.stderr
    assert "SGE qmaster unreachable" in result.stderr and f"SGE_ROOT={bogus['SGE_ROOT']}" \
        in result.stderr
    assert sge.run("cancel", job).returncode == 0
    assert not sge_queued(sge, job)
    assert_no_processes(job)
