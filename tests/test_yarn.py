"""Real MXNet jobs in YARN containers on the real test cluster (ci/clusters/yarn-up.sh: one
ResourceManager, one NodeManager with 8192 MB): a dist_sync job, a crashing worker, workers
YARN cannot place, cancel, and YARN's refusals."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Dict

import pytest

from .clusterjobs import example_spec
from .conftest import Cli, assert_no_processes, wait_for
from .test_mxnet_local import LEAN_LINE, assert_trained
from .yarnjobs import ENDED, app_id, rm_app

pytestmark = [pytest.mark.yarn, pytest.mark.mxnet]


def spec_file(tmp_path: Path, options: str = "", *, name: str = "yarn-mlp",
              startup: str = "5m", worker_memory: str = "") -> Path:
    """The example job with 1G containers (5 fit next to the AM), ps-lite on loopback."""
    path = example_spec(tmp_path, "yarn", options, name=name, startup=startup, memory="1G")
    text = path.read_text().replace("  ports: 9000-9999\n", "  ports: 9000-9999\n  interface: lo\n")
    if worker_memory:
        text = text.replace("worker: {count: 2}",
                            f"worker: {{count: 2, resources: {{memory: {worker_memory}}}}}")
    path.write_text(text)
    return path


def assert_gone(cli: Cli, job: str) -> dict:
    """The job's application has ended and nothing of the job runs on this machine."""
    app = rm_app(cli, app_id(cli, job))
    assert app["state"] in ENDED, app
    assert_no_processes(job)
    return app


def test_example_job_trains_in_yarn_containers(yarn, tmp_path):
    spec = spec_file(tmp_path, name="yarn-ok")
    # a fresh skein config: no global driver, so the CLI starts (and announces) its own
    cold = {"SKEIN_CONFIG": str(tmp_path / "skein")}
    result = yarn.run("submit", "--backend", "yarn", "--wait", str(spec),
                      env={"EPOCHS": "3", **cold})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting a skein driver" in result.stderr
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert yarn.status(job)["state"] == "SUCCEEDED"
    app = assert_gone(yarn, job)
    assert app["finalStatus"] == "SUCCEEDED"
    assert sorted(app["applicationTags"].split(",")) == ["mxbatch", f"mxbatch-job-{job}"]
    logs = yarn.run("logs", job, "--role", "worker", "--rank", "1")
    assert logs.returncode == 0 and "num_workers=2" in logs.stdout
    # the scheduler served from the packed environment's MXNet library (lean)
    logs = yarn.run("logs", job, "--role", "scheduler", "--verbose")
    assert logs.returncode == 0 and LEAN_LINE in logs.stdout, logs.stdout[-3000:]


