"""Roles in containers, as the CLI sees them: checking the spec and this host before
anything is created, rendering each task's container command and a launch recipe to
paste, and removing a job's containers left behind.

The runtime side (the command line, the environment file, removal while the job
runs) is ``runtime.container``; backends whose runtime runs roles in containers set
``role_containers`` (local, SGE, Slurm), and their plan carries a ``ContainerPlan``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List

from .. import shell
from ..errors import BackendUnavailable, CommandError, MxbatchError
from ..quoting import quote, shell_words
from ..runtime.container import (
    APPTAINER_ENV_PREFIX,
    CONFLICTING_OPTIONS,
    REMOVE_TIMEOUT_S,
    RENDEZVOUS_VARIABLES,
    ContainerPlan,
    ContainerRuntime,
    binary_candidates,
    container_name,
    env_file_text,
    find_binary,
    remove_argv,
    run_argv,
)
from ..runtime.environ import role_environment
from ..runtime.planfile import RunPlan, TaskInfo
from ..spec.plan import JobPlan

#: what a runtime says when an image is not there (docker, podman)
_NO_IMAGE = re.compile(r"no such image|image not known", re.IGNORECASE)
#: what it says when a container to remove is not there
_NO_CONTAINER = re.compile(r"no such container|no container with", re.IGNORECASE)
#: how long asking a runtime about an image may take
INSPECT_IMAGE_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- checks


def check_spec(plan: JobPlan) -> None:
    """SpecError if the plan's container cannot work as written. No I/O."""
    container = plan.run.container
    if container is None:
        return
    spec = plan.spec
    for mount in container.mounts:
        source, target = mount.split(":")[:2]
        if not (source.startswith("/") and target.startswith("/")):
            raise spec.error(("container", "mounts"),
                             f"a mount binds an absolute host path to an absolute path in "
                             f"the container, got {mount!r}", "named volumes are not supported")
    conflicting = CONFLICTING_OPTIONS[container.runtime]
    for option in container.options:
        if option.split("=", 1)[0] in conflicting:
            raise spec.error(("container", "options"),
                             f"{option!r} conflicts with how mxbatch runs each role (attached, "
                             "named after the job, on the host's network, in the workdir)",
                             "remove it")
    _check_env_lines(plan)
    image = container.image
    if (container.runtime is ContainerRuntime.APPTAINER and "://" not in image
            and not image.startswith("/")):
        raise spec.error(("container", "image"),
                         f"an apptainer image is an absolute path to an image file or a URI "
                         f"(docker://..., library://...), got {image!r}")


def _check_env_lines(plan: JobPlan) -> None:
    """docker's and podman's env files hold one line a variable: a value of the spec's
    ``env`` (or ``--env``) with a line break cannot reach the container (it would be
    left out), so it is a spec error, not a variable silently missing."""
    container = plan.run.container
    assert container is not None
    if container.runtime is ContainerRuntime.APPTAINER:  # its env file is shell: quoted
        return
    spec = plan.spec
    places = [(("env",), spec.env)] + [(("roles", role.value, "env"), role_spec.env)
                                       for role, role_spec in spec.roles.items()]
    for key_path, env in places:
        for name, value in env.items():
            if "\n" in value or "\r" in value:
                raise spec.error(key_path + (name,),
                                 f"a value with a line break cannot reach a "
                                 f"{container.runtime.value} container (its env file holds "
                                 "one line a variable)",
                                 "write it on one line, or use container.runtime: apptainer")


def check_environment(plan: JobPlan, remote: bool) -> None:
    """Before anything is created: the mounts' host paths exist, the runtime is
    installed and answers, the image is there (``remote``: tasks run on other hosts,
    which are assumed to see the same as this one, as for the run directory)."""
    container = plan.run.container
    if container is None:
        return
    spec = plan.spec
    here = "on this host" + (" (the nodes need it too)" if remote else "")
    for mount in container.mounts:
        source = mount.split(":")[0]
        if not os.path.exists(source):
            raise spec.error(("container", "mounts"),
                             f"the host path of mount {mount!r} does not exist {here}: {source}")
    runtime = container.runtime
    binary = find_binary(runtime)
    if binary is None:
        names = binary_candidates(runtime)
        missing = (f"neither {' nor '.join(names)} is installed" if len(names) > 1
                   else f"{names[0]} is not installed")
        raise BackendUnavailable(
            f"container.runtime {runtime.value}: {missing} {here} (not on PATH), so no "
            "role can run in its "
            f"container; install it or choose another runtime "
            f"({', '.join(r.value for r in ContainerRuntime)}). "
            "`mxbatch render` shows what would run without it.")
    if runtime is ContainerRuntime.APPTAINER:
        if "://" not in container.image and not os.path.isfile(container.image):
            raise spec.error(("container", "image"), f"no such image file {here}: "
                                                     f"{container.image}")
        return
    _check_image(plan, binary, here)


