"""status, logs and cancel of a YARN job start no Java process (no skein driver): the
ResourceManager's REST API and the application master answer them, on the real test
cluster (ci/clusters/yarn-up.sh). Submission still goes through the module's global
skein driver (``yarn_env``).

"No Java" is checked for real: those commands run with ``JAVA_HOME`` pointing at a
``java`` that only leaves a mark and fails, and with skein credentials but no global
driver, so any skein driver start would either leave the mark or fail the command."""

from __future__ import annotations

import json
import resource
import shutil
import statistics
from pathlib import Path
from typing import Dict

import pytest

from mxbatch.backends.yarn import rest

from .conftest import Cli, wait_for
from .polling import poll
from .test_yarn import app_id, assert_gone, rm_app, spec_file

pytestmark = [pytest.mark.yarn, pytest.mark.mxnet]

#: CPU seconds (with children) of one `mxbatch status` of a running YARN job: 0.3 s
#: measured (bench/yarn_status.py), 4.5 s when it started a skein driver; CPU, not wall
#: time, so that a loaded machine does not fail the test
STATUS_CPU_LIMIT_S = 1.0


@pytest.fixture
def no_java(tmp_path, yarn_env) -> Dict[str, str]:
    """Environment overrides under which starting a skein driver is impossible and
    leaves ``<tmp>/java-started``."""
    fake = tmp_path / "fake-jdk"
    (fake / "bin").mkdir(parents=True)
    java = fake / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'java-started'}\nexit 1\n")
    java.chmod(0o755)
    skein = tmp_path / "skein-no-driver"
    skein.mkdir()
    for name in ("skein.crt", "skein.pem"):  # the credentials, not the driver's address
        shutil.copy(Path(yarn_env["SKEIN_CONFIG"]) / name, skein / name)
    return {"JAVA_HOME": str(fake), "SKEIN_CONFIG": str(skein)}


def assert_no_java(tmp_path: Path, *results) -> None:
    for result in results:
        assert "starting a skein driver" not in result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "java-started").exists(), (tmp_path / "java-started").read_text()


def timed(cli: Cli, *args: str, env: Dict[str, str]):
    """The completed CLI process and the CPU seconds it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = cli.run(*args, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_status_logs_and_cancel_of_a_running_job_start_no_java(yarn, tmp_path, no_java):
    spec = spec_file(tmp_path, name="yarn-rest")
    job = yarn.submit(spec, "--backend", "yarn", env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    record = json.loads((yarn.home / "jobs" / f"{job}.json").read_text())
    assert record["handle"]["rm_urls"] == [yarn.env["MXBATCH_YARN_RM_URL"]]
    wait_for(lambda: "first step" in yarn.run("logs", job, "--role", "worker", "--rank", "0",
                                              env=no_java).stdout,
             180, "the first training step (logs without Java)", interval=1)
    times = []
    for _ in range(5):
        result, took = timed(yarn, "status", job, "--json", env=no_java)
        assert result.returncode == 0, result.stderr
        times.append(took)
    status = json.loads(result.stdout)
    assert status["state"] == "RUNNING"
    assert {t["state"] for t in status["tasks"]} == {"RUNNING"}  # the application master's records
    assert all(t["log"].startswith("http://") for t in status["tasks"])
    assert statistics.median(times) < STATUS_CPU_LIMIT_S, times
    cancelled, _ = timed(yarn, "cancel", job, env=no_java)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{job} CANCELLED" in cancelled.stderr
    assert rm_app(yarn, app_id(yarn, job))["finalStatus"] == "KILLED"
    assert_gone(yarn, job)
    after, _ = timed(yarn, "status", job, "--json", env=no_java)
    assert json.loads(after.stdout)["state"] == "CANCELLED"
    assert_no_java(tmp_path, result, cancelled, after)


def test_kill_through_rest_then_status_of_the_ended_job(yarn, tmp_path, no_java):
    """The PUT .../state kill on the real ResourceManager (simple auth: user.name), and
    the first status after: from GET .../apps/{id}, then kept in yarn/report.json."""
    spec = spec_file(tmp_path, name="yarn-put")
    job = yarn.submit(spec, "--backend", "yarn", env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    app = app_id(yarn, job)
    # killed early, skein's application master may unregister SUCCEEDED before the
    # kill lands (YARN then reports FINISHED): kill a job that trains
    logs = poll(lambda: yarn.run("logs", job, "--role", "worker", "--rank", "0", env=no_java),
                lambda result: "first step" in result.stdout, 180, interval=1)
    if "first step" not in logs.stdout:  # what the job and the cluster said, to see why
        pytest.fail("no first training step after 180s: status "
                    + yarn.run("status", job, env=no_java).stdout + "\nworker[0]'s log "
                    + logs.stdout[-2000:] + logs.stderr[-1000:] + "\nRM: " + str(rm_app(yarn, app)))
    client = rest.RmRestClient(rest.RmUrls((yarn.env["MXBATCH_YARN_RM_URL"],), "the test"), 10)
    client.kill(app)
    wait_for(lambda: client.app(app).state.ended, 60, "YARN ending the killed application",
             interval=0.5)
    assert rm_app(yarn, app)["finalStatus"] == "KILLED"
    result, _ = timed(yarn, "status", job, "--json", env=no_java)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["terminal"] and status["state"] in ("CANCELLED", "FAILED"), status
    assert "KILLED" in (status.get("reason") or "") or status["state"] == "CANCELLED"
    saved = yarn.run_dir(job) / "yarn" / "report.json"
    assert json.loads(saved.read_text())["state"] == "KILLED"
    again = yarn.run("cancel", job, env=no_java)
    assert again.returncode == 0 and "already ended" in again.stderr
    assert_gone(yarn, job)
    assert_no_java(tmp_path, result, again)
