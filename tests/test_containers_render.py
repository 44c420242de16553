"""Roles in containers without a container runtime: the command lines (golden, GPUs
included: there is no GPU here), environment files, the launch recipe, the checks on
bad input, and the process-tree measurement stall detection uses for containers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mxbatch.errors import BackendUnavailable, SpecError
from mxbatch.jobs import submit as jobs
from mxbatch.runtime import procstat
from mxbatch.runtime.container import (
    ContainerPlan,
    ContainerRuntime,
    GpuMode,
    container_inherited,
    container_name,
    env_file_text,
    find_binary,
    gpu_options,
    visible_devices,
    write_private,
)
from mxbatch.runtime.planfile import RunPlan
from mxbatch.spec import parse as specs

from .conftest import wait_for
from .polling import poll

SPEC = """\
name: golden
command: python3 train.py
roles:
  server: {count: 1}
  worker: {count: 2, resources: {gpus: 2}}
rendezvous: {dir: /shared/runs}
container: {runtime: RUNTIME, image: IMAGE, mounts: ["/data:/data:ro"], options: [--shm-size=1g]GPUS}
"""


def prepare(tmp_path: Path, runtime: str = "docker", backend: str = "local",
            image: str = "mxnet/python:1.9.1", gpus: str = ""):
    text = SPEC.replace("RUNTIME", runtime).replace("IMAGE", image).replace(
        "GPUS", f", gpus: {gpus}" if gpus else "")
    spec = specs.parse(text, tmp_path / "golden.yaml")
    _, request = jobs.prepare(spec, backend, for_submit=False)
    return request


def task_argv(request, role: str, rank: int):
    data = request.to_dict()
    return next(t["container"]["argv"] for t in data["tasks"]
                if t["role"] == role and t["rank"] == rank)


def golden_start(runtime: str, request, tmp_path: Path, task: str):
    """What every docker and podman command line starts with, up to ``-w <workdir>``."""
    job = request.plan.job_id
    run = f"/shared/runs/{job}"
    return [runtime, "run", "--rm", "--init", "--network", "host",
            "--name", f"mxbatch-{job}-{task}", "--env-file", f"{run}/containers/{task}.env",
            "-e", "DMLC_PS_ROOT_URI", "-e", "DMLC_PS_ROOT_PORT", "-e", "DMLC_NODE_HOST",
            "-v", f"{tmp_path}:{tmp_path}", "-v", f"{run}/pyhook:{run}/pyhook:ro",
            "-v", "/data:/data:ro",
            "-w", str(tmp_path)]


def test_docker_command_line_is_golden(tmp_path):
    request = prepare(tmp_path)
    assert task_argv(request, "worker", 1) == golden_start("docker", request, tmp_path,
                                                           "worker-1") + [
        "--ulimit", "core=0", "--gpus", "2", "--shm-size=1g",
        "mxnet/python:1.9.1", "python3", "train.py"]
    # the scheduler asks for no GPU
    assert "--gpus" not in task_argv(request, "scheduler", 0)


def test_podman_command_line_is_golden(tmp_path):
    request = prepare(tmp_path, "podman")
    assert task_argv(request, "worker", 0) == golden_start("podman", request, tmp_path,
                                                           "worker-0") + [
        "--ulimit", "host",
        "--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1", "--shm-size=1g",
        "mxnet/python:1.9.1", "python3", "train.py"]


def test_apptainer_command_line_is_golden(tmp_path):
    request = prepare(tmp_path, "apptainer", image="/images/mxnet.sif", backend="slurm")
    run = f"/shared/runs/{request.plan.job_id}"
    assert task_argv(request, "worker", 0) == [
        "apptainer", "exec", "--cleanenv", "--env-file", f"{run}/containers/worker-0.env",
        "--bind", str(tmp_path), "--bind", f"{run}:{run}:ro", "--bind", "/data:/data:ro",
        "--pwd", str(tmp_path), "--nv", "--shm-size=1g", "/images/mxnet.sif",
        "python3", "train.py"]


@pytest.mark.parametrize("runtime,gpus,worker,scheduler", [
    ("docker", "all", ["--gpus", "all"], ["--gpus", "all"]),
    ("docker", "none", [], []),
    ("podman", "all", ["--device", "nvidia.com/gpu=all"], ["--device", "nvidia.com/gpu=all"]),
    ("podman", "none", [], []),
    ("apptainer", "auto", ["--nv"], []),
    ("apptainer", "none", [], []),
])
def test_gpus_follow_the_spec(tmp_path, runtime, gpus, worker, scheduler):
    image = "/i.sif" if runtime == "apptainer" else "img"
    request = prepare(tmp_path, runtime, image=image, gpus=gpus)

    def gpu_part(argv):
        flags = {"--gpus", "--device", "--nv"}
        out = []
        for i, arg in enumerate(argv):
            if arg in flags:
                out += [arg] if arg == "--nv" else [arg, argv[i + 1]]
        return out

    assert gpu_part(task_argv(request, "worker", 0)) == worker
    assert gpu_part(task_argv(request, "scheduler", 0)) == scheduler


def test_gpus_come_from_the_batch_systems_devices():
    devices = visible_devices({"CUDA_VISIBLE_DEVICES": "3,5"})
    assert devices == ["3", "5"]
    assert gpu_options(ContainerRuntime.DOCKER, GpuMode.AUTO, 2, devices) == \
        ["--gpus", '"device=3,5"']
    assert gpu_options(ContainerRuntime.PODMAN, GpuMode.AUTO, 2, devices) == \
        ["--device", "nvidia.com/gpu=3", "--device", "nvidia.com/gpu=5"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) is None
    assert visible_devices({}) is None
    plan = ContainerPlan(runtime=ContainerRuntime.DOCKER, image="i")
    environ = {"CUDA_VISIBLE_DEVICES": "3,5", "PATH": "/venv/bin", "HOME": "/root",
               "LD_LIBRARY_PATH": "/x", "MXNET_ENGINE_TYPE": "NaiveEngine"}
    # the container numbers its devices from 0: the host's ids must not pass in
    assert container_inherited(environ, plan, gpu_devices_given=True) == {
        "MXNET_ENGINE_TYPE": "NaiveEngine"}
    apptainer = ContainerPlan(runtime=ContainerRuntime.APPTAINER, image="/i.sif")
    assert container_inherited(environ, apptainer, gpu_devices_given=True) == {
        "CUDA_VISIBLE_DEVICES": "3,5", "MXNET_ENGINE_TYPE": "NaiveEngine"}


def test_env_files_carry_values_literally_or_quoted():
    env = {"A": "two words", "B": "x=y $HOME 'q'", "BASH_FUNC_module%%": "() { :\n}",
           "MULTI": "line1\nline2"}
    text, skipped = env_file_text(ContainerRuntime.DOCKER, env)
    assert text == "A=two words\nB=x=y $HOME 'q'\n"
    assert skipped == ["BASH_FUNC_module%%", "MULTI"]
    text, skipped = env_file_text(ContainerRuntime.APPTAINER, env)
    assert text == "A='two words'\nB='x=y $HOME '\"'\"'q'\"'\"''\nMULTI='line1\nline2'\n"
    assert skipped == ["BASH_FUNC_module%%"]


def test_env_files_are_private(tmp_path):
    path = tmp_path / "containers" / "worker-0.env"
    old = os.umask(0)
    try:
        write_private(str(path), "A=1\n")
    finally:
        os.umask(old)
    assert path.read_text() == "A=1\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert os.listdir(path.parent) == ["worker-0.env"]  # no temporary file left


def test_container_names_are_safe():
    assert container_name("mlp-ps-0a1b2c3d", "worker", 12) == "mxbatch-mlp-ps-0a1b2c3d-worker-12"
    assert container_name("a b/c", "server", 0) == "mxbatch-a-b-c-server-0"


def test_the_plan_file_carries_the_container(tmp_path):
    plan = prepare(tmp_path, "podman", gpus="all").plan.run
    again = RunPlan.from_json(plan.to_json())
    assert again.container == plan.container
    assert again.container.runtime is ContainerRuntime.PODMAN
    assert again.container.gpus is GpuMode.ALL
    assert json.loads(plan.to_json())["container"]["runtime"] == "podman"


def test_the_launch_recipe_is_a_bash_script_with_every_role(tmp_path):
    request = prepare(tmp_path)
    text = request.describe()
    recipe = text[text.index("# Every role of job"):]
    assert recipe.count("docker run --rm --init") == 4 and recipe.endswith("wait\n")
    assert "export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=9000 DMLC_NODE_HOST=127.0.0.1" \
        in recipe
    assert "DMLC_ROLE=server\n" in recipe and "MXBATCH_RANK=1\n" in recipe
    subprocess.run(["bash", "-n"], input=recipe, text=True, check=True)


def test_batch_backends_render_containers_and_yarn_keeps_its_own(tmp_path):
    for backend in ("sge", "slurm"):
        assert "# Every role of job" in prepare(tmp_path, backend=backend).describe()
    spec = specs.parse("command: x\ncontainer: {image: img}\n", tmp_path / "y.yaml")
    _, yarn = jobs.prepare(spec, "yarn", for_submit=False)
    assert yarn.plan.run.container is None
    assert "# Every role of job" not in yarn.describe()


@pytest.mark.parametrize("container,key,words", [
    ("{runtime: dockr, image: x}", "container.runtime", "expected one of docker, podman, "
                                                        "apptainer"),
    ("{image: x, gpus: 2}", "container.gpus", "expected one of auto, none, all"),
    ("{image: x, mounts: ['data:/data']}", "container.mounts", "absolute host path"),
    ("{image: x, options: [-d]}", "container.options", "conflicts"),
    ("{image: x, options: ['--network=bridge']}", "container.options", "conflicts"),
    ("{runtime: apptainer, image: mxnet.sif}", "container.image", "absolute path"),
], ids=["unknown-runtime", "bad-gpus", "relative-mount", "detach", "network",
        "relative-sif"])
def test_bad_container_specs_exit_2_before_anything(cli, tmp_path, container, key, words):
    path = tmp_path / "job.yaml"
    path.write_text(f"command: x\ncontainer: {container}\n")
    for command in ("render", "submit"):
        result = cli.run(command, str(path))
        assert result.returncode == 2, result.stderr
        assert f"{path}:2: {key}: " in result.stderr and words in result.stderr
    assert cli.run_dirs() == []


def test_a_missing_mount_source_exits_2_before_anything(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\ncontainer: {image: x, mounts: ['/no/such/dir:/data']}\n")
    assert cli.run("render", str(path)).returncode == 0  # render probes nothing
    result = cli.run("submit", str(path))
    assert result.returncode == 2, result.stderr
    assert "container.mounts: the host path of mount '/no/such/dir:/data' does not exist" \
        in result.stderr
    assert cli.run_dirs() == []


def test_a_runtime_that_is_not_installed_exits_3_clearly(cli, tmp_path):
    # no apptainer or singularity can be installed here
    assert find_binary(ContainerRuntime.APPTAINER) is None
    path = tmp_path / "job.yaml"
    path.write_text("command: x\ncontainer: {runtime: apptainer, image: /images/m.sif}\n")
    assert cli.run("render", str(path)).returncode == 0
    result = cli.run("submit", str(path))
    assert result.returncode == 3, result.stderr
    assert "container.runtime apptainer: neither apptainer nor singularity is installed on " \
           "this host" in result.stderr
    assert "Traceback" not in result.stderr
    assert cli.run_dirs() == []
    # docker too, when it is not on PATH
    path.write_text("command: x\ncontainer: {runtime: docker, image: img}\n")
    result = cli.run("submit", str(path), env={"PATH": os.path.dirname(sys.executable)})
    assert result.returncode == 3, result.stderr
    assert "container.runtime docker: docker is not installed on this host (not on PATH)" \
        in result.stderr


def test_find_binary_looks_on_the_given_path(tmp_path):
    assert find_binary(ContainerRuntime.DOCKER, str(tmp_path)) is None
    fake = tmp_path / "singularity"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_binary(ContainerRuntime.APPTAINER, str(tmp_path)) == str(fake)


@pytest.mark.parametrize("flags,words", [
    (["--container", "docker"], "expected RUNTIME:IMAGE"),
    (["--mount", "/a:/a"], "--mount: needs --container RUNTIME:IMAGE"),
    (["--container", "lxc:img"], "expected one of docker, podman, apptainer"),
])
def test_launch_container_flags(cli, tmp_path, flags, words):
    result = cli.run("launch", *flags, "--", "python3", "x.py", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr
    assert cli.run_dirs() == []


def test_process_trees_are_measured_from_proc():
    """A container's processes are the tree under its main process (an init), not the
    client's process group: CPU of the whole tree, and stopped when the init's child is."""
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', "
            "'t = __import__(\"time\").time() + 60\\nwhile __import__(\"time\").time() < t: pass'])\n"
            "print(child.pid, flush=True)\n"
            "child.wait()\n")
    init = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        child = int(init.stdout.readline())
        first = procstat.snapshot([], [init.pid])[init.pid]
        assert first.processes == 2 and not first.leader_stopped
        later = wait_for(lambda: (lambda s: s if s.cpu_ticks > first.cpu_ticks else None)(
            procstat.snapshot([], [init.pid])[init.pid]), 10, "the child's CPU time")
        assert later.processes == 2
        os.kill(child, signal.SIGSTOP)
        wait_for(lambda: procstat.snapshot([], [init.pid])[init.pid].leader_stopped, 10,
                 "the stopped child")
        # the same scan answers for process groups too
        both = procstat.snapshot([init.pid], [init.pid])
        assert both[init.pid].processes == 2
        os.kill(child, signal.SIGKILL)
    finally:
        os.killpg(init.pid, signal.SIGKILL)
        init.wait()
    poll(lambda: init.pid in procstat.snapshot([], [init.pid]), lambda seen: not seen, 5, 0.05)
    assert init.pid not in procstat.snapshot([], [init.pid])


def test_bad_input_errors_are_spec_errors_not_tracebacks(tmp_path):
    spec = specs.parse("command: x\ncontainer: {image: x, mounts: ['/nope:/n']}\n",
                       tmp_path / "j.yaml")
    with pytest.raises(SpecError):
        jobs.prepare(spec, "local")
    spec = specs.parse("command: x\ncontainer: {runtime: apptainer, image: /i.sif}\n",
                       tmp_path / "j.yaml")
    with pytest.raises(BackendUnavailable):
        jobs.prepare(spec, "local")
