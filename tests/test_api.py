"""The Python API (``mxbatch.submit``, ``launch``, ``Job``, ``jobs``) on the local backend
and on the Slurm and SGE test clusters, with stand-in roles (tests/fakerole.py): submit, wait,
status (the fields of ``status --json``), logs, cancel, a spec error with its file,
line and key; ``import mxbatch`` stays light; the sweep example runs real MXNet."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mxbatch
from mxbatch.backends.status import JobState
from mxbatch.errors import ExitCode, JobNotFound, SpecError, WaitTimeout

from .conftest import EXAMPLES, FAKEROLE, assert_no_processes, copy_example, wait_for

FAKE = [sys.executable, str(FAKEROLE)]


def fake_job(tmp_path: Path, *, sleep: str = "0.5", workers: int = 2, **extra) -> dict:
    """A job of stand-in roles as a mapping: 1 scheduler, 1 server, ``workers`` workers
    that dump their argv and environment into ``tmp_path/out`` and run ``sleep`` s."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    spec = {"name": "api", "command": FAKE,
            "roles": {"server": {"count": 1}, "worker": {"count": workers}},
            "env": {"FAKE_OUT": str(out), "FAKE_SLEEP": sleep, "FAKE_TICK": "0.2"},
            "rendezvous": {"startup_timeout": "60s", "grace": "1s"}}
    spec.update(extra)
    return spec


def test_submit_wait_status_and_logs(home, cli, tmp_path):
    job = mxbatch.submit(fake_job(tmp_path), env={"FROM_API": "yes"}, args=["--flag"])
    assert isinstance(job, mxbatch.Job) and job.id.startswith("api-")
    assert job.run_dir.is_dir() and job.run_dir == Path(cli.run_dir(job.id))
    final = job.wait(timeout=120)
    assert final.state is JobState.SUCCEEDED and final.succeeded and final.ended
    assert sorted(t.label for t in final.tasks) == [
        "scheduler[0]", "server[0]", "worker[0]", "worker[1]"]
    assert final.cause is None and final.attempts
    dump = json.loads((tmp_path / "out" / "1.json").read_text())
    assert dump["argv"][-1] == "--flag" and dump["env"]["FROM_API"] == "yes"

    # the same fields as `mxbatch status --json`, which is built on it
    status = job.status()
    shown = cli.status(job.id)
    assert set(shown) - {"schema"} == set(status.to_dict())
    assert shown["state"] == status.state.value == "SUCCEEDED"
    assert [t["rank"] for t in shown["tasks"]] == [t.rank for t in status.tasks]
    for key in shown:  # each field of the document is one of JobStatus's
        assert key == "schema" or hasattr(status, key), key
    assert status.samples_per_sec == status.detail.samples_per_sec

    lines = list(job.logs(role="worker"))
    assert any(line.startswith("worker[0] | tick") for line in lines), lines
    assert any(line.startswith("worker[1] | tick") for line in lines), lines
    last = list(job.logs(role="worker", rank=1, tail=1))
    assert len(last) == 1 and not last[0].startswith("worker[1] |")
    followed = list(job.logs(role="worker", rank=0, follow=True))  # ended: ends at once
    assert "tick" in followed
    with pytest.raises(JobNotFound) as error:
        list(job.logs(role="worker", rank=7))
    assert error.value.exit_code == ExitCode.NOT_FOUND and "worker[1]" in error.value.message

    assert [j.id for j in mxbatch.jobs()] == [job.id]
    assert [j.id for j in mxbatch.jobs(state="succeeded", backend="local")] == [job.id]
    assert mxbatch.jobs(state="running") == []
    assert mxbatch.Job(job.id).run_dir == job.run_dir
    assert mxbatch.Job("last").id == mxbatch.Job(job.id[:6]).id == job.id  # as the CLI
    assert job.cancel().already_ended  # idempotent on an ended job
    assert_no_processes(job.id)