def test_worker_crash_ends_the_application_fast(yarn, tmp_path):
    spec = spec_file(tmp_path, name="yarn-crash")
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "20", "STEP_SLEEP": "0.02", "EPOCHS": "50"}
    result = yarn.run("submit", "--backend", "yarn", "--wait", str(spec), env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "RuntimeError: simulated crash on worker rank 1" in result.stdout
    failed = re.search(r"FAILED: (worker\[\d\]) exited with code 1", result.stderr)
    assert failed, result.stderr
    job = result.stdout.split()[0]
    app = assert_gone(yarn, job)
    assert app["finalStatus"] == "FAILED"
    abort = json.loads((yarn.run_dir(job) / "abort.json").read_text())
    assert app["finishedTime"] / 1000 - abort["at"] < 30
    status = yarn.status(job)
    assert status["state"] == "FAILED"
    blamed = {t["role"] + f"[{t['rank']}]": t for t in status["tasks"]}[failed.group(1)]
    assert blamed["state"] == "FAILED" and blamed["exit_code"] == 1


def test_startup_deadline_when_yarn_cannot_place_the_workers(yarn, tmp_path):
    # 8 GB workers are accepted (the maximum allocation) but never fit next to the AM
    spec = spec_file(tmp_path, name="yarn-starved", startup="20s", worker_memory="8G")
    started = time.time()
    result = yarn.run("submit", "--backend", "yarn", "--wait", str(spec))
    elapsed = time.time() - started
    assert result.returncode == 1, result.stderr[-3000:]
    assert "startup deadline (20s) passed" in result.stderr, result.stderr[-3000:]
    assert "worker[0], worker[1]" in result.stderr, result.stderr[-3000:]
    assert elapsed < 20 + 15
    job = result.stdout.split()[0]
    assert rm_app(yarn, app_id(yarn, job))["finalStatus"] in ("FAILED", "KILLED")
    assert_gone(yarn, job)
    tasks = {t["role"]: t["state"] for t in yarn.status(job)["tasks"]}
    assert tasks["worker"] == "CANCELLED"


def test_cancel_kills_the_application(yarn, tmp_path):
    spec = spec_file(tmp_path, name="yarn-cancel")
    job = yarn.submit(spec, "--backend", "yarn", env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    wait_for(lambda: "first step" in yarn.run("logs", job, "--role", "worker",
                                              "--rank", "0").stdout,
             90, "the first training step", interval=1)
    assert yarn.status(job)["state"] == "RUNNING"
    result = yarn.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert f"{job} CANCELLED" in result.stderr
    assert yarn.status(job)["state"] == "CANCELLED"
    app = assert_gone(yarn, job)
    assert app["finalStatus"] == "KILLED"
    again = yarn.run("cancel", job)
    assert again.returncode == 0 and "already ended" in again.stderr


@pytest.mark.parametrize("change,words", [
    ("queue", "unknown queue: nosuch"),
    ("memory", "the largest NodeManager has <memory:8192"),
], ids=["unknown-queue", "above-node-size"])
def test_yarn_refusals_exit_2_and_leave_nothing(yarn, tmp_path, change, words):
    if change == "queue":
        spec = spec_file(tmp_path, "queue: nosuch", name="yarn-refused")
    else:
        spec = spec_file(tmp_path, name="yarn-refused", worker_memory="9G")
    result = yarn.run("submit", "--backend", "yarn", str(spec))
    assert result.returncode == 2, result.stderr
    assert words in result.stderr
    assert result.stdout == ""
    assert yarn.run_dirs() == [] and not list((yarn.home / "jobs").glob("*.json"))


def unreachable_conf(tmp_path: Path) -> Dict[str, str]:
    """An environment whose Hadoop configuration names a ResourceManager nobody runs."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.address</name>"
        "<value>127.0.0.1:1</value></property></configuration>")
    return {"YARN_CONF_DIR": str(conf), "HADOOP_CONF_DIR": str(conf)}


def test_resourcemanager_unreachable_names_address_and_wait(yarn, tmp_path):
    unreachable = unreachable_conf(tmp_path)
    spec = spec_file(tmp_path, "connect_timeout: 2s", name="yarn-no-rm")
    started = time.time()
    result = yarn.run("submit", "--backend", "yarn", str(spec), env=unreachable)
    assert result.returncode == 3, result.stderr
    assert "ResourceManager unreachable: waited 2s for 127.0.0.1:1" in result.stderr
    assert time.time() - started < 15
    assert yarn.run_dirs() == []


def test_later_commands_use_the_options_the_job_was_submitted_with(yarn, tmp_path):
    """status and cancel in fresh processes rebuild the backend from the job record: the
    ResourceManager's web address kept there (another configuration changes nothing) and
    the non-default connect_timeout (3s, default 20s), the wait when it does not answer."""
    spec = spec_file(tmp_path, "connect_timeout: 3s", name="yarn-options")
    job = yarn.submit(spec, "--backend", "yarn", env={"STEP_SLEEP": "0.05", "EPOCHS": "100"})
    path = yarn.home / "jobs" / f"{job}.json"
    saved = path.read_text()
    try:
        status = yarn.run("status", job, env=unreachable_conf(tmp_path))
        assert status.returncode == 0, status.stderr
        record = json.loads(saved)
        record["handle"]["rm_urls"] = ["http://127.0.0.1:1"]
        path.write_text(json.dumps(record))
        status = yarn.run("status", job)
        assert status.returncode == 3, status.stderr
        assert "web service unreachable: waited 3s for http://127.0.0.1:1" in status.stderr
    finally:
        path.write_text(saved)
        cancelled = yarn.run("cancel", job)
    assert cancelled.returncode == 0, cancelled.stderr
    assert_gone(yarn, job)
