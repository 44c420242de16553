"""The Python of each host's agent under ssh and mpirun when the spec names none
(``backends.hosts.agentpython``): the roles' own when their command names it by its path
and it is 3.8 or newer, else ``python3``; what render shows. The real runs on the
namespace hosts (test_host_backends.py) check the agents' interpreter there."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mxbatch.backends.hosts.agentpython import DEFAULT_AGENT_PYTHON, roles_python

from .conftest import write_spec


def interpreter(folder: Path, real_name: str, link_name: str = "python") -> str:
    """``folder/link_name``, a link to an executable file named ``real_name``."""
    folder.mkdir(parents=True, exist_ok=True)
    real = folder / real_name
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    link = folder / link_name
    link.symlink_to(real_name)
    return str(link)


def test_this_interpreter_by_its_path_is_the_agents():
    assert roles_python([[sys.executable, "train.py"], [sys.executable, "serve.py"]]) == \
        sys.executable


def test_after_env_and_its_variables():
    assert roles_python([["env", "A=1", "B=x=y", sys.executable, "t.py"]]) == sys.executable
    assert roles_python([["/usr/bin/env", sys.executable, "t.py"]]) == sys.executable
    assert roles_python([["env", "-i", sys.executable, "t.py"]]) is None  # options: no
    assert roles_python([["env", "A=1"]]) is None


def test_a_python_named_3_8_or_newer_after_its_links(tmp_path):
    assert roles_python([[interpreter(tmp_path / "a", "python3.8"), "t.py"]]) == \
        str(tmp_path / "a" / "python")
    assert roles_python([[interpreter(tmp_path / "b", "python3.12", "python3"), "t.py"]]) == \
        str(tmp_path / "b" / "python3")


def test_anything_else_leaves_python3():
    assert roles_python([["python3", "train.py"]]) is None  # a name: the host's PATH decides
    assert roles_python([[sys.executable, "t.py"], ["python3", "t.py"]]) is None  # two
    assert roles_python([["/bin/sh", "run.sh"]]) is None  # not a Python
    assert roles_python([["/nowhere/bin/python3", "t.py"]]) is None  # not here: unknown
    assert roles_python([]) is None


def test_an_old_or_unnamed_version_leaves_python3(tmp_path):
    assert roles_python([[interpreter(tmp_path / "a", "python3.7"), "t.py"]]) is None
    assert roles_python([[interpreter(tmp_path / "b", "python2.7"), "t.py"]]) is None
    # a link to a file whose name says no version (not this interpreter): unknown
    assert roles_python([[interpreter(tmp_path / "c", "python-wrapper"), "t.py"]]) is None


def test_a_file_that_cannot_run_leaves_python3(tmp_path):
    path = interpreter(tmp_path, "python3.11")
    os.chmod(tmp_path / "python3.11", 0o644)
    assert roles_python([[path, "t.py"]]) is None


def spec(tmp_path: Path, backend: str, command: list, extra: str = "") -> Path:
    (tmp_path / "hosts").write_text("node1\nnode2\n")
    return write_spec(tmp_path / "job.yaml",
                      f"name: p\ncommand: {json.dumps(command)}\n{extra}"
                      f"backends:\n  {backend}: {{hostfile: hosts}}\n")


def rendered(cli, path: Path, backend: str, *args: str) -> dict:
    result = cli.run("render", "--json", "-b", backend, *args, str(path))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["native"]["setup"]


def test_render_ssh_runs_the_agents_under_the_roles_python(cli, tmp_path):
    setup = rendered(cli, spec(tmp_path, "ssh", [sys.executable, "train.py"]), "ssh")
    assert setup["python"] == sys.executable
    assert all(f" {sys.executable} -S -c " in host["remote"] for host in setup["hosts"])
    setup = rendered(cli, spec(tmp_path, "ssh", ["python3", "train.py"]), "ssh")
    assert setup["python"] == DEFAULT_AGENT_PYTHON
    assert all(" python3 -S -c " in host["remote"] for host in setup["hosts"])


def test_render_mpi_runs_the_agents_under_the_roles_python(cli, tmp_path):
    argv = rendered(cli, spec(tmp_path, "mpi", [sys.executable, "train.py"]), "mpi")["argv"]
    assert argv[argv.index("-S") - 1] == sys.executable
    argv = rendered(cli, spec(tmp_path, "mpi", ["python3", "train.py"]), "mpi")["argv"]
    assert argv[argv.index("-S") - 1] == DEFAULT_AGENT_PYTHON


def test_the_spec_and_containers_win(cli, tmp_path):
    path = spec(tmp_path, "ssh", [sys.executable, "train.py"])
    path.write_text(path.read_text().replace("{hostfile: hosts}",
                                             "{hostfile: hosts, python: /opt/py/bin/python3}"))
    assert rendered(cli, path, "ssh")["python"] == "/opt/py/bin/python3"
    # in a container the command's interpreter is the image's: the host's python3 runs
    # the agent
    path = spec(tmp_path, "ssh", [sys.executable, "train.py"],
                "container: {runtime: podman, image: mxnet/python:1.9.1}\n")
    assert rendered(cli, path, "ssh")["python"] == DEFAULT_AGENT_PYTHON
