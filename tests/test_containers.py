"""Roles in real docker and podman containers (ci/clusters/containers-up.sh), the fast
tests: the example MXNet job on Slurm with every role in a container, and every way a
containerised job ends (a crash, a killed client, a stall, cancel, Ctrl-C, a killed
supervisor), each leaving no container (``docker ps -a``, ``podman ps -a``) and no
process of the job behind.

Their image is busybox with no Python: the roles run the host's virtualenv Python through
the read-only mounts ``containers.env`` names (``MXBATCH_TEST_CONTAINER_MOUNTS``). The
example job on local and ssh, a crash and a cancel in an image with its own Python and
user: test_container_image.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import yaml

from mxbatch.backends import records

from .conftest import (
    FAKEROLE,
    Cli,
    assert_no_processes,
    cluster_environment,
    task_record,
    wait_for,
)
from .faultmatrix import free_port, occupy_here
from .polling import poll
from .test_mxnet_local import LEAN_LINE, assert_trained

pytestmark = pytest.mark.containers

TESTS = Path(__file__).resolve().parent
#: what each runtime puts into its containers
MARKER = {"docker": "/.dockerenv", "podman": "/run/.containerenv"}


@pytest.fixture(scope="module")
def ctr_env() -> Dict[str, str]:
    return cluster_environment("containers")


@pytest.fixture
def ccli(home, ctr_env) -> Cli:
    return Cli(home, ctr_env)


def runtimes(env: Dict[str, str]) -> List[str]:
    return env["MXBATCH_TEST_RUNTIMES"].split()


def mounts(env: Dict[str, str]) -> List[str]:
    """The test Python's mounts, and this folder (fakerole.py)."""
    return env["MXBATCH_TEST_CONTAINER_MOUNTS"].split(",") + [f"{TESTS}:{TESTS}:ro"]


def container(env: Dict[str, str], runtime: str) -> dict:
    return {"runtime": runtime, "image": env["MXBATCH_TEST_IMAGE"], "mounts": mounts(env)}


def containers_of(env: Dict[str, str], job_id: str) -> List[str]:
    """``runtime:name`` of every container of the job in any runtime (``ps -a``)."""
    found = []
    for runtime in runtimes(env):
        out = subprocess.run([runtime, "ps", "-a", "--format", "{{.Names}}", "--filter",
                              f"name=mxbatch-{job_id}-"], env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout
        found += [f"{runtime}:{name}" for name in out.split()]
    return found


def assert_no_containers(env: Dict[str, str], job_id: str, timeout: float = 10.0) -> None:
    left = poll(lambda: containers_of(env, job_id), lambda found: not found, timeout, 0.5)
    if left:
        for item in left:
            runtime, name = item.split(":", 1)
            subprocess.run([runtime, "rm", "-f", name], env=env, capture_output=True,
                           timeout=60)
        pytest.fail(f"containers of {job_id} left behind: {left}")


def write_spec(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=1))  # JSON is YAML
    return path


def fake_job(tmp_path: Path, env: Dict[str, str], runtime: str, *, workers: int = 1,
             worker_env: Optional[dict] = None, worker_command: Optional[list] = None,
             extra: Optional[dict] = None) -> Path:
    """A job of stand-in roles (tests/fakerole.py) in ``runtime`` containers."""
    role = [env["MXBATCH_TEST_CONTAINER_PYTHON"], str(FAKEROLE)]
    data = {"name": "ctr", "command": role,
            "roles": {"server": {"count": 1},
                      "worker": {"count": workers, "command": worker_command or role,
                                 "env": worker_env or {}}},
            "rendezvous": {"startup_timeout": "2m", "grace": "2s"},
            "container": container(env, runtime)}
    data.update(extra or {})
    return write_spec(tmp_path / "ctr.yaml", data)


def log_of(cli: Cli, job: str, task: str) -> str:
    try:
        return (cli.run_dir(job) / "logs" / f"{task}.log").read_text(errors="replace")
    except OSError:
        return ""


