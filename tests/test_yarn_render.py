"""YARN without a cluster: the skein specification (golden) and the container environment
(inherited variables, YARN's Docker runtime)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mxbatch.backends.registry import options_for
from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.errors import SpecError
from mxbatch.jobs import submit as jobs
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning
from mxbatch.spec.schema import ContainerRuntime, ContainerSpec

from .yarngolden import GOLDEN_HEAD, GOLDEN_WORKER, SPEC, WORKER, golden

# ------------------------------------------------------------------ the specification


def test_skein_specification_is_golden(tmp_path):
    backend, plan = golden(tmp_path)
    text = yarn_spec.spec_yaml(yarn_spec.application_spec(plan, backend.options))
    assert text.startswith(GOLDEN_HEAD)
    assert GOLDEN_WORKER.format(workdir=tmp_path) in text
    assert list(yarn_spec.application_spec(plan, backend.options)["services"]) == [
        "scheduler", "server", "worker"]


@pytest.mark.parametrize("supervisor,code,slept", [
    ("kill -KILL $$", 137, "75"),        # killed: no final record, the peers must see it
    ("exit 3", 3, None),                 # failed by itself: its abort is written
    ("exit 0", 0, None),
], ids=["killed", "failed", "succeeded"])
def test_container_outlives_a_killed_supervisor(tmp_path, supervisor, code, slept):
    """The container script run by bash, with a stand-in supervisor and ``sleep``: a
    supervisor killed by a signal keeps its container for the peers' heartbeat timeout
    and grace (30s + 30s + 15s) so that they name the lost task; else it ends at once."""
    bin_dir, work = tmp_path / "bin", tmp_path / "container"
    bin_dir.mkdir()
    work.mkdir()
    python = bin_dir / "python"
    python.write_text(f"#!/bin/bash\n{supervisor}\n")
    (bin_dir / "sleep").write_text(f"#!/bin/bash\necho \"$@\" > {tmp_path / 'slept'}\n")
    for tool in (python, bin_dir / "sleep"):
        tool.chmod(0o755)
    (work / yarn_spec.ENV_FILE).write_text(f"export PATH={bin_dir}:$PATH\n")
    _, plan = golden(tmp_path)
    plan = planning.make(plan.spec, "yarn", job_id="golden-00000001", created_at=0,
                         python=str(python))
    script = yarn_spec.container_script(plan.run, WORKER)
    result = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "SKEIN_CONTAINER_ID": "worker_1",
                                 "LOG_DIRS": str(tmp_path)}, timeout=60)
    assert result.returncode == code, result.stderr
    if slept is None:
        assert not (tmp_path / "slept").exists()
    else:
        assert (tmp_path / "slept").read_text().split() == [slept]
        assert "the supervisor was killed by signal 9" in result.stderr


def test_specification_is_what_skein_accepts(tmp_path):
    skein = pytest.importorskip("skein")
    backend, plan = golden(tmp_path)
    data = yarn_spec.application_spec(plan, backend.options)
    spec = skein.ApplicationSpec.from_dict(data)
    assert spec.services["worker"].instances == 3
    assert spec.services["worker"].resources.gpus == 1
    assert spec.services["server"].max_restarts == 0
    assert spec.node_label == "gpu" and spec.queue == "ml"
    assert set(spec.services["scheduler"].files) == {"runtime.pyz", "plan.json",
                                                     "mxbatch-env.sh", "workdir"}


def test_containers_see_paths_relative_to_their_directory(tmp_path):
    _, plan = golden(tmp_path)
    shipped = yarn_spec.container_plan(plan.run, ship_workdir=True)
    assert (shipped.run_dir, shipped.workdir) == (".", "workdir")
    in_place = yarn_spec.container_plan(plan.run, ship_workdir=False)
    assert in_place.workdir == str(tmp_path)
    options = options_for(specs.parse(SPEC.replace("tags: [Team-A]", "ship_workdir: false"),
                                      tmp_path / "golden.yaml"), "yarn")
    assert "workdir" not in yarn_spec.application_spec(plan, options)["services"]["worker"][
        "files"]


def test_memory_defaults_when_the_spec_sets_none(tmp_path):
    backend, plan = golden(tmp_path, "command: x\nrendezvous: {dir: /r}\n")
    services = yarn_spec.application_spec(plan, backend.options)["services"]
    assert services["worker"]["resources"] == {"memory": yarn_spec.DEFAULT_MEMORY_MIB,
                                               "vcores": 1}
    assert "YARN_CONTAINER_RUNTIME_TYPE" not in services["worker"]["env"]


def test_render_through_the_cli_contacts_no_cluster(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SPEC.replace("/shared/runs", str(tmp_path / "runs")))
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
           "JAVA_HOME": "/nonexistent", "YARN_CONF_DIR": "/nonexistent"}
    result = cli.run("render", "--backend", "yarn", str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert "## skein application specification" in result.stdout
    assert "  worker:\n    instances: 3\n" in result.stdout
    assert "skein driver" not in result.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ container environment


def test_inherited_environment_leaves_out_what_yarn_sets(tmp_path):
    _, plan = golden(tmp_path)
    environ = {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "EPOCHS": "3",
               "HOME": "/home/me", "PWD": "/here", "PORT": "80", "DMLC_ROLE": "worker",
               "MXBATCH_HOME": "/m", "SKEIN_CONFIG": "/s", "CONTAINER_ID": "c",
               "LOG_DIRS": "/l", "NM_HOST": "n", "BASH_FUNC_f%%": "() { :; }",
               "YARN_CONTAINER_RUNTIME_TYPE": "docker", "TMPDIR": "/tmp/me"}
    assert yarn_spec.inherited_environment(plan.run, environ) == {
        "EPOCHS": "3", "PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv"}
    closed = planning.make(specs.parse("command: x\ninherit_env: false\n",
                                       tmp_path / "j.yaml"), "yarn")
    assert yarn_spec.inherited_environment(closed.run, environ) == {"PATH": "/venv/bin:/usr/bin"}


def test_env_file_survives_any_value_through_bash(tmp_path):
    values = {"QUOTES": "it's \"x\"", "DOLLAR": "$HOME `id` $(id)", "NEWLINE": "a\nb",
              "EMPTY": "", "SPACES": "  a  b  "}
    path = tmp_path / "env.sh"
    path.write_text(yarn_spec.env_file(values))
    out = subprocess.run(["bash", "-c", f'. "{path}" && env -0'], capture_output=True,
                         check=True, env={}).stdout
    seen = dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)
    assert {k: seen[k] for k in values} == values


def test_docker_runtime_environment():
    container = ContainerSpec(
        runtime=ContainerRuntime.DOCKER, image="img:1", mounts=("/a:/a", "/b:/c:ro"),
        options=("YARN_CONTAINER_RUNTIME_DOCKER_RUN_PRIVILEGED_CONTAINER=true",))
    assert yarn_spec.docker_environment(container) == {
        "YARN_CONTAINER_RUNTIME_TYPE": "docker",
        "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": "img:1",
        "YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK": "host",
        "YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS": "/a:/a:rw,/b:/c:ro",
        "YARN_CONTAINER_RUNTIME_DOCKER_RUN_PRIVILEGED_CONTAINER": "true"}


@pytest.mark.parametrize("container,backend,words", [
    ("{runtime: podman, image: x}", "yarn", "podman containers are not supported by backend "
                                            "'yarn'"),
    ("{image: x, mounts: ['data:/data']}", "local", "absolute host path"),
    ("{image: x, options: [--privileged]}", "yarn", "YARN_CONTAINER_RUNTIME_DOCKER_<NAME>"),
    ("{image: x, mounts: [data:/data]}", "yarn", "absolute paths only"),
    ("{image: x, mounts: [/a]}", None, "host-path:container-path"),
    ("{runtime: docker}", None, "missing: the container image"),
    ("{image: x, volumes: []}", None, "unknown key"),
], ids=["yarn-podman", "local", "yarn-option", "relative-mount", "bad-mount", "no-image",
        "unknown-key"])
def test_container_spec_errors(tmp_path, container, backend, words):
    path = tmp_path / "job.yaml"
    path.write_text(f"command: x\ncontainer: {container}\n")
    with pytest.raises(SpecError) as error:
        jobs.prepare(specs.load(path), backend or "yarn", for_submit=False)
    assert words in str(error.value) and f"{path}:2:" in str(error.value)
