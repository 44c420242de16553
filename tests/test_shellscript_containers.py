"""`mxbatch render --format shell` of a spec with `container:` (issue 38, friction 8):
every role by the runtime's own `docker run`/`podman run`, run for real with both
runtimes (ci/clusters/containers-up.sh), and its teardown removing the containers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import Cli, cluster_environment
from .test_containers import MARKER, container, containers_of, runtimes

pytestmark = pytest.mark.containers

#: a role that says where it runs; a worker exits with $WORKER_EXIT, others end soon
ROLE = ("import os, sys, time\n"
        "role = os.environ['DMLC_ROLE']\n"
        "marks = [m for m in ('/.dockerenv', '/run/.containerenv') if os.path.exists(m)]\n"
        "print('role', role, 'in', ','.join(marks) or 'the host', 'root',\n"
        "      os.environ['DMLC_PS_ROOT_URI'], os.environ['DMLC_PS_ROOT_PORT'],\n"
        "      'workers', os.environ['DMLC_NUM_WORKER'], 'x', os.environ.get('X'),\n"
        "      flush=True)\n"
        "if role == 'worker':\n"
        "    time.sleep(1)\n"
        "    sys.exit(int(os.environ.get('WORKER_EXIT', '0')))\n"
        "time.sleep(0.5 if os.environ.get('WORKER_EXIT', '0') == '0' else 120)\n")


@pytest.fixture(scope="module")
def ctr_env():
    return cluster_environment("containers")


def _script(cli: Cli, tmp_path: Path, env: dict, runtime: str, worker_exit: int) -> str:
    tmp_path.chmod(0o755)
    (tmp_path / "role.py").write_text(ROLE)
    spec = {"command": [env["MXBATCH_TEST_CONTAINER_PYTHON"], "role.py"],
            "env": {"X": "a b", "WORKER_EXIT": str(worker_exit)},
            "roles": {"worker": {"count": 2}, "server": {"count": 1}},
            "rendezvous": {"grace": "3s"},
            "container": container(env, runtime)}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    rendered = cli.run("render", "--format", "shell", str(path))
    assert rendered.returncode == 0, rendered.stderr
    return rendered.stdout


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_the_container_script_runs_every_role_in_its_container(home, ctr_env, tmp_path,
                                                               runtime):
    if runtime not in runtimes(ctr_env):
        pytest.fail(f"{runtime} is not up")
    script = _script(Cli(home, ctr_env), tmp_path, ctr_env, runtime, 0)
    assert f"{runtime} run --rm --init --network host --name mxbatch-" in script
    job = re.search(r"--name mxbatch-(\S+)-scheduler-0", script).group(1)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            timeout=300, env=ctr_env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("role ")]
    assert sorted(line.split()[1] for line in lines) == ["scheduler", "server", "worker",
                                                         "worker"]
    assert all(f" in {MARKER[runtime]} root 127.0.0.1 " in line for line in lines), lines
    assert all(line.endswith("workers 2 x a b") for line in lines), lines
    assert containers_of(ctr_env, job) == []


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_failing_worker_removes_every_container(home, ctr_env, tmp_path, runtime):
    if runtime not in runtimes(ctr_env):
        pytest.fail(f"{runtime} is not up")
    script = _script(Cli(home, ctr_env), tmp_path, ctr_env, runtime, 3)
    job = re.search(r"--name mxbatch-(\S+)-scheduler-0", script).group(1)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            timeout=300, env=ctr_env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "exited with status 3: stopping the job" in result.stderr
    assert containers_of(ctr_env, job) == []
