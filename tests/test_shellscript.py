"""`mxbatch render --format shell`: the job as a bash script with the DMLC_* wiring; the
example trains when the script runs with plain bash, without mxbatch."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mxbatch.jobs.shellscript import render_script
from mxbatch.spec import config as siteconfig

from .conftest import write_spec
from .test_mxnet_local import assert_trained


def processes_in(directory: Path) -> list:
    """Pids of processes whose working directory is ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_script_exports_the_wiring_and_starts_every_role(tmp_path, home):
    spec = siteconfig.load_job(write_spec(tmp_path / "j.yaml",
                                          "command: python3 t.py 'a b'\nenv: {X: 1}\n"
                                          "roles: {worker: {count: 3}, server: {count: 2}}\n"
                                          "network: {ports: 9300-9310}\n"))
    script = render_script(spec, "local")
    port = int(re.search(r"^export DMLC_PS_ROOT_PORT=(\d+)$", script, re.M).group(1))
    assert 9300 <= port <= 9310
    assert "export DMLC_PS_ROOT_URI=127.0.0.1\n" in script
    assert "export DMLC_NUM_SERVER=2\nexport DMLC_NUM_WORKER=3\n" in script
    starts = re.findall(r"^DMLC_ROLE=(\w+) .* python3 t.py 'a b' &$", script, re.M)
    assert starts == ["scheduler", "server", "server", "worker", "worker", "worker"]
    assert "X=1" in script and "MXBATCH_" not in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_script_is_for_the_local_backend_only(cli, example):
    result = cli.run("render", "--format", "shell", "--backend", "sge", str(example))
    assert result.returncode == 2 and "add --backend local" in result.stderr


def test_a_failing_worker_stops_the_script(cli, tmp_path):
    role = ("import os, sys, time\n"
            "role = os.environ['DMLC_ROLE']\n"
            "if role == 'worker': sys.exit(3)\n"
            "time.sleep(60)\n")
    (tmp_path / "role.py").write_text(role)
    spec = write_spec(tmp_path / "j.yaml", "command: python3 role.py\n"
                                           "rendezvous: {grace: 1s}\n")
    rendered = cli.run("render", "--format", "shell", str(spec))
    assert rendered.returncode == 0, rendered.stderr
    result = subprocess.run(["bash", "-c", rendered.stdout], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 3
    assert "exited with status 3: stopping the job" in result.stderr
    assert processes_in(tmp_path) == []


def test_servers_ending_a_moment_before_the_workers_is_success(cli, tmp_path):
    # ps-lite's servers and scheduler may exit once the workers said goodbye, before the
    # worker processes have exited
    role = ("import os, sys, time\n"
            "time.sleep(1.5 if os.environ['DMLC_ROLE'] == 'worker' else 0.2)\n")
    (tmp_path / "role.py").write_text(role)
    spec = write_spec(tmp_path / "j.yaml", "command: python3 role.py\n"
                                           "roles: {worker: {count: 2}}\n"
                                           "rendezvous: {grace: 5s}\n")
    rendered = cli.run("render", "--format", "shell", str(spec))
    result = subprocess.run(["bash", "-c", rendered.stdout], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "every worker succeeded" in result.stderr


@pytest.mark.mxnet
def test_rendered_script_trains_the_example_with_plain_bash(cli, example):
    rendered = cli.run("render", "--format", "shell", str(example))
    assert rendered.returncode == 0, rendered.stderr
    script = example.parent / "run.sh"
    script.write_text(rendered.stdout)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                            timeout=300, env=dict(cli.env, EPOCHS="3"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    assert "every worker succeeded" in result.stderr
    assert processes_in(example.parent) == []


def test_a_container_spec_starts_each_role_by_its_runtimes_command(tmp_path, home):
    data = tmp_path / "data"
    data.mkdir()
    spec = siteconfig.load_job(write_spec(
        tmp_path / "j.yaml",
        "command: python3 t.py\n"
        f"container: {{runtime: podman, image: img:1, mounts: ['{data}:/data:ro'],"
        " gpus: all}\n"
        "roles: {worker: {count: 1, env: {Y: 2}}}\n"))
    script = render_script(spec, "local")
    starts = re.findall(r"^DMLC_ROLE=worker .*$", script, re.M)
    assert len(starts) == 1
    line = starts[0]
    assert " podman run --rm --init --network host --name mxbatch-" in line
    assert "-e DMLC_PS_ROOT_URI -e DMLC_PS_ROOT_PORT" in line and "-e Y " in line
    assert f"-v {data}:/data:ro" in line and "--device nvidia.com/gpu=all" in line
    assert line.endswith(" img:1 python3 t.py &") and "--env-file" not in line
    assert re.search(r"^    podman rm -f -t 0 mxbatch-\S+-scheduler-0 ", script, re.M)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