def abort_of(cli: Cli, job: str) -> dict:
    return json.loads((cli.run_dir(job) / "abort.json").read_text())


def container_main_pid(env: Dict[str, str], runtime: str, name: str) -> int:
    out = subprocess.run([runtime, "inspect", "--format", "{{.State.Pid}}", name], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return int(out.strip())


def children(pid: int) -> List[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        found += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


# --------------------------------------------------------------------------- MXNet


@pytest.mark.slurm
@pytest.mark.mxnet
def test_example_job_on_slurm_with_every_role_in_a_podman_container(home, ctr_env, example):
    """Through the Slurm test cluster (its nodes are network namespaces: podman's host
    network there is the node's own), one array task per role, each role in podman."""
    cli = Cli(home, dict(cluster_environment("slurm"), **ctr_env))
    data = yaml.safe_load(example.read_text())
    check = ('test -f /run/.containerenv && echo "mxbatch-test: $DMLC_ROLE in a podman '
             'container on $(hostname)"; exec "$0" "$@"')
    data["command"] = ["/bin/sh", "-c", check, ctr_env["MXBATCH_TEST_CONTAINER_PYTHON"],
                       "train_mlp.py", "--kvstore", "dist_sync"]
    data["resources"]["memory"] = "1G"  # the test nodes advertise 4096 MB
    data["container"] = container(ctr_env, "podman")
    spec = write_spec(example, data)
    result = cli.run("submit", "--backend", "slurm", "--wait", str(spec), env={"EPOCHS": "2"},
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert_trained(result.stdout)
    assert len(re.findall(r"mxbatch-test: \w+ in a podman container", result.stdout)) == 5
    job = result.stdout.split()[0]
    # the scheduler served from the image's MXNet library, without the script's import
    log = (cli.run_dir(job) / "logs" / "scheduler-0.log").read_text(errors="replace")
    assert LEAN_LINE in log and "/libmxnet.so" in log, log[-3000:]
    assert_no_containers(ctr_env, job)
    assert_no_processes(job)


# --------------------------------------------------------------------------- endings


def test_a_crashing_worker_ends_the_job_fast(ccli, ctr_env, tmp_path):
    spec = fake_job(tmp_path, ctr_env, "podman", workers=2,
                    worker_env={"FAKE_SLEEP": "2", "FAKE_EXIT": "3"})
    result = ccli.run("submit", "--wait", str(spec))
    ended = time.time()
    assert result.returncode == 1, result.stderr
    assert "exited with code 3" in result.stderr
    job = result.stdout.split()[0]
    assert ended - abort_of(ccli, job)["at"] < 15
    assert_no_containers(ctr_env, job)
    assert_no_processes(job)


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_killed_client_fails_the_job_and_its_container_is_removed(ccli, ctr_env, tmp_path,
                                                                     runtime):
    """SIGKILL of the ``docker run``/``podman run`` client leaves its container running:
    the supervisor removes it by name."""
    spec = fake_job(tmp_path, ctr_env, runtime,
                    worker_env={"FAKE_SLEEP": "120", "FAKE_TICK": "1"})
    job = ccli.submit(spec)
    wait_for(lambda: "tick" in log_of(ccli, job, "worker-0"), 120, "the worker's output")
    client = task_record(ccli.run_dir(job), "worker", 0)["pid"]
    os.kill(client, signal.SIGKILL)
    killed = time.time()
    result = ccli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1, result.stderr
    assert "FAILED: worker[0] was killed by SIGKILL" in result.stderr
    assert abort_of(ccli, job)["at"] - killed < 10
    assert_no_containers(ctr_env, job, timeout=15)
    assert_no_processes(job)


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_foreign_listener_on_the_containerised_scheduler_s_port(ccli, ctr_env, tmp_path,
                                                                  runtime):
    """The scheduler's role (in its container, which the runtime's daemon started: not a
    process of the supervisor's) binds only once "bind" exists; a listener of this host
    takes the port first. Readiness is asked of the container's processes, so the job
    fails naming the port and no member ever connects to the foreign listener."""
    port = free_port()
    spec = fake_job(tmp_path, ctr_env, runtime,
                    extra={"env": {"FAKE_JOIN": "1", "FAKE_SLEEP": "120",
                                   "FAKE_SCHEDULER_BIND_AFTER": str(tmp_path / "bind")},
                           "network": {"ports": f"{port}-{port}"}})
    job = ccli.submit(spec)
    run_dir = ccli.run_dir(job)
    wait_for(lambda: json.loads((run_dir / "scheduler.json").read_text()).get("port") == port,
             120, "the scheduler's port chosen")
    occupied = occupy_here(port)
    try:
        (tmp_path / "bind").touch()
        result = ccli.run("wait", job, "--timeout", "90")
    finally:
        joined = occupied.release()
    assert result.returncode == 1, result.stderr
    assert joined == 0, f"the foreign listener accepted {joined} connection(s)"
    assert re.search(rf"scheduler\[0\]: no free port in {port}-{port}; .*port {port}\b",
                     abort_of(ccli, job)["reason"])
    assert_no_containers(ctr_env, job, timeout=15)
    assert_no_processes(job)


def test_a_stopped_worker_in_a_container_is_a_stall(ccli, ctr_env, tmp_path):
    """SIGSTOP of the role inside worker[1]'s container (seen from the host's /proc) fails
    the job after the stall timeout; worker[0], silent but busy in its container, is not
    taken for idle (the container's processes are measured, not the idle client)."""
    script = tmp_path / "worker.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['MXBATCH_RANK'] == '0':\n"
                      "    end = time.time() + 60\n"
                      "    while time.time() < end:\n"
                      "        pass\n"
                      "    sys.exit(0)\n"
                      "for _ in range(120):\n"
                      "    print('tick', flush=True)\n"
                      "    time.sleep(1)\n")
    spec = fake_job(tmp_path, ctr_env, "docker", workers=2,
                    worker_command=[ctr_env["MXBATCH_TEST_CONTAINER_PYTHON"], str(script)],
                    extra={"rendezvous": {"startup_timeout": "2m", "grace": "2s",
                                          "stall_timeout": "8s"}})
    job = ccli.submit(spec)
    wait_for(lambda: "tick" in log_of(ccli, job, "worker-1"), 120, "worker[1]'s output")
    main = container_main_pid(ctr_env, "docker", f"mxbatch-{job}-worker-1")
    (role,) = children(main)  # docker-init's child: the role
    os.kill(role, signal.SIGSTOP)
    stopped = time.time()
    result = ccli.run("wait", job, "--timeout", "90")
    assert result.returncode == 1, result.stderr
    assert "FAILED: worker[1] stalled: its process has been stopped" in result.stderr
    abort = abort_of(ccli, job)
    assert abort["extra"]["stalled"] == ["worker[1]"]
    assert 8 <= abort["at"] - stopped < 20
    assert_no_containers(ctr_env, job, timeout=15)
    assert_no_processes(job)


def test_cancel_removes_every_container(ccli, ctr_env, tmp_path):
    spec = fake_job(tmp_path, ctr_env, "podman",
                    worker_env={"FAKE_SLEEP": "120", "FAKE_TICK": "1"})
    job = ccli.submit(spec)
    wait_for(lambda: "tick" in log_of(ccli, job, "worker-0"), 120, "the worker's output")
    env_file = ccli.run_dir(job) / "containers" / "worker-0.env"
    wait_for(lambda: not env_file.exists(), 30, "the env file's removal once the container ran")
    result = ccli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert ccli.status(job)["state"] == "CANCELLED"
    assert containers_of(ctr_env, job) == []
    assert_no_processes(job, timeout=2)


def test_a_killed_supervisor_takes_its_containers_down(ccli, ctr_env, tmp_path):
    """The job manager killed outright: its clients get SIGTERM (not SIGKILL), which
    docker passes on, so the containers end by themselves; cancel then finds nothing."""
    spec = fake_job(tmp_path, ctr_env, "docker",
                    worker_env={"FAKE_SLEEP": "120", "FAKE_TICK": "1"})
    job = ccli.submit(spec)
    wait_for(lambda: "tick" in log_of(ccli, job, "worker-0"), 120, "the worker's output")
    os.kill(records.load(job).handle["manager_pid"], signal.SIGKILL)
    assert_no_containers(ctr_env, job, timeout=20)
    assert ccli.run("cancel", job).returncode == 0
    assert_no_processes(job)


def test_ctrl_c_on_launch_with_a_container(ccli, ctr_env, tmp_path):
    flags = ["--container", f"docker:{ctr_env['MXBATCH_TEST_IMAGE']}"]
    for mount in mounts(ctr_env):
        flags += ["--mount", mount]
    proc = ccli.popen("launch", "-n", "1", "-s", "1", "--grace", "2s", *flags, "--",
                      ctr_env["MXBATCH_TEST_CONTAINER_PYTHON"], str(FAKEROLE),
                      env={"FAKE_SLEEP": "120", "FAKE_TICK": "1"}, cwd=tmp_path)
    try:
        run_dir = wait_for(lambda: next(iter(ccli.run_dirs()), None), 60, "the run directory")
        job = run_dir.name
        wait_for(lambda: "tick" in log_of(ccli, job, "worker-0"), 120, "the worker's output")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert ccli.status(job)["state"] == "CANCELLED"
    assert_no_containers(ctr_env, job)
    assert_no_processes(job)


# --------------------------------------------------------------------------- input, recipe


def test_a_missing_image_exits_2_before_anything(ccli, ctr_env, tmp_path):
    for runtime in runtimes(ctr_env):
        data = {"command": "x", "container": {"runtime": runtime,
                                              "image": "localhost/mxbatch-no-such-image:0"}}
        result = ccli.run("submit", str(write_spec(tmp_path / "job.yaml", data)))
        assert result.returncode == 2, result.stderr
        assert (f"container.image: {runtime} has no image 'localhost/mxbatch-no-such-image:0' "
                "on this host") in result.stderr
        assert "pulls nothing" in result.stderr
    assert ccli.run_dirs() == []


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_the_rendered_launch_recipe_runs(ccli, ctr_env, tmp_path, runtime):
    """``mxbatch render``'s recipe, pasted into bash, runs every role in its container."""
    say = ('import os; print("recipe:", os.environ["DMLC_ROLE"], os.environ["MXBATCH_RANK"], '
           f'os.path.exists("{MARKER[runtime]}"), os.environ["DMLC_PS_ROOT_PORT"])')
    data = {"name": "recipe", "command": [ctr_env["MXBATCH_TEST_CONTAINER_PYTHON"], "-c", say],
            "roles": {"server": {"count": 1}, "worker": {"count": 2}},
            "rendezvous": {"dir": str(tmp_path / "runs")}, "container": container(ctr_env,
                                                                                 runtime)}
    spec = write_spec(tmp_path / "recipe.yaml", data)
    rendered = ccli.run("render", str(spec))
    assert rendered.returncode == 0, rendered.stderr
    recipe = rendered.stdout[rendered.stdout.index("# Every role of job"):]
    ran = subprocess.run(["bash", "-e"], input=recipe, env=ctr_env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    lines = sorted(line for line in ran.stdout.splitlines() if line.startswith("recipe:"))
    assert lines == ["recipe: scheduler 0 True 9000", "recipe: server 0 True 9000",
                     "recipe: worker 0 True 9000", "recipe: worker 1 True 9000"]
    job = rendered.stdout.split()[2]
    assert_no_containers(ctr_env, job)