def test_wait_times_out_then_cancel_stops_everything(home, tmp_path):
    job = mxbatch.launch(FAKE, workers=2, servers=1, name="api-cancel",
                         env={"FAKE_SLEEP": "600", "FAKE_TICK": "0.2"},
                         rendezvous={"grace": "1s"})
    wait_for(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
    with pytest.raises(WaitTimeout) as error:
        job.wait(timeout=0.5)
    assert error.value.exit_code == ExitCode.TIMEOUT
    assert job.status().state is JobState.RUNNING  # waiting gave up; the job goes on
    following = job.logs(role="worker", rank=0, follow=True)
    assert next(following)  # a line while it runs
    report = job.cancel()
    assert report.before.state is JobState.RUNNING and not report.already_ended
    assert job.status().state is JobState.CANCELLED
    assert job.wait(timeout=30).state is JobState.CANCELLED
    assert list(following) is not None  # the follower ends with the job
    assert_no_processes(job.id)


def test_a_spec_error_carries_file_line_and_key_and_creates_nothing(home, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(f"name: bad\ncommand: {json.dumps(FAKE)}\nroles:\n  worker: {{cuont: 2}}\n")
    with pytest.raises(SpecError) as error:
        mxbatch.submit(spec)
    assert (error.value.path, error.value.line, error.value.key) == (
        spec, 4, "roles.worker.cuont")
    assert error.value.exit_code == ExitCode.USAGE and "did you mean 'count'" in str(
        error.value.message)
    with pytest.raises(SpecError) as error:  # YAML text: named <string>
        mxbatch.submit("command: x\nrendezvous: {grace: soon}\n")
    assert (str(error.value.path), error.value.line, error.value.key) == (
        "<string>", 2, "rendezvous.grace")
    with pytest.raises(SpecError) as error:  # an override is checked like the spec
        mxbatch.submit(fake_job(tmp_path), overrides={"roles.worker.count": 0})
    assert error.value.key == "roles.worker.count"
    with pytest.raises(JobNotFound):
        mxbatch.Job("nosuch-12345678")
    assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())


def test_overrides_name_and_a_spec_file(home, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps(fake_job(tmp_path, workers=1)))
    job = mxbatch.submit(str(spec), overrides={"roles.worker.count": 2,
                                               "env": {"FROM_OVERRIDE": "1"}},
                         name="renamed")
    assert job.id.startswith("renamed-")
    final = job.wait(timeout=120)
    assert final.succeeded and len([t for t in final.tasks if t.role.value == "worker"]) == 2
    assert json.loads((tmp_path / "out" / "0.json").read_text())["env"]["FROM_OVERRIDE"] == "1"


def test_import_mxbatch_loads_no_api_and_no_heavy_module():
    code = ("import sys, mxbatch; heavy = ('click', 'yaml', 'mxnet', 'skein', 'drmaa', "
            "'mxbatch.api', 'mxbatch.jobs'); print([m for m in heavy if m in sys.modules]); "
            "mxbatch.Job; print(sorted(m for m in ('mxnet', 'skein', 'drmaa') "
            "if m in sys.modules)); print(callable(mxbatch.jobs), 'submit' in dir(mxbatch))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    assert out == ["[]", "[]", "True True"]


# ------------------------------------------------------------------ batch systems


@pytest.fixture
def batch_here(request, monkeypatch):
    """This process with a batch test cluster's environment (the API runs in it): the
    test's ``backend`` parameter names the cluster (its ``Cli`` fixture)."""
    cli = request.getfixturevalue(request.param)
    for name, value in cli.env.items():
        monkeypatch.setenv(name, value)
    return request.param, cli


@pytest.mark.parametrize("batch_here", [pytest.param("slurm", marks=pytest.mark.slurm),
                                        pytest.param("sge", marks=pytest.mark.sge)],
                         indirect=True)
def test_the_api_on_a_batch_system(batch_here, tmp_path):
    """Submit, wait, status, logs and a spec error through Slurm or SGE, then cancel a
    job that runs: it leaves the queue and nothing of it runs."""
    from .clusterjobs import sge_queued, slurm_queued, wait_queue_empty

    backend, cli = batch_here
    spec = fake_job(tmp_path, sleep="3", backend=backend,
                    resources={"cpus": 1, "memory": "512M", "walltime": "10m"},
                    workdir=str(tmp_path))
    spec["command"] = ["python3", str(FAKEROLE)]
    job = mxbatch.submit(spec)
    assert job.backend_name == backend
    final = job.wait(timeout=300)
    assert final.state is JobState.SUCCEEDED, final.to_dict()
    assert all(t.native for t in final.tasks)  # the batch system's own ids
    assert any("tick" in line for line in job.logs(role="worker", rank=1))

    with pytest.raises(SpecError) as error:
        mxbatch.submit(spec, overrides={f"backends.{backend}.queeu": "x"})
    assert error.value.key == f"backends.{backend}.queeu"

    spec["env"] = dict(spec["env"], FAKE_SLEEP="600")
    running = mxbatch.submit(spec, name=f"api-{backend}-cancel")
    wait_for(lambda: running.status().state is JobState.RUNNING, 300, "the job to run")
    assert running.cancel().after.state is JobState.CANCELLED
    queued = sge_queued if backend == "sge" else slurm_queued
    wait_queue_empty(lambda: queued(cli, running.id), running.id, 60)
    assert running.status().state is JobState.CANCELLED
    assert_no_processes(running.id)


# ------------------------------------------------------------------- the sweep


@pytest.mark.mxnet
def test_the_sweep_example_runs_three_jobs_and_tables_their_losses(cli, tmp_path):
    """examples/sweep.py, small: three learning rates, 1 worker and 1 server each, one
    epoch; every job succeeds and the table has a loss for each."""
    example = copy_example(tmp_path / "example")
    sweep = Path(shutil.copy(EXAMPLES / "sweep.py", example.parent / "sweep.py"))
    result = subprocess.run([sys.executable, str(sweep), "--epochs", "1", "--workers", "1",
                             "--servers", "1", "--timeout", "600"], capture_output=True,
                            text=True, timeout=900, env=cli.env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["0.05", "0.1", "0.2"], result.stdout
    assert all(row[2] == "SUCCEEDED" and float(row[3]) > 0 for row in rows), result.stdout
    for row in rows:
        assert_no_processes(row[1])
