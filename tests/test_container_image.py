"""Roles in an image of the kind users run, with nothing of the host's mounted:
``MXBATCH_TEST_MXNET_IMAGE`` (ci/clusters/containers-mxnet-image.sh) has Debian's Python,
mxnet in /opt/mxnet-venv first on the image's own PATH, and a non-root default user.

The example job as a user writes it (``command: python3 train_mlp.py ...``, the image's
``python3``), a crash (an uncaught exception: mxbatch's hook must work in the image's
Python, as the image's user) and a cancel, on local with docker and podman and on the
ssh test hosts with podman. Not docker on the ssh hosts: its daemon lives in the root
network namespace, so its host network is not the test host's. Each ends with no
container and no process of the job left.

The image's user is not the host's root, so the working directories here are 0755 (the
0700 directories pytest makes would be closed to it); only the workdir and mxbatch's hook
directory are mounted."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict

import pytest
import yaml

from .conftest import (
    FAKEROLE,
    Cli,
    assert_no_processes,
    cluster_environment,
    copy_example,
    job_times,
    wait_for,
)
from .hostjobs import all_running, assert_clean
from .test_containers import MARKER, assert_no_containers, containers_of, log_of, write_spec
from .test_mxnet_local import assert_trained

pytestmark = pytest.mark.containers

#: (backend, runtime): docker's host network on the ssh hosts is the root namespace's
CASES = [pytest.param("local", "docker", id="local-docker"),
         pytest.param("local", "podman", id="local-podman"),
         pytest.param("ssh", "podman", id="ssh-podman", marks=pytest.mark.ssh)]


@pytest.fixture(scope="module")
def ctr_env() -> Dict[str, str]:
    env = cluster_environment("containers")
    if "MXBATCH_TEST_MXNET_IMAGE" not in env:
        pytest.fail("containers.env names no MXNet image: rerun ci/clusters/containers-up.sh")
    return env


def image_cli(home: Path, ctr_env: Dict[str, str], backend: str) -> Cli:
    if backend == "ssh":
        return Cli(home, dict(cluster_environment("hosts"), **ctr_env))
    return Cli(home, ctr_env)


def open_workdir(path: Path) -> Path:
    """``path`` as a working directory the image's user can read and enter."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def image_spec(path: Path, cli: Cli, backend: str, runtime: str, data: dict) -> Path:
    """``data`` with every role in ``runtime`` containers of the MXNet image, no mounts."""
    data = dict(data, container={"runtime": runtime,
                                 "image": cli.env["MXBATCH_TEST_MXNET_IMAGE"]})
    if backend == "ssh":
        data["backends"] = {"ssh": {"hostfile": cli.env["MXBATCH_TEST_HOSTFILE"]}}
    return write_spec(path, data)


def stand_in_job(tmp_path: Path, cli: Cli, backend: str, runtime: str, name: str,
                 worker_env: Dict[str, str]) -> Path:
    """Stand-in roles (tests/fakerole.py, copied into the workdir) run by the image's
    ``python3``: 1 scheduler, 1 server, 2 workers."""
    work = open_workdir(tmp_path / "work")
    shutil.copy(FAKEROLE, work / "fakerole.py")
    data = {"name": name, "command": ["python3", "fakerole.py"], "workdir": str(work),
            "roles": {"server": {"count": 1},
                      "worker": {"count": 2, "env": worker_env}},
            "rendezvous": {"startup_timeout": "3m", "grace": "2s"}}
    return image_spec(work / f"{name}.yaml", cli, backend, runtime, data)


def submit_and_wait_running(cli: Cli, spec: Path, backend: str) -> str:
    """Submit detached; once every task runs and worker[1]'s Python in its container
    printed, the job id."""
    job = cli.submit(spec, "-b", backend)
    run_dir = cli.run_dir(job)
    wait_for(lambda: all_running(run_dir, 4), 180, "every task running")
    wait_for(lambda: "tick" in log_of(cli, job, "worker-1"), 120, "worker[1]'s output")
    return job


def assert_nothing_left(cli: Cli, job: str, backend: str) -> None:
    assert_no_containers(cli.env, job, timeout=15)
    if backend == "ssh":
        assert_clean(job)
    else:
        assert_no_processes(job)


