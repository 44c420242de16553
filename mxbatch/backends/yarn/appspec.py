"""The skein application of a job, as plain data: pure, no skein import, no I/O.

One application per job with three services, ``scheduler`` (1 instance),
``server`` (S) and ``worker`` (W). Skein names a service's containers
``<service>_<i>`` (``$SKEIN_CONTAINER_ID``); with ``max_restarts: 0`` ``i`` runs
0..count-1, and container ``i`` of a role runs task ``<first index of the role> + i``
(so ``worker_1`` is ``worker[1]``). Every container gets the same files:

- ``runtime.pyz``: the runtime zipapp;
- ``plan.json``: the job's plan with ``run_dir`` ``.`` (the container's working
  directory) and, when the workdir is shipped, ``workdir`` ``workdir``;
- ``mxbatch-env.sh``: the submitting environment (``inherit_env``), sourced by the
  container script: YARN writes service ``env`` values into its launch script
  unquoted, so arbitrary values go through this file (shell-quoted) instead;
- ``workdir``: the spec's workdir (a directory; YARN copies it once per node),
  unless ``backends.yarn.ship_workdir`` is false (it is then used in place and must
  be on storage every node mounts at the same path).

- ``python-env``: with ``backends.yarn.python_env``, the shipped Python environment
  (a skein archive file, unpacked by YARN; see ``pyenv``).

Supervisors keep their rendezvous in skein's key-value store
(``--kv-store mxbatch.backends.yarn_kv:container_store``), so the Python they run
needs ``mxbatch[yarn]``: the shipped environment's ``python-env/bin/python`` (which
also leads the roles' ``PATH``), else the plan's Python (the submitter's, by absolute
path), which must then exist on every node, as the roles' Python does anyway (or
inside the Docker image, e.g. a read-only mount of the venv). The role logs go to the
container's YARN log directory (``logs`` is a link to it), where the NodeManager
serves them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from ...quoting import quote
from ...runtime import wire
from ...runtime.layout import PLAN as PLAN_FILE
from ...runtime.layout import RUNTIME as RUNTIME_FILE
from ...runtime.planfile import RunPlan, TaskInfo
from ...runtime.roles import Role
from ...spec.plan import JobPlan
from ...spec.schema import ContainerSpec
from ...spec.typed import Seconds, option
from .pyenv import ARCHIVE_DIR, INTERPRETER

#: how much longer than the peers' heartbeat timeout and grace a container whose
#: supervisor was killed waits for the job to end (``container_script``)
LOST_MARGIN_S = 15.0
#: memory of a container whose role's spec sets none
DEFAULT_MEMORY_MIB = 1024
#: skein's application master: holds the key-value store (skein's default size)
MASTER_MEMORY_MIB = 512
MASTER_VCORES = 1
#: how the runtime in a container reaches the key-value store
KV_STORE_FACTORY = "mxbatch.backends.yarn_kv:container_store"
ENV_FILE = "mxbatch-env.sh"
WORKDIR_FILE = "workdir"
#: the backend's directory in the local run directory (``RunLayout.backend_dir``)
STATE_DIR = "yarn"

#: never taken from the submitting environment: set by YARN/skein for each
#: container, private to the submitting host, or confusing to ps-lite
_NOT_INHERITED = frozenset((
    "HOME", "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "USER", "LOGNAME", "TMPDIR",
    "CONTAINER_ID", "LOG_DIRS", "LOCAL_DIRS", "LOCAL_USER_DIRS", "JVM_PID", "CLASSPATH",
    "HADOOP_TOKEN_FILE_LOCATION", "HADOOP_USER_NAME", "PRELAUNCH_OUT", "PRELAUNCH_ERR",
    "LOCALIZATION_COUNTERS", "MALLOC_ARENA_MAX", "PORT"))
_NOT_INHERITED_PREFIXES = (*wire.OWN_PREFIXES, "SKEIN_", "NM_", "YARN_CONTAINER_RUNTIME_",
                           "BASH_FUNC_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: what YARN's Docker runtime reads from a container's launch environment
DOCKER_ENV_PREFIX = "YARN_CONTAINER_RUNTIME_DOCKER_"


@dataclasses.dataclass(frozen=True)
class YarnOptions:
    """``backends.yarn``."""

    queue: str = option("default", "the YARN queue")
    node_label: Optional[str] = option(None, "a node label expression for every container")
    tags: Tuple[str, ...] = option((), "extra application tags")
    ship_workdir: bool = option(True, "copy the spec's workdir into every container "
                                      "(false: use it in place, on shared storage)")
    connect_timeout: Seconds = option(Seconds(20.0), "how long to wait for the "
                                                     "ResourceManager to answer")
    python_env: Optional[str] = option(
        None, "the Python every container runs: a venv-pack or conda-pack archive "
              "(relative to the spec file), or auto (this environment, packed once and "
              "cached); null: the submitter's interpreter path, on every node")
    rm_url: str = option("", "the ResourceManager's web address (http://host:port) for "
                             "status and cancel; default: yarn.resourcemanager.webapp.address")


def application_tags(plan: JobPlan, options: YarnOptions) -> List[str]:
    """``mxbatch``, the job id (YARN lowercases tags) and the user's."""
    return sorted({"mxbatch", f"mxbatch-job-{plan.job_id}".lower(),
                   *(t.lower() for t in options.tags)})