def _check_image(plan: JobPlan, binary: str, here: str) -> None:
    container = plan.run.container
    assert container is not None
    runtime = container.runtime.value
    try:
        shell.run([binary, "image", "inspect", "--format", "{{.Id}}", container.image],
                  timeout=INSPECT_IMAGE_TIMEOUT_S)
    except CommandError as exc:
        words = (exc.stderr or exc.stdout).strip()
        if exc.returncode is not None and _NO_IMAGE.search(words):
            raise plan.spec.error(
                ("container", "image"), f"{runtime} has no image {container.image!r} {here}",
                f"mxbatch pulls nothing: `{runtime} pull {container.image}` or load it "
                "first") from None
        raise BackendUnavailable(
            f"container.runtime {runtime}: {runtime} does not answer {here}: "
            f"{words or exc}\nCheck that it works for this user (`{runtime} info`; "
            "DOCKER_HOST, CONTAINER_HOST)") from None


# --------------------------------------------------------------------------- rendering


def task_argv(run: RunPlan, task: TaskInfo) -> List[str]:
    """What runs task ``task`` in its container, as ``mxbatch render`` shows it (GPU ids
    from ``CUDA_VISIBLE_DEVICES`` are known only when the task runs)."""
    assert run.container is not None
    return run_argv(run.container, run.job_id, run.workdir, run.layout, task.role.value,
                    task.rank, task.argv, gpus=task.gpus, core_dumps=run.core_dumps)


def task_env_file(run: RunPlan, task: TaskInfo) -> Dict[str, str]:
    """The job's part of a task's container environment file (a submitted job's
    also holds the inherited environment, less host-only variables)."""
    return role_environment({}, False, task.env, {}, run.layout.pyhook_dir)


def task_data(run: RunPlan, task: TaskInfo) -> Dict[str, Any]:
    """``render --json``'s container part of one task."""
    return {"name": container_name(run.job_id, task.role.value, task.rank),
            "argv": task_argv(run, task),
            "env_file": run.layout.container_env_file(task.role.value, task.rank),
            "env": task_env_file(run, task)}


def _rendezvous_names(container: ContainerPlan) -> List[str]:
    prefix = APPTAINER_ENV_PREFIX if container.runtime is ContainerRuntime.APPTAINER else ""
    return [prefix + name for name in RENDEZVOUS_VARIABLES]


def recipe(run: RunPlan) -> str:
    """Every role by hand, each in its container: a bash script to paste (the scheduler
    on this machine's loopback at the first port of the range)."""
    container = run.container
    assert container is not None
    uri, port = "127.0.0.1", str(run.port_low)
    values = dict(zip(_rendezvous_names(container), (uri, port, uri)))
    names = " ".join(RENDEZVOUS_VARIABLES)
    lines = [f"# Every role of job {run.job_id}, each in its {container.runtime.value} "
             f"container, started in {run.workdir}.",
             "# Each supervisor runs the same command; its env file (mode 0600, removed once "
             "the container runs) also holds",
             "# the inherited environment less PATH, HOME and other host-only variables, and "
             f"it sets {names}",
             "# to the scheduler it started. By hand, on one machine (across machines: the "
             "scheduler's address, and each machine's own):",
             "export " + " ".join(f"{k}={quote(v)}" for k, v in values.items()),
             f"mkdir -p -m 0700 {quote(run.layout.containers_dir)} "
             f"{quote(run.layout.pyhook_dir)}"]
    for task in run.tasks:
        text, skipped = env_file_text(container.runtime, task_env_file(run, task))
        lines += [f"# task {task.index}: {task.label}"]
        if skipped:  # never the spec's own values: check_spec refuses those
            lines.append(f"# left out of its env file (a line break in the value, or a name "
                         f"that is no identifier): {', '.join(skipped)}")
        lines += [f"cat > {quote(run.layout.container_env_file(task.role.value, task.rank))}"
                  " <<'MXBATCH_ENV'", text.rstrip("\n"), "MXBATCH_ENV",
                  shell_words(task_argv(run, task)) + " &"]
    lines.append("wait")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- removal


def remove_leftovers(run: RunPlan) -> None:
    """Remove every container of the job still known to this host's runtime (running
    or not): what a supervisor killed outright left behind. Idempotent; nothing to do
    without a container runtime here."""
    container = run.container
    if container is None or container.runtime is ContainerRuntime.APPTAINER:
        return
    binary = find_binary(container.runtime)
    if binary is None:
        return
    names = [container_name(run.job_id, t.role.value, t.rank) for t in run.tasks]
    argv = remove_argv(container.runtime, names, binary)
    result = None
    try:
        result = shell.run(argv, check=False, timeout=2 * REMOVE_TIMEOUT_S)
    except CommandError as exc:
        words = str(exc)
    else:
        words = (result.stderr + result.stdout).strip()
    if result is not None and result.returncode == 0:
        return
    unexpected = [line for line in words.splitlines()
                  if line.strip() and not _NO_CONTAINER.search(line)
                  and line.strip() not in names]
    if result is not None and not unexpected:
        return
    raise MxbatchError(f"could not remove the containers of job {run.job_id}: {words}\n"
                       f"Remove them with: {shell_words(argv)}")