@pytest.mark.mxnet
@pytest.mark.parametrize("backend,runtime", CASES)
def test_the_example_job_trains_in_the_image(home, ctr_env, tmp_path, backend, runtime):
    cli = image_cli(home, ctr_env, backend)
    example = copy_example(open_workdir(tmp_path / "example"))
    data = yaml.safe_load(example.read_text())
    assert data["command"] == "python3 train_mlp.py --kvstore dist_sync"  # as written
    say = (f'test -f {MARKER[runtime]} && echo "mxbatch-test: $DMLC_ROLE at $DMLC_NODE_HOST '
           'uid $(id -u) runs $(command -v python3)"; exec "$@"')
    data["command"] = ["/bin/sh", "-c", say, "sh", *data["command"].split()]
    spec = image_spec(example, cli, backend, runtime, data)
    result = cli.run("submit", "--wait", "-b", backend, str(spec), env={"EPOCHS": "2"},
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert_trained(result.stdout)  # num_workers == 2, distinct ranks, loss falls
    seen = [line.split("| ", 1)[1] for line in result.stdout.splitlines()
            if "| mxbatch-test: " in line]
    # every role: the image's own Python (its PATH), as the image's user
    tail = f"uid {ctr_env['MXBATCH_TEST_MXNET_UID']} runs {ctr_env['MXBATCH_TEST_MXNET_PYTHON']}"
    assert len(seen) == 5 and all(line.endswith(tail) for line in seen), seen
    if backend == "ssh":  # each role on its test host's own address
        assert len({line.split()[3] for line in seen}) >= 2, seen
    job = result.stdout.split()[0]
    assert_nothing_left(cli, job, backend)


@pytest.mark.parametrize("backend,runtime", CASES)
def test_a_crash_in_the_image_fails_the_job_and_names_the_task(home, ctr_env, tmp_path,
                                                                backend, runtime):
    """worker[1] raises: mxbatch's exception hook, mounted from the run directory, works
    in the image's Python as the image's user (exit 1 at once, the hook's line)."""
    cli = image_cli(home, ctr_env, backend)
    trigger = tmp_path / "work" / "raise"
    spec = stand_in_job(tmp_path, cli, backend, runtime, "crash",
                        {"FAKE_SLEEP": "300", "FAKE_TICK": "1", "FAKE_RAISE_RANK": "1",
                         "FAKE_RAISE_ON": str(trigger)})
    job = submit_and_wait_running(cli, spec, backend)
    trigger.touch()
    result = cli.run("wait", job, "--timeout", "120")
    assert result.returncode == 1, result.stderr
    assert "FAILED: worker[1] exited with code 1" in result.stderr
    log = log_of(cli, job, "worker-1")
    assert "RuntimeError: simulated failure of worker rank 1" in log
    assert "mxbatch: uncaught RuntimeError: exiting with code 1" in log, log[-2000:]
    times = job_times(cli.run_dir(job))
    crashed = times.tasks["worker[1]"]["ended_at"]
    assert times.abort_at is not None and times.abort_at - crashed < 10
    assert times.last_end - times.abort_at < 30  # the others stopped, containers removed
    assert_nothing_left(cli, job, backend)


@pytest.mark.parametrize("backend,runtime", CASES)
def test_cancel_of_a_job_in_the_image_leaves_nothing(home, ctr_env, tmp_path, backend,
                                                      runtime):
    cli = image_cli(home, ctr_env, backend)
    spec = stand_in_job(tmp_path, cli, backend, runtime, "cancelled",
                        {"FAKE_SLEEP": "300", "FAKE_TICK": "1"})
    job = submit_and_wait_running(cli, spec, backend)
    env_file = cli.run_dir(job) / "containers" / "worker-1.env"
    wait_for(lambda: not env_file.exists(), 30, "the env file's removal once the container ran")
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert cli.status(job)["state"] == "CANCELLED"
    times = job_times(cli.run_dir(job))
    assert times.last_end - times.abort_at < 30
    if backend == "local":
        assert containers_of(cli.env, job) == []  # cancel returns once they are gone
    assert_nothing_left(cli, job, backend)