def container_plan(run: RunPlan, ship_workdir: bool, python_env: bool = False) -> RunPlan:
    """The plan as containers see it: paths relative to the container's directory;
    with a shipped ``python_env``, its interpreter, and no submitter's ``PATH`` to
    restore in the roles (the container script's, which the environment leads)."""
    shipped = dataclasses.replace(run, run_dir=".",
                                  workdir=WORKDIR_FILE if ship_workdir else run.workdir)
    if python_env:
        shipped = dataclasses.replace(shipped, python=INTERPRETER, submit_path=None)
    return shipped


def inherited_environment(run: RunPlan, environ: Mapping[str, str]) -> Dict[str, str]:
    """What every container takes from the submitting environment: all of it
    (``inherit_env``) but what YARN sets per container, else only ``PATH``."""
    if not run.inherit_env:
        return {"PATH": environ["PATH"]} if "PATH" in environ else {}
    return {name: value for name, value in sorted(environ.items())
            if _NAME.fullmatch(name) and name not in _NOT_INHERITED
            and not name.startswith(_NOT_INHERITED_PREFIXES)}


def env_file(variables: Mapping[str, str]) -> str:
    """``mxbatch-env.sh``: one shell-quoted ``export`` per variable."""
    lines = ["# mxbatch: the submitting environment, sourced by every container script"]
    lines += [f"export {name}={quote(value)}" for name, value in variables.items()]
    return "\n".join(lines) + "\n"


def docker_environment(container: ContainerSpec) -> Dict[str, str]:
    """The launch environment that makes YARN run a container in Docker (needs the
    LinuxContainerExecutor with Docker enabled on the NodeManagers, and the mounts
    allowed in their container-executor.cfg): the image, the host's network (ps-lite
    advertises the host's IP), the mounts (``src:dst:mode``) and ``options`` of the
    form ``YARN_CONTAINER_RUNTIME_DOCKER_<NAME>=value``."""
    env = {"YARN_CONTAINER_RUNTIME_TYPE": "docker",
           DOCKER_ENV_PREFIX + "IMAGE": container.image,
           DOCKER_ENV_PREFIX + "CONTAINER_NETWORK": "host"}
    if container.mounts:
        env[DOCKER_ENV_PREFIX + "MOUNTS"] = ",".join(
            m if m.count(":") == 2 else m + ":rw" for m in container.mounts)
    for extra in container.options:
        name, _, value = extra.partition("=")
        env[name] = value
    return env


def lost_linger_s(run: RunPlan) -> int:
    """How long a container outlives its supervisor killed by a signal (see
    ``container_script``): the peers' heartbeat timeout, the grace period of their
    teardown, and ``LOST_MARGIN_S``."""
    return math.ceil(run.heartbeat_timeout_s + run.grace_s + LOST_MARGIN_S)


def container_script(run: RunPlan, role: Role, python_env: bool = False) -> str:
    """The bash script of one service: find the task from the container index, link
    ``logs`` to YARN's log directory, load the environment (with a shipped
    ``python_env``: its ``bin`` first on ``PATH``), run the supervisor.

    A supervisor killed by a signal (SIGKILL, a crash) writes no final record. Its
    container stays (``lost_linger_s``) so that the peers see its heartbeat stop and
    end the job naming the task; skein would otherwise end the application at once
    with only the service's name. The container exits with the supervisor's status
    then, if the job has not ended by that time. Any other exit (a supervisor that
    never started: exit 127, 126...) ends the container at once."""
    tasks = run.tasks_of(role)
    first = tasks[0].index
    python = INTERPRETER if python_env else quote(run.python)
    shipped = ([f'export PATH="$PWD/{ARCHIVE_DIR}/bin:$PATH" VIRTUAL_ENV="$PWD/{ARCHIVE_DIR}"',
                "unset PYTHONHOME"] if python_env else [])
    return "\n".join([
        f"# mxbatch job {run.job_id}: container {role.value}_<i> runs task {first}+i "
        f"({role.value}[i])",
        "set -e",
        "i=${SKEIN_CONTAINER_ID##*_}",
        f'if [ "$i" -ge {len(tasks)} ]; then',
        f'  echo "mxbatch: container $SKEIN_CONTAINER_ID: the job has only {len(tasks)} '
        f'{role.value} task(s)" >&2',
        "  exit 2",
        "fi",
        *_logs_link(run),
        f". ./{ENV_FILE}",
        *shipped,
        "status=0",
        f"{python} {RUNTIME_FILE} run . --task $(({first} + i)) "
        f"--kv-store {KV_STORE_FACTORY} || status=$?",
        'if [ "$status" -gt 128 ]; then',
        f'  echo "mxbatch: the supervisor was killed by signal $((status - 128)); '
        f'waiting up to {lost_linger_s(run)}s for the job to end" >&2',
        f"  sleep {lost_linger_s(run)}",
        "fi",
        'exit "$status"',
    ]) + "\n"


def _logs_link(run: RunPlan) -> List[str]:
    """The lines that link the attempt's ``logs`` to YARN's log directory: ``logs``;
    with restarts, a relaunched attempt's (``$MXBATCH_ATTEMPT``, set by the relaunch)
    is ``attempts/<k>/logs``, where its supervisor writes (``RunLayout.attempt``)."""
    if not run.restarts.enabled:
        return ['ln -sfn "${LOG_DIRS%%,*}" logs']
    return ["logs=logs",
            f'if [ "${{{wire.ATTEMPT}:-0}}" != 0 ]; then',
            f'  logs="attempts/${wire.ATTEMPT}/logs"',
            f'  mkdir -p "attempts/${wire.ATTEMPT}/tasks"',
            "fi",
            'ln -sfn "${LOG_DIRS%%,*}" "$logs"']


def attempt_spec(spec: Mapping[str, Any], index: int, restart_reason: str,
                 nodes: Optional[List[str]] = None) -> Dict[str, Any]:
    """The skein specification of attempt ``index`` of a job from its first one (kept
    in ``yarn/skein.json``): every service's environment says the attempt
    (``MXBATCH_ATTEMPT``, ``MXBATCH_RESTART_REASON``: the roles see them, and the
    container script links that attempt's logs); ``nodes``: the NodeManagers its
    containers may run on (the cluster's less the hosts node failures excluded), with
    strict locality (``relax_locality: false``); None: anywhere."""
    data = copy.deepcopy(dict(spec))
    for service in data["services"].values():
        service["env"] = {**service.get("env", {}), wire.ATTEMPT: str(index),
                          wire.RESTART_REASON: restart_reason}
        if nodes is not None:
            service["nodes"] = list(nodes)
            service["relax_locality"] = False
    return data


def _resources(task: TaskInfo) -> Dict[str, int]:
    resources = {"memory": task.memory_mib or DEFAULT_MEMORY_MIB, "vcores": task.cpus}
    if task.gpus:
        resources["gpus"] = task.gpus
    return resources


@dataclasses.dataclass(frozen=True)
class ShippedFiles:
    """Local sources of the files every container gets (paths on the submitting host)."""

    runtime: str
    plan: str
    env: str
    workdir: Optional[str]
    #: the Python environment archive (``backends.yarn.python_env``), unpacked by YARN
    python_env: Optional[str] = None

    def as_skein(self) -> Dict[str, Dict[str, str]]:
        files = {RUNTIME_FILE: self.runtime, PLAN_FILE: self.plan, ENV_FILE: self.env}
        if self.workdir:
            files[WORKDIR_FILE] = self.workdir
        shipped = {target: {"source": source, "type": "file"}
                   for target, source in files.items()}
        if self.python_env:
            shipped[ARCHIVE_DIR] = {"source": self.python_env, "type": "archive"}
        return shipped


def shipped_files(plan: JobPlan, options: YarnOptions,
                  python_env: Optional[str] = None) -> ShippedFiles:
    """Where ``submit`` writes the container files (``<run_dir>/yarn/``), the workdir,
    and ``python_env``: the resolved archive of ``options.python_env`` (``pyenv``)."""
    layout = plan.run.layout
    return ShippedFiles(runtime=layout.runtime, plan=layout.backend_file(STATE_DIR, PLAN_FILE),
                        env=layout.backend_file(STATE_DIR, ENV_FILE),
                        workdir=plan.run.workdir if options.ship_workdir else None,
                        python_env=python_env)


def application_spec(plan: JobPlan, options: YarnOptions,
                     python_env: Optional[str] = None) -> Dict[str, Any]:
    """The skein ``ApplicationSpec`` of ``plan`` as a dict (``ApplicationSpec.from_dict``);
    ``python_env``: the local path of the environment archive every container runs."""
    files = shipped_files(plan, options, python_env).as_skein()
    service_env = {wire.JOB_ID: plan.job_id}
    if plan.spec.container is not None:
        service_env.update(docker_environment(plan.spec.container))
    services: Dict[str, Any] = {}
    for role in Role:
        tasks = plan.tasks_of(role)
        if not tasks:
            continue
        services[role.value] = {
            "instances": len(tasks),
            "max_restarts": 0,
            "resources": _resources(tasks[0]),
            "files": files,
            "env": dict(service_env),
            "script": container_script(plan.run, role, python_env is not None),
        }
    return {
        "name": plan.job_id,
        "queue": options.queue,
        "node_label": options.node_label or "",
        "tags": application_tags(plan, options),
        "max_attempts": 1,
        "master": {"resources": {"memory": MASTER_MEMORY_MIB, "vcores": MASTER_VCORES}},
        "services": services,
    }


class _SpecDumper(yaml.SafeDumper):
    """YAML for people: no anchors for the files every service shares, scripts as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_SpecDumper.add_representer(str, _str)


def spec_yaml(spec: Mapping[str, Any]) -> str:
    """The specification as skein's YAML (``skein application submit`` reads it too)."""
    return yaml.dump(dict(spec), Dumper=_SpecDumper, sort_keys=False, width=1000)
